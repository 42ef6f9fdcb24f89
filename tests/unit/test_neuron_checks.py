"""The Neuron backend's check (a matrix product on the device's cores against
the CPU's, in a child that sees those cores alone) and its repair (the
operator's: AWS publishes no reset of one device)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from ray_accel_neuron import NeuronPlugin
from ray_accel_neuron import plugin as neuron_plugin
from ray_accel_neuron.check import MATMUL_RTOL, products

from ray_accel.core.checks import CheckOutcome, CheckResult, RepairOutcome
from ray_accel.core.errors import InputError
from ray_accel.plugins.check_runner import child_command, run_check_child
from tests.fakes.neuron_env import tree_only
from tests.fakes.neuron_sysfs import build_tree
from tests.fakes.torchneuron import install


@pytest.fixture
def plugin(tmp_path: Path) -> NeuronPlugin:
    found = NeuronPlugin(tree_only(build_tree(tmp_path / "s", "trn1.32xlarge", core_metrics=False)))
    assert found.probe() is None
    return found


def test_the_product_passes_where_the_device_computes_right() -> None:
    outcome, detail = products(torch, [torch.device("cpu"), torch.device("cpu")])
    assert outcome is CheckOutcome.PASSED and detail.startswith("256x256 product on cpu, cpu within ")
    assert MATMUL_RTOL >= 2**-8, "at least bfloat16's precision: the compiler casts float32 products by default"


def test_without_a_neuron_framework_the_check_is_unavailable_naming_both(plugin: NeuronPlugin) -> None:
    result = plugin.check("neuron:3", 120)
    assert result.outcome is CheckOutcome.UNAVAILABLE
    assert "TorchNeuron is not installed" in result.detail and "torch-xla is not installed" in result.detail


def test_the_child_sees_the_devices_cores_as_one_range(plugin: NeuronPlugin, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def spy(**kw: Any) -> CheckResult:
        calls.append(kw)
        return CheckResult(kw["device_id"], CheckOutcome.PASSED, "not run", 0.0, 0.0)

    monkeypatch.setattr(neuron_plugin, "run_check_child", spy)
    assert plugin.check("neuron:3", 120).detail == "not run"
    device = next(d for d in plugin.list_devices() if d.id == "neuron:3")
    want = f"{device.core_ids[0]}-{device.core_ids[-1]}"
    assert (calls[0]["visible_env"], calls[0]["visible_value"]) == ("NEURON_RT_VISIBLE_CORES", want)
    assert calls[0]["command"][-2:] == ["-m", "ray_accel_neuron.check"] and calls[0]["timeout_s"] == 120


def test_with_torchneuron_the_check_runs_on_the_neuron_device(tmp_path: Path) -> None:
    # The fake TorchNeuron registers the `neuron` device but has no kernels for
    # it: the product fails there, naming the device, which shows the path taken.
    site = install(tmp_path / "site")
    result = run_check_child(
        device_id="neuron:2",
        command=child_command("ray_accel_neuron.check"),
        visible_env="NEURON_RT_VISIBLE_CORES",
        visible_value="4-5",
        timeout_s=120,
        extra_env={"PYTHONPATH": str(site)},
    )
    assert result.outcome is CheckOutcome.FAILED and "'neuron' backend" in result.detail


def test_the_repair_is_the_operators_and_an_unknown_device_is_refused(plugin: NeuronPlugin) -> None:
    result = plugin.repair("neuron:3")
    assert (result.outcome, result.exit_code, result.device_id) == (RepairOutcome.OPERATOR, None, "neuron:3")
    assert "AWS publishes no command that resets one Neuron device" in result.detail
    with pytest.raises(InputError, match="'neuron:99' is not a device of this host"):
        plugin.repair("neuron:99")
    with pytest.raises(InputError, match="'neuron:99' is not a device of this host"):
        plugin.check("neuron:99", 60)
