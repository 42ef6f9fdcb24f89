"""A host, as ray-accel tells hosts apart: its name together with the node IP
that Ray uses for its raylets.

A name alone merges hosts: cloud images that all call themselves `localhost`
or `ubuntu`, containers started with one `--hostname`. The machine id does
not help either: cloned images and network namespaces share it. Within one
Ray cluster each host's raylets have a node IP of their own (it is how the
other hosts reach them), so the pair is unique there, and the name keeps it
readable.

`HostId.key` is the pair as one string, `<name>_<ip>`, used wherever a host is
a key: the host label of every partition's raylet, the `host` tag of every
metric series, the host column of `status --cluster` and `top`, the placement
view and the jobs' replicas. It follows Ray's rules for label values (at most
63 characters of `[A-Za-z0-9_.-]`, starting and ending with a letter or
digit: `LABEL_REGEX`, `ray/_private/label_utils.py`, Ray 2.60), so the same
string is a label value and a selector. The IP is kept whole and only the
name is shortened to fit, so two hosts with different IPs never share a key.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from dataclasses import dataclass

MAX_KEY = 63  # Ray's longest label value
SEPARATOR = "_"  # never in the IP's text, so the last one splits a key
# Ray 2.60 `is_localhost` (ray._common.network_utils): exactly these three
# strings; `ray start --node-ip-address` replaces them with the address Ray
# detects (`resolve_ip_for_localhost`, ray/_private/services.py).
LOCALHOST = ("localhost", "127.0.0.1", "::1")
_NAME_JUNK = re.compile(r"[^A-Za-z0-9_.-]")
_IP_JUNK = re.compile(r"[^A-Za-z0-9.-]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")


@dataclass(frozen=True, order=True)
class HostId:
    """One host: its name (`socket.gethostname()`, as Ray records it for each
    node) and the node IP Ray uses for its raylets."""

    name: str
    ip: str

    @property
    def key(self) -> str:
        return host_key(self.name, self.ip)

    def __str__(self) -> str:
        return f"{self.name} ({self.ip})"


def canonical_ip(text: str) -> str | None:
    """An IP address in its one canonical text (IPv6 compressed, lower case,
    zone kept); None when `text` is not an IP address."""
    try:
        return ipaddress.ip_address(text.strip()).compressed
    except ValueError:
        return None


def ip_text(ip: str) -> str:
    """The IP as label text: IPv4 as written; IPv6 compressed with ':' as '-'
    and a zone's '%' as '.' (neither is allowed in a label, and neither '-' nor
    '.' is in a compressed IPv6 address), and a '0' after a trailing '-' (a
    label ends with a letter or digit; a compressed address never ends in
    '::0'). So two addresses never share a text. Anything that is not an
    address is cleaned like a name. At most 61 characters, leaving room for
    the name."""
    canonical = canonical_ip(ip)
    raw = canonical.replace(":", "-").replace("%", ".") if canonical is not None else ip
    text = _IP_JUNK.sub("-", raw)[: MAX_KEY - 3]
    return text if text[-1:].isalnum() else text + "0"


def host_key(name: str, ip: str) -> str:
    """`<name>_<ip>`, a valid Ray label value: the name with other characters
    as '-', shortened so the whole fits in 63 characters; the IP whole."""
    address = ip_text(ip)
    room = MAX_KEY - len(SEPARATOR) - len(address)
    base = _EDGE.sub("", _NAME_JUNK.sub("-", name))
    base = _EDGE.sub("", base[:room]) or "host"[:room]
    return f"{base}{SEPARATOR}{address}"


def is_localhost(text: str) -> bool:
    return text in LOCALHOST


def this_host_name() -> str:
    """This host's name as Ray records it for a node (`NodeManagerHostname`)."""
    return socket.gethostname()
