"""The seam to Ray's private API finds each part by feature: on the
installed Ray (2.60) every part is there and takes what ray-accel passes; a
part that is gone (its module, an attribute, a parameter) raises
`RayApiMissing` naming the Ray version and exactly what is missing, and the
callers that degrade today still do."""

from __future__ import annotations

import importlib.metadata
import inspect
import logging
import sys
import time
import types
from dataclasses import dataclass
from typing import Any

import click
import pytest

from ray_accel.cluster import auth as cluster_auth
from ray_accel.cluster import driver, host, raylet
from ray_accel.rayapi import accelerators, address, gcs, node, serve, state, train
from ray_accel.rayapi import auth as rayapi_auth
from ray_accel.rayapi.feature import FAKE_RAY_VERSION_ENV, RayApiMissing, attr, module, ray_version, require_params

RAY = importlib.metadata.version("ray")


def test_missing_names_the_running_ray_and_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ray_version() == RAY
    with pytest.raises(RayApiMissing, match=f"^Ray {RAY}: has no module ray._private.nothing_here"):
        module("ray._private.nothing_here")
    monkeypatch.setenv(FAKE_RAY_VERSION_ENV, "2.61.0")
    with pytest.raises(RayApiMissing) as err:
        attr(types.SimpleNamespace(), "available_resources_per_node", "ray._private.state.GlobalState")
    assert str(err.value) == "Ray 2.61.0: ray._private.state.GlobalState has no available_resources_per_node"


def test_a_signature_must_take_what_is_passed() -> None:
    def drain(node_id: str, reason: int, *, timeout: float | None = None) -> None: ...

    require_params(drain, ("node_id", "reason", "timeout"), "x.drain")
    with pytest.raises(RayApiMissing, match=r"x\.drain takes no reason_message, deadline_timestamp_ms"):
        require_params(drain, ("node_id", "reason_message", "deadline_timestamp_ms"), "x.drain")
    require_params(lambda **kw: None, ("anything",), "x.open")  # takes every keyword
    require_params(min, ("whatever",), "builtins.min")  # no readable signature: taken as it is


def test_every_part_is_there_on_the_installed_ray() -> None:
    accelerators.check_registry()
    assert inspect.isclass(accelerators.manager_base())
    with node.capture_nodes("t") as captured:  # Ray's Node can be patched
        assert captured == []
    attr(module(node.SCRIPTS), "cli", node.SCRIPTS)
    sizing = node.host_sizing()
    assert sizing.cpus >= 1 and 0 < node.object_store_for(sizing.available_memory) < sizing.available_memory
    assert inspect.isclass(train.controller_callback_base())
    assert gcs.drain_reason() == 2, "DRAIN_NODE_REASON_PREEMPTION in Ray's autoscaler protocol"
    assert len(rayapi_auth.generate_token()) == 64
    assert address.address_file("/tmp/x").startswith("/tmp/x")
    # The drain Ray's GCS client forwards to takes what drain_node passes.
    raylet = module("ray._raylet")
    require_params(raylet.InnerGcsClient.drain_node, gcs.DRAIN_PARAMS, "ray._raylet.InnerGcsClient.drain_node")
    for name in ("get_draining_nodes", "node_table", "total_resources_per_node", "available_resources_per_node"):
        assert callable(getattr(module("ray._private.state").GlobalState, name)), name


def test_registry_missing_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, accelerators.REGISTRY, None)
    with pytest.raises(RayApiMissing, match=f"Ray {RAY}: has no module ray._private.accelerators"):
        accelerators.check_registry()


