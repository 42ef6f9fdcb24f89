"""The bridge's pure parts, and its managers inside this process's Ray registry."""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray_accel_cuda.runtime import TRAITS as CUDA_TRAITS

from ray_accel.bridge import autoinstall, managers
from ray_accel.bridge.managers import (
    RAY_DEFAULT_UNIT_RESOURCES,
    SPEC_ENV,
    BridgeSpec,
    BridgeUnsupported,
    check_ray_version,
    install,
    make_manager,
    raylet_env,
    specs_from_env,
    unit_resources_env,
    visible_tokens,
)
from ray_accel.cluster import procs
from ray_accel.cluster.host import PortError, plan_ports, port_blocks
from ray_accel.cluster.raylet import validate_ray_args, without
from ray_accel.core import masks
from ray_accel.core.errors import InputError
from ray_accel.core.processes import ProcessRecord
from ray_accel.core.reader import dump
from ray_accel.core.visibility import format_visible_ids
from ray_accel.plugins.traits import DeviceTraits
from ray_accel.rayapi import accelerators
from ray_accel.rayapi.feature import FAKE_RAY_VERSION_ENV, RayApiMissing, ray_version
from tests.bridge_specs import GPU, NEURON

TPU = BridgeSpec(
    resource_name="FAKETPU",
    visible_ids_env="FAKE_TPU_VISIBLE_CHIPS",
    family="faketpu",
    accelerator_type="FakeTPU-v1",
    unit_ids=(0, 1, 2, 3),
    backend="faketpu",
    traits=DeviceTraits(),
)


def test_spec_round_trips_through_the_environment() -> None:
    env = raylet_env([NEURON], {})
    assert specs_from_env(env["RAYACCEL_BRIDGE_SPEC"]) == [NEURON]
    assert env["RAY_preload_python_modules"] == "ray_accel.bridge.autoinstall"
    assert "RAY_custom_unit_instance_resources" not in env, "neuron_cores is already per-instance in Ray"
    with pytest.raises(InputError, match="bad RAYACCEL_BRIDGE_SPEC"):
        specs_from_env("[{]")


