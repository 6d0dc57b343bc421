"""Bearer-token authentication of the master's RPCs.

Every call carries the metadata `authorization: Bearer <token>`: the worker
token for WorkerService, the admin token for ControlService. The standard
health service (grpc.health.v1) needs none, so Kubernetes probes work.
Tokens come from an argument, the environment (AIPERF_TOKEN,
AIPERF_ADMIN_TOKEN), a token file, or are generated on first start and written
to the data directory (mode 0600).
"""

from __future__ import annotations

import hmac
import logging
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import grpc

from aiperf.api.calls import CREDENTIAL_METADATA
from aiperf.api.tokens import check_token

log = logging.getLogger(__name__)

WORKER_SERVICE = "/aiperf.v1.WorkerService/"
CONTROL_SERVICE = "/aiperf.v1.ControlService/"
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
WORKER_TOKEN_FILE = "worker.token"
ADMIN_TOKEN_FILE = "admin.token"


@dataclass(frozen=True)
class Tokens:
    worker: str = field(repr=False)
    admin: str = field(repr=False)
    generated: dict[str, Path] = field(default_factory=dict)  # kind -> file written


def read_token_file(path: Path) -> str:
    """The token in `path` (surrounding white space dropped); ValueError naming the file
    when it is not a token (aiperf.api.tokens)."""
    try:
        token = path.read_bytes().decode("utf-8").strip()
    except UnicodeDecodeError:
        raise ValueError(f"the token from file {path} cannot be used: it is not UTF-8 text") from None
    return check_token(token, f"file {path}")


def _resolve(
    kind: str,
    explicit: str | None,
    env: tuple[str, str | None],
    file: Path | None,
    default_file: Path,
    generated: dict[str, Path],
) -> str:
    if explicit:
        return check_token(explicit, f"the {kind} token argument")
    if env[1]:
        return check_token(env[1], f"variable {env[0]}")
    for path in (file, default_file):
        if path is not None and path.exists():
            return read_token_file(path)
    target = file or default_file
    target.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    generated[kind] = target
    log.info("event=token_generated kind=%s file=%s", kind, target)
    return token


def load_tokens(
    data_dir: Path,
    worker_token: str | None = None,
    admin_token: str | None = None,
    worker_token_file: Path | None = None,
    admin_token_file: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> Tokens:
    """Resolve both tokens: argument > environment > file > generated; ValueError naming the
    source of one that is not a token (aiperf.api.tokens)."""
    env = os.environ if env is None else env
    for kind, given, var in (("worker", worker_token, "AIPERF_TOKEN"), ("admin", admin_token, "AIPERF_ADMIN_TOKEN")):
        if given:  # both checked before a token file is generated for either
            check_token(given, f"the {kind} token argument")
        elif env.get(var):
            check_token(env[var], f"variable {var}")
    generated: dict[str, Path] = {}
    worker = _resolve("worker", worker_token, ("AIPERF_TOKEN", env.get("AIPERF_TOKEN")), worker_token_file,
                      data_dir / WORKER_TOKEN_FILE, generated)
    admin = _resolve("admin", admin_token, ("AIPERF_ADMIN_TOKEN", env.get("AIPERF_ADMIN_TOKEN")), admin_token_file,
                     data_dir / ADMIN_TOKEN_FILE, generated)
    if hmac.compare_digest(worker, admin):
        raise ValueError("the worker and admin tokens must differ")
    return Tokens(worker=worker, admin=admin, generated=generated)


def _bearer(metadata: Any) -> str | None:
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str) and value.startswith("Bearer "):
            return value[len("Bearer "):].strip()
    return None


def worker_credential(metadata: Any) -> str:
    """The `aiperf-worker-credential` metadata value ("" when absent or not text)."""
    for key, value in metadata or ():
        if key == CREDENTIAL_METADATA:
            return value if isinstance(value, str) else ""
    return ""


def _denied(handler: grpc.RpcMethodHandler[Any, Any], message: str) -> grpc.RpcMethodHandler[Any, Any]:
    async def abort(_request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    # the replacement must have the same streaming shape as the real method
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(abort)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(abort)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(abort)
    return grpc.unary_unary_rpc_method_handler(abort)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls without the right bearer token with UNAUTHENTICATED."""

    def __init__(self, tokens: Tokens) -> None:
        self._worker = tokens.worker.encode()
        self._admin = tokens.admin.encode()

    def check(self, method: str, metadata: Any) -> str | None:
        """None when the call may proceed, else the reason it may not."""
        if method.startswith(PUBLIC_PREFIXES):
            return None
        if method.startswith(WORKER_SERVICE):
            expected, kind = self._worker, "worker"
        elif method.startswith(CONTROL_SERVICE):
            expected, kind = self._admin, "admin"
        else:
            return "unknown service"
        given = _bearer(metadata)
        if given is None:
            return f"missing 'authorization: Bearer <{kind} token>' metadata"
        if not hmac.compare_digest(given.encode(), expected):
            log.warning("event=auth_failed method=%s", method)
            return f"wrong {kind} token"
        return None

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler[Any, Any] | None]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        handler = await continuation(details)
        if handler is None:
            return None
        reason = self.check(details.method, details.invocation_metadata)
        return handler if reason is None else _denied(handler, reason)
