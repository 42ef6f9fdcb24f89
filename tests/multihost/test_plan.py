"""The harness's pure plan: names, addresses, paths and `ip` commands (no root needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.multihost.hosts import (
    MAX_HOSTS,
    MAX_TMPDIR_LEN,
    TEST_NET,
    Tools,
    host_env,
    make_run_id,
    plan_hosts,
    setup_commands,
    teardown_link_commands,
    wrap_command,
)

IFNAMSIZ = 15  # Linux interface names are at most 15 bytes (include/uapi/linux/if.h)
pids = st.integers(min_value=1, max_value=4_194_304)  # pid_max upper bound on 64-bit Linux
seqs = st.integers(min_value=1, max_value=10_000)
counts = st.integers(min_value=1, max_value=MAX_HOSTS)


@given(pids, seqs, counts)
def test_plan_names_addresses_and_paths_are_unique_and_short(pid: int, seq: int, n: int) -> None:
    plan = plan_hosts(make_run_id(pid, seq), n, Path("/tmp"), seq % 256)
    assert len(plan.hosts) == n
    assert len(set(plan.namespaces)) == n + 1 and all(str(pid) in ns for ns in plan.namespaces)
    assert len({h.ip for h in plan.hosts}) == n and all(h.ip.startswith(f"{TEST_NET}.") for h in plan.hosts)
    assert len({h.hostname for h in plan.hosts}) == n
    assert all(len(h.switch_port) <= IFNAMSIZ for h in plan.hosts)
    dirs = [d for h in plan.hosts for d in (h.home, h.tmpdir, h.state_dir)]
    assert len(set(dirs)) == 3 * n and all(d.is_relative_to(plan.root) for d in dirs)
    assert all(len(str(h.tmpdir)) <= MAX_TMPDIR_LEN for h in plan.hosts)


@given(pids, seqs, counts, st.from_regex(r"[a-z][a-z0-9.-]{0,30}", fullmatch=True))
def test_one_host_name_for_every_host_leaves_addresses_and_paths_apart(pid: int, seq: int, n: int, name: str) -> None:
    plan = plan_hosts(make_run_id(pid, seq), n, Path("/tmp"), seq % 256, hostname=name)
    assert {h.hostname for h in plan.hosts} == {name}
    assert len({h.ip for h in plan.hosts}) == n and len({h.netns for h in plan.hosts}) == n
    assert len({d for h in plan.hosts for d in (h.home, h.tmpdir, h.state_dir)}) == 3 * n


@pytest.mark.parametrize("name", ["", "a b", "x" * 65, "a/b", "$(id)"])
def test_a_host_name_the_harness_cannot_set_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="host name"):
        plan_hosts("mh1s1", 2, Path("/tmp"), 1, hostname=name)


@given(st.tuples(pids, seqs), st.tuples(pids, seqs))
def test_run_ids_differ_when_pid_or_set_differs(x: tuple[int, int], y: tuple[int, int]) -> None:
    assert (make_run_id(*x) == make_run_id(*y)) == (x == y)


@given(pids, seqs, counts)
def test_every_ip_command_names_one_of_the_sets_namespaces(pid: int, seq: int, n: int) -> None:
    plan = plan_hosts(make_run_id(pid, seq), n, Path("/tmp"), 7)
    for args in setup_commands(plan) + teardown_link_commands(plan):
        assert args[0] == "-n" and args[1] in plan.namespaces, args  # never the root namespace
        if "veth" in args:
            assert args[1] == plan.switch_ns and args[-2:] in ([["netns", h.netns] for h in plan.hosts])
    addrs = [a[a.index("add") + 1] for a in setup_commands(plan) if a[2] == "addr"]
    assert addrs == [f"{h.ip}/24" for h in plan.hosts]
    lo_up = [a[1] for a in setup_commands(plan) if a[2:] == ["link", "set", "lo", "up"]]
    assert sorted(lo_up) == sorted(plan.namespaces)


@pytest.mark.parametrize("n", [0, MAX_HOSTS + 1, -1])
def test_host_count_out_of_range_is_named(n: int) -> None:
    with pytest.raises(ValueError, match=f"n={n} "):
        plan_hosts("mh1s1", n, Path("/tmp"), 1)


def test_long_base_is_refused_naming_it() -> None:
    base = Path("/tmp/" + "x" * 40)
    with pytest.raises(ValueError, match=f"base '{base}' makes TMPDIR"):
        plan_hosts("mh1s1", 2, base, 1)


@pytest.mark.parametrize("run_id", ["", "mh 1", "mh/1", "mh;1"])
def test_bad_run_id_is_named(run_id: str) -> None:
    with pytest.raises(ValueError, match="run id"):
        plan_hosts(run_id, 2, Path("/tmp"), 1)


def test_host_env_is_clean_and_per_host() -> None:
    plan = plan_hosts("mh1s1", 2, Path("/tmp"), 1)
    caller = {"PATH": "/venv/bin:/usr/bin", "PYTHONPATH": "/wt", "HOME": "/root", "RAY_ADDRESS": "x", "SECRET": "s"}
    a, b = (host_env(h, plan.token_path, caller) for h in plan.hosts)
    assert a["HOME"] != b["HOME"] and a["TMPDIR"] != b["TMPDIR"] and a["RAYACCEL_STATE_DIR"] != b["RAYACCEL_STATE_DIR"]
    assert a["PATH"] == caller["PATH"] and a["PYTHONPATH"] == "/wt"
    assert a["RAY_AUTH_TOKEN_PATH"] == b["RAY_AUTH_TOKEN_PATH"] == str(plan.token_path)
    assert "RAY_ADDRESS" not in a and "SECRET" not in a
    assert "PYTHONPATH" not in host_env(plan.hosts[0], plan.token_path, {"PATH": "/bin"})
    assert host_env(plan.hosts[0], plan.token_path, caller, {"HOME": "/shared"})["HOME"] == "/shared"


def test_wrapped_command_enters_the_namespace_and_sets_the_hostname() -> None:
    tools = Tools("/sbin/ip", "/usr/bin/nsenter", "/usr/bin/unshare")
    argv = ["ray", "start", "--block"]
    cmd = wrap_command(Path("/run/netns/mh1s1-a"), "mh1s1-a", argv, tools)
    assert cmd[:2] == ["/usr/bin/nsenter", "--net=/run/netns/mh1s1-a"]
    assert "--uts" in cmd and cmd[-len(argv) - 1 :] == ["mh1s1-a", *argv]
