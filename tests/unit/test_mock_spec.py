"""The mock spec file is user input: every bad value is an exit-2
error of one line naming the file, the field and the value; nothing else
escapes the parser, and a spec is never silently half-used.

The catalogue below runs each bad spec through the CLI in-process
(`ray_accel.cli.main`, the console script's own entry) for `devices` and
`plan`, with and without `--json`; the file-kind cases (FIFO, device,
directory, huge file) also through the installed console script, timed.
The property tests feed arbitrary TOML tables and bytes to every parser path.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import math
import os
import re
import tempfile
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from ray_accel_mock import MockPlugin
from ray_accel_mock.spec import (
    DEVICE_KEYS,
    GIB,
    HOST_KEYS,
    MAX_GPUS,
    MAX_SPEC_BYTES,
    SpecError,
    load_spec,
    spec_from_table,
)
from ray_accel_neuron.limits import MAX_DEVICES, MAX_LOGICAL_CORES

from ray_accel.cli import main
from ray_accel.core.devices import validate_inventory
from ray_accel.core.errors import InputError
from ray_accel.core.validate import PARTITION_NAME
from ray_accel.plugins.discovery import discover
from tests.badinput import badinput
from tests.cli_process import run_cli

GPU = '[host]\nfamily = "gpu"\n'
NEURON = '[host]\nfamily = "neuron"\n'
ROW = "[[devices]]\n"

# (case, spec text, field named, value as the message shows it)
BAD: list[tuple[str, str, str, str]] = [
    # [host] values of the wrong type or out of range (the bad-input class "wrong exit codes").
    ("memory lots", GPU + 'devices = 2\nmemory_gib = "lots"\n', "memory_gib", "'lots'"),
    ("memory inf", GPU + "devices = 2\nmemory_gib = inf\n", "memory_gib", "inf"),
    ("memory -inf", GPU + "devices = 2\nmemory_gib = -inf\n", "memory_gib", "-inf"),
    ("memory nan", GPU + "devices = 2\nmemory_gib = nan\n", "memory_gib", "nan"),
    ("memory negative", GPU + "devices = 2\nmemory_gib = -1\n", "memory_gib", "-1"),
    ("memory bool", GPU + "devices = 2\nmemory_gib = true\n", "memory_gib", "True"),
    ("memory date", GPU + "devices = 2\nmemory_gib = 2000-01-01\n", "memory_gib", "datetime.date(2000, 1, 1)"),
    ("memory past 1 PiB", GPU + "devices = 2\nmemory_gib = 1e300\n", "memory_gib", "1e+300"),
    ("devices bool", GPU + "devices = true\n", "devices", "True"),
    ("devices negative", GPU + "devices = -1\n", "devices", "-1"),
    ("devices zero", GPU + "devices = 0\n", "devices", "0"),
    ("devices float", GPU + "devices = 2.0\n", "devices", "2.0"),
    ("devices string", GPU + 'devices = "4"\n', "devices", "'4'"),
    ("devices missing", GPU + 'model = "A100"\n', "devices", "[[devices]]"),
    ("neuron devices 1e6", NEURON + "devices = 1000000\n", "devices", "1000000 is above the maximum 64"),
    ("neuron devices 65", NEURON + "devices = 65\n", "devices", "65 is above the maximum 64"),
    ("gpu devices 33", GPU + "devices = 33\n", "devices", "33 is above the maximum 32"),
    ("devices huge int", NEURON + "devices = 0x" + "f" * 5000 + "\n", "devices", "<int too large to show>"),
    ("cores 1e8", NEURON + "devices = 2\ncores_per_device = 100000000\n", "cores_per_device", "100000000"),
    ("cores 9", NEURON + "devices = 2\ncores_per_device = 9\n", "cores_per_device", "9 is above the maximum 8"),
    ("cores float", NEURON + "devices = 2\ncores_per_device = 1.5\n", "cores_per_device", "1.5"),
    ("gpu cores 2", GPU + "devices = 2\ncores_per_device = 2\n", "cores_per_device", "2 is above the maximum 1"),
    ("torus negative", NEURON + 'devices = 8\ntopology = "torus:-2x-4"\n', "topology", "'torus:-2x-4'"),
    ("torus wrong size", NEURON + 'devices = 8\ntopology = "torus:2x2"\n', "topology", "'torus:2x2' needs 4"),
    ("torus arabic digits", NEURON + 'devices = 8\ntopology = "torus:٢x٤"\n', "topology", "'torus:٢x٤'"),
    ("torus zero", NEURON + 'devices = 8\ntopology = "torus:0x8"\n', "topology", "'torus:0x8'"),
    ("topology unknown", GPU + 'devices = 2\ntopology = "mesh"\n', "topology", "'mesh'"),
    ("topology int", GPU + "devices = 2\ntopology = 4\n", "topology", "4"),
    ("numa zero", GPU + "devices = 2\nnuma_nodes = 0\n", "numa_nodes", "0"),
    ("numa past max", GPU + "devices = 2\nnuma_nodes = 5000\n", "numa_nodes", "5000 is above the maximum 1024"),
    ("type int", GPU + "devices = 2\naccelerator_type = 5\n", "accelerator_type", "5"),
    ("type empty", GPU + 'devices = 2\naccelerator_type = ""\n', "accelerator_type", "''"),
    ("type not a label", GPU + 'devices = 2\naccelerator_type = "A100,x=y"\n', "accelerator_type", "'A100,x=y'"),
    ("model int", GPU + "devices = 2\nmodel = 5\n", "model", "5"),
    ("model newline", GPU + 'devices = 2\nmodel = "a\\nb"\n', "model", "'a\\nb'"),
    ("model too long", GPU + f'devices = 2\nmodel = "{"x" * 96}"\n', "model", "'xxxx"),
    ("model as type", GPU + 'devices = 2\nmodel = "A100 (80GB)"\n', "model", "'A100 (80GB)'"),
    ("instance int", GPU + "devices = 2\ninstance_type = 5\n", "instance_type", "5"),
    ("instance not a label", GPU + 'devices = 2\ninstance_type = "p4d/24"\n', "instance_type", "'p4d/24'"),
    ("name int", GPU + "devices = 2\nname = 5\n", "name", "5"),
    ("family missing", "[host]\ndevices = 2\n", "family", "None"),
    ("family tpu", '[host]\nfamily = "tpu"\ndevices = 2\n', "family", "'tpu'"),
    ("family list", '[host]\nfamily = ["gpu"]\ndevices = 2\n', "family", "['gpu']"),
    ("host unknown key", GPU + 'devices = 2\ncolour = "red"\n', "unknown key", "'colour'"),
    ("host physical_cores", NEURON + "devices = 2\nphysical_cores = 8\n", "unknown key", "'physical_cores'"),
    ("host devices with list", NEURON + "devices = 2\n" + ROW, "devices", "remove it"),
    ("host topology with list", NEURON + 'topology = "ring"\n' + ROW, "topology", "remove it"),
    ("host numa with list", NEURON + "numa_nodes = 2\n" + ROW, "numa_nodes", "remove it"),
    # The top level.
    ("no host", "[[devices]]\n", "[host]", "missing"),
    ("host not a table", "host = 5\n", "host", "5"),
    ("host an array", '[[host]]\nfamily = "gpu"\n', "host", "[{'family': 'gpu'}]"),
    ("top unknown key", "extra = 1\n" + GPU + "devices = 2\n", "unknown table or key", "'extra'"),
    ("devices before host", "devices = 4\n" + GPU, "devices", "got 4"),
    ("devices empty", "devices = []\n" + GPU, "devices", "got []"),
    ("devices of numbers", "devices = [1, 2]\n" + GPU, "devices", "got [1, 2]"),
    ("devices one not a table", 'devices = [{id = "a"}, 5]\n' + GPU, "devices", "5]"),
    ("65 neuron rows", NEURON + ROW * 65, "[[devices]]", "65 [[devices]] listed, above the maximum 64"),
    ("33 gpu rows", GPU + ROW * 33, "[[devices]]", "33 [[devices]] listed, above the maximum 32"),
    # [[devices]] rows.
    ("index string", GPU + ROW + 'index = "x"\n', "index", "'x'"),
    ("index negative", GPU + ROW + "index = -1\n", "index", "-1"),
    ("index bool", GPU + ROW + "index = true\n", "index", "True"),
    ("index past max", NEURON + ROW + "index = 64\n", "index", "64 is above the maximum 63"),
    ("index taken", NEURON + ROW + ROW + "index = 0\n", "index", "0 is taken by device 'neuron:0'"),
    ("id int", GPU + ROW + "id = 5\n", "id", "5"),
    ("id space", GPU + ROW + 'id = "a b"\n', "id", "'a b'"),
    ("id comma", GPU + ROW + 'id = "a,b"\n', "id", "'a,b'"),
    ("id empty", GPU + ROW + 'id = ""\n', "id", "''"),
    ("id duplicate", GPU + ROW + 'id = "x"\n' + ROW + 'id = "x"\n', "duplicate device id", "'x'"),
    ("numa string", GPU + ROW + 'numa_node = "zero"\n', "numa_node", "'zero'"),
    ("numa -2", GPU + ROW + "numa_node = -2\n", "numa_node", "-2"),
    ("numa past max", GPU + ROW + "numa_node = 1024\n", "numa_node", "1024 is above the maximum 1023"),
    ("cores zero", NEURON + ROW + "cores = 0\n", "cores", "0"),
    ("cores string", NEURON + ROW + 'cores = "2"\n', "cores", "'2'"),
    ("cores 9", NEURON + ROW + "cores = 9\n", "cores", "9 is above the maximum 8"),
    ("gpu cores 4", GPU + ROW + "cores = 4\n", "cores", "4 is above the maximum 1"),
    ("row memory lots", GPU + ROW + 'memory_gib = "lots"\n', "memory_gib", "'lots'"),
    ("row memory nan", GPU + ROW + "memory_gib = nan\n", "memory_gib", "nan"),
    ("row memory negative", GPU + ROW + "memory_gib = -0.5\n", "memory_gib", "-0.5"),
    ("peers string", NEURON + ROW + 'peers = "neuron:1"\n' + ROW, "peers", "'neuron:1'"),
    ("peers table", NEURON + ROW + "peers = {a = 1}\n" + ROW, "peers", "{'a': 1}"),
    ("peer unknown index", NEURON + ROW + "peers = [5]\n" + ROW, "peer", "5 names no device"),
    ("peer bool", NEURON + ROW + "peers = [true]\n" + ROW, "peer", "True names no device"),
    ("peer float", NEURON + ROW + "peers = [1.0]\n" + ROW, "peer", "1.0 names no device"),
    ("peer unknown id", NEURON + ROW + 'peers = ["nope"]\n', "peer", "'nope' names no device"),
    ("peer twice", NEURON + ROW + "peers = [1, 'neuron:1']\n" + ROW + "peers = [0]\n", "peer", "listed twice"),
    ("peer itself", NEURON + ROW + "peers = [0]\n", "peer", "'neuron:0' lists itself"),
    ("one-sided link", NEURON + ROW + "peers = [1]\n" + ROW, "link", "'neuron:0' -> 'neuron:1' is one-sided"),
    ("healthy string", GPU + ROW + 'healthy = "no"\n', "healthy", "'no'"),
    ("healthy int", GPU + ROW + "healthy = 0\n", "healthy", "0"),
    ("pci short", GPU + ROW + 'pci_bus_id = "10:1c.0"\n', "pci_bus_id", "'10:1c.0'"),
    ("pci int", GPU + ROW + "pci_bus_id = 5\n", "pci_bus_id", "5"),
    (
        "pci taken",
        GPU + ROW + 'pci_bus_id = "0000:10:1c.0"\n' + ROW + 'pci_bus_id = "00000000:10:1C.0"\n',
        "pci_bus_id",
        "'00000000:10:1C.0' is taken",
    ),
    ("serial int", GPU + ROW + "serial = 5\n", "serial", "5"),
    ("row model int", GPU + ROW + "model = 5\n", "model", "5"),
    ("row model as type", GPU + ROW + 'model = "V100 [16G]"\n', "model", "'V100 [16G]'"),
    ("row type int", GPU + ROW + "accelerator_type = 5\n", "accelerator_type", "5"),
    ("row type not a label", GPU + ROW + 'accelerator_type = "a=b"\n', "accelerator_type", "'a=b'"),
    ("row unknown key", GPU + ROW + 'colour = "red"\n', "unknown key", "'colour'"),
    ("row physical_cores", NEURON + ROW + "physical_cores = 4\n", "unknown key", "'physical_cores'"),
]


def _spec(tmp_path: Path, text: str | bytes, name: str = "host.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def _run(argv: list[str], spec: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("RAYACCEL_MOCK", spec)
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _class(case: str, shown: str) -> str:
    """The bad-input class of a bad spec value: a traceback before, a limit
    (unbounded or the value not named), or a silently inactive mock (exit code)."""
    if case in ("type int", "row type int"):
        return "traceback"  # `accelerator_type = 5` raised AttributeError
    if "above the maximum" in shown or case in ("cores 1e8", "devices huge int", "memory past 1 PiB", "peers string"):
        return "unnamed"
    return "exit-code"


@pytest.mark.parametrize(
    ("case", "text", "field", "shown"), [pytest.param(*c, id=c[0], marks=badinput(_class(c[0], c[3]))) for c in BAD]
)
def test_bad_spec_is_one_line_naming_file_field_and_value(
    case: str,
    text: str,
    field: str,
    shown: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    path = str(_spec(tmp_path, text))
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert isinstance(info.value, InputError)
    assert message.startswith(path), message
    assert field in message and shown in message, message
    for argv in (["devices"], ["plan"]):
        code, out, err = _run(argv, path, capsys, monkeypatch)
        assert (code, out) == (2, ""), (argv, err)
        assert err == f"ray-accel: error: {message}\n"
    code, out, err = _run(["plan", "--json"], path, capsys, monkeypatch)
    assert (code, out) == (2, "")
    assert json.loads(err) == {"error": message, "kind": "input", "exit_code": 2}


def test_the_catalogue_covers_every_key() -> None:
    named = {field for _, _, field, _ in BAD}
    assert set(HOST_KEYS) | set(DEVICE_KEYS) <= named


# ---------------------------------------------------------------------------
# What the file is: never block, never read without bound
# ---------------------------------------------------------------------------


def _file_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name: (RAYACCEL_MOCK value, what the one error line says)."""
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    bare_fifo = tmp_path / "spec"
    os.mkfifo(bare_fifo)
    link = tmp_path / "link.toml"
    link.symlink_to(fifo)
    dangling = tmp_path / "dangling.toml"
    dangling.symlink_to(tmp_path / "absent.toml")
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    huge = tmp_path / "huge.toml"
    with huge.open("wb") as f:  # sparse: its size is what matters
        f.truncate(10 * 1024**3)
    over = _spec(tmp_path, GPU + "devices = 2\n" + "#" * MAX_SPEC_BYTES + "\n", "over.toml")
    return {
        "fifo": (str(fifo), f"{fifo} is a FIFO, not a regular file"),
        "fifo without .toml": (str(bare_fifo), f"{bare_fifo} is a FIFO, not a regular file"),
        "link to a fifo": (str(link), f"{link} is a FIFO, not a regular file"),
        "character device": ("/dev/null", "/dev/null is a character device, not a regular file"),
        "directory": (str(folder), f"{folder} is a directory, not a regular file"),
        "directory with a trailing slash": (str(tmp_path) + "/", "is a directory, not a regular file"),
        "10 GiB file": (str(huge), f"{huge} holds more than {MAX_SPEC_BYTES} bytes"),
        "just past the bound": (str(over), f"{over} holds more than {MAX_SPEC_BYTES} bytes"),
        "dangling link": (str(dangling), f"mock spec file '{dangling}' does not exist"),
        "absent": (str(tmp_path / "no.toml"), "does not exist"),
        "not utf-8": (str(_spec(tmp_path, b'[host]\nfamily = "\xff"\n', "latin.toml")), "not UTF-8 text (byte 17)"),
        "nested too deeply": (str(_spec(tmp_path, "a = " + "[" * 5000, "deep.toml")), "nested too deeply"),
        "int past str limit": (str(_spec(tmp_path, "a = " + "1" * 5000, "digits.toml")), "a number too long to read"),
        "malformed": (str(_spec(tmp_path, "[host\nfamily=", "bad.toml")), "malformed TOML"),
        "unknown preset": ("trn9.large", "unknown mock preset 'trn9.large'"),
    }


