"""Whether a host names the loopback interface: a single-machine run keeps every listener there."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``[::1]``, ``localhost``: True; a routable address or a name: False."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return host == "localhost"
