"""A host change planned whole before anything is touched, and recorded step
by step (`ray_accel.hostops`): the plan's shares, ports and masks, the
record's change and unassigned devices, the failpoint's names, the helper
kinds' table, and the one place a raylet's arguments are made."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_mock.spec import load_spec

from ray_accel.cluster import helpers, procs, statedir
from ray_accel.cluster.host import ShareError, raylet_ports
from ray_accel.cluster.raylet import Split
from ray_accel.cluster.record import HostChange, RecordError, Spare, dumps, parse_record
from ray_accel.core.errors import RayAccelError
from ray_accel.core.health_state import HealthSettings
from ray_accel.hostops import change, steps
from ray_accel.hostops.repartition import Inputs, free_block, plan_change
from ray_accel.partition.plan import MaskView
from tests.planning import started_record

TRN1 = load_spec("trn1.32xlarge").devices
FOUR = "a=0-3;b=4-7;c=8-11;d=12-15"
MERGED = "a=0-3;b=4-7;cd=8-15"
ROOT = Path(__file__).resolve().parents[2]


def always_free(port: int) -> bool:
    return True


def test_a_split_whose_object_stores_would_be_too_small_is_refused_naming_the_figure() -> None:
    record = started_record(TRN1, FOUR, object_store=600_000_000)
    ten = "a=0-3;b=4-7;c0=8;c1=9;c2=10;c3=11;d0=12;d1=13;d2=14;d3=15"
    with pytest.raises(ShareError, match=r"partition c0's object store would be 37500000 bytes, below Ray's minimum"):
        plan_change(record, TRN1, Split("manual", manual=ten), frozenset(), always_free)


def test_the_merged_partition_gets_the_stopped_ones_shares() -> None:
    record = started_record(TRN1, FOUR, cpus=16, object_store=800_000_000)
    planned = plan_change(record, TRN1, Split("manual", manual=MERGED), frozenset(), always_free)
    (cd,) = planned.target
    old = {p.name: p.share for p in record.partitions}
    assert cd.name == "cd" and cd.share is not None and old["c"] and old["d"]
    assert cd.share.cpus == old["c"].cpus + old["d"].cpus
    assert cd.share.object_store_memory == old["c"].object_store_memory + old["d"].object_store_memory
    view = planned.view()
    assert {c.partition: (c.share, c.ports) for c in view.partitions if c.partition == "cd"} == {
        "cd": (cd.share, cd.ports)
    }


@pytest.mark.parametrize("port_base", [None, 30000])
def test_an_added_partition_s_ports_are_clear_of_every_kept_raylet_on_a_host_of_192_cpus(port_base: int | None) -> None:
    record = started_record(TRN1, FOUR, cpus=192, port_base=port_base)
    planned = plan_change(record, TRN1, Split("manual", manual=MERGED), frozenset(), always_free)
    (cd,) = planned.target
    block = set(cd.ports.all())
    for kept in [record.head_raylet, *record.partitions]:
        assert kept is not None
        assert not block & set(kept.ports.all()), f"{cd.name}'s block overlaps {kept.name}'s ports or worker ports"
    first = port_base if port_base is not None else 21000
    assert min(block) >= first, "inside the user's range, from its --port-base up"
    # Sized by its own share's CPUs (half of 192), not the whole host's.
    assert cd.share is not None and cd.ports.max_worker_port - cd.ports.min_worker_port + 1 == 2 * 96 + 4 * 16 + 64


def test_a_port_in_use_moves_the_block_past_it() -> None:
    taken = [raylet_ports(21000, 184)]
    busy = {21300}
    block = free_block(184, 21000, taken, lambda p: p not in busy)
    assert block.base > 21300 and not set(block.all()) & set(taken[0].all())


@given(
    st.integers(1024, 60000),
    st.lists(st.tuples(st.integers(1024, 64000), st.integers(184, 2000)), max_size=6),
    st.integers(184, 3000),
)
def test_a_free_block_never_overlaps_a_taken_one(base: int, taken_at: list[tuple[int, int]], workers: int) -> None:
    taken = [raylet_ports(at, n) for at, n in taken_at if at + 16 + n <= 65535]
    try:
        block = free_block(workers, base, taken, always_free)
    except RayAccelError:
        return  # no room left above `base`: refused, naming the range
    assert block.base >= base and block.max_worker_port <= 65535
    assert all(not set(block.all()) & set(t.all()) for t in taken)


def test_a_split_under_a_mask_that_splits_a_device_is_planned_by_core() -> None:
    # Cores 0..28 of 32: device 14 (cores 28, 29) only partly inside the mask.
    mask = MaskView("NEURON_RT_VISIBLE_CORES", "0-28", tuple(range(29)), tuple(f"neuron:{i}" for i in range(15)), "")
    spec = "a=0-3;b=4-7;c=8-14"
    record = started_record(TRN1, spec, inherited=mask)
    again = plan_change(record, TRN1, Split("manual", manual=spec), frozenset(), always_free)
    assert not again.resplit.changed, "the same split under the same mask is nothing to change"
    split = plan_change(record, TRN1, Split("manual", manual="a=0-3;b=4-7;c=8-11;e=12-14"), frozenset(), always_free)
    cores = {c for t in split.target for c in t.core_ids}
    assert cores and cores <= set(range(29)), "no raylet serves a core outside the mask"


def test_unassigned_devices_come_back_with_their_share() -> None:
    record = started_record(TRN1, "a=0-3;b=4-7", object_store=800_000_000)
    share = replace(record.partitions[1].share, partition="cd")  # type: ignore[type-var]
    spare = Spare(
        device_ids=tuple(f"neuron:{i}" for i in range(8, 16)),
        core_ids=tuple(range(16, 32)),
        share=share,
        reason="did not register within 1s",
    )
    record = replace(record, unassigned=(spare,))
    planned = plan_change(record, TRN1, Split("manual", manual=MERGED), frozenset(), always_free)
    (cd,) = planned.target
    assert cd.share is not None and cd.share.object_store_memory == share.object_store_memory


def _record_json() -> dict[str, object]:
    record = started_record(TRN1, FOUR)
    target = replace(record.partitions[2], name="cd", device_ids=tuple(f"neuron:{i}" for i in range(8, 16)))
    target = replace(target, core_ids=tuple(range(16, 32)))
    change = HostChange(
        kind="repartition", step=steps.LAUNCH, since=2.0, touched=("c", "d"), target=(target,), deadline=9.0,
        mode="manual",
    )  # fmt: skip
    spare = Spare(device_ids=("neuron:15",), core_ids=(30, 31), share=record.partitions[3].share, reason="x")  # type: ignore[arg-type]
    record = replace(record, change=change, unassigned=(spare,), port_base=30000, max_workers=300)
    data: dict[str, object] = json.loads(dumps(record))
    return data


def test_a_change_and_unassigned_devices_are_kept_in_the_record() -> None:
    data = _record_json()
    record = parse_record(json.dumps(data), "host.json")
    assert record.change is not None and record.change.step == "launch" and record.change.touched == ("c", "d")
    assert [t.name for t in record.change.target] == ["cd"] and record.in_change("cd") and record.in_change("c")
    assert not record.in_change("a")
    assert record.unassigned[0].device_ids == ("neuron:15",) and record.port_base == 30000
    assert json.loads(dumps(record)) == data


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (("change", "kind"), "reboot", "'reboot'"),
        (("change", "step"), "", "change.step"),
        (("unassigned",), [{"device_ids": []}], "unassigned[0]"),
        (("port_base",), 80, "port_base"),
    ],
)
def test_a_bad_change_is_refused_naming_its_field(path: tuple[str, ...], value: object, needle: str) -> None:
    data = _record_json()
    at: dict[str, object] = data
    for key in path[:-1]:
        at = at[key]  # type: ignore[assignment]
    at[path[-1]] = value
    with pytest.raises(RecordError, match=needle.replace("[", r"\[")):
        parse_record(json.dumps(data), "host.json")


def test_a_record_of_a_newer_version_is_refused_naming_it() -> None:
    data = _record_json()
    data["version"] = 6
    with pytest.raises(
        RecordError, match="version: 6; this ray-accel reads versions 3 to 5 .a newer ray-accel wrote it"
    ):
        parse_record(json.dumps(data), "host.json")


@given(st.sampled_from(steps.STEPS), st.sampled_from(["a", "cd", None]), st.text(max_size=20))
def test_the_failpoint_names_a_step_and_perhaps_a_partition(step: str, where: str | None, other: str) -> None:
    assert steps.crashes_here(step, where, step)
    assert steps.crashes_here(step, where, f"{step}@{where}") == (where is not None)
    assert not steps.crashes_here(step, where, None) and not steps.crashes_here(step, where, "")
    if other != step and not other.startswith(f"{step}@"):
        assert not steps.crashes_here(step, where, other)


def test_helper_kinds_are_one_table_that_refuses_an_unknown_kind() -> None:
    assert helpers.identity_of("health_decider") == "-m ray_accel.health.decider"
    assert helpers.identity_of("repartition") == "-m ray_accel.hostops.repartition"
    assert procs.is_ray_process("repartition", "-m ray_accel.hostops.repartition")
    with pytest.raises(
        RayAccelError, match="no helper of kind 'tuner': the helper kinds are health_decider, repartition"
    ):
        helpers.identity_of("tuner")


def _calls(name: str) -> list[str]:
    """Where the product calls `name`: file:function."""
    found = []
    for path in sorted((ROOT / "ray_accel").rglob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for node in ast.walk(fn):
                callee = node.func if isinstance(node, ast.Call) else None
                called = getattr(callee, "id", None) or getattr(callee, "attr", None)
                if called == name:
                    found.append(f"{path.relative_to(ROOT)}:{fn.name}")
    return sorted(set(found))


def test_one_place_makes_a_raylets_arguments_and_environment() -> None:
    assert _calls("ray_start_args") == ["ray_accel/cluster/raylet.py:job"]
    assert _calls("partition_env") == ["ray_accel/cluster/raylet.py:job"]
    # ... and every raylet start goes through it.
    assert {"ray_accel/cluster/recover.py:relaunch", "ray_accel/cluster/start.py:job"} <= set(_calls("job"))
    assert not {"ray_accel/hostops/change.py", "ray_accel/hostops/actions.py"} & {
        c.split(":")[0] for c in _calls("run_all")
    }


def test_one_function_answers_which_devices_are_out_of_service() -> None:
    callers = _calls("out_of_service")
    assert "ray_accel/cluster/start.py:kept_out" in callers and "ray_accel/hostops/repartition.py:planned" in callers
    assert not _calls("last_out"), "no caller reads the last health report's out on its own"


STOP_ALONE = """
import json, sys
from ray_accel.cluster.{module} import {name}
result = {name}()
assert not [m for m in sys.modules if m.startswith(("ray_accel.health", "ray_accel.hostops"))], "imported"
print(json.dumps({{"ok": True, "warnings": list(getattr(result, "warnings", ()))}}))
"""


def _alone(module: str, name: str, env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, "-c", STOP_ALONE.format(module=module, name=name)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_stop_and_status_know_every_helper_with_only_their_own_imports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record naming a live decider and a live repartition helper: `status()`
    and `stop()`, each from a Python that imported nothing else of ray-accel,
    take both for ray-accel's own and stop them."""
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o700)
    monkeypatch.setenv("RAYACCEL_STATE_DIR", str(state_dir))
    monkeypatch.setenv("RAYACCEL_MOCK", "trn1.32xlarge")
    record = replace(
        started_record(TRN1, FOUR),
        host=statedir.host_name(),
        host_ip="127.0.0.1",
        partitions=(),
        head_raylet=None,
        health=HealthSettings(interval_s=0.5),
    )
    record = statedir.save(record)
    inputs = helpers.HelperInputs(str(state_dir), record.created, True)
    decider, _ = helpers.spawn("health_decider", "the decider", inputs, state_dir / "decider.log", record.spec.to_env())
    # A repartition helper waiting for the lock (held by another process until it is killed).
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(state_dir)], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    waiting = Inputs(str(state_dir), record.created, True, 10.0)
    helper, _ = helpers.spawn("repartition", "the repartition", waiting, state_dir / "repartition.log")
    statedir.save(replace(record, decider=decider, repartition=helper))
    try:
        env = dict(os.environ)
        shown = _alone("status", "status", env)
        assert not [w for w in shown["warnings"] if "not counted as ours" in w], shown  # type: ignore[union-attr]
        holder.kill()
        holder.wait(10)
        _alone("stop", "stop", env)
        assert not decider.record.alive() and not helper.record.alive()
        assert not (state_dir / statedir.STATE_FILE).exists()
    finally:
        procs.terminate([p.record for p in (decider, helper) if p.record.alive()], 2.0)
        holder.kill()


