"""The errors a store call raises; the servicers map each to one gRPC status code.

A failed call writes nothing. The Master raises the same errors for the rules it checks
itself, so that one mapping serves both.
"""

from __future__ import annotations


class StoreError(Exception):
    """Base of the errors a store call raises; nothing was written."""


class NotFound(StoreError):
    pass


class PermissionDenied(StoreError):
    pass


class FailedPrecondition(StoreError):
    pass


class ResendNotRecorded(FailedPrecondition):
    """A report let through as a resend (no budget spent) whose first copy was not recorded:
    the master sends it again as a new report."""


class InvalidArgument(StoreError):
    pass


class AlreadyExists(StoreError):
    """A name held by a live worker, asked for without that worker's credential."""


class Unavailable(StoreError):
    """The database did not answer (down, restarting, connection lost, locked): try again."""


class StorageFull(StoreError):
    """The database cannot grow (its disk is full): nothing was written; try again once there is room."""


class SchemaError(StoreError):
    """The database's schema revision is unknown to this version (newer)."""
