"""The gRPC server the workers and operators reach: the same for a master serving
it itself and for each of its front ends (master/frontends/process.py): the message
limits, the token check, the health service, TLS and the port.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from aiperf.api import aiperf_pb2 as pb
from aiperf.api.client import MAX_MESSAGE_BYTES
from aiperf.limits import MAX_REQUEST_BYTES
from master.rpc.tokens import TokenInterceptor, Tokens

# what the health service answers for: the server ("") and each service
HEALTH_NAMES = ("", pb.DESCRIPTOR.services_by_name["WorkerService"].full_name,
                pb.DESCRIPTOR.services_by_name["ControlService"].full_name)


def server_credentials(tls_cert: Path | None, tls_key: Path | None) -> grpc.ServerCredentials | None:
    """TLS credentials from a certificate and key, or None (plain)."""
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("TLS needs both a certificate and a key")
    if tls_cert is None or tls_key is None:
        return None
    return grpc.ssl_server_credentials([(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())])


def check_port_free(host: str, port: int) -> None:
    """OSError naming the cause when `port` on `host` is already taken, checked with a plain bind
    (SO_REUSEADDR, as gRPC binds) before anything else starts: gRPC itself only logs a C++ line
    and fails to add the port, after the database has been migrated. Port 0: nothing to check."""
    if not port:
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise OSError(f"cannot listen on {host}:{port}: the address does not resolve ({exc.strerror})") from None
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(where)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(f"cannot listen on {host}:{port}: the port is in use (another master or "
                              f"service; pick another --port)") from None
            raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


async def listen(address: str, credentials: grpc.ServerCredentials | None, tokens: Tokens,
                 add_services: Callable[[grpc.aio.Server], None], *, shared_port: bool
                 ) -> tuple[grpc.aio.Server, health.aio.HealthServicer, int]:
    """The started server (the services `add_services` adds, behind the token check, and the
    health service, SERVING) and its port; OSError when it cannot listen. shared_port: the
    port is shared with the master's other front ends (SO_REUSEPORT); otherwise a port already
    taken is refused."""
    server = grpc.aio.server(
        interceptors=[TokenInterceptor(tokens)],
        options=[
            ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),  # larger: RESOURCE_EXHAUSTED
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.so_reuseport", 1 if shared_port else 0),
        ],
    )
    add_services(server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    try:
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as exc:
        raise OSError(f"cannot listen on {address}: {exc}") from None
    if bound == 0:
        raise OSError(f"cannot listen on {address}")
    await server.start()
    await set_health(health_servicer, serving=True)
    return server, health_servicer, bound


async def set_health(health_servicer: health.aio.HealthServicer, *, serving: bool) -> None:
    """SERVING or NOT_SERVING for the server and each service."""
    state = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in HEALTH_NAMES:
        await health_servicer.set(name, state)
