"""Who wrote what: the API server's audit log, read back for the objects a violation names.

A violation says what the cluster held at some revision (a pod bound while its claim held
nothing); it cannot say who made it so, and three writers touch a claim's status in-tree
(dralloc, kube-scheduler, kube-controller-manager). The testbed's kube-apiserver logs every
write of a claim, every binding, eviction and pod deletion at Metadata level (no bodies:
``testbed/control.py``, ``AUDIT_POLICY``), so the run prints, under each violation, the writes
to the objects it names, in the order the API server answered them.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

TRAIL_LIMIT = 12
"""Writes shown per violation (the last ones: what led to it is closest to its end)."""


@dataclass(frozen=True)
class Write:
    """One write the API server answered."""

    at: str
    """When it answered (RFC 3339, microseconds)."""
    user: str
    verb: str
    resource: str
    """``resourceclaims/status``, ``pods/binding``, ..."""
    namespace: str
    name: str
    code: int

    def __str__(self) -> str:
        clock = self.at[11:26] if len(self.at) >= 26 else self.at
        return (
            f"{clock} {self.user} {self.verb} {self.resource} "
            f"{self.namespace}/{self.name} -> {self.code}"
        )


def audit_logs(state_dir: Path) -> list[Path]:
    """The testbed's audit log and its rotated parts, oldest first."""
    logs = state_dir / "logs"
    rotated = sorted(p for p in logs.glob("audit-*.log"))
    current = logs / "audit.log"
    return [*rotated, *([current] if current.exists() else [])]


def writes(paths: Iterable[Path], objects: Collection[tuple[str, str]]) -> list[Write]:
    """Completed writes to ``(namespace, name)`` in ``objects``, by the time they were
    answered. A pod's binding and eviction are named by the pod."""
    wanted = set(objects)
    found: list[Write] = []
    for path in paths:
        with path.open(errors="replace") as lines:
            for line in lines:
                write = _parse(line, wanted)
                if write is not None:
                    found.append(write)
    return sorted(found, key=lambda w: w.at)


def _parse(line: str, wanted: set[tuple[str, str]]) -> Write | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None  # a line cut by a restart
    if not isinstance(entry, dict) or entry.get("stage") != "ResponseComplete":
        return None
    ref = entry.get("objectRef") or {}
    key = (str(ref.get("namespace") or ""), str(ref.get("name") or ""))
    if key not in wanted:
        return None
    resource = str(ref.get("resource") or "")
    if ref.get("subresource"):
        resource += f"/{ref['subresource']}"
    return Write(
        at=str(entry.get("stageTimestamp") or ""),
        user=str((entry.get("user") or {}).get("username") or ""),
        verb=str(entry.get("verb") or ""),
        resource=resource,
        namespace=key[0],
        name=key[1],
        code=int((entry.get("responseStatus") or {}).get("code") or 0),
    )


def trails(
    state_dir: Path | None, objects: Mapping[str, Collection[tuple[str, str]]]
) -> dict[str, list[str]]:
    """Per key (a violation), the last writes to its objects as lines to print, the audit
    log read once for all of them; empty lists without an audit log."""
    if state_dir is None:
        return {key: [] for key in objects}
    wanted = set().union(*objects.values()) if objects else set()
    found = writes(audit_logs(state_dir), wanted) if wanted else []
    return {
        key: _shown([w for w in found if (w.namespace, w.name) in objs])
        for key, objs in objects.items()
    }


def _shown(found: list[Write]) -> list[str]:
    shown = [str(w) for w in found[-TRAIL_LIMIT:]]
    if len(found) > TRAIL_LIMIT:
        shown.insert(0, f"({len(found) - TRAIL_LIMIT} earlier writes left out)")
    return shown
