"""A mask already set in the environment
(Slurm, a container runtime) bounds the plan; discovery still sees the whole host."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock import MockPlugin, load_spec

from ray_accel.core.errors import InputError
from ray_accel.core.visibility import format_visible_ids, parse_visible_ids
from ray_accel.partition.inherited import inherited_mask, plan_within_mask
from ray_accel.partition.plan import PartitionError
from tests.badinput import badinput
from tests.cli_process import CliRunner
from tests.clirun import cli_json_here as cli_json

TRN1 = {"RAYACCEL_MOCK": "trn1.32xlarge"}
P4D = {"RAYACCEL_MOCK": "p4d.24xlarge"}


def plugin(preset: str) -> MockPlugin:
    return MockPlugin(load_spec(preset))


def test_neuron_range_mask_plans_over_those_cores_only() -> None:
    out = cli_json("plan", "--partitions", "2", env={**TRN1, "NEURON_RT_VISIBLE_CORES": "8-23"})
    assert [p["core_ids"] for p in out["partitions"]] == [list(range(8, 16)), list(range(16, 24))]
    assert out["inherited_mask"]["env"] == "NEURON_RT_VISIBLE_CORES"
    assert out["inherited_mask"]["visible_ids"] == list(range(8, 24))
    assert "16 of 32 neuron_cores" in out["inherited_mask"]["description"]
    # Discovery still sees the whole host.
    assert len(cli_json("devices", env={**TRN1, "NEURON_RT_VISIBLE_CORES": "8-23"})["devices"]) == 16


def test_plan_table_says_it_plans_within_the_mask(cli: CliRunner) -> None:
    proc = cli("plan", "--partitions", "2", env={**TRN1, "NEURON_RT_VISIBLE_CORES": "8-23"})
    assert proc.returncode == 0, proc.stderr
    assert "inherited mask NEURON_RT_VISIBLE_CORES=8-23: planning over 16 of 32 neuron_cores" in proc.stdout


def test_cuda_uuid_mask_on_mock_p4d_plans_over_those_gpus() -> None:
    devices = cli_json("devices", env=P4D)["devices"]
    chosen = [devices[5]["id"], devices[2]["id"]]
    out = cli_json("plan", "--partitions", "2", env={**P4D, "CUDA_VISIBLE_DEVICES": ",".join(chosen)})
    assert sorted(d for p in out["partitions"] for d in p["device_ids"]) == sorted(chosen)
    assert sorted(c for p in out["partitions"] for c in p["core_ids"]) == [2, 5]
    # A unique UUID prefix names the GPU too, as CUDA allows.
    out = cli_json("plan", env={**P4D, "CUDA_VISIBLE_DEVICES": chosen[0][:12]})
    assert out["partitions"][0]["core_ids"] == [5]


def test_mock_gpu_reads_masks_as_the_cuda_backend_does() -> None:
    p = plugin("p4d.24xlarge")
    uuids = [d.id for d in p.list_devices()]
    assert p.parse_visible(f"{uuids[4]},1") == [4, 1]
    assert p.parse_visible("NoDevFiles") == []
    assert p.parse_visible(None) is None
    with pytest.raises(InputError, match="matches 0 GPUs"):
        p.parse_visible("GPU-nope")


@badinput("masks")
@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({**TRN1, "NEURON_RT_VISIBLE_CORES": "8-x"}, "NEURON_RT_VISIBLE_CORES='8-x'"),
        ({**TRN1, "NEURON_RT_VISIBLE_CORES": "30-40"}, "NEURON_RT_VISIBLE_CORES='30-40'"),
        ({**TRN1, "NEURON_RT_VISIBLE_CORES": ""}, "shows no device"),
        ({**P4D, "CUDA_VISIBLE_DEVICES": "GPU-0000"}, "CUDA_VISIBLE_DEVICES='GPU-0000'"),
    ],
)
def test_bad_mask_exits_2_naming_it(env: dict[str, str], needle: str, cli: CliRunner) -> None:
    proc = cli("plan", env=env)
    assert proc.returncode == 2, proc.stdout
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr


@badinput("masks")
def test_manual_spec_outside_the_mask_exits_2(cli: CliRunner) -> None:
    env = {**TRN1, "NEURON_RT_VISIBLE_CORES": "8-23"}
    proc = cli("plan", "--mode", "manual", "--manual", "a=4-7;b=8-12", env=env)
    assert proc.returncode == 2
    assert "device neuron:12 is outside the inherited mask NEURON_RT_VISIBLE_CORES=8-23" in proc.stderr
    ok = cli_json("plan", "--mode", "manual", "--manual", "a=4-7;b=8-11", env=env)
    assert [p["partition"] for p in ok["partitions"]] == ["a", "b"]


def test_a_partly_shown_device_keeps_only_its_shown_cores() -> None:
    p = plugin("trn1.32xlarge")
    mask = inherited_mask(p, {"NEURON_RT_VISIBLE_CORES": "9-12"})
    assert mask is not None
    plan = plan_within_mask(p.list_devices(), "manual", manual="a=4-5;b=6", mask=mask, traits=p.traits)
    assert [list(x.core_ids) for x in plan] == [[9, 10, 11], [12]]
    assert any("neuron:4 is partly inside" in w for w in plan.warnings)


@given(st.data())
def test_plans_never_leave_the_mask(data: st.DataObject) -> None:
    p = plugin("trn1.32xlarge")
    first = data.draw(st.integers(0, 15))
    count = data.draw(st.sampled_from([n for n in (1, 2, 4, 8) if first + n <= 16]))
    cores = list(range(first * 2, (first + count) * 2))
    mask = inherited_mask(p, {"NEURON_RT_VISIBLE_CORES": format_visible_ids(cores, "ranges")})
    count = data.draw(st.sampled_from([n for n in (1, 2, 4, 8) if count % n == 0]))
    plan = plan_within_mask(p.list_devices(), "auto-split", count, mask=mask, traits=p.traits)
    planned = sorted(c for x in plan for c in x.core_ids)
    assert planned == cores
    assert len(plan.partitions) == count


def test_no_mask_is_the_plain_plan() -> None:
    p = plugin("trn1.32xlarge")
    assert inherited_mask(p, {}) is None
    plan = plan_within_mask(p.list_devices(), "auto-split", 2, traits=p.traits)
    assert plan.mask is None and plan.to_json()["inherited_mask"] is None


@badinput("masks")
def test_manual_outside_raises_partition_error() -> None:
    p = plugin("p4d.24xlarge")
    mask = inherited_mask(p, {"CUDA_VISIBLE_DEVICES": "0,1"})
    with pytest.raises(PartitionError, match="outside the inherited mask CUDA_VISIBLE_DEVICES=0,1"):
        plan_within_mask(p.list_devices(), "manual", manual="a=0;b=2", mask=mask, traits=p.traits)


class LooseReader(MockPlugin):
    """A backend that reads its visibility variable without checking the ids against its devices."""

    def parse_visible(self, value: str | None) -> list[int] | None:
        return parse_visible_ids(value)


def test_an_inherited_mask_naming_a_core_the_host_lacks_is_refused_naming_it() -> None:
    plugin = LooseReader(load_spec("trn1.32xlarge"))
    env = plugin.visible_ids_env
    assert inherited_mask(plugin, {env: "0-3"}) is not None
    with pytest.raises(InputError, match=f"^{env}='30-33' set in the environment names 32, which this host does not"):
        inherited_mask(plugin, {env: "30-33"})
