"""What each raylet is given: its `ray start`
arguments, the user's labels and resources, the host figures, the dashboard.

And what a `ray start` argument list means (`ray_accel.cluster.raylet`):
the parser against Ray's own `ray start` command, and properties of parsing,
reading, filtering and building argument lists."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ray_accel.bridge.managers import BridgeSpec, BridgeUnsupported, check_ray_version
from ray_accel.cluster import raylet
from ray_accel.cluster.host import HEAD_SHARE, RayletPorts, Share, raylet_ports, read_host
from ray_accel.cluster.raylet import (
    CPU_SET_ENV,
    HOST_FLAGS,
    NO_VALUE,
    VALUE,
    Arg,
    Join,
    Offer,
    RayOptions,
    Services,
    StartRequest,
    flag_names,
    flag_value,
    launch_argv,
    parse,
    parse_launch_argv,
    partition_env,
    ray_start_args,
    render,
    user_figures,
    validate_ray_args,
    without,
)
from ray_accel.core import validate
from ray_accel.core.errors import InputError
from ray_accel.partition.plan import Partition, check_user_keys
from ray_accel.rayapi.feature import FAKE_RAY_VERSION_ENV
from tests.badinput import badinput
from tests.bridge_specs import GPU
from tests.bridge_specs import NEURON as SPEC

PART = Partition("p1", ("neuron:8", "neuron:9"), (16, 17, 18, 19))
SHARE = Share(
    partition="p1",
    cpus=3,
    memory=4_000_000_000,
    object_store_memory=1_500_000_000,
    resources={"license": 2.0},
    cpu_set=(4, 5),
    pin_reason="NUMA node 1",
)


def value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def start_args(
    part: Partition,
    ports: RayletPorts,
    spec: BridgeSpec,
    head: bool,
    gcs: str | None,
    req: StartRequest,
    gcs_port: int,
    share: Share,
) -> list[str]:
    """One partition's arguments for the request `req`, as `start` builds them."""
    assert head == (gcs is None)
    return ray_start_args(part, ports, spec, share, req.ray, req.offer.labels, gcs, gcs_port, req.services.dashboard)


def test_a_raylet_gets_its_share_not_the_host() -> None:
    req = StartRequest(
        join=Join(head=True),
        offer=Offer(labels={"team": "a"}),
        ray=RayOptions.read(["--num-cpus", "8", "--memory=9", "--temp-dir", "/x"]),
    )
    args = start_args(PART, raylet_ports(30000, 1), SPEC, False, "h:1", req, 6379, SHARE)
    assert value(args, "--num-cpus") == "3" and args.count("--num-cpus") == 1, "the user's host figure is replaced"
    assert value(args, "--memory") == "4000000000" and not any(a.startswith("--memory=") for a in args)
    assert value(args, "--object-store-memory") == "1500000000"
    assert json.loads(value(args, "--resources")) == {"license": 2.0, "neuron_cores": 4}
    labels = dict(kv.split("=") for kv in value(args, "--labels").split(","))
    assert labels == {"team": "a", "ray-accel.io/partition": "p1", "ray-accel.io/accelerator-type": "Trainium"}
    assert args[-2:] == ["--temp-dir", "/x"], "other ray start options pass through"


def test_the_head_raylet_holds_no_devices_cpus_or_partition_label() -> None:
    req = StartRequest(join=Join(head=True), offer=Offer(labels={"team": "a"}))
    args = start_args(
        Partition(validate.HEAD, (), ()), raylet_ports(30000, 1, True), SPEC, True, None, req, 6379, HEAD_SHARE
    )
    assert json.loads(value(args, "--resources")) == {"neuron_cores": 0}
    assert (value(args, "--num-cpus"), value(args, "--memory"), value(args, "--labels")) == ("0", "0", "team=a")
    assert value(args, "--port") == "6379" and "--ray-client-server-port" in args
    env = partition_env({}, SPEC, Partition(validate.HEAD, (), ()), HEAD_SHARE)
    assert env["NEURON_RT_VISIBLE_CORES"] == "" and CPU_SET_ENV not in env, "no device visible to its workers"


def test_gpu_count_goes_to_num_gpus_and_custom_resources_stay() -> None:
    share = Share(partition="p0", cpus=1, memory=10**9, object_store_memory=10**8)
    args = start_args(PART, raylet_ports(30000, 0), GPU, False, "h:1", StartRequest(), 0, share)
    assert value(args, "--num-gpus") == "4"
    assert "--resources" not in args, "nothing custom, nothing to pass"


