"""Run one process's worth of torch-xla 2.9 for the XLA lane; print nothing, write JSON.

    python -m tests.integration.xla_probes MODE OUT.json     (the environment is the worker's)

Modes:
  neuron-start: torch-xla's own start-up on a Neuron host, on exactly this
      environment (PJRT_DEVICE=NEURON), then ray-accel's own `xla` group
      set-up up to the PJRT client (which needs libneuronpjrt and a device).
      1. `import torch_xla`: on a host with libneuronxla and without
         torch-neuronx, torch_xla/__init__.py:119-142 then runs
         `libneuronxla.configure_environment()` (closed, absent here),
         `neuron.set_envvar_defaults()` and `neuron.configure_pjrt_environment()`
         (_internal/neuron.py:45-89, which remaps the cores under torchrun);
         the two torch-xla functions are called here, in that order.
      2. torch-xla's `xla://` rendezvous handler (_internal/rendezvous.py:22-66),
         which a user's own `init_process_group("xla", init_method="xla://")`
         would run (under torchrun it calls pjrt.initialize_multiprocess).
      3. `ray_accel_neuron.xla.init_xla_group`, the product's path (what
         the Neuron runtime's `init_process_group` runs for `xla` on a
         PJRT device).
      Each stops where torch-xla would create the client: `torch_xla.device`,
      `torch_xla.devices`, `xm.get_xla_supported_devices` and
      `xr.process_count` raise ClientBoundary. Reported: the cores as
      torch-xla's own parser reads them afterwards
      (neuron_utils.get_visible_cores_list), the variables torch-xla wrote,
      and that no client was created.
  sync-xla: one process, a real `xla` process group made by ray-accel's
      `init_xla_group` on PJRT CPU (world 1), `ray_accel.train.sync_gradients`
      on a model on the XLA device, with `xm.all_reduce` wrapped by a
      recorder (every XLA reduce goes through it: ProcessGroupXla.allreduce
      calls it too, distributed/xla_backend.py:78-83). The worker's backend
      is the one a Neuron raylet's bridge spec names, loaded by name as in a
      training worker: its runtime reduces the `xla` group's gradients.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any

WATCHED = (
    "NEURON_RT_VISIBLE_CORES",
    "NEURON_PJRT_PROCESS_INDEX",
    "NEURON_PJRT_PROCESSES_NUM_DEVICES",
    "NEURON_PJRT_WORLD_SIZE",
    "NEURON_RT_ROOT_COMM_ID",
    "PJRT_LOCAL_PROCESS_RANK",
    "PJRT_LOCAL_PROCESS_COUNT",
    "PJRT_DEVICE",
)


class ClientBoundary(Exception):
    """Raised where torch-xla would create the PJRT client."""


def _stop(name: str) -> Callable[..., Any]:
    def stop(*args: object, **kwargs: object) -> Any:
        raise ClientBoundary(name)

    return stop


def neuron_start() -> dict[str, Any]:
    before = dict(os.environ)
    out: dict[str, Any] = {"error": None, "boundaries": {}}
    stage = "import torch_xla"
    try:
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.runtime as xr
        from ray_accel_neuron.xla import init_xla_group
        from torch_xla._internal import neuron, neuron_utils, rendezvous

        out["found_libneuronxla"] = bool(torch_xla._found_libneuronxla)
        stage = "configure_pjrt_environment"
        neuron.set_envvar_defaults()
        neuron.configure_pjrt_environment()
        for name, owner, attr in (
            ("torch_xla.device", torch_xla, "device"),
            ("torch_xla.devices", torch_xla, "devices"),
            ("xm.get_xla_supported_devices", xm, "get_xla_supported_devices"),
            ("xr.process_count", xr, "process_count"),
        ):
            setattr(owner, attr, _stop(name))
        stage = "xla:// rendezvous"
        try:
            next(rendezvous.pjrt_rendezvous_handler("xla://"))
        except ClientBoundary as b:
            out["boundaries"]["xla://"] = str(b)
        stage = "ray_accel init_xla_group"
        try:
            init_xla_group(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 30)
        except ClientBoundary as b:
            out["boundaries"]["init_xla_group"] = str(b)
        stage = "read NEURON_RT_VISIBLE_CORES"
        out["visible_cores"] = neuron_utils.get_visible_cores_list()
        out["runtime_initialized"] = bool(torch_xla._XLAC._xla_runtime_is_initialized())
    except Exception as e:
        out["error"] = {"stage": stage, "type": type(e).__name__, "message": str(e)}
    out["env"] = {k: os.environ.get(k) for k in WATCHED}
    out["written"] = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
    return out


def sync_xla() -> dict[str, Any]:
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from ray_accel_neuron.plugin import NeuronPlugin
    from ray_accel_neuron.runtime import NeuronRuntime
    from ray_accel_neuron.xla import init_xla_group, xla_device

    from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
    from ray_accel.train import sync_gradients, worker

    calls: list[dict[str, Any]] = []
    real = xm.all_reduce

    def recording(reduce_type: str, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        tensors = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs)
        calls.append(
            {
                "reduce": reduce_type,
                "devices": sorted({t.device.type for t in tensors}),
                "n": len(tensors),
                "scale": kwargs.get("scale", args[0] if args else 1.0),
            }
        )
        return real(reduce_type, inputs, *args, **kwargs)

    xm.all_reduce = recording
    spec = BridgeSpec(
        resource_name="neuron_cores",
        visible_ids_env=NeuronPlugin.visible_ids_env,
        family="neuron",
        accelerator_type=None,
        unit_ids=(0,),
        backend="neuron",
        traits=NeuronPlugin.traits,
    )
    os.environ[SPEC_ENV] = spec.to_env()
    assert isinstance(worker.runtime(), NeuronRuntime), "the backend the spec names, loaded by name"
    init_xla_group(0, 1, 30)
    device = xla_device()  # the runtime's device for the `xla` collective
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to(device)
    (model(torch.randn(8, 4).to(device)) ** 2).mean().backward()
    before = [p.grad.detach().cpu().clone() for p in model.parameters() if p.grad is not None]
    sync_gradients(model)
    torch_xla.sync()
    after = [p.grad.detach().cpu() for p in model.parameters() if p.grad is not None]
    result = {
        "error": None,
        "group": dist.get_backend(),
        "device": device.type,
        "xr_world_size": xr.world_size(),
        "calls": calls,
        "params_with_grad": len(before),
        "grads_equal_at_world_1": all(torch.equal(a, b) for a, b in zip(after, before, strict=True)),
    }
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    mode, path = sys.argv[1], sys.argv[2]
    try:
        result = {"neuron-start": neuron_start, "sync-xla": sync_xla}[mode]()
    except Exception as e:
        result = {"error": {"type": type(e).__name__, "message": str(e)}, "traceback": traceback.format_exc()[-3000:]}
    with open(path, "w") as f:
        json.dump(result, f)
