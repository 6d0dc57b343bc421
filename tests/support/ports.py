"""A free loopback port for a process the test starts later (a subprocess's server, a master
restarted on the same port).

A port the kernel hands out for port 0 is in its ephemeral range, where the other pytest
process of `make test` (and every outgoing connection) gets its ports too: between this call
and the server's bind, or across a server's restart, another test could take it. So the port
is drawn at random below that range, and checked free now.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST = 20_000


def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default; elsewhere the check below still applies


def free_port() -> int:
    """A port on 127.0.0.1 nobody listens on, outside the ephemeral range."""
    top = max(LOWEST + 1_000, _ephemeral_start())
    for _ in range(200):
        port = random.randrange(LOWEST, top)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in [{LOWEST}, {top})")
