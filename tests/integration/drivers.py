"""Driver scripts run as subprocesses against a cluster the test started.

Each prints one JSON line (the last line of stdout) for the test to check.
"""

from __future__ import annotations

NEURON_TASKS = r"""
import json, os, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
parts = sys.argv[2].split(",")
n = int(sys.argv[3])

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
def task(part):
    start = time.time()
    cores = os.environ.get("NEURON_RT_VISIBLE_CORES")
    time.sleep(0.05)
    return {"part": part, "cores": cores, "start": start, "end": time.time(), "pid": os.getpid()}

targets = [parts[i % len(parts)] for i in range(n)]
refs = [task.options(label_selector={"ray-accel.io/partition": p}).remote(p) for p in targets]
print(json.dumps(ray.get(refs, timeout=240)))
"""

GPU_ACTORS = r"""
import json, os, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
parts = sys.argv[2].split(",")

@ray.remote(num_gpus=1, num_cpus=0)
class Probe:
    def seen(self, part):
        return {"part": part, "cvd": os.environ.get("CUDA_VISIBLE_DEVICES"), "gpu_ids": ray.get_gpu_ids()}

actors = [Probe.options(label_selector={"ray-accel.io/partition": p}).remote() for p in parts for _ in range(2)]
parts2 = [p for p in parts for _ in range(2)]
print(json.dumps(ray.get([a.seen.remote(p) for a, p in zip(actors, parts2)], timeout=240)))
"""

# Drains one partition's raylet through ray-accel's seam (what `ray
# drain-node --reason DRAIN_NODE_REASON_PREEMPTION` sends) while an actor
# keeps it busy, and reads the GCS's draining nodes before and after.
DRAIN = r"""
import json, os, sys, time
import ray
from ray_accel.rayapi import gcs
from tests.gcs_drains import draining_nodes
address, node_id, part = sys.argv[1], sys.argv[2], sys.argv[3]
ray.init(address=address, log_to_driver=False)

@ray.remote(num_gpus=1, num_cpus=0)
class Busy:
    def pid(self):
        return os.getpid()

busy = Busy.options(label_selector={"ray-accel.io/partition": part}).remote()
ray.get(busy.pid.remote(), timeout=120)
before = draining_nodes(address)
deadline_ms = int(time.time() * 1000) + 600_000
reply = gcs.drain_node(address, node_id, "ray-accel test: drain one partition", deadline_ms, timeout_s=60)
draining = {}
for _ in range(100):
    draining = draining_nodes(address)
    if node_id in draining:
        break
    time.sleep(0.1)
print(json.dumps({"before": before, "accepted": reply.accepted, "rejection": reply.rejection,
                  "draining": draining, "deadline_ms": deadline_ms}))
"""

INIT_RANGES = r"""
import json, os
import ray, ray_accel
ray_accel.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
def task():
    return os.environ.get("NEURON_RT_VISIBLE_CORES")

seen = sorted(set(ray.get([task.remote() for _ in range(8)])))
print(json.dumps({"neuron_cores": ray.cluster_resources().get("neuron_cores"), "seen": seen,
                  "type": [k for k in ray.cluster_resources() if k.startswith("accelerator_type:")]}))
ray.shutdown()
"""

# Plain Ray 2.60 on the same environment. Only the hardware is faked: Ray's own
# Neuron detection (which would run neuron-ls) answers 32 cores, as on a real
# trn1.32xlarge; everything after that is Ray's unmodified code.
PLAIN_RAY_RANGES = r"""
import json
import ray
from ray._private.accelerators.neuron import NeuronAcceleratorManager
NeuronAcceleratorManager.get_current_node_num_accelerators = staticmethod(lambda: 32)
ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
print(json.dumps({"neuron_cores": ray.cluster_resources().get("neuron_cores"),
                  "parsed": NeuronAcceleratorManager.get_current_process_visible_accelerator_ids()}))
ray.shutdown()
"""

TRAIN_JOB = r"""
import json, sys
from examples.hooks import Recording
from examples.train_partitions import run_job
from tests.integration.train_hooks import SetsEnv
kw = json.loads(sys.argv[2])
hooks = [Recording(**h) for h in kw.pop("recording", [])]
hooks += [SetsEnv(**h) for h in kw.pop("sets_env", [])]
try:
    run_job(sys.argv[1], hooks=hooks, **kw)
    print(json.dumps({"ok": True}))
except Exception as e:
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
"""

