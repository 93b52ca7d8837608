"""The recorder's relist after a 410: what changed in the gap becomes relisted events, what
vanished a deletion at the list's revision, and the gap is recorded."""

from __future__ import annotations

from typing import Any

from operators.kube import RESOURCE_CLAIMS
from robustness.history import Gap
from robustness.recorder import Recorder


def claim(name: str, rv: int, namespace: str = "run-a") -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "resourceVersion": str(rv)}}


class ListingClient:
    def __init__(self, items: list[dict[str, Any]], rv: str) -> None:
        self.items, self.rv = items, rv

    async def list(self, resource: Any) -> tuple[list[dict[str, Any]], str]:
        return self.items, self.rv


async def test_a_relist_records_what_changed_and_vanished_in_the_gap_and_the_gap() -> None:
    client = ListingClient(
        [claim("same", 5), claim("changed", 9), claim("new", 11), claim("theirs", 12, "other")],
        "20",
    )
    recorder = Recorder(client, {"claim": RESOURCE_CLAIMS}, keep=lambda ns: ns.startswith("run-"))  # type: ignore[arg-type]
    recorder.last_rv["claim"] = 7
    known = {"run-a/same": 5, "run-a/changed": 6, "run-a/gone": 7}
    rv = await recorder._relist("claim", RESOURCE_CLAIMS, known)
    assert rv == "20"
    assert [(e.type, e.key, e.rv, e.relisted) for e in recorder.events] == [
        ("MODIFIED", "run-a/changed", 9, True),
        ("ADDED", "run-a/new", 11, True),
        ("DELETED", "run-a/gone", 20, True),
    ]
    assert recorder.gaps == [Gap("claim", 7, 20)]
    assert known == {"run-a/same": 5, "run-a/changed": 9, "run-a/new": 11}
    assert recorder.last_rv["claim"] == 20 and recorder.relists == 1