@pytest.mark.parametrize(
    ("dashboard", "ray_args", "expect"),
    [
        (True, [], None),  # on by default, as `ray start --head`
        (False, [], "false"),  # --no-dashboard
        (True, ["--include-dashboard", "false"], "false"),  # Ray's own flag, passed through
    ],
)
def test_dashboard_on_by_default_on_the_head(dashboard: bool, ray_args: list[str], expect: str | None) -> None:
    req = StartRequest(join=Join(head=True), services=Services(dashboard=dashboard), ray=RayOptions.read(ray_args))
    share = Share(partition="p0", cpus=1, memory=10**9, object_store_memory=10**8)
    args = start_args(PART, raylet_ports(30000, 0), SPEC, True, None, req, 6379, share)
    got = value(args, "--include-dashboard") if "--include-dashboard" in args else None
    assert got == expect
    assert "--dashboard-port" in args, "its port comes from the head's port block"
    worker = start_args(PART, raylet_ports(30000, 1), SPEC, False, "h:1", req, 0, share)
    assert "--include-dashboard" not in worker and "--dashboard-port" not in worker, "Ray refuses them off the head"


def test_pinned_partition_env_names_its_cpus() -> None:
    env = partition_env({"X": "1", CPU_SET_ENV: "stale"}, SPEC, PART, SHARE)
    assert env[CPU_SET_ENV] == "4-5"
    assert env["NEURON_RT_VISIBLE_CORES"] == "16,17,18,19"
    unpinned = partition_env(
        {CPU_SET_ENV: "stale"}, SPEC, PART, Share(partition="p1", cpus=1, memory=1, object_store_memory=1)
    )
    assert CPU_SET_ENV not in unpinned


@badinput("launcher")
@pytest.mark.parametrize(
    ("flag", "pointer"),
    [
        ("--labels", "ray-accel start --labels"),
        ("--labels-file", "ray-accel start --labels"),
        ("--resources", "ray-accel start --resources"),
        ("--resources={}", "ray-accel start --resources"),
        ("--node-manager-port", "remove it"),
    ],
)
def test_passed_through_start_flags_point_at_our_option(flag: str, pointer: str) -> None:
    with pytest.raises(InputError, match=re.escape(pointer)):
        validate_ray_args([flag, "x"])


@badinput("launcher")
@pytest.mark.parametrize(
    ("labels", "resources", "needle"),
    [
        ({"ray-accel.io/partition": "x"}, {}, "'ray-accel.io/partition' is ray-accel's own label"),
        ({"ray-accel.io/host": "x"}, {}, "'ray-accel.io/host' is ray-accel's own label"),
        ({}, {"neuron_cores": 1}, "'neuron_cores' is the accelerator resource"),
        ({}, {"CPU": 1}, "'CPU' is Ray's own resource; give the host's figure with -- --num-cpus"),
        ({}, {"memory": 1}, "-- --memory"),
        ({}, {"accelerator_type:A100": 1}, "'accelerator_type:A100' is a resource Ray sets itself"),
    ],
)
def test_clash_with_our_keys_is_refused_naming_the_key(
    labels: dict[str, str], resources: dict[str, float], needle: str
) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        check_user_keys(labels, resources, SPEC.resource_name)


@badinput("launcher")
def test_gpu_resource_clash() -> None:
    with pytest.raises(InputError, match="'GPU' is the accelerator resource"):
        check_user_keys({}, {"GPU": 1}, GPU.resource_name)
    check_user_keys({"team": "ml"}, {"license": 1}, GPU.resource_name)


label_part = st.from_regex(r"\A[a-z0-9]([a-z0-9_.-]{0,10}[a-z0-9])?\Z")


@given(st.dictionaries(label_part, label_part, max_size=5))
def test_labels_round_trip(labels: dict[str, str]) -> None:
    text = ",".join(f"{k}={v}" for k, v in labels.items())
    assert validate.node_labels(text) == labels