def test_process_env_reaches_every_raylet_through_the_spec() -> None:
    gpu = BridgeSpec(
        resource_name="GPU",
        visible_ids_env="CUDA_VISIBLE_DEVICES",
        family="gpu",
        accelerator_type="A100",
        unit_ids=(0, 1),
        backend="cuda",
        traits=CUDA_TRAITS,
        process_env=(("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),),
    )
    env = raylet_env([gpu], {"CUDA_DEVICE_ORDER": "FASTEST_FIRST"})
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID", "masks are NVML (PCI bus) indexes, whatever was inherited"
    assert specs_from_env(env["RAYACCEL_BRIDGE_SPEC"]) == [gpu]
    assert "CUDA_DEVICE_ORDER" not in raylet_env([NEURON], {})


def test_spec_from_plugin_carries_the_plugins_process_env() -> None:
    from ray_accel_cuda import CudaPlugin
    from ray_accel_mock import MockPlugin
    from ray_accel_mock.spec import load_spec

    from tests.fakes import fake_nvml

    cuda = CudaPlugin(fake_nvml.a100x8_nvlink())
    assert cuda.probe() is None
    assert BridgeSpec.from_plugin(cuda).process_env == (("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),)
    assert BridgeSpec.from_plugin(MockPlugin(load_spec("p4d.24xlarge"))).process_env == (
        ("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
    )
    assert BridgeSpec.from_plugin(MockPlugin(load_spec("trn1.2xlarge"))).process_env == ()


def test_a_spec_that_names_no_backend_or_traits_is_refused_naming_what_is_missing() -> None:
    """A worker loads its backend by the spec's name: a spec without one
    (written by an older ray-accel) is an error, never a guess."""
    old = {"resource_name": "GPU", "visible_ids_env": "CUDA_VISIBLE_DEVICES", "family": "gpu"}
    row = {**old, "accelerator_type": "A100", "unit_ids": [0, 1], "process_env": []}
    with pytest.raises(InputError, match="bad RAYACCEL_BRIDGE_SPEC: missing 'backend'"):
        specs_from_env(json.dumps([row]))
    with pytest.raises(InputError, match="bad RAYACCEL_BRIDGE_SPEC: missing 'traits'"):
        specs_from_env(json.dumps([{**row, "backend": "cuda"}]))
    with pytest.raises(InputError, match="traits.split: 'sideways' is not one of"):
        specs_from_env(json.dumps([{**row, "backend": "cuda", "traits": {**dump(CUDA_TRAITS), "split": "sideways"}}]))


def test_new_resource_names_become_unit_instance_resources() -> None:
    env = raylet_env([TPU], {"RAY_preload_python_modules": "mine"})
    assert env["RAY_custom_unit_instance_resources"] == ",".join([*RAY_DEFAULT_UNIT_RESOURCES, "FAKETPU"])
    assert env["RAY_preload_python_modules"] == "mine,ray_accel.bridge.autoinstall"
    assert unit_resources_env([GPU], None) is None
    assert unit_resources_env([TPU], "A,B") == "A,B,FAKETPU"


@given(st.sets(st.integers(0, 31), max_size=32), st.sampled_from(["list", "ranges"]))
def test_visible_tokens_expand_ranges(ids: set[int], style: str) -> None:
    tokens = visible_tokens(NEURON, format_visible_ids(ids, style))  # type: ignore[arg-type]
    assert tokens == [str(i) for i in sorted(ids)]


def test_visible_tokens_keep_gpu_uuids_and_nodevfiles() -> None:
    assert visible_tokens(GPU, "GPU-aaa,GPU-bbb") == ["GPU-aaa", "GPU-bbb"]
    assert visible_tokens(GPU, "NoDevFiles") == []
    assert visible_tokens(GPU, None) is None


def test_manager_answers_from_its_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    m = make_manager(NEURON)
    assert m.get_resource_name() == "neuron_cores"
    assert m.get_current_node_num_accelerators() == 32
    assert m.get_current_node_accelerator_type() == "Trainium"
    assert m.validate_resource_request_quantity(2.0) == (True, None)
    ok, why = m.validate_resource_request_quantity(0.5)
    assert not ok and "whole numbers" in str(why)
    assert make_manager(GPU).validate_resource_request_quantity(0.5) == (True, None)
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "0-3")
    assert m.get_current_process_visible_accelerator_ids() == ["0", "1", "2", "3"]
    m.set_current_process_visible_accelerator_ids(["7", "6"])
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "6,7", "written sorted (Ray writes '7,6')"
    assert masks.read_records(masks.mask_dir()) == {}, "the Neuron backend reads no published masks: none written"
    assert not any(tmp_path.iterdir()), "no mask file at all"
    monkeypatch.setenv("RAY_EXPERIMENTAL_NOSET_NEURON_RT_VISIBLE_CORES", "1")
    m.set_current_process_visible_accelerator_ids(["1"])
    assert os.environ["NEURON_RT_VISIBLE_CORES"] == "6,7"
    monkeypatch.setenv("NEURON_RT_VISIBLE_CORES", "3-1")
    with pytest.raises(ValueError, match="descending range '3-1'"):
        m.get_current_process_visible_accelerator_ids()


@pytest.mark.parametrize("spec", [NEURON, GPU, TPU], ids=["neuron", "cuda", "third-party"])
def test_a_worker_on_a_real_backend_writes_no_mask_file(
    spec: BridgeSpec, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mask records are for a backend whose telemetry reads them (the mock's,
    standing for the vendor tools' process reports); a real backend's workers
    write none at their task starts."""
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path / "masks"))
    monkeypatch.setenv(spec.visible_ids_env, "0,1")
    make_manager(spec).set_current_process_visible_accelerator_ids(["1"])
    assert os.environ[spec.visible_ids_env] == "1"
    assert not (tmp_path / "masks").exists()


def test_a_worker_of_a_backend_that_reads_masks_publishes_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray_accel_mock import MockPlugin, load_spec

    spec = BridgeSpec.from_plugin(MockPlugin(load_spec("trn1.32xlarge")))
    assert spec.traits.reads_published_masks and spec.backend == "mock"
    monkeypatch.setenv(masks.MASK_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(spec.visible_ids_env, "0-31")
    make_manager(spec).set_current_process_visible_accelerator_ids(["7", "6"])
    published = {pid: mask for pid, (mask, _) in masks.read_records(masks.mask_dir()).items()}
    assert published == {os.getpid(): "6,7"}, "published for the metrics collector"


def test_install_replaces_rays_manager_for_that_name() -> None:
    import ray._private.accelerators as acc

    install([NEURON, TPU])
    names = acc.get_all_accelerator_resource_names()
    assert {"neuron_cores", "FAKETPU", "GPU", "TPU"} <= names
    assert acc.get_accelerator_manager_for_resource("neuron_cores").ray_accel_spec == NEURON
    assert acc.get_accelerator_manager_for_resource("FAKETPU").get_current_node_num_accelerators() == 4
    assert sum(1 for m in acc.get_all_accelerator_managers() if m.get_resource_name() == "neuron_cores") == 1
    install([NEURON])  # idempotent
    assert sum(1 for m in acc.get_all_accelerator_managers() if m.get_resource_name() == "neuron_cores") == 1


@given(st.integers(1024, 40000), st.lists(st.integers(16, 3000), min_size=1, max_size=8), st.booleans())
def test_port_blocks_are_disjoint_and_named_ports_distinct(base: int, workers: list[int], client: bool) -> None:
    blocks = port_blocks(base, workers, client)
    seen: list[int] = [p for b in blocks for p in b.all()]
    assert len(seen) == len(set(seen))
    assert [b.max_worker_port - b.min_worker_port + 1 for b in blocks] == workers
    assert ("ray_client_server_port" in blocks[0].named) == client
    assert all("ray_client_server_port" not in b.named for b in blocks[1:])


def test_plan_ports_refuses_a_taken_port() -> None:
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        taken = s.getsockname()[1]
        with pytest.raises(PortError, match=f"port {taken} is already in use"):
            plan_ports([184, 184], taken - 1)
    assert len(plan_ports([184, 184, 500], None)) == 3


def test_ray_args_filters() -> None:
    assert without(
        ["--include-dashboard", "true", "--num-cpus", "2", "--include-dashboard=false"], {"--include-dashboard"}
    ) == [
        "--num-cpus",
        "2",
    ]
    validate_ray_args(["--num-cpus", "2", "--temp-dir", "/x"])
    with pytest.raises(InputError, match="--node-manager-port is set per partition"):
        validate_ray_args(["--node-manager-port=5"])


def test_terminate_stops_exactly_the_recorded_tree() -> None:
    sleeper = "import time; time.sleep(60)"
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {sleeper!r}]); time.sleep(60)"
    parent = subprocess.Popen([sys.executable, "-c", code])
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
            time.sleep(0.05)
        child = psutil.Process(parent.pid).children()[0]
        record = ProcessRecord.of(parent.pid)
        assert record is not None and record.alive()
        assert not ProcessRecord(parent.pid, record.start_ticks - 100).alive(), "a reused PID is not ours"
        signalled = procs.terminate([record], grace_s=2)
        assert set(signalled) == {parent.pid, child.pid}
        parent.wait(timeout=5)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert bystander.poll() is None, "a process we did not record is untouched"
        assert not record.alive()
    finally:
        bystander.kill()
        bystander.wait()


# The bridge refuses to install, naming why, where Ray is absent or lacks
# the registry it replaces; a worker's masks are refreshed through Ray's own.
def test_without_ray_the_bridge_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_RAY_VERSION_ENV, "not installed")
    with pytest.raises(BridgeUnsupported, match="^ray is not installed$"):
        install([NEURON])


def test_a_ray_whose_distribution_is_gone_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def gone(name: str) -> str:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.delenv(FAKE_RAY_VERSION_ENV, raising=False)
    monkeypatch.setattr(importlib.metadata, "version", gone)
    assert ray_version() == "not installed"
    with pytest.raises(BridgeUnsupported, match="^ray is not installed$"):
        check_ray_version()


def test_a_ray_without_the_registry_is_named_and_nothing_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_registry() -> None:
        raise RayApiMissing("Ray 2.60.0: ray._private.accelerators has no _resource_name_to_accelerator_manager")

    monkeypatch.setattr(accelerators, "check_registry", no_registry)
    with pytest.raises(BridgeUnsupported, match="has no _resource_name_to_accelerator_manager: the bridge is not"):
        check_ray_version()


def test_a_registry_that_refuses_our_managers_leaves_the_bridge_uninstalled(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuses(ours: object) -> None:
        raise RayApiMissing("Ray 2.60.0: the registry is not a dict")

    monkeypatch.setattr(accelerators, "put_managers", refuses)
    with pytest.raises(BridgeUnsupported, match="the registry is not a dict: the bridge is not installed$"):
        install([NEURON])


def test_a_workers_masks_are_recorded_again_through_rays_accelerators(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setenv(SPEC_ENV, NEURON.to_env())
    monkeypatch.setattr(managers, "install", lambda specs: calls.append("install"))
    monkeypatch.setattr(accelerators, "refresh_original_visible_ids", lambda: calls.append("refresh"))
    autoinstall._autoinstall()
    assert calls == ["install", "refresh"]
