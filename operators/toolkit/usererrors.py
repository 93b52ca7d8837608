"""Errors of the toolkit that point at the exact place a user has to fix.

A snapshot may hold thousands of objects from many files; "invalid object" is useless there.
Every error carries the file (and document number), the object (kind, namespace, name) and
the field path, and renders them in that order on one line.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectRef:
    """Where an object came from and which one it is."""

    source: str
    """File path (as the user gave it) or ``cluster`` for a live read."""
    document: int | None = None
    """1-based position of the object in its file (documents and List items counted)."""
    kind: str = ""
    namespace: str | None = None
    name: str | None = None

    @property
    def object_name(self) -> str:
        name = self.name or "<unnamed>"
        ident = f"{self.namespace}/{name}" if self.namespace else name
        return f"{self.kind} {ident}" if self.kind else ident

    @property
    def location(self) -> str:
        return f"{self.source} (object #{self.document})" if self.document else self.source

    def __str__(self) -> str:
        return f"{self.location}: {self.object_name}"


class ToolkitError(Exception):
    """Something the user asked for cannot be done; the message says what to change."""


class SnapshotError(ToolkitError):
    """A snapshot file or object is unusable."""

    def __init__(self, where: ObjectRef | str, message: str, field: str = "") -> None:
        self.where = where
        self.field = field
        self.detail = message
        prefix = str(where)
        text = f"{field}: {message}" if field else message
        super().__init__(f"{prefix}: {text}")
