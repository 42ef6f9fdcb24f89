"""neuron-ls with either output flag: `--json-output` (Neuron 2.22 to 2.33)
and `--output-format json` (Neuron 2.34 onwards, announced; its format is
ASSUMED, see tests/fixtures/neuron/CATALOGUE.md). A tool that takes only
one of them works, the flag that answered is remembered per tool, and both
formats are parsed by their shape."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray_accel_neuron import neuron_ls
from ray_accel_neuron.neuron_ls import FORMAT_NEW, FORMAT_OLD, NeuronLsError, parse_listing, parse_new_output

from tests.badinput import badinput
from tests.cli_process import cli_json
from tests.fakes.neuron_env import LS_STUB, executable, ls_only

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "neuron" / "neuron-ls"
ASSUMED = "trn2.48xlarge-output-format-json-ASSUMED.json"


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    return executable(tmp_path / "neuron-ls", LS_STUB)


@pytest.fixture(autouse=True)
def _fresh_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which flag each tool answered to."""
    monkeypatch.setattr(neuron_ls, "_FLAG_CACHE", {})


def neuron(out: dict[str, Any]) -> dict[str, Any]:
    return next(b for b in out["host"]["backends"] if b["plugin"] == "neuron")


@pytest.mark.parametrize("accepts", ["old", "new", "both"])
@pytest.mark.parametrize("preset", ["trn1.32xlarge", "trn2.48xlarge", "trn3.48xlarge"])
def test_a_tool_taking_either_flag_gives_the_same_inventory(
    accepts: str, preset: str, tmp_path: Path, stub: Path
) -> None:
    calls = tmp_path / "calls"
    env = ls_only(tmp_path, stub, STUB_PRESET=preset, STUB_ACCEPTS=accepts, STUB_CALLS=str(calls))
    out = cli_json("devices", "--backend", "neuron", env=env)
    reference = cli_json("devices", env={"RAYACCEL_MOCK": preset})
    assert [d["core_ids"] for d in out["devices"]] == [d["core_ids"] for d in reference["devices"]]
    assert [sorted(d["peers"]) for d in out["devices"]] == [sorted(d["peers"]) for d in reference["devices"]]
    # The new flag first; a tool of 2.33 or older refuses it and is asked with the old one.
    tried = calls.read_text().splitlines()
    assert tried == (["--output-format json", "--json-output"] if accepts == "old" else ["--output-format json"])
    warnings = neuron(out)["warnings"]
    assert any(w.startswith(f"neuron-ls printed {FORMAT_NEW}") for w in warnings) == (accepts != "old")


def test_the_assumed_fixture_reads_as_its_devices_with_the_top_level_applied(tmp_path: Path, stub: Path) -> None:
    env = ls_only(tmp_path, stub, ASSUMED, STUB_ACCEPTS="new")
    out = cli_json("devices", "--backend", "neuron", env=env)
    old = cli_json("devices", "--backend", "neuron", env=ls_only(tmp_path, stub, "trn2.48xlarge.json"))
    assert [d["core_ids"] for d in out["devices"]] == [d["core_ids"] for d in old["devices"]]
    assert out["host"]["instance_type"] == "trn2n.48xlarge"
    (note,) = [w for w in neuron(out)["warnings"] if w.startswith("neuron-ls printed")]
    assert note == f"neuron-ls printed {FORMAT_NEW}, read by its shape; top-level fields not read: ultraserver"


def test_parse_new_output_on_the_fixture() -> None:
    listing = parse_new_output((FIXTURES / ASSUMED).read_text())
    assert listing.format == FORMAT_NEW and listing.instance_type == "trn2n.48xlarge"
    assert [d.index for d in listing.devices] == list(range(16))
    assert {d.instance_type for d in listing.devices} == {"trn2n.48xlarge"}
    assert {d.lnc for d in listing.devices} == {2}
    assert listing.unread == ("ultraserver",)
    old = parse_listing((FIXTURES / "trn2.48xlarge.json").read_text())
    assert old.format == FORMAT_OLD
    assert [d.core_ids for d in old.devices] == [d.core_ids for d in listing.devices]