FILE_CASES = {
    # What blocked or read without bound before (hangs) ...
    **dict.fromkeys(["fifo", "fifo without .toml", "link to a fifo", "character device", "directory"], "dangerous"),
    **dict.fromkeys(["directory with a trailing slash", "10 GiB file", "just past the bound"], "dangerous"),
    # ... and what a parser could raise on.
    **dict.fromkeys(["dangling link", "absent", "not utf-8", "nested too deeply", "int past str limit"], "traceback"),
    **dict.fromkeys(["malformed", "unknown preset"], "traceback"),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=badinput(k)) for c, k in FILE_CASES.items()])
def test_file_kinds_fail_at_once_in_process(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = _file_cases(tmp_path)
    assert set(cases) == set(FILE_CASES)
    value, said = cases[case]
    start = time.monotonic()
    with pytest.raises(SpecError, match=re.escape(said)):
        load_spec(value)
    assert time.monotonic() - start < 2, case
    for argv in (["devices"], ["plan", "--json"]):
        code, out, err = _run(argv, value, capsys, monkeypatch)
        assert (code, out) == (2, ""), (case, err)
        assert said in err and len(err.strip().splitlines()) == 1, (case, err)


@badinput("dangerous")
@pytest.mark.parametrize("case", ["fifo", "fifo without .toml", "character device", "directory", "10 GiB file"])
def test_file_kinds_through_the_console_script(case: str, tmp_path: Path) -> None:
    # The 2 s bound is timed in-process above; here the installed script must
    # not hang (the timeout) and must say the same in text and in JSON.
    value, said = _file_cases(tmp_path)[case]
    for command in (["devices"], ["plan", "--json"]):
        proc = run_cli(*command, env={"RAYACCEL_MOCK": value}, timeout=20)
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
        if "--json" in command:
            error = json.loads(proc.stderr)
            assert error["kind"] == "input" and error["exit_code"] == 2 and said in error["error"]
        else:
            assert proc.stderr.count("\n") == 1 and said in proc.stderr


# ---------------------------------------------------------------------------
# What a good spec gives
# ---------------------------------------------------------------------------


def test_documented_maxima_are_accepted_exactly(tmp_path: Path) -> None:
    neuron = load_spec(str(_spec(tmp_path, NEURON + f"devices = {MAX_DEVICES}\ncores_per_device = 8\n", "n.toml")))
    assert len(neuron.devices) == MAX_DEVICES
    assert sorted(c for d in neuron.devices for c in d.core_ids) == list(range(MAX_DEVICES * MAX_LOGICAL_CORES))
    gpus = load_spec(str(_spec(tmp_path, GPU + f"devices = {MAX_GPUS}\n", "g.toml")))
    assert [d.core_ids for d in gpus.devices] == [(i,) for i in range(MAX_GPUS)]
    listed = load_spec(str(_spec(tmp_path, NEURON + ROW * 63 + ROW + "index = 63\n", "l.toml")))
    assert sorted(d.index for d in listed.devices) == list(range(64))


def test_integer_peers_name_a_device_index(tmp_path: Path) -> None:
    # README: "peers = [1]  # indexes or ids". An index, not a position in the list.
    text = NEURON + ROW + "index = 5\npeers = [7]\n" + ROW + "index = 7\npeers = [5]\n"
    spec = load_spec(str(_spec(tmp_path, text)))
    assert [(d.id, d.peers) for d in spec.devices] == [("neuron:5", ("neuron:7",)), ("neuron:7", ("neuron:5",))]


def test_every_listed_field_is_honoured(tmp_path: Path) -> None:
    text = (
        '[host]\nfamily = "gpu"\nmodel = "NVIDIA A100-SXM4-40GB"\naccelerator_type = "A100"\n'
        'instance_type = "p4d.24xlarge"\nname = "box"\nmemory_gib = 40\n'
        + ROW
        + 'id = "GPU-a"\nnuma_node = -1\npci_bus_id = "00000000:10:1C.0"\nserial = "S1"\nhealthy = false\npeers = [1]\n'
        + ROW
        + 'id = "GPU-b"\nmodel = "Tesla V100-SXM2-16GB"\naccelerator_type = "V100"\nmemory_gib = 15.5\n'
        + "numa_node = 1\ncores = 1\npeers = ['GPU-a']\n"
    )
    spec = load_spec(str(_spec(tmp_path, text)))
    a, b = spec.devices
    assert (spec.name, spec.instance_type, spec.accelerator_type) == ("box", "p4d.24xlarge", None)
    assert (a.numa_node, a.pci_bus_id, a.serial, a.attributes["healthy"], a.memory_bytes) == (
        -1,
        "00000000:10:1C.0",
        "S1",
        "false",
        40 * GIB,
    )
    assert (a.accelerator_type, b.accelerator_type, b.model, b.memory_bytes) == (
        "A100",
        "V100",
        "Tesla V100-SXM2-16GB",
        int(15.5 * GIB),
    )
    assert (a.peers, b.peers, b.numa_node, b.attributes["healthy"]) == (("GPU-b",), ("GPU-a",), 1, "true")


def test_one_type_given_on_every_row_types_the_host(tmp_path: Path) -> None:
    # Before: the host said its model ("NVIDIA GPU") while every device said A10G.
    spec = load_spec(str(_spec(tmp_path, GPU + (ROW + 'accelerator_type = "A10G"\n') * 2)))
    assert spec.accelerator_type == "A10G"
    assert {d.accelerator_type for d in spec.devices} == {"A10G"}


# ---------------------------------------------------------------------------
# Properties: arbitrary TOML tables and bytes
# ---------------------------------------------------------------------------


def _toml_string(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: object) -> str:
    """TOML for a value tomllib can give back (inline tables and arrays)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(type(value))


def _toml_document(data: Mapping[str, object]) -> str:
    return "".join(f"{_toml_key(k)} = {_toml_value(v)}\n" for k, v in data.items())


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


scalars = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-3, 70),
    st.floats(),
    st.booleans(),
    st.dates(),
    st.times(),
    st.datetimes(),
)
toml_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)

NEAR_MISSES = st.sampled_from(
    [
        *(0, -1, -2, 1.5, 9, 33, 65, 1024, 10**6, 2**63 - 1, True, "4", "", "a,b", "a b", "torus:-2x-4"),
        *("torus:0x4", float("nan"), float("inf"), -0.0, [], {}, "neuron:1", "x" * 96, "line\nbreak"),
        dt.date(2000, 1, 1),
    ]
)
# A model is the accelerator type where none is given, so a Ray label value;
# a longer one (up to NVML's 95 characters) comes with an accelerator_type.
MODELS = ["Trainium", "NVIDIA A100-SXM4-40GB", "Tesla V100-SXM2-16GB"]
LONG_MODEL = "x" * 95
TYPES = ["A100", "Trainium2", "NVIDIA GPU", "V100"]


def _maybe(draw: st.DrawFn, table: dict[str, object], key: str, strategy: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        table[key] = draw(strategy)


@st.composite
def good_specs(draw: st.DrawFn) -> dict[str, object]:
    """A spec every field of which is valid: it must load."""
    family = draw(st.sampled_from(["neuron", "gpu"]))
    neuron = family == "neuron"
    host: dict[str, object] = {"family": family}
    _maybe(draw, host, "model", st.sampled_from(MODELS))
    if draw(st.integers(0, 5)) == 0:
        host["model"], host["accelerator_type"] = LONG_MODEL, draw(st.sampled_from(TYPES))
    _maybe(draw, host, "name", st.sampled_from(["box", "a b"]))
    _maybe(draw, host, "accelerator_type", st.sampled_from(TYPES))
    _maybe(draw, host, "instance_type", st.sampled_from(["trn1.32xlarge", "p5.48xlarge"]))
    _maybe(draw, host, "cores_per_device", st.integers(1, MAX_LOGICAL_CORES if neuron else 1))
    _maybe(draw, host, "memory_gib", st.integers(0, 1024**2) | st.floats(0, 1024**2))
    data: dict[str, object] = {"host": host}
    if draw(st.booleans()):
        count = draw(st.integers(1, MAX_DEVICES if neuron else MAX_GPUS))
        host["devices"] = count
        rows_ = draw(st.sampled_from([r for r in range(1, count + 1) if count % r == 0]))
        _maybe(
            draw, host, "topology", st.sampled_from(["none", "ring", "all-to-all", f"torus:{rows_}x{count // rows_}"])
        )
        _maybe(draw, host, "numa_nodes", st.integers(1, 1024))
        return data
    count = draw(st.integers(1, 8))
    indexes = draw(
        st.just(list(range(count)))
        | st.lists(
            st.integers(0, (MAX_DEVICES if neuron else MAX_GPUS) - 1), min_size=count, max_size=count, unique=True
        )
    )
    custom = draw(st.booleans())
    ids = [f"dev-{i}" for i in indexes] if custom else None
    links = draw(st.sets(st.tuples(st.integers(0, count - 1), st.integers(0, count - 1)), max_size=10))
    rows: list[dict[str, object]] = []
    for n in range(count):
        row: dict[str, object] = {}
        if indexes != list(range(count)) or draw(st.booleans()):
            row["index"] = indexes[n]
        if ids is not None:
            row["id"] = ids[n]
        near = sorted({b for a, b in links if a == n and b != n} | {a for a, b in links if b == n and a != n})
        by_id = ids is not None and draw(st.booleans())
        row["peers"] = [ids[m] if by_id and ids is not None else indexes[m] for m in near]
        _maybe(draw, row, "cores", st.integers(1, MAX_LOGICAL_CORES if neuron else 1))
        _maybe(draw, row, "memory_gib", st.integers(0, 100) | st.floats(0, 100))
        _maybe(draw, row, "numa_node", st.integers(-1, 1023))
        if draw(st.booleans()):
            row["pci_bus_id"] = f"0000:{n + 0x10:02x}:00.0"
        _maybe(draw, row, "serial", st.sampled_from(["S1", "MOCK0001"]))
        _maybe(draw, row, "healthy", st.booleans())
        _maybe(draw, row, "model", st.sampled_from(MODELS))
        _maybe(draw, row, "accelerator_type", st.sampled_from(TYPES))
        if draw(st.integers(0, 5)) == 0:
            row["model"], row["accelerator_type"] = LONG_MODEL, draw(st.sampled_from(TYPES))
        rows.append(row)
    data["devices"] = rows
    return data


@st.composite
def spec_tables(draw: st.DrawFn) -> tuple[dict[str, object], int]:
    """A good spec with 0-3 places changed to a near miss or any TOML value
    (a known key or any other), or removed; and how many were changed."""
    # Copies: the changes below mutate tables in place, and a drawn value may
    # be a constant (a near miss that is a table) shared by every example;
    # mutating it made generation depend on earlier examples (Hypothesis'
    # FlakyStrategyDefinition, seen once).
    data = copy.deepcopy(draw(good_specs()))
    changes = draw(st.sampled_from([0, 1, 1, 2, 3]))
    for _ in range(changes):
        # Each table's own keys mostly, so the values are what gets tested.
        tables: list[tuple[dict[str, Any], tuple[str, ...]]] = [(data, ("host", "node", "devices"))]
        if isinstance(data.get("host"), dict):
            tables.append((data["host"], HOST_KEYS))  # type: ignore[arg-type]
        if isinstance(data.get("devices"), list):
            tables += [(row, DEVICE_KEYS) for row in data["devices"] if isinstance(row, dict)]  # type: ignore[union-attr]
        table, keys = draw(st.sampled_from(tables))
        key = draw(st.sampled_from(keys)) if draw(st.integers(0, 7)) else draw(st.text(max_size=8))
        if key in table and draw(st.integers(0, 4)) == 0:
            del table[key]
        else:
            table[key] = copy.deepcopy(draw(NEAR_MISSES | toml_values))
    return data, changes


FIELD_WORDS = {*HOST_KEYS, *DEVICE_KEYS, "host", "node", "peer", "link", "unknown table or key"}
LOCATION = re.compile(r"^(?: \[(?:host|node)\]| \[\[devices\]\]\[\d+\])?: (.+)$")


def _check(path: str, data: Mapping[str, Any]) -> bool:
    """`load_spec` gives a valid host or a SpecError naming the file and a
    field, and discovery agrees: the mock active, or the same error."""
    try:
        spec = load_spec(path)
    except SpecError as e:
        message = str(e)
        assert "\n" not in message and len(message) < len(path) + 300, message
        assert message.startswith(path), message
        body = LOCATION.match(message[len(path) :])
        assert body is not None, message
        assert any(re.search(rf"(?<![A-Za-z_]){re.escape(w)}(?![A-Za-z_])", body[1]) for w in FIELD_WORDS), message
        error: SpecError | None = e
    else:
        error = None
        family = data["host"]["family"]
        assert spec.family == family
        assert 1 <= len(spec.devices) <= (MAX_DEVICES if family == "neuron" else MAX_GPUS)
        assert validate_inventory(spec.devices) == spec.devices
        for d in spec.devices:
            assert 1 <= len(d.core_ids) <= (MAX_LOGICAL_CORES if family == "neuron" else 1)
            assert 0 <= d.memory_bytes <= 1024**2 * GIB
            assert d.accelerator_type and PARTITION_NAME.match(d.accelerator_type.replace(" ", "-"))
        info = MockPlugin(spec).host_info()
        assert info.device_count == len(spec.devices)
    with mock.patch.dict(os.environ, {"RAYACCEL_MOCK": path}):
        if error is not None:
            with pytest.raises(SpecError) as again:
                discover("mock")
            assert str(again.value) == str(error)
        else:
            inventory = discover("mock")
            assert [s.active for s in inventory.statuses] == [True]
            assert len(inventory.devices()) == len(spec.devices)
    return error is None


@badinput("exit-code")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec_tables())
def test_any_toml_table_loads_or_names_a_field(case: tuple[dict[str, object], int]) -> None:
    data, changes = case
    text = _toml_document(data)
    assert _same(tomllib.loads(text), data), "the test's TOML writer is wrong"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.toml")
        Path(path).write_text(text, encoding="utf-8")
        loaded = _check(path, data)
    event("loaded" if loaded else "refused")
    if changes == 0:
        assert loaded, f"a valid spec was refused: {text}"


@settings(max_examples=200, deadline=None)
@given(
    family=st.sampled_from(["neuron", "gpu"]),
    count=st.integers(1, 16),
    cores=st.integers(1, 8),
    memory=st.one_of(st.integers(0, 200), st.floats(0, 200)),
    links=st.sets(st.tuples(st.integers(0, 15), st.integers(0, 15)), max_size=20),
    listed=st.booleans(),
)
def test_a_valid_spec_gives_exactly_what_it_says(
    family: str, count: int, cores: int, memory: float, links: set[tuple[int, int]], listed: bool
) -> None:
    cores = cores if family == "neuron" else 1
    host: dict[str, object] = {"family": family, "cores_per_device": cores, "memory_gib": memory}
    data: dict[str, object] = {"host": host}
    pairs = {(a, b) for a, b in links if a != b and a < count and b < count}
    peers = {i: sorted({b for a, b in pairs if a == i} | {a for a, b in pairs if b == i}) for i in range(count)}
    if listed:
        data["devices"] = [{"peers": peers[i]} for i in range(count)]
    else:
        host["devices"] = count
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "spec.toml")
        Path(path).write_text(_toml_document(data))
        spec = load_spec(path)
    assert [d.index for d in spec.devices] == list(range(count))
    assert {len(d.core_ids) for d in spec.devices} == {cores}
    assert {d.memory_bytes for d in spec.devices} == {int(memory * GIB)}
    if listed:
        assert [sorted(d.peers) for d in spec.devices] == [
            sorted(spec.devices[j].id for j in peers[i]) for i in range(count)
        ]


@badinput("traceback")
@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(str.encode)))
def test_any_bytes_load_or_raise_spec_error(raw: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.toml"
        path.write_bytes(raw)
        try:
            spec = load_spec(str(path))
        except SpecError as e:
            assert str(path) in str(e) and "\n" not in str(e)
        else:
            assert validate_inventory(spec.devices) == spec.devices


@badinput("traceback")
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_value_of_the_variable_is_a_preset_a_spec_or_a_spec_error(value: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        old = os.getcwd()
        os.chdir(tmp)  # a relative value names nothing here
        try:
            try:
                spec = load_spec(value)
            except SpecError as e:
                assert "\n" not in str(e)
            else:
                assert validate_inventory(spec.devices) == spec.devices
        finally:
            os.chdir(old)


def test_spec_from_table_takes_parsed_data_directly() -> None:
    # The parser is pure: the file is only where the table came from.
    spec = spec_from_table({"host": {"family": "gpu", "devices": 2}}, "inline")
    assert len(spec.devices) == 2 and spec.name == "inline"
    with pytest.raises(SpecError, match=r"^inline \[host\]: devices must be a positive integer, got 0$"):
        spec_from_table({"host": {"family": "gpu", "devices": 0}}, "inline")


def test_node_is_the_old_name_of_the_host_table() -> None:
    # Spec files written before the table was renamed still load, alike.
    old = spec_from_table({"node": {"family": "gpu", "devices": 2}}, "inline")
    assert old == spec_from_table({"host": {"family": "gpu", "devices": 2}}, "inline")
    with pytest.raises(SpecError, match=r"^inline \[node\]: devices must be a positive integer, got 0$"):
        spec_from_table({"node": {"family": "gpu", "devices": 0}}, "inline")
    with pytest.raises(SpecError, match=r"^inline: both \[host\] and \[node\] \(its old name\) are given"):
        spec_from_table({"host": {"family": "gpu"}, "node": {"family": "gpu", "devices": 2}}, "inline")


def test_a_spec_file_with_node_loads_with_a_deprecation_warning_on_stderr(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = load_spec(str(_spec(tmp_path, '[node]\nfamily = "gpu"\ndevices = 2\n')))
    assert len(old.devices) == 2
    assert "[node] is deprecated: it is the old name of [host]" in capsys.readouterr().err
    load_spec(str(_spec(tmp_path, '[host]\nfamily = "gpu"\ndevices = 2\n')))
    assert capsys.readouterr().err == ""


def test_the_readme_example_loads(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (example,) = [b for b in re.findall(r"```toml\n(.*?)```", readme, re.S) if b.startswith("[host]")]
    spec = load_spec(str(_spec(tmp_path, example)))
    assert [(d.id, d.core_ids, d.peers) for d in spec.devices] == [
        ("neuron:0", (0, 1), ("neuron:1",)),
        ("neuron:1", (2, 3), ("neuron:0",)),
    ]


def test_a_path_with_a_nul_byte_is_a_spec_error_naming_it() -> None:
    # Found by the property above: os.stat raises ValueError, not OSError, on a NUL.
    with pytest.raises(SpecError, match=r"holds a NUL byte") as e:
        load_spec("/\x00")
    assert "\n" not in str(e.value)