class StubGcsClient:
    """A GCS client as Ray 2.60's: `drain_node(node_id, reason,
    reason_message, deadline_timestamp_ms, timeout)` answers (accepted,
    rejection)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def drain_node(
        self, node_id: str, reason: int, reason_message: str, deadline_timestamp_ms: int, timeout: float | None = None
    ) -> tuple[bool, str]:
        self.calls.append(dict(locals(), self=None))
        return False, "the raylet is busy"


def test_drain_sends_what_ray_drain_node_sends() -> None:
    client = StubGcsClient()
    reply = gcs.drain_node("h:1", "ab" * 28, "device 3 failed", deadline_ms=1234, timeout_s=5.0, client=client)
    assert reply == gcs.DrainReply(accepted=False, rejection="the raylet is busy")
    assert client.calls == [
        {
            "self": None,
            "node_id": "ab" * 28,
            "reason": 2,
            "reason_message": "device 3 failed",
            "deadline_timestamp_ms": 1234,
            "timeout": 5.0,
        }
    ]


def test_drain_without_the_call_or_its_parameters_is_missing() -> None:
    with pytest.raises(RayApiMissing, match=f"^Ray {RAY}: ray._raylet.GcsClient has no drain_node$"):
        gcs.drain_node("h:1", "ab", "x", client=types.SimpleNamespace())

    class OldClient:
        def drain_node(self, node_id: str, reason: int, reason_message: str) -> tuple[bool, str]:
            raise AssertionError("never called with what it cannot take")

    with pytest.raises(RayApiMissing, match=r"GcsClient.drain_node takes no deadline_timestamp_ms, timeout"):
        gcs.drain_node("h:1", "ab", "x", client=OldClient())


def test_drain_without_the_preemption_reason_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(RayApiMissing, match="DrainNodeReason has no DRAIN_NODE_REASON_SOMETHING"):
        gcs.drain_reason("DRAIN_NODE_REASON_SOMETHING")
    monkeypatch.setitem(sys.modules, "ray.core.generated.autoscaler_pb2", None)
    with pytest.raises(RayApiMissing, match="has no module ray.core.generated.autoscaler_pb2"):
        gcs.drain_node("h:1", "ab", "x", client=StubGcsClient())


def test_reading_nodes_without_the_node_table_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoTable:
        def _initialize_global_state(self, options: Any) -> None: ...

        def total_resources_per_node(self) -> dict[str, Any]:
            return {}

        def available_resources_per_node(self) -> dict[str, Any]:
            return {}

    monkeypatch.setattr(module("ray._private.state"), "GlobalState", NoTable)
    with pytest.raises(RayApiMissing, match=f"^Ray {RAY}: ray._private.state.GlobalState has no node_table$"):
        gcs.read_nodes("192.0.2.1:6379")

    class Uncallable(NoTable):
        node_table = None

    monkeypatch.setattr(module("ray._private.state"), "GlobalState", Uncallable)
    with pytest.raises(RayApiMissing, match=r"ray._private.state.GlobalState.node_table is not callable"):
        gcs.read_nodes("192.0.2.1:6379")


def test_a_dead_node_says_why_by_rays_name(monkeypatch: pytest.MonkeyPatch) -> None:
    class Table:
        def _initialize_global_state(self, options: Any) -> None: ...

        def total_resources_per_node(self) -> dict[str, Any]:
            return {"ab": {"CPU": 1.0}}

        def available_resources_per_node(self) -> dict[str, Any]:
            return {}

        def node_table(self) -> list[dict[str, Any]]:
            return [
                {"NodeID": "ab", "Alive": True, "DeathReason": 0, "DeathReasonMessage": ""},
                {"NodeID": "cd", "Alive": False, "DeathReason": 3, "DeathReasonMessage": "device 3 failed"},
                {"NodeID": "ef", "Alive": False, "DeathReason": 99},
            ]

    monkeypatch.setattr(module("ray._private.state"), "GlobalState", Table)
    assert gcs.read_nodes("192.0.2.1:6379") == (
        gcs.GcsNode(node_id="ab", alive=True, total={"CPU": 1.0}, available={}, labels={}),
        gcs.GcsNode(
            node_id="cd", alive=False, death_reason="AUTOSCALER_DRAIN_PREEMPTED", death_message="device 3 failed"
        ),
        gcs.GcsNode(node_id="ef", alive=False, death_reason="99"),
    )


def test_a_drivers_free_resources_are_missing_without_the_state_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(module("ray._private.state"), "available_resources_per_node")
    with pytest.raises(RayApiMissing, match="ray._private.state has no available_resources_per_node"):
        state.available_resources_per_node()


def test_capturing_nodes_patches_rays_node_only_while_inside() -> None:
    cls = module("ray._private.node").Node
    before = (cls.__init__, cls._prepare_socket_file)
    with node.capture_nodes("p0.123") as captured:
        assert captured == []
        assert cls.__init__ is not before[0] and cls._prepare_socket_file is not before[1]
    assert (cls.__init__, cls._prepare_socket_file) == before, "Ray's Node is as it was"


@dataclass
class FakeParams:
    """The one field of Ray's `RayParams` that `capture_nodes` reads."""

    env_vars: dict[str, str] | None = None


