"""Bridge specs of a Trainium host (32 NeuronCores) and an A100 host (8
GPUs), as their backends' plugins would give them, for the unit tests of the
bridge, of a driver's checks and of `ray start`'s arguments."""

from __future__ import annotations

from ray_accel_cuda.runtime import TRAITS as CUDA_TRAITS
from ray_accel_neuron.runtime import TRAITS as NEURON_TRAITS

from ray_accel.bridge.managers import BridgeSpec

NEURON = BridgeSpec(
    resource_name="neuron_cores",
    visible_ids_env="NEURON_RT_VISIBLE_CORES",
    family="neuron",
    accelerator_type="Trainium",
    unit_ids=tuple(range(32)),
    backend="neuron",
    traits=NEURON_TRAITS,
)
GPU = BridgeSpec(
    resource_name="GPU",
    visible_ids_env="CUDA_VISIBLE_DEVICES",
    family="gpu",
    accelerator_type="A100",
    unit_ids=tuple(range(8)),
    backend="cuda",
    traits=CUDA_TRAITS,
)
