"""The demo's table of example pods and their devices, read from ``kubectl get pods -A -o json``
on standard input.

``python scripts/demo_pods.py``        the table: namespace, pod, node, devices
``python scripts/demo_pods.py wait``   exit 0 once every pod that should have devices has them,
                                       and every pod meant to wait was told why

Some examples are meant to wait (a DeviceQuota that is full, say): they carry the annotation
``examples.dralloc.dev/waits`` with the reason, are not waited for, and are listed in one line
each with what the operator told them (the pod's ``DevicesAllocated`` condition).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

CLAIMS = "resource.dralloc.dev/claims"
DEVICES = "resource.dralloc.dev/devices"
WAITS = "examples.dralloc.dev/waits"
CONDITION = "resource.dralloc.dev/DevicesAllocated"
SHOWN_DEVICES = 3


@dataclass(frozen=True)
class Report:
    rows: list[tuple[str, str, str, str]]
    waiting: list[str]
    """Pods that should have devices and have none yet."""
    meant_to_wait: list[str]
    """One line per pod that waits as its example means it to: why, and what it was told."""
    untold: list[str]
    """Pods meant to wait that the operator has not told why yet (it explains a pod that
    waits after a short grace, not at once)."""

    @property
    def done(self) -> bool:
        return not self.waiting and not self.untold and len(self.rows) > 0

    def table(self) -> str:
        rows = [("NAMESPACE", "POD", "NODE", "DEVICES"), *self.rows]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = [
            "  ".join(c.ljust(w) for c, w in zip(r[:3], widths, strict=True)) + "  " + r[3]
            for r in rows
        ]
        return "\n".join([*lines, *self.meant_to_wait])


def report(pods: Sequence[Mapping[str, Any]]) -> Report:
    rows: list[tuple[str, str, str, str]] = []
    waiting: list[str] = []
    meant: list[str] = []
    untold: list[str] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        if CLAIMS not in annotations:
            continue
        raw = annotations.get(DEVICES)
        devices = [
            f"{d['request']}={d['pool']}/{d['device']}"
            + (" (admin)" if d.get("adminAccess") else "")
            for entry in (json.loads(raw) if raw else [])
            for d in entry.get("devices", [])
        ]
        if len(devices) > SHOWN_DEVICES:
            devices = [devices[0], f"... {len(devices) - 2} more ...", devices[-1]]
        node = (pod.get("spec") or {}).get("nodeName") or "-"
        ref = f"{meta.get('namespace')}/{meta.get('name')}"
        placed = bool(devices) and node != "-"
        why = annotations.get(WAITS)
        if not placed and why:
            told = _condition_message(pod)
            if not told:
                untold.append(ref)
            told = told or "not told anything yet"
            meant.append(f"{ref} waits, as its example means it to ({why}); dralloc says: {told}")
            shown = "(waits: see below)"
        else:
            if not placed:
                waiting.append(ref)
            shown = ", ".join(devices) or "(waiting)"
        rows.append((str(meta.get("namespace")), str(meta.get("name")), node, shown))
    return Report(rows, waiting, meant, untold)


def _condition_message(pod: Mapping[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == CONDITION:
            return str(condition.get("message") or "")
    return ""


def main(argv: Sequence[str]) -> int:
    found = report(json.load(sys.stdin)["items"])
    if list(argv) == ["wait"]:
        return 0 if found.done else 1
    print(found.table())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