def test_the_flag_that_answered_is_remembered_per_tool(tmp_path: Path, stub: Path) -> None:
    calls = tmp_path / "calls"
    env = {**os.environ, "STUB_ACCEPTS": "old", "STUB_CALLS": str(calls), "STUB_PRESET": "trn1.2xlarge"}
    first = neuron_ls.run_listing(str(stub), 10, env)
    second = neuron_ls.run_listing(str(stub), 10, env)
    assert first == second and len(first.devices) == 1
    assert calls.read_text().splitlines() == ["--output-format json", "--json-output", "--json-output"]
    assert neuron_ls.remembered_flag(str(stub)) == neuron_ls.FLAG_OLD
    # An upgraded tool (another file at the same path) is asked afresh.
    upgraded = tmp_path / "neuron-ls.new"
    executable(upgraded, LS_STUB)
    upgraded.replace(stub)
    assert neuron_ls.remembered_flag(str(stub)) is None
    calls.write_text("")
    neuron_ls.run_listing(str(stub), 10, {**env, "STUB_ACCEPTS": "new"})
    assert calls.read_text().splitlines() == ["--output-format json"]


@badinput("traceback")
def test_a_tool_refusing_both_flags_is_named_with_both_answers(tmp_path: Path, stub: Path) -> None:
    env = {**os.environ, "STUB_MODE": "fail", "STUB_ACCEPTS": "both"}
    with pytest.raises(NeuronLsError) as e:
        neuron_ls.run_listing(str(stub), 10, env)
    assert "--output-format json: exited with 1" in str(e.value) and "--json-output: exited with 1" in str(e.value)
    assert "Neuron driver is not loaded" in str(e.value)


@badinput("traceback")
@pytest.mark.parametrize(
    ("value", "named"),
    [
        ({"x": 1}, "holds no list of devices"),
        ([], None),
        ({"a": [{"neuron_device": 0, "nc_count": 2}], "b": [{"neuron_device": 1, "nc_count": 2}]}, "several"),
        (
            {
                "logical_neuroncore_config": 2,
                "d": [{"neuron_device": 0, "nc_count": 8, "logical_neuroncore_config": 1}],
            },
            "differs from the top-level 2",
        ),
        (
            {"instance_type": "trn2.48xlarge", "d": [{"neuron_device": 0, "nc_count": 4, "instance_type": "trn1.2x"}]},
            "differs from the top-level",
        ),
        ({"logical_neuroncore_config": 3, "d": []}, "not 1 or 2"),
    ],
)
def test_the_new_format_refuses_what_contradicts_itself(value: Any, named: str | None) -> None:
    if named is None:
        assert parse_listing(json.dumps(value)).devices == ()
        return
    with pytest.raises(NeuronLsError, match=named):
        parse_listing(json.dumps(value))


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@badinput("traceback")
@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=12), json_values, max_size=6))
def test_the_new_format_parser_raises_only_its_own_error(value: dict[str, Any]) -> None:
    try:
        parse_listing(json.dumps(value))
    except NeuronLsError as e:
        assert str(e)


@st.composite
def new_outputs(draw: st.DrawFn) -> tuple[dict[str, Any], list[int]]:
    indexes = draw(st.lists(st.integers(0, 63), min_size=1, max_size=8, unique=True))
    lnc = draw(st.sampled_from([None, 1, 2]))
    devices = [{"neuron_device": i, "nc_count": 4, "bdf": f"{i:02x}:1e.0"} for i in indexes]
    out: dict[str, Any] = {draw(st.sampled_from(["neuron_devices", "devices", "x"])): devices}
    if lnc is not None:
        out["logical_neuroncore_config"] = lnc
    if draw(st.booleans()):
        out["instance_type"] = "trn2.48xlarge"
    extra = draw(st.dictionaries(st.sampled_from(["ultraserver", "tool_version", "host"]), json_values, max_size=2))
    out.update(extra)
    return out, indexes


@settings(max_examples=200, deadline=None)
@given(new_outputs(), st.sampled_from([None, 2]))
def test_well_formed_new_output_round_trips(case: tuple[dict[str, Any], list[int]], indent: int | None) -> None:
    value, indexes = case
    listing = parse_listing(json.dumps(value, indent=indent))
    assert [d.index for d in listing.devices] == sorted(indexes)
    assert {d.lnc for d in listing.devices} == {value.get("logical_neuroncore_config")}
    assert {d.instance_type for d in listing.devices} == {value.get("instance_type")}
    assert set(listing.unread) == set(value) - {
        "neuron_devices",
        "devices",
        "x",
        "logical_neuroncore_config",
        "instance_type",
    }
