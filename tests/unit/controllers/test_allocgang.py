"""allocgang.member_changed: which pod events make a gang's other members decide again."""

from __future__ import annotations

from typing import Any

from operators.api.annotations import GANG_ANNOTATION, GANG_SIZE_ANNOTATION
from operators.cache.core import SCHEDULING_GATE, Pod, parse_pod
from operators.controllers.allocgang import member_changed


def member(gated: bool, phase: str = "Pending", gang: str = "train", **meta: Any) -> Pod:
    raw: dict[str, Any] = {
        "metadata": {
            "namespace": "ns",
            "name": "w0",
            "uid": "uid-w0",
            "resourceVersion": "1",
            "annotations": {GANG_ANNOTATION: gang, GANG_SIZE_ANNOTATION: "2"},
            **meta,
        },
        "spec": {"schedulingGates": [{"name": SCHEDULING_GATE}] if gated else []},
        "status": {"phase": phase},
    }
    return parse_pod(raw)


def test_a_released_member_that_runs_on_does_not_wake_its_gang() -> None:
    # Each status update of a running member used to requeue every other member: a gang of
    # N pods cost N queue entries (and, for members still waiting, a gang search) per event.
    assert not member_changed(member(False, "Pending"), member(False, "Running"))


def test_leaving_or_being_released_wakes_the_gang() -> None:
    assert member_changed(member(True), member(False))  # released
    assert member_changed(member(True), None)  # deleted
    assert member_changed(member(False, "Running"), None)
    assert member_changed(member(True), member(True, gang="other"))  # moved
    assert member_changed(member(False, "Running"), member(False, "Succeeded"))  # finished
    assert not member_changed(member(True), member(True))  # a gated member's own update