class FakeNode:
    """Ray's `Node` as `capture_nodes` uses it: built from a `RayParams`, its
    socket files prepared under `_sockets_dir`."""

    def __init__(self, ray_params: FakeParams, connect_only: bool = False) -> None:
        self.params = ray_params
        self._sockets_dir = "/run/s"

    def _prepare_socket_file(self, socket_path: str, default_prefix: str) -> str:
        return socket_path


def test_a_socket_is_named_by_its_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node, "_node_class", lambda: FakeNode)
    with node.capture_nodes("p1.77") as captured:
        made = FakeNode(FakeParams())
        assert made._prepare_socket_file(None, "raylet") == "/run/s/raylet.p1.77"  # type: ignore[arg-type]
        assert made._prepare_socket_file("/given", "plasma_store") == "/given", "a path Ray was given stays"
        odd = FakeNode(FakeParams())
        del odd._sockets_dir
        with pytest.raises(RayApiMissing, match="Node has no _sockets_dir"):
            odd._prepare_socket_file(None, "raylet")  # type: ignore[arg-type]
    assert captured == [made, odd]
    assert FakeNode(FakeParams())._prepare_socket_file("/z", "raylet") == "/z"


def test_each_new_node_gets_an_id_of_its_own_drawn_from_the_os(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not from Ray's generator, which launchers forked from one launch server
    share: the ID goes in through `RayParams.env_vars`, as Ray's test clusters
    give one; one given already, or a node that only connects, is left alone."""
    monkeypatch.setattr(node, "_node_class", lambda: FakeNode)
    with node.capture_nodes("p0.1"):
        first, second = FakeNode(FakeParams()), FakeNode(FakeParams(env_vars={"OTHER": "1"}))
        given = FakeNode(FakeParams(env_vars={node.NODE_ID_ENV: "ab" * 28}))
        joining = FakeNode(FakeParams(), connect_only=True)
        with pytest.raises(RayApiMissing, match="no RayParams with env_vars"):
            FakeNode(object())  # type: ignore[arg-type]
    ids = [n.params.env_vars[node.NODE_ID_ENV] for n in (first, second)]  # type: ignore[index]
    assert ids[0] != ids[1] and all(len(bytes.fromhex(i)) == 28 for i in ids), ids
    assert second.params.env_vars["OTHER"] == "1"  # type: ignore[index]
    assert given.params.env_vars == {node.NODE_ID_ENV: "ab" * 28}
    assert joining.params.env_vars is None


def test_node_facts_and_processes_come_from_rays_node() -> None:
    proc = types.SimpleNamespace(process=types.SimpleNamespace(pid=42))
    started = types.SimpleNamespace(
        node_id="ab",
        gcs_address="10.0.0.1:6379",
        node_ip_address="10.0.0.1",
        webui_url="10.0.0.1:8265",
        all_processes={"raylet": [proc], "gcs_server": [proc]},
    )
    assert node.node_facts(started) == node.NodeFacts("ab", "10.0.0.1:6379", "10.0.0.1", "10.0.0.1:8265")
    assert node.node_processes(started) == [("raylet", 42), ("gcs_server", 42)]
    with pytest.raises(RayApiMissing, match="ray._private.node.Node has no all_processes"):
        node.node_processes(types.SimpleNamespace())


def test_controller_state_names_a_state_ray_2_60_would_not_type() -> None:
    kind = types.SimpleNamespace(state_name="ERRORED", is_terminal=True)
    errored = types.SimpleNamespace(_state_type=kind, training_failed_error=ValueError("boom"))
    assert train.controller_state(errored) == train.ControllerState("ERRORED", True, "boom")

    class Hibernating:
        pass

    assert train.controller_state(Hibernating()) == train.ControllerState("Hibernating", False, "")


def test_callers_fall_back_where_they_did(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The token generator, the bootstrap-address rule and host sizing have
    fallbacks; each is taken through `RayApiMissing`, the last two say so."""
    monkeypatch.setitem(sys.modules, rayapi_auth.GENERATOR, None)
    token = cluster_auth._new_token()
    assert len(token) == 64 and int(token, 16) >= 0, "256 random bits, as Ray's own"
    monkeypatch.setitem(sys.modules, address.SERVICES, None)
    with caplog.at_level(logging.INFO, logger="ray_accel.cluster.driver"):
        assert driver._starts_a_local_cluster(None, None) is False
    assert "has no module ray._private.services" in caplog.text
    monkeypatch.setitem(sys.modules, node.UTILS, None)
    with caplog.at_level(logging.WARNING, logger="ray_accel.cluster.host"):
        cpus, _, size_store = host._ray_detected()
    assert cpus >= 1 and size_store(1000) == 300
    assert "has no module ray._private.utils" in caplog.text and "psutil" in caplog.text


def test_a_started_node_that_cannot_be_recorded_is_killed_and_named(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """The launcher's `ray start` made a node, but this Ray's `Node` lacks
    what identifies it: the launch fails naming what is missing, and the
    node's processes are killed, not left unrecorded."""
    import contextlib
    import json

    from ray_accel.cluster import raylet_launch
    from ray_accel.rayapi import node as rayapi_node

    started = types.SimpleNamespace()
    killed: list[Any] = []

    @contextlib.contextmanager
    def capture(tag: str) -> Any:
        yield [started]

    def no_facts(n: Any) -> Any:
        raise RayApiMissing("Ray 9.0.0: ray._private.node.Node has no node_id")

    monkeypatch.delenv(raylet.CPU_SET_ENV, raising=False)
    monkeypatch.delenv("RAYACCEL_BRIDGE_SPEC", raising=False)
    monkeypatch.setattr(rayapi_node, "capture_nodes", capture)
    monkeypatch.setattr(rayapi_node, "run_ray_cli", lambda args: None)
    monkeypatch.setattr(rayapi_node, "node_processes", lambda n: [])
    monkeypatch.setattr(rayapi_node, "node_facts", no_facts)
    monkeypatch.setattr(rayapi_node, "kill_node", killed.append)
    result = tmp_path / "result.json"
    assert raylet_launch.main([str(result), "--", "start", "--head"]) == 1
    assert json.loads(result.read_text())["error"] == "Ray 9.0.0: ray._private.node.Node has no node_id"
    assert killed == [started]


def test_rays_own_command_runs_here_and_its_usage_errors_reach_the_caller(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(click.UsageError, match="No such command 'no-such-command'"):
        node.run_ray_cli(["no-such-command"])
    node.run_ray_cli(["--help"])
    assert capsys.readouterr().out.startswith("Usage: ray ")


def test_a_node_is_killed_at_once_without_waiting_for_its_processes() -> None:
    calls: list[dict[str, bool]] = []

    class Node:
        def kill_all_processes(self, **kw: bool) -> None:
            calls.append(kw)

    node.kill_node(Node())
    assert calls == [{"check_alive": False, "allow_graceful": False}]


def test_a_drivers_free_resources_are_plain_names_and_floats(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = {"ab": {"CPU": 2, "memory": 1.5}, "cd": {}}
    monkeypatch.setattr(module("ray._private.state"), "available_resources_per_node", lambda: answer)
    got = state.available_resources_per_node()
    assert got == {"ab": {"CPU": 2.0, "memory": 1.5}, "cd": {}}
    assert isinstance(got["ab"]["CPU"], float)


def test_serves_replica_names_are_the_installed_serves() -> None:
    """The rules `rayapi.serve` copies (so the exporter never imports Serve)
    are the installed Serve's own: its actor name, class name and parse."""
    common = module("ray.serve._private.common")
    assert serve.REPLICA_NAME_PREFIX == common.REPLICA_ID_FULL_ID_STR_PREFIX
    for app in ("where", ""):
        deployment = common.DeploymentID(name="Where", app_name=app)
        replica = common.ReplicaID(unique_id="zs6inek3", deployment_id=deployment)
        assert deployment.to_replica_actor_class_name().startswith(serve.REPLICA_CLASS_PREFIX)
        assert serve.is_replica_title(f"ray::{deployment.to_replica_actor_class_name()}")
        assert serve.replica_name(replica.to_full_id_str()) == serve.ReplicaName(
            app=app, deployment="Where", replica_id="zs6inek3"
        )
        parsed = common.ReplicaID.from_full_id_str(replica.to_full_id_str())
        assert (parsed.deployment_id.app_name, parsed.deployment_id.name, parsed.unique_id) == (
            app,
            "Where",
            "zs6inek3",
        )
    for other in ("ServeController", "SERVE_REPLICA::a#b#c#d", "SERVE_REPLICA::#id", "SERVE_PROXY_ACTOR-x"):
        assert serve.replica_name(other) is None, other


def test_live_actors_are_read_from_the_connected_processs_actor_table(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []
    rows = {
        "a1": {
            "Name": "SERVE_REPLICA::where#Where#r1",
            "ActorClassName": "ServeReplica:where:Where",
            "Pid": 4242,
            "Address": {"IPAddress": "10.0.0.1", "Port": 1, "NodeID": "ab" * 28},
            "State": "ALIVE",
        },
        "a2": {"Name": "", "ActorClassName": "Holder", "Pid": 0, "Address": {}, "State": "ALIVE"},
    }

    class GlobalState:
        def actor_table(self, actor_id: str | None, job_id: object = None, actor_state_name: str | None = None) -> Any:
            asked.append({"actor_id": actor_id, "actor_state_name": actor_state_name})
            return rows

    monkeypatch.setattr(module("ray._private.state"), "state", GlobalState())
    assert serve.live_actors() == (
        serve.LiveActor(
            name="SERVE_REPLICA::where#Where#r1", class_name="ServeReplica:where:Where", pid=4242, node_id="ab" * 28
        ),
        serve.LiveActor(name="", class_name="Holder", pid=0, node_id=""),
    )
    assert asked == [{"actor_id": None, "actor_state_name": "ALIVE"}], "only live actors, in one read"
    monkeypatch.setattr(module("ray._private.state"), "state", object())
    with pytest.raises(RayApiMissing, match=r"ray._private.state.GlobalState has no actor_table"):
        serve.live_actors()


def test_a_gcs_querys_time_starts_after_rays_modules_are_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a loaded host, importing Ray took longer than a query's whole 5 s:
    the GCS answered, yet `status` said it had not. The imports come first."""
    imported: list[str] = []

    def slow_import(name: str) -> types.ModuleType:
        if name not in imported:  # as Python's: slow the first time, then from sys.modules
            time.sleep(0.3)
            imported.append(name)
        return types.ModuleType(name)

    def query() -> str:  # as `read_nodes`: Ray's client and state, then the answer
        gcs.module(gcs.RAYLET)
        gcs.module(gcs.STATE)
        return "answer"

    monkeypatch.setattr(gcs, "module", slow_import)
    assert gcs.answer_within(query, 0.2, "a GCS") == "answer"
    assert imported == [gcs.RAYLET, gcs.STATE]
