"""A host is its name AND its node IP: the key every view, label and metric
uses (`ray_accel.core.hosts.host_key`), the host of a raylet read back from
Ray (`labels.node_host`), the state directory of one address
(`ip_text`), the choice of this host's record among those under its
name (`statedir.choose`), and the node IP `start` gives its raylets
(`host.node_ip`). Keys are held to Ray 2.60's own label validation."""

from __future__ import annotations

import ipaddress
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from ray._private.label_utils import validate_label_value

from ray_accel.cluster import host, statedir
from ray_accel.cluster.raylet import RayOptions
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, canonical_ip, host_key, ip_text
from ray_accel.partition.plan import HOST_LABEL, LABEL_VALUE, node_host
from tests.badinput import badinput

ips = st.ip_addresses().map(str)
names = st.text(max_size=300)


@given(names, st.one_of(ips, st.text(max_size=100)))
def test_any_name_and_address_make_a_valid_label_value(name: str, ip: str) -> None:
    key = host_key(name, ip)
    validate_label_value(key)  # Ray's own check raises on a bad value
    assert LABEL_VALUE.match(key) and len(key) <= 63


@given(names, names, ips, ips)
def test_two_addresses_never_share_a_key_whatever_the_names(n1: str, n2: str, a1: str, a2: str) -> None:
    if ipaddress.ip_address(a1) != ipaddress.ip_address(a2):
        assert host_key(n1, a1) != host_key(n2, a2)
    else:
        assert host_key(n1, a1).rsplit("_", 1)[1] == host_key(n2, a2).rsplit("_", 1)[1]


@given(names, ips)
def test_the_address_is_kept_whole_after_the_last_separator(name: str, ip: str) -> None:
    key = host_key(name, ip)
    assert key.rsplit("_", 1)[1] == ip_text(ip)
    assert "_" not in ip_text(ip)


@given(st.from_regex(r"[a-z][a-z0-9-]{0,40}[a-z0-9]", fullmatch=True), ips)
def test_an_ordinary_host_name_is_kept(name: str, ip: str) -> None:
    key = host_key(name, ip)
    if len(name) + 1 + len(ip_text(ip)) <= 63:
        assert key.startswith(name + "_")
    else:
        assert name.startswith(key.rsplit("_", 1)[0].rstrip("-")), "shortened, never changed"


def test_examples() -> None:
    assert host_key("ubuntu", "10.0.0.11") == "ubuntu_10.0.0.11"
    assert host_key("ubuntu", "10.0.0.12") != host_key("ubuntu", "10.0.0.11")
    assert host_key("ip-10-0-0-1.ec2.internal", "10.0.0.1") == "ip-10-0-0-1.ec2.internal_10.0.0.1"
    assert host_key("my host!", "fd00::2") == "my-host_fd00--2"
    assert host_key("h", "fe80::") == "h_fe80--0"  # a label ends with a letter or digit
    assert host_key("h", "FE80::1%eth0") == "h_fe80--1.eth0"
    assert host_key("", "10.0.0.1") == "host_10.0.0.1"
    assert host_key("x" * 100, "10.0.0.1") == "x" * 54 + "_10.0.0.1"
    assert str(HostId("ubuntu", "10.0.0.11")) == "ubuntu (10.0.0.11)"
    assert HostId("ubuntu", "10.0.0.11").key == "ubuntu_10.0.0.11"


@given(st.text(max_size=40), st.text(max_size=40), st.dictionaries(st.text(max_size=10), st.text(max_size=10)))
def test_a_raylets_host_is_its_name_and_ip_as_ray_records_them(name: str, ip: str, labels: dict[str, str]) -> None:
    got = node_host(name, ip, labels)
    if name and ip:
        assert got == host_key(name, ip)
    else:
        assert got == (labels.get(HOST_LABEL) or name or ip or "?")


def test_two_raylets_of_one_name_on_two_hosts_are_two_hosts() -> None:
    a = node_host("ubuntu", "10.0.0.11", {HOST_LABEL: "ubuntu"})  # a raylet of an earlier ray-accel
    b = node_host("ubuntu", "10.0.0.12", {})
    assert a != b and a == "ubuntu_10.0.0.11"


@given(ips, ips)
def test_one_directory_per_address(a1: str, a2: str) -> None:
    d1, d2 = ip_text(a1), ip_text(a2)
    assert re.fullmatch(r"[A-Za-z0-9._-]+", d1) and not d1.startswith(".")
    assert (d1 == d2) == (ipaddress.ip_address(a1) == ipaddress.ip_address(a2))
    assert ip_text(a1) == ip_text(canonical_ip(a1) or a1), "one text per address"


@given(st.lists(ips, max_size=6, unique=True), st.lists(ips, max_size=6))
def test_this_hosts_records_are_those_of_its_addresses(recorded_ips: list[str], local_ips: list[str]) -> None:
    recorded = [ip_text(ip) for ip in recorded_ips]
    local = {ip_text(ip) for ip in local_ips}
    mine, others = statedir.choose(recorded, local)
    assert sorted(mine + others) == sorted(recorded)
    assert all(d in local for d in mine) and not any(d in local for d in others)
    assert mine == sorted(mine) and others == sorted(others)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--node-ip-address", "10.1.2.3"], "10.1.2.3"),
        (["--node-ip-address=10.1.2.4", "--num-cpus", "2"], "10.1.2.4"),
        (["--node-ip-address", "FD00:0::2"], "fd00::2"),
        (["--node-ip-address", "1.1.1.1", "--node-ip-address", "10.1.2.5"], "10.1.2.5"),  # the last, as click
    ],
)
def test_a_given_node_ip_is_the_hosts(args: list[str], expected: str) -> None:
    options = RayOptions.read(args)
    assert host.node_ip(options.node_ip, None) == expected
    assert options.naming(expected).args == tuple(args), "a given address is passed on as given"


def test_localhost_and_no_address_are_what_ray_detects(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str | None] = []

    def detected(gcs: str | None) -> str:
        asked.append(gcs)
        return "10.9.8.7"

    monkeypatch.setattr(host, "detected_ip", detected)
    for loopback in ("localhost", "127.0.0.1", "::1"):
        assert host.node_ip(loopback, "10.0.0.1:6379") == "10.9.8.7"
    assert host.node_ip(None, "10.0.0.1:6379") == "10.9.8.7"
    assert host.node_ip(None, None) == "10.9.8.7"
    # Ray: `resolve_ip_for_localhost` detects without the GCS; a joining raylet detects toward it.
    assert asked == [None, None, None, "10.0.0.1:6379", None]
    given = RayOptions.read(["--num-cpus", "2"]).naming("10.9.8.7")
    assert given.args == ("--num-cpus", "2", "--node-ip-address", "10.9.8.7") and given.node_ip == "10.9.8.7"


@badinput("unnamed")
@pytest.mark.parametrize("value", ["my-host", "10.0.0", "10.0.0.1:6379", " "])
def test_a_node_ip_that_is_no_address_is_refused_naming_it(value: str) -> None:
    with pytest.raises(InputError, match="is not an IP address") as e:
        host.node_ip(value, None)
    assert repr(value) in str(e.value)


def test_the_detected_address_is_rays_own() -> None:
    import ray.util

    assert host.detected_ip(None) == ray.util.get_node_ip_address()
    assert canonical_ip(host.node_ip(None, None)) is not None
