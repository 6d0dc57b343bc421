"""The services the master serves, as their protobuf descriptors: what the front ends' relay
numbers the methods by, and the request type each method decodes (master/frontends/)."""

from __future__ import annotations

from typing import Any

from aiperf.api import aiperf_pb2 as pb

SERVICES = (pb.DESCRIPTOR.services_by_name["WorkerService"], pb.DESCRIPTOR.services_by_name["ControlService"])


def request_type(service: str, method: str) -> Any:
    """The request message class of `method` of `service` (its full name, "aiperf.v1.WorkerService")."""
    descriptor = pb.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]].methods_by_name[method]
    return getattr(pb, descriptor.input_type.name)
