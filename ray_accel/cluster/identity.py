"""Which host this is: its name and the node IP Ray uses for its raylets
(`ray_accel.core.hosts`), and the addresses it has now.

The node IP is decided the way `ray start` decides it (Ray 2.60,
`ray/scripts/scripts.py` `start` and `ray/_private/services.py`): the
`--node-ip-address` given after `--`, where `localhost`, `127.0.0.1` and `::1`
stand for the address Ray detects (`resolve_ip_for_localhost`); without one,
the address Ray detects, from the GCS's perspective on a joining host
(`get_node_ip_address(bootstrap_address)`) and from a public address's on a
head. `ray.util.get_node_ip_address` is that detection; it falls back to
resolving the host name, then to loopback, where there is no route out.
`start` then passes the address to every raylet, so the labels, the record
and Ray agree, and `--recover` restarts raylets on the same address.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator

from ray_accel.cluster.startargs import NODE_IP_FLAG
from ray_accel.core.errors import InputError
from ray_accel.core.hosts import HostId, canonical_ip, is_localhost, this_host_name


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Ray's C++ detection logs its fallback straight to file descriptor 2; a
    refused `start` prints one line there, so that log goes nowhere (the
    address chosen is in `status`)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def detected_ip(gcs_address: str | None) -> str:
    """The address Ray itself would give this host's raylet."""
    import ray.util

    with _quiet_stderr():
        return str(ray.util.get_node_ip_address(gcs_address))


def node_ip(given: str | None, gcs_address: str | None) -> str:
    """The node IP this host's raylets will use (see the module doc), from
    the `--node-ip-address` given, if any; one that is not an IP address is
    refused, naming it."""
    if given is None:
        ip = detected_ip(gcs_address)
    elif is_localhost(given.strip()):
        ip = detected_ip(None)
    else:
        ip = given.strip()
    canonical = canonical_ip(ip)
    if canonical is None:
        source = f"{NODE_IP_FLAG} {given!r}" if given is not None else f"Ray's address for this host {ip!r}"
        raise InputError(f"{source} is not an IP address: ray-accel tells hosts apart by their node IP")
    return canonical


def this_host(ip: str) -> HostId:
    return HostId(this_host_name(), ip)


def local_addresses() -> frozenset[str]:
    """The IP addresses of this host's interfaces now (in its network namespace), canonical."""
    import psutil

    families = (socket.AF_INET, socket.AF_INET6)
    found = [canonical_ip(a.address) for addrs in psutil.net_if_addrs().values() for a in addrs if a.family in families]
    # An IPv6 link-local address also without its zone (`fe80::1%eth0`).
    return frozenset(x for ip in found if ip is not None for x in (ip, ip.split("%", 1)[0]))
