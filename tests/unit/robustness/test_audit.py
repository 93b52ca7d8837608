"""A violation is printed with the writes that led to it, read from the API server's audit
log: only completed writes to the objects it names, in the order they were answered."""

from __future__ import annotations

import json
from pathlib import Path

from robustness.audit import TRAIL_LIMIT, audit_logs, trails, writes
from robustness.checker import DEVICE_HELD_TWICE, POD_BOUND_WITHOUT_DEVICES, check
from robustness.run import involved
from tests.unit.robustness.test_checker import NS, claim, dev, history, pod


def entry(
    name: str,
    at: str,
    *,
    user: str = "system:kube-scheduler",
    verb: str = "update",
    resource: str = "resourceclaims",
    subresource: str = "status",
    stage: str = "ResponseComplete",
    code: int = 200,
) -> str:
    return json.dumps(
        {
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": {
                "resource": resource,
                "subresource": subresource,
                "namespace": NS,
                "name": name,
            },
            "responseStatus": {"code": code},
            "stageTimestamp": at,
        }
    )


def test_only_completed_writes_to_the_named_objects_in_the_order_answered(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "audit-2026-12-06T10-00-00.000.log").write_text(
        entry("c", "2026-12-06T10:00:01.000001Z", user="dralloc") + "\n"
    )
    (logs / "audit.log").write_text(
        "\n".join(
            [
                entry("c", "2026-12-06T10:00:03.000000Z", code=409),
                entry("other", "2026-12-06T10:00:02.000000Z"),
                entry("c", "2026-12-06T10:00:02.500000Z", stage="ResponseStarted"),
                entry("p", "2026-12-06T10:00:02.000000Z", resource="pods", subresource="binding"),
                '{"cut by a restart',
            ]
        )
    )
    found = writes(audit_logs(tmp_path), {(NS, "c"), (NS, "p")})
    assert [(w.name, w.user, w.resource, w.code) for w in found] == [
        ("c", "dralloc", "resourceclaims/status", 200),
        ("p", "system:kube-scheduler", "pods/binding", 200),
        ("c", "system:kube-scheduler", "resourceclaims/status", 409),
    ]
    assert str(found[0]) == ("10:00:01.000001 dralloc update resourceclaims/status ns/c -> 200")


def test_a_long_trail_keeps_its_last_writes_and_says_how_many_it_left_out(tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "audit.log").write_text(
        "\n".join(entry("c", f"2026-12-06T10:00:{s:02d}.000000Z") for s in range(TRAIL_LIMIT + 3))
    )
    found = trails(tmp_path, {"v1": {(NS, "c")}, "v2": {(NS, "other")}, "v3": set()})
    lines = found["v1"]
    assert lines[0] == "(3 earlier writes left out)"
    assert len(lines) == TRAIL_LIMIT + 1
    assert f":{TRAIL_LIMIT + 2:02d}." in lines[-1]
    assert found["v2"] == [] and found["v3"] == []
    assert trails(None, {"v1": {(NS, "c")}}) == {"v1": []} and trails(tmp_path, {}) == {}


def test_a_violation_names_the_pod_and_its_claims_or_the_device_holders() -> None:
    recorded = history(
        claim("a", 0, reserved=["p"]),
        claim("b", 0, reserved=["q"]),
        claim("unrelated", 1),
        pod("p", "a", node="n1"),
        claim("a"),
    )
    report = check(recorded)
    (double,) = [v for v in report.violations if v.rule == DEVICE_HELD_TWICE]
    assert double.subject == str(dev(0))
    assert involved(recorded, double) == {(NS, "a"), (NS, "b")}
    (unbacked,) = [v for v in report.violations if v.rule == POD_BOUND_WITHOUT_DEVICES]
    assert involved(recorded, unbacked) == {(NS, "p"), (NS, "a")}
