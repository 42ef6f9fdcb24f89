"""A host is its name AND its node IP: the key every view, label and metric
uses (`ray_accel.core.hosts.host_key`), held to Ray 2.60's own label validation."""

from __future__ import annotations

import ipaddress
import re

from hypothesis import given
from hypothesis import strategies as st
from ray._private.label_utils import validate_label_value

from ray_accel.core.hosts import HostId, host_key, ip_text

ips = st.ip_addresses().map(str)
names = st.text(max_size=300)
LABEL_VALUE = r"^[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,61}[a-zA-Z0-9])?$"


@given(names, st.one_of(ips, st.text(max_size=100)))
def test_any_name_and_address_make_a_valid_label_value(name: str, ip: str) -> None:
    key = host_key(name, ip)
    validate_label_value(key)  # Ray's own check raises on a bad value
    assert re.match(LABEL_VALUE, key) and len(key) <= 63


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