@badinput("launcher")
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a", "'a' is not key=value"),
        ("a=b=c", "'a=b=c' is not key=value"),
        ("-a=b", "bad label key '-a'"),
        ("a=b,a=c", "label 'a' is given twice"),
        ("a=-b", "bad value '-b' for label 'a'"),
        ("ray.io/node-id=x", "'ray.io/node-id' is under ray.io/"),
        ("bad..prefix/a=b", "bad label key prefix 'bad..prefix'"),
    ],
)
def test_bad_labels_name_the_value(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        validate.node_labels(text)


@given(st.dictionaries(st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z"), st.integers(0, 10**8).map(lambda u: u / 1e4)))
def test_resources_round_trip(resources: dict[str, float]) -> None:
    assert validate.resource_amounts(json.dumps(resources)) == resources


@badinput("launcher")
@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{", "is not JSON"),
        ("[1]", "is not a JSON object"),
        ('{"a": "1"}', "amount of 'a' is '1', not a number"),
        ('{"a": -1}', "amount of 'a' is -1"),
        ('{"a": true}', "not a number"),
        ('{"a": 0.00001}', "units of 0.0001"),
    ],
)
def test_bad_resources_name_the_value(text: str, needle: str) -> None:
    with pytest.raises(InputError, match=re.escape(needle)):
        validate.resource_amounts(text)


def test_user_host_figures_are_read_as_the_hosts() -> None:
    assert user_figures(["--num-cpus", "4", "--memory=1000", "--object-store-memory", "900000000"]) == {
        "cpus": 4,
        "memory": 1000,
        "object_store_memory": 900000000,
    }
    with pytest.raises(InputError, match="--num-cpus 'x'"):
        user_figures(["--num-cpus", "x"])
    with pytest.raises(InputError, match="--memory 0"):
        user_figures(["--memory", "0"])
    host = read_host(user_figures(["--num-cpus", "6", "--object-store-memory", "200000000"]), {"license": 3})
    assert host.cpus == 6 and host.object_store_memory == 200000000
    assert host.sources == {"cpus": "--num-cpus", "memory": "host", "object_store_memory": "--object-store-memory"}


def test_detected_host_stays_within_physical_memory() -> None:
    import psutil
    import ray._private.utils as ray_utils

    host = read_host({})
    assert host.cpus == int(ray_utils.get_num_cpus())
    assert 0 < host.memory + host.object_store_memory <= psutil.virtual_memory().total
    # Ray's own rule for the object store, for the whole host (no fixed 2 GiB cap).
    assert host.object_store_memory > 2 * 1024**3 or psutil.virtual_memory().total < 8 * 1024**3


def test_version_check_test_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FAKE_RAY_VERSION_ENV, "2.99.0")
    with pytest.raises(BridgeUnsupported, match=r"ray 2.99.0 is outside .* \(2.57.x to 2.60.x\)"):
        check_ray_version()
    for version in ("2.56.1", "2.61.0"):
        monkeypatch.setenv(FAKE_RAY_VERSION_ENV, version)
        with pytest.raises(BridgeUnsupported, match=f"ray {version} is outside"):
            check_ray_version()
    monkeypatch.setenv(FAKE_RAY_VERSION_ENV, "2.57.0")
    assert check_ray_version() == "2.57.0"
    monkeypatch.delenv(FAKE_RAY_VERSION_ENV)
    assert check_ray_version().startswith("2.60.")


UNKNOWN = ("--future-flag", "--gpu-memory-fraction", "--x")


words = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


plain_words = words.filter(lambda w: not w.startswith("-"))


tokens = st.one_of(
    st.sampled_from(sorted(NO_VALUE | VALUE) + list(UNKNOWN) + ["--", "-", "-v"]),
    st.builds(lambda f, v: f"{f}={v}", st.sampled_from(sorted(VALUE) + list(UNKNOWN)), words),
    words,
)


def test_the_flag_table_is_rays_own() -> None:
    """Which `ray start` options take a value, as the installed Ray's click
    command declares them."""
    from ray.scripts.scripts import start

    def no_value(p: object) -> bool:
        return bool(getattr(p, "is_flag", False) or getattr(p, "count", False))

    flags = {o for p in start.params if no_value(p) for o in p.opts}
    valued = {o for p in start.params if not no_value(p) for o in p.opts}
    assert NO_VALUE - {"--help"} == flags
    assert valued == VALUE


@given(st.lists(tokens, max_size=12))
def test_any_list_round_trips(args: list[str]) -> None:
    assert render(parse(args)) == args


def _arg() -> st.SearchStrategy[Arg]:
    return st.one_of(
        st.builds(Arg, st.sampled_from(sorted(VALUE)), words, st.booleans()),  # Ray's: any value, both forms
        st.builds(Arg, st.sampled_from(sorted(NO_VALUE))),
        st.builds(Arg, st.sampled_from(UNKNOWN), plain_words, st.just(False)),  # unknown, separate value
        st.builds(Arg, st.sampled_from(UNKNOWN), words, st.just(True)),  # unknown, --f=v
        st.builds(Arg, st.sampled_from(UNKNOWN)),  # unknown, alone
        st.builds(Arg, st.none(), plain_words),  # a bare word
    )


def _well_formed(items: list[Arg]) -> list[Arg]:
    """As one would write them: a flag alone that takes or may take a value
    is followed by another option (or ends the list)."""
    out = []
    for i, a in enumerate(items):
        following = items[i + 1].tokens()[0] if i + 1 < len(items) else None
        alone = a.name is not None and a.value is None and a.name not in NO_VALUE
        if alone and following is not None and (a.name in VALUE or not following.startswith("-")):
            a = Arg(a.name, "v", joined=True)
        out.append(a)
    return out


@given(st.lists(_arg(), max_size=10))
def test_a_built_list_parses_back_to_what_was_built(items: list[Arg]) -> None:
    items = _well_formed(items)
    assert list(parse(render(items))) == items


@given(st.sampled_from(sorted(VALUE)), words, words)
def test_a_value_reads_the_same_in_both_forms_and_the_last_wins(flag: str, first: str, last: str) -> None:
    assert flag_value([flag, first], flag) == first
    assert flag_value([f"{flag}={first}"], flag) == first
    assert flag_value([flag, first, "--temp-dir", "/t", f"{flag}={last}"], flag) == last
    carrier = "--node-name" if flag == "--temp-dir" else "--temp-dir"
    assert flag_value([carrier, flag], flag) is None, "a value is never an option"


@given(st.lists(_arg(), max_size=10), st.sets(st.sampled_from([*sorted(HOST_FLAGS), "--include-dashboard"])))
def test_without_drops_exactly_the_named_flags_and_keeps_unknown_ones(items: list[Arg], drop: set[str]) -> None:
    items = _well_formed(items)
    kept = without(render(items), drop)
    assert kept == render(a for a in items if a.name not in drop)
    for a in items:
        if a.name in UNKNOWN:
            assert a.tokens()[0] in kept, "an option this Ray does not have is passed on as given"


@badinput("launcher")
@pytest.mark.parametrize("given_", [["--num-cpus"], ["--temp-dir=/t", "--memory"]])
def test_a_flag_without_its_value_is_refused_naming_it(given_: list[str]) -> None:
    flag = given_[-1]
    with pytest.raises(InputError, match=f"^{flag} needs a value$"):
        flag_value(given_, flag)


def test_examples() -> None:
    args = ["--num-cpus", "--memory=5", "--block", "--future", "x", "--next", "--labels=a=b", "word"]
    assert parse(args) == (
        Arg("--num-cpus", "--memory=5"),  # click gives a value-taking option the next word
        Arg("--block"),
        Arg("--future", "x"),
        Arg("--next"),
        Arg("--labels", "a=b", joined=True),
        Arg(None, "word"),
    )
    assert flag_names(args) == ["--num-cpus", "--block", "--future", "--next", "--labels"]
    validate_ray_args(["--node-name", "--head"])  # --head is the node's name here, not the flag
    with pytest.raises(InputError, match="--worker_port_list is set per partition"):
        validate_ray_args(["--worker_port_list", "1"])


@badinput("launcher")
@pytest.mark.parametrize("argv", [[], ["result.json"], ["result.json", "start", "--head"]])
def test_the_launcher_refuses_a_command_line_without_its_separator(argv: list[str]) -> None:
    with pytest.raises(InputError, match="^usage: python -m ray_accel.cluster.raylet_launch RESULT -- start"):
        parse_launch_argv(argv)


@given(words, st.lists(tokens, max_size=8))
def test_the_launcher_command_line_round_trips(result: str, args: list[str]) -> None:
    assert parse_launch_argv(launch_argv(result, ["start", *args])) == (result, ["start", *args])


def test_every_interpretation_lives_here() -> None:
    """The other cluster modules call this one; none re-parses `ray start` flags."""
    import ast
    from pathlib import Path

    root = Path(raylet.__file__).parent
    for path in root.glob("*.py"):
        if path.name == "raylet.py":
            continue
        defined = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        assert not defined & {"flag_names", "has_flag", "flag_value", "without", "validate_ray_args"}, path.name