# TRAIN_JOB, with the job's workers told (through the job's runtime env) that
# their raylet serves a backend that is not installed where they run: the
# bridge spec of the partition, read from one of its tasks, with another
# backend's name.
TRAIN_JOB_BACKEND_MISSING = r"""
import json, sys
import ray
from examples.train_partitions import run_job
address, kw = sys.argv[1], json.loads(sys.argv[2])
ray.init(address=address, log_to_driver=False)

@ray.remote(num_cpus=0)
def spec():
    import os
    return os.environ["RAYACCEL_BRIDGE_SPEC"]

rows = json.loads(ray.get(spec.options(label_selector={"ray-accel.io/partition": kw["partition"]}).remote()))
ray.shutdown()
rows[0]["backend"] = kw.pop("backend_name")
ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": {"RAYACCEL_BRIDGE_SPEC": json.dumps(rows)}})
try:
    run_job(address, **kw)
    print(json.dumps({"ok": True}))
except Exception as e:
    print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"}))
"""

# Several fits, one after another, in one driver (one Python start-up and one
# ray.init for all of them): argv[2] is a JSON object of name -> run_job's
# keyword arguments; prints name -> {"ok", "error"} in the order given.
TRAIN_JOBS = r"""
import json, os, sys
from examples.hooks import Recording
from examples.train_partitions import run_job
from tests.integration.train_hooks import SetsEnv
out = {}
for key, kw in json.loads(sys.argv[2]).items():
    kw.setdefault("name", f"{key}-{os.getpid()}")
    hooks = [Recording(**h) for h in kw.pop("recording", [])]
    hooks += [SetsEnv(**h) for h in kw.pop("sets_env", [])]
    try:
        run_job(sys.argv[1], hooks=hooks, **kw)
        out[key] = {"ok": True}
    except Exception as e:
        out[key] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
print(json.dumps(out))
"""

TASK_ACTOR_HOOKS = r"""
import json, os, sys
import ray, ray_accel
from examples.hooks import Recording
from ray_accel.hooks.tasks import with_hooks
log = sys.argv[1]
ray_accel.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
               runtime_env={"env_vars": {"PYTHONPATH": os.environ["PYTHONPATH"], "RAYACCEL_HOOK_DIR": sys.argv[2]}})

@ray.remote(resources={"neuron_cores": 2})
@with_hooks(Recording(log), run_id="demo")
def task():
    return os.environ.get("EXAMPLE_HOOK_TOKEN"), os.environ.get("NEURON_RT_VISIBLE_CORES")

@ray.remote(resources={"neuron_cores": 1})
@with_hooks(Recording(log), run_id="demo")
class Actor:
    def token(self):
        return os.environ.get("EXAMPLE_HOOK_TOKEN")

first = ray.get(task.remote())
after = ray.get(task.remote())
a = Actor.remote()
token = ray.get(a.token.remote())
ray.kill(a)  # killed outright: no terminate hooks in the actor itself
import time; time.sleep(1)
b = Actor.remote()
ray.get(b.token.remote())
ray.get(b.ray_accel_terminate.remote())
ray.get(task.remote())

from ray_accel import LifecycleHook, WorkloadConfig
class Mounts(LifecycleHook):
    def pre_create(self):
        return WorkloadConfig(mounts=(("/fsx/data", "/data"),))

@ray.remote(resources={"neuron_cores": 1})
@with_hooks(Recording(log), Mounts, run_id="mounts")
def mounted():
    return "the body ran"

try:
    refused = "not refused: " + ray.get(mounted.remote())
except Exception as e:
    refused = str(e)
print(json.dumps({"first": first, "actor_token": token, "mounts": refused}))
ray.shutdown()
"""

HOLD_ACTORS = r"""
import json, os, sys, time
import ray
ray.init(address=sys.argv[1], log_to_driver=False)

@ray.remote(resources={"neuron_cores": 2}, num_cpus=0)
class Holder:
    def where(self):
        return {"pid": os.getpid(), "cores": os.environ.get("NEURON_RT_VISIBLE_CORES")}

actors = {p: Holder.options(label_selector={"ray-accel.io/partition": p}).remote() for p in ("p0", "p1")}
print(json.dumps({p: ray.get(a.where.remote()) for p, a in actors.items()}), flush=True)
time.sleep(float(sys.argv[2]))
"""

# Ray's node table through Ray's own API: each node's ID and whether it is alive.
NODES = r"""
import json, sys
import ray
ray.init(address=sys.argv[1], log_to_driver=False)
print(json.dumps([{"NodeID": n["NodeID"], "Alive": n["Alive"]} for n in ray.nodes()]))
"""
