"""One partition's raylet: the start request, its `ray start` arguments and its
environment (the subprocess that runs it: `ray_accel.cluster.launcher`; the
user's keys it refuses: `ray_accel.partition.plan.check_user_keys`).

What a `ray start` argument list means, in one place: parsing it into
options and values, the flags ray-accel sets itself or reads as the host's
figures, building one partition's list, and the launcher's command line that
carries it. Pure functions; everything that reads or writes `ray start`
arguments calls these.

Ray 2.60's `ray start` is a click command (ray/scripts/scripts.py `start`):
an option takes its value as `--f v` or `--f=v`, and click gives an option
that takes a value the next word whatever it looks like; a flag takes none.
Which of Ray's options are flags is listed here (`NO_VALUE`,
tests/unit/test_start_args.py checks the list against the installed Ray). An
option Ray 2.60 does not have (a newer Ray's) is kept as given: it takes the
next word as its value unless that word starts with "-".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ray_accel.bridge.managers import SPEC_ENV, BridgeSpec
from ray_accel.cluster.host import HEAD_ONLY, HOST_FLAGS, NODE_IP_FLAG, RayletPorts, Share
from ray_accel.core import ray_resources
from ray_accel.core.errors import InputError
from ray_accel.core.health_state import HealthSettings
from ray_accel.core.numa import format_cpulist
from ray_accel.partition.plan import PARTITION_LABEL, TYPE_LABEL, Mode, Partition

# Ray 2.60 `ray start` options that take no value (click flags and counts,
# and click's own --help); every other option of it takes one (`VALUE`).
NO_VALUE = frozenset({
    "--block", "--disable-usage-stats", "--enable-object-reconstruction", "--enable-resource-isolation", "--head",
    "--no-monitor", "--no-redirect-output", "--ray-debugger-external", "--verbose", "-v", "--help",
})  # fmt: skip
VALUE = frozenset({
    "--address", "--autoscaling-config", "--cgroup-path", "--dashboard-agent-grpc-port",
    "--dashboard-agent-listen-port", "--dashboard-host", "--dashboard-port", "--include-dashboard",
    "--include-log-monitor", "--labels", "--labels-file", "--log-color", "--log-style", "--max-worker-port",
    "--memory", "--metrics-export-port", "--min-worker-port", "--node-ip-address", "--node-manager-port",
    "--node-name", "--num-cpus", "--num-gpus", "--object-manager-port", "--object-spilling-directory",
    "--object-store-memory", "--plasma-directory", "--port", "--proxy-server-url", "--ray-client-server-port",
    "--redis-password", "--redis-shard-ports", "--redis-username", "--resources", "--runtime-env-agent-port",
    "--system-config", "--system-reserved-cpu", "--system-reserved-memory", "--temp-dir", "--tracing-startup-hook",
    "--worker-port-list",
})  # fmt: skip

# Flags ray-accel sets per partition; a user value would break the split.
RESERVED_FLAGS = {
    "--head", "--address", "--port", "--resources", "--num-gpus", "--labels", "--labels-file",
    "--node-manager-port", "--object-manager-port", "--min-worker-port", "--max-worker-port", "--worker-port-list",
    "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port", "--runtime-env-agent-port",
    "--metrics-export-port", "--ray-client-server-port", "--dashboard-port", "--block",
}  # fmt: skip
# Reserved flags that have an option of ray-accel's own in their place.
OUR_OPTION = {
    "--labels": "ray-accel start --labels k=v,... (they go to every partition)",
    "--labels-file": "ray-accel start --labels k=v,... (they go to every partition)",
    "--resources": "ray-accel start --resources '{...}' (the host's amounts, divided between partitions)",
    "--port": "ray-accel start --port",
    "--address": "ray-accel start --address",
    "--head": "ray-accel start --head",
}
# Ray refuses these on a raylet that joins a cluster.
HEAD_ONLY_FLAGS = {"--include-dashboard", "--redis-shard-ports"}

# The launcher's command line: RESULT_JSON -- start ARGS...
LAUNCH_SEPARATOR = "--"
LAUNCH_USAGE = "usage: python -m ray_accel.cluster.raylet_launch RESULT -- start ARGS..."


@dataclass(frozen=True)
class Arg:
    """One item of a `ray start` argument list: an option with its value
    (`--f v`, or `--f=v` when `joined`), an option alone (`value` None), or
    a bare word (`name` None)."""

    name: str | None
    value: str | None = None
    joined: bool = False

    def tokens(self) -> list[str]:
        if self.name is None:
            return [self.value or ""]
        if self.value is None:
            return [self.name]
        return [f"{self.name}={self.value}"] if self.joined else [self.name, self.value]


def _takes_value(name: str, following: str) -> bool:
    """Whether option `name` takes `following` as its value (an unknown option: unless it looks like one)."""
    if name in NO_VALUE:
        return False
    if name in VALUE:
        return True
    return not following.startswith("-")


def parse(args: Sequence[str]) -> tuple[Arg, ...]:
    """`args` as options and values; `render` gives back the very same list."""
    out: list[Arg] = []
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if not token.startswith("-") or token in ("-", "--"):
            out.append(Arg(None, token))
        elif token.startswith("--") and "=" in token:
            name, value = token.split("=", 1)
            out.append(Arg(name, value, joined=True))
        elif token.startswith("--") and i < len(args) and _takes_value(token, args[i]):
            out.append(Arg(token, args[i]))
            i += 1
        else:
            out.append(Arg(token))
    return tuple(out)


def render(items: Iterable[Arg]) -> list[str]:
    return [t for a in items for t in a.tokens()]


def flag_names(args: Sequence[str]) -> list[str]:
    """Every option named in `args`, in order (values are never options)."""
    return [a.name for a in parse(args) if a.name is not None]


def flag_value(args: Sequence[str], name: str) -> str | None:
    """The value of `--name v` or `--name=v` (the last one, as click takes
    it); None when `name` is not given; `InputError` when it is given without
    the value it takes."""
    found = [a for a in parse(args) if a.name == name]
    if not found:
        return None
    if found[-1].value is None and name not in NO_VALUE:
        raise InputError(f"{name} needs a value")
    return found[-1].value


def without(args: Sequence[str], flags: Iterable[str]) -> list[str]:
    """`args` less `flags` and their values (`--f v` or `--f=v`)."""
    drop = set(flags)
    return render(a for a in parse(args) if a.name not in drop)


def validate_ray_args(args: Sequence[str]) -> None:
    """Refuse a flag ray-accel sets per partition, naming it and what to use."""
    clash = [f for f in flag_names(args) if f.replace("_", "-") in RESERVED_FLAGS]
    if clash:
        flag = clash[0].replace("_", "-")
        hint = f"use `{OUR_OPTION[flag]}`" if flag in OUR_OPTION else "remove it"
        raise InputError(f"{clash[0]} is set per partition by ray-accel; {hint}")


def user_figures(args: Sequence[str]) -> dict[str, int]:
    """The host figures the user gave after `--`, checked as `ray start` would
    (whole numbers), naming the flag and value when bad."""
    out: dict[str, int] = {}
    for flag, key in HOST_FLAGS.items():
        raw = flag_value(args, flag)
        if raw is None:
            continue
        text = raw.strip()
        if not (text.isascii() and text.isdigit()):
            raise InputError(f"{flag} {raw!r}: give a whole number (the host's total, divided between partitions)")
        if key != "cpus" and int(text) == 0:
            raise InputError(f"{flag} 0: the host's total must be above 0")
        out[key] = int(text)
    return out


@dataclass(frozen=True)
class RayOptions:
    """The user's `ray start` options (after `--`), read once: what ray-accel
    reads of them, and what every raylet is given of them."""

    args: tuple[str, ...] = ()
    node_ip: str | None = None  # NODE_IP_FLAG, as given
    figures: Mapping[str, int] = field(default_factory=dict)  # the host's, by HOST_FLAGS key
    include_dashboard: str | None = None
    usage_stats_off: bool = False  # --disable-usage-stats given

    @classmethod
    def read(cls, args: Sequence[str]) -> RayOptions:
        """`args`, refusing a flag ray-accel sets itself, an option without
        its value and a host figure `ray start` would refuse, naming it."""
        validate_ray_args(args)
        return cls(
            args=tuple(args),
            node_ip=flag_value(args, NODE_IP_FLAG),
            figures=user_figures(args),
            include_dashboard=flag_value(args, "--include-dashboard"),
            usage_stats_off="--disable-usage-stats" in flag_names(args),
        )

    def naming(self, ip: str) -> RayOptions:
        """These options with `--node-ip-address ip` when they name none (one given is kept as given)."""
        return self if self.node_ip is not None else replace(self, args=(*self.args, NODE_IP_FLAG, ip), node_ip=ip)

    def passed_on(self, head: bool) -> list[str]:
        """What a raylet is given of these: all but the host figures (its
        share replaces them) and, joining, the options only a head takes."""
        user = without(self.args, HOST_FLAGS)
        return user if head else without(user, HEAD_ONLY_FLAGS)


def port_args(ports: RayletPorts, head: bool) -> list[str]:
    """A raylet's port block as `ray start` flags (a head's own ports only on a head)."""
    args: list[str] = []
    for key, port in ports.named.items():
        if head or key not in HEAD_ONLY:
            args += [f"--{key.replace('_', '-')}", str(port)]
    return [*args, "--min-worker-port", str(ports.min_worker_port), "--max-worker-port", str(ports.max_worker_port)]


def ray_start_args(
    part: Partition,
    ports: RayletPorts,
    spec: BridgeSpec,
    share: Share,
    user: RayOptions,
    labels: Mapping[str, str],
    gcs: str | None,
    gcs_port: int = 0,
    dashboard: bool = True,
    log_monitor: bool = True,
) -> list[str]:
    """`ray start` arguments for one partition: its ports, its accelerator
    count, its share of the host (`share`), its labels (the user's, then
    ray-accel's own per partition: host, topology), then what it is given of
    the user's own `ray start` options. With no `gcs` to join it is the head
    raylet (`part` without devices, no partition label), its GCS on
    `gcs_port`, its dashboard on unless not `dashboard`. It runs Ray's log
    monitor only where `log_monitor` (one per host: `carries_log_monitor`)."""
    head = gcs is None
    passed = user.passed_on(head)
    args = ["start"]
    args += ["--head", "--port", str(gcs_port)] if head else ["--address", str(gcs)]
    args += port_args(ports, head)
    args += ray_resources.start_args(spec.resource_name, len(part.core_ids), share.resources)
    if not head:  # the head holds no devices: it is no partition
        labels = {**labels, PARTITION_LABEL: part.name}
        if spec.accelerator_type:
            labels[TYPE_LABEL] = spec.accelerator_type.replace(" ", "-")
    args += ["--labels", ",".join(f"{k}={v}" for k, v in labels.items())]
    # Every raylet would otherwise claim the whole host (docs/design.md).
    args += ["--num-cpus", str(share.cpus), "--memory", str(share.memory)]
    args += ["--object-store-memory", str(share.object_store_memory)]
    if head and not dashboard and user.include_dashboard is None:
        args += ["--include-dashboard", "false"]
    if not log_monitor:
        # Every log monitor tails every worker's log in the session's logs
        # folder, which the host's raylets share: a second one would print
        # each line of a worker twice on its driver (docs/design.md).
        args += ["--include-log-monitor", "false"]
    if not user.usage_stats_off:
        args.append("--disable-usage-stats")
    return args + passed


@dataclass(frozen=True, kw_only=True)
class RayletLaunch:
    """Everything one raylet's `ray start` is given: the one place a raylet's
    arguments and environment are made, for `start`, `start --recover`, the
    decider's shrink and return and a repartition alike. `part` is the
    partition as its raylet serves it (the head raylet: no devices), `spec`
    the bridge's spec of its own devices, `labels` all of its labels (the
    user's, then ray-accel's), `gcs` the GCS it joins (None: it is the head
    raylet, its GCS on `gcs_port`)."""

    part: Partition
    ports: RayletPorts
    spec: BridgeSpec
    share: Share
    user: RayOptions
    labels: Mapping[str, str]
    gcs: str | None
    gcs_port: int = 0
    dashboard: bool = True
    log_monitor: bool = True  # it runs the host's one log monitor

    def job(self, base_env: dict[str, str]) -> tuple[str, list[str], dict[str, str]]:
        """The launcher's job: the raylet's name, its `ray start` arguments and
        its environment made from `base_env`."""
        args = ray_start_args(
            self.part,
            self.ports,
            self.spec,
            self.share,
            self.user,
            self.labels,
            self.gcs,
            self.gcs_port,
            self.dashboard,
            self.log_monitor,
        )
        return self.part.name, args, partition_env(base_env, self.spec, self.part, self.share)


def launch_argv(result_path: str, args: Sequence[str]) -> list[str]:
    """The launcher module's arguments: where to write its result, then the
    `ray` command line (`start ...`)."""
    return [result_path, LAUNCH_SEPARATOR, *args]


def leader_path(result_path: str) -> str:
    """Where a launcher writes, before it starts anything, its own PID and
    start time: the leader of the process group every process of its raylet
    stays in, so that what a launch started is found even when the process
    that asked for it died before it could record anything."""
    return result_path.removesuffix(".result.json") + ".leader.json"


def parse_launch_argv(argv: Sequence[str]) -> tuple[str, list[str]]:
    """(result path, `ray` arguments) from the launcher's arguments, or
    `InputError` with its usage line."""
    if len(argv) < 2 or argv[1] != LAUNCH_SEPARATOR:
        raise InputError(LAUNCH_USAGE)
    return argv[0], list(argv[2:])


DEFAULT_GCS_PORT = 6379


PARTITION_ENV = "RAYACCEL_PARTITION"
# The CPUs (kernel list format) this raylet, and so every process it starts,
# runs on; unset: not pinned.
CPU_SET_ENV = "RAYACCEL_CPU_SET"


@dataclass(frozen=True)
class Join:
    """Where this host's raylets go: a new cluster, its GCS on `port`
    (`head`), or the one whose GCS is at `address`; their port blocks from
    `port_base` (None: the first free)."""

    head: bool = False
    address: str | None = None
    port: int | None = None
    port_base: int | None = None


@dataclass(frozen=True)
class Split:
    """How to split the host (`plan` and `start`): `--manual SPEC` alone
    means manual mode; with another `--mode` it is refused, naming both."""

    mode: str = "auto-split"
    partitions: int | None = None
    manual: str | None = None
    backend: str | None = None

    @classmethod
    def given(cls, mode: str | None, partitions: int | None, manual: str | None, backend: str | None) -> Split:
        """The split as given: a mode left out takes the default; a mode given
        is checked here, at the edge, so an empty one (`--mode ''`) is refused
        by name before anything is read or touched, never taken as the default."""
        if mode is not None:
            Mode.parse(mode)
            return cls(mode, partitions, manual, backend)
        return cls("manual" if manual is not None else "auto-split", partitions, manual, backend)


@dataclass(frozen=True)
class Offer:
    """What every partition offers beside its devices: the user's labels, the
    host's custom resources (divided like CPUs), and the workers its raylet
    may run (None: sized by its share)."""

    labels: Mapping[str, str] = field(default_factory=dict)
    resources: Mapping[str, float] = field(default_factory=dict)
    max_workers: int | None = None


@dataclass(frozen=True)
class Services:
    """ray-accel's metrics exporters and Ray's dashboard: on unless turned off."""

    metrics: bool = True
    dashboard: bool = True


@dataclass(frozen=True, kw_only=True)
class StartRequest:
    """What `ray-accel start` is asked for (the CLI's options, checked)."""

    join: Join = field(default_factory=Join)
    split: Split = field(default_factory=Split)
    offer: Offer = field(default_factory=Offer)
    services: Services = field(default_factory=Services)
    ray: RayOptions = field(default_factory=RayOptions)  # the user's `ray start` options (after `--`)
    health: HealthSettings = field(default_factory=HealthSettings)  # the host's health settings
    timeout_s: float = 180.0


def partition_env(
    base_env: dict[str, str], spec: BridgeSpec, part: Partition, share: Share | None = None
) -> dict[str, str]:
    """A partition raylet's environment: its mask (a comma list), its name, what
    every process using its devices needs (bridge or not), where the bridge is
    on its own spec (the type of its own devices), and the CPUs its launcher
    pins it to (when it is pinned)."""
    env = {**base_env, **dict(spec.process_env), spec.visible_ids_env: part.visible_ids, PARTITION_ENV: part.name}
    if SPEC_ENV in base_env:
        env[SPEC_ENV] = spec.to_env()
    env.pop(CPU_SET_ENV, None)
    if share is not None and share.cpu_set is not None:
        env[CPU_SET_ENV] = format_cpulist(share.cpu_set)
    return env
