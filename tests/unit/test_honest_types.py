"""Honest accelerator types on a host of several GPU models.

Here we deliberately differ from Ray. Ray 2.60 types a whole node by its GPU
0 (`NvidiaGPUAcceleratorManager.get_current_node_accelerator_type` reads
`nvmlDeviceGetHandleByIndex(0)` only), and Ray's own test of it
(`test_gpu_info_parsing` in python/ray/tests/accelerators/test_nvidia_gpu.py)
expects "A100" for a node of two A100s and a V100. A task asking for a V100
there may never land and one asking for an A100 may get the V100. Since we
split hosts, each partition advertises the type of its own devices: AUTO_SPLIT
never puts two models in one partition, and a partition holding several types
(SHARED or MANUAL) advertises none and is warned about, naming the models.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_cuda.runtime import TRAITS as CUDA_TRAITS
from ray_accel_mock.spec import GIB, build_mixed_gpus, load_spec

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec, make_manager, raylet_env, specs_from_env
from ray_accel.cluster.raylet import partition_env
from ray_accel.core.devices import Device
from ray_accel.core.reader import dump, load
from ray_accel.partition.plan import Mode, PartitionError
from tests.cli_process import CliRunner
from tests.clirun import cli_json_here as cli_json
from tests.planning import plan_for

MIXED = "mixed-v100-a100"
V100, A100 = "Tesla V100-SXM2-16GB", "NVIDIA A100-SXM4-40GB"


def mixed() -> tuple[Device, ...]:
    return load_spec(MIXED).devices


def test_auto_split_gives_each_model_its_own_partition_by_default() -> None:
    plan = plan_for(mixed(), "auto-split")
    assert [(p.core_ids, p.accelerator_type, p.models) for p in plan] == [
        ((0,), "V100", (V100,)),
        ((1, 2), "A100", (A100,)),
    ]
    assert not any("models" in w for w in plan.warnings)


def test_auto_split_three_ways_splits_the_a100s() -> None:
    plan = plan_for(mixed(), "auto-split", 3)
    assert [(p.core_ids, p.accelerator_type) for p in plan] == [((0,), "V100"), ((1,), "A100"), ((2,), "A100")]


def test_auto_split_into_one_partition_is_refused_naming_the_models() -> None:
    with pytest.raises(PartitionError, match=r"1 x Tesla V100-SXM2-16GB, 2 x NVIDIA A100-SXM4-40GB.*--partitions 2, 3"):
        plan_for(mixed(), "auto-split", 1)


def test_shared_over_mixed_models_advertises_no_type_and_warns() -> None:
    plan = plan_for(mixed(), Mode.SHARED, 2)
    assert [p.accelerator_type for p in plan] == [None, None]
    assert all(p.models == (V100, A100) for p in plan)
    warning = next(w for w in plan.warnings if "no single accelerator type" in w)
    assert "partitions p0, p1" in warning and V100 in warning and A100 in warning


def test_manual_partition_over_mixed_models_advertises_no_type() -> None:
    plan = plan_for(mixed(), "manual", manual="a=0-1;b=2")
    assert [(p.name, p.accelerator_type) for p in plan] == [("a", None), ("b", "A100")]
    assert any(w.startswith(f"partition a mixes models {V100}, {A100}") for w in plan.warnings)


def test_models_of_one_type_keep_the_type() -> None:
    host = build_mixed_gpus("a100s", [(A100, "A100", 40 * GIB, 1), ("NVIDIA A100-SXM4-80GB", "A100", 80 * GIB, 1)])
    plan = plan_for(host.devices, "manual", manual="both=0-1")
    assert plan.partitions[0].accelerator_type == "A100"
    assert any("all of accelerator type A100" in w for w in plan.warnings)
    assert [p.accelerator_type for p in plan_for(host.devices, "auto-split")] == ["A100", "A100"]


def test_devices_without_a_type_of_their_own_take_the_hosts_on_a_one_model_host() -> None:
    untyped = [dataclasses.replace(d, accelerator_type=None) for d in load_spec("p4d.24xlarge").devices]
    assert [p.accelerator_type for p in plan_for(untyped, "auto-split", 2, default_type="A100")] == [
        "A100",
        "A100",
    ]
    mixed_untyped = [dataclasses.replace(d, accelerator_type=None) for d in mixed()]
    plan = plan_for(mixed_untyped, "auto-split", default_type="V100")
    assert [p.accelerator_type for p in plan] == [None, None], "GPU 0's type is not the host's"


@st.composite
def mixed_hosts(draw: st.DrawFn) -> tuple[tuple[Device, ...], int]:
    counts = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    rows = [(f"Model{n}", f"T{n}", (n + 1) * GIB, c) for n, c in enumerate(counts)]
    host = build_mixed_gpus("hyp", rows)
    # Every count the plan can meet: each model split evenly, at least once.
    totals = {0}
    for c in counts:
        totals = {t + k for t in totals for k in range(1, c + 1) if c % k == 0}
    return host.devices, draw(st.sampled_from(sorted(totals)))


@given(mixed_hosts())
def test_auto_split_never_mixes_models_and_types_each_partition(case: tuple[tuple[Device, ...], int]) -> None:
    devices, partitions = case
    plan = plan_for(devices, "auto-split", partitions)
    assert len(plan.partitions) == partitions
    by_id = {d.id: d for d in devices}
    assert sorted(i for p in plan for i in p.device_ids) == sorted(by_id)
    for p in plan:
        members = [by_id[i] for i in p.device_ids]
        assert len({d.model for d in members}) == 1, f"{p.name} mixes models"
        assert p.accelerator_type == members[0].accelerator_type
    for model in {d.model for d in devices}:
        sizes = {len(p.device_ids) for p in plan if p.models == (model,)}
        assert len(sizes) == 1, f"{model} is split unevenly: {sizes}"


def test_a_partitions_spec_carries_its_own_type_to_rays_manager() -> None:
    spec_all = BridgeSpec(
        resource_name="GPU",
        visible_ids_env="CUDA_VISIBLE_DEVICES",
        family="gpu",
        accelerator_type=None,
        unit_ids=(0, 1, 2),
        backend="cuda",
        traits=CUDA_TRAITS,
    )
    plan = plan_for(mixed(), "auto-split")
    base = raylet_env([spec_all], {})
    for part, kind in zip(plan, ["V100", "A100"], strict=True):
        own = spec_all.for_partition(part)
        env = partition_env(base, own, part)
        (spec,) = specs_from_env(env[SPEC_ENV])
        assert spec.accelerator_type == kind
        # What Ray's resource and label code asks (resource_and_label_spec.py):
        assert make_manager(spec).get_current_node_accelerator_type() == kind
    shared = plan_for(mixed(), "shared", 2)
    assert make_manager(spec_all.for_partition(shared.partitions[0])).get_current_node_accelerator_type() is None


def test_partition_env_leaves_the_spec_alone_when_the_bridge_is_off() -> None:
    spec_all = BridgeSpec(
        resource_name="GPU",
        visible_ids_env="CUDA_VISIBLE_DEVICES",
        family="gpu",
        accelerator_type=None,
        unit_ids=(0, 1, 2),
        backend="cuda",
        traits=CUDA_TRAITS,
    )
    part = plan_for(mixed(), "auto-split").partitions[0]
    assert SPEC_ENV not in partition_env({}, spec_all.for_partition(part), part)


def test_plan_cli_shows_the_type_per_partition(cli: CliRunner) -> None:
    env = {"RAYACCEL_MOCK": MIXED}
    out = cli_json("plan", env=env)
    assert [(p["partition"], p["accelerator_type"], p["models"]) for p in out["partitions"]] == [
        ("p0", "V100", [V100]),
        ("p1", "A100", [A100]),
    ]
    text = cli("plan", "--mode", "shared", "--partitions", "2", env=env)
    assert text.returncode == 0, text.stderr
    assert "TYPE" in text.stdout and f"none ({V100} + {A100})" in text.stdout
    assert "no single accelerator type" in text.stdout
    assert cli("plan", "--partitions", "1", env=env).returncode == 2


def test_devices_cli_keeps_each_models_type(cli: CliRunner) -> None:
    env = {"RAYACCEL_MOCK": MIXED}
    out = cli_json("devices", env=env)
    assert out["host"]["accelerator_type"] is None
    assert [(d["model"], d["accelerator_type"]) for d in out["devices"]] == [
        (V100, "V100"),
        (A100, "A100"),
        (A100, "A100"),
    ]
    text = cli("devices", env=env).stdout
    assert text.splitlines()[0].endswith("mixed: V100, A100")


def test_spec_json_round_trip_keeps_no_type() -> None:
    spec = BridgeSpec(
        resource_name="GPU",
        visible_ids_env="CUDA_VISIBLE_DEVICES",
        family="gpu",
        accelerator_type=None,
        unit_ids=(0,),
        backend="cuda",
        traits=CUDA_TRAITS,
        process_env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
    )
    assert load(BridgeSpec, json.loads(json.dumps(dump(spec)))) == spec


def test_partition_env_carries_the_process_env_with_or_without_the_bridge() -> None:
    spec_all = BridgeSpec(
        resource_name="GPU",
        visible_ids_env="CUDA_VISIBLE_DEVICES",
        family="gpu",
        accelerator_type=None,
        unit_ids=(0, 1, 2),
        backend="cuda",
        traits=CUDA_TRAITS,
        process_env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
    )
    part = plan_for(mixed(), "auto-split").partitions[1]
    for base in ({}, raylet_env([spec_all], {})):
        env = partition_env(base, spec_all.for_partition(part), part)
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID" and env["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_metrics_tag_each_device_with_its_own_type() -> None:
    from ray_accel_mock import MockPlugin

    from ray_accel.metrics.collect import device_readings

    plugin = MockPlugin(load_spec(MIXED))
    readings, errors = device_readings(plugin.telemetry, plugin.list_devices(), "p0", None)
    assert errors == []
    assert [r.accelerator_type for r in readings] == ["V100", "A100", "A100"]