HOLD_LOCK = """
import sys, time
from pathlib import Path
from ray_accel.cluster import statedir
d = Path(sys.argv[1])
with statedir.host_lock("test", statedir.Place(d, d / statedir.STATE_FILE, True)):
    print("held", flush=True)
    time.sleep(120)
"""


def test_a_removed_partition_whose_devices_no_new_one_takes_keeps_its_share() -> None:
    record = started_record(TRN1, FOUR, cpus=16, object_store=800_000_000)
    planned = plan_change(record, TRN1, Split("manual", manual="a=0-3;b=4-7;cc=8-11"), frozenset(), always_free)
    (cc,) = planned.target
    old = {p.name: p.share for p in record.partitions}
    assert cc.share is not None and old["c"] is not None
    assert cc.share.object_store_memory == old["c"].object_store_memory, "d's share is not given to cc"


@given(st.text(max_size=2000))
def test_a_reason_from_a_launchers_log_is_kept_as_one_line_the_record_reads_back(said: str) -> None:
    """A launch's error carries its log's tail: colour codes, line breaks. The
    record keeps it as one line it reads back (it refused its own file before)."""
    record = started_record(TRN1, "a=0-3;b=4-7")
    share = record.partitions[1].share
    assert share is not None
    spare = Spare(device_ids=("neuron:15",), core_ids=(30, 31), share=share, reason=change.line(f"\x1b[37m{said}\n"))
    read = parse_record(dumps(replace(record, unassigned=(spare,))), "host.json")
    assert read.unassigned[0].reason == spare.reason and "\n" not in spare.reason and len(spare.reason) <= 1000
