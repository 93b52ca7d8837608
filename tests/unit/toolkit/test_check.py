"""The invariant checker: a healthy snapshot passes, and each rule catches its own breakage."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators import cli
from operators.toolkit import check
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import RawObject, objects_from_documents
from operators.toolkit.usererrors import ObjectRef

API = "resource.dralloc.dev/v1"
DRIVER = "gpu.example.com"
FINALIZER = "resource.dralloc.dev/delete-protection"
SHARE_A = "0f0f0f0f-0000-4000-8000-00000000000a"
SHARE_B = "0f0f0f0f-0000-4000-8000-00000000000b"


def slice_(
    name: str,
    devices: list[dict[str, Any]] | None = None,
    *,
    pool: str = "node-a",
    generation: int = 1,
    count: int = 1,
    counters: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {"name": pool, "generation": generation, "resourceSliceCount": count},
        "nodeName": pool,
    }
    if devices is not None:
        spec["devices"] = devices
    if counters is not None:
        spec["sharedCounters"] = counters
        del spec["nodeName"]
        spec["allNodes"] = True
    return {"apiVersion": API, "kind": "ResourceSlice", "metadata": {"name": name}, "spec": spec}


def claim(
    name: str,
    devices: list[str | dict[str, Any]] = (),  # type: ignore[assignment]
    *,
    pool: str = "node-a",
    reserved_for: list[tuple[str, str]] = (),  # type: ignore[assignment]
    finalizer: bool = True,
    namespace: str = "team",
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if finalizer:
        body["metadata"]["finalizers"] = [FINALIZER]
    if devices:
        results = []
        for device in devices:
            result = {"request": "gpu", "driver": DRIVER, "pool": pool}
            result.update({"device": device} if isinstance(device, str) else device)
            results.append(result)
        body["status"] = {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [
                {"resource": "pods", "name": pod, "uid": uid} for pod, uid in reserved_for
            ],
        }
    return body


def pod(
    name: str,
    claims: list[dict[str, str]],
    *,
    uid: str | None = None,
    gated: bool = False,
    node: str | None = None,
    statuses: list[dict[str, str | None]] | None = None,
    namespace: str = "team",
) -> dict[str, Any]:
    annotations = {"resource.dralloc.dev/claims": json.dumps(claims)}
    if statuses is not None:
        annotations["resource.dralloc.dev/claim-statuses"] = json.dumps(statuses)
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if gated:
        spec["schedulingGates"] = [{"name": "resource.dralloc.dev/allocation"}]
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "annotations": annotations,
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def snapshot_of(*bodies: dict[str, Any]) -> Snapshot:
    return build_snapshot(
        RawObject(ObjectRef("test", i + 1), body) for i, body in enumerate(bodies)
    )


def healthy() -> list[dict[str, Any]]:
    """Two pods, each with its own GPU, one gated pod waiting for a template claim."""
    return [
        slice_("node-a-gpus", [{"name": "gpu-0"}, {"name": "gpu-1"}]),
        claim("c0", ["gpu-0"], reserved_for=[("p0", "uid-p0")]),
        claim("c1", ["gpu-1"], reserved_for=[("p1", "uid-p1")]),
        pod("p0", [{"name": "gpu", "resourceClaimName": "c0"}], node="node-a"),
        pod("p1", [{"name": "gpu", "resourceClaimName": "c1"}], node="node-a"),
        pod("waiting", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}], gated=True),
    ]


def rules_hit(report: check.CheckReport) -> set[str]:
    return {v.rule for v in report.violations}


def test_healthy_snapshot_has_no_violations_under_every_rule() -> None:
    report = check.check_snapshot(snapshot_of(*healthy()), check.ALL_RULES)
    assert report.ok, report.violations
    assert report.checked[check.DEVICE_ALLOCATED_TWICE] == 2
    assert report.checked[check.RESERVED_FOR_MISSING_POD] == 2
    assert report.checked[check.GATED_POD_CLAIM_MISSING] == 1
    assert report.checked[check.BOUND_POD_CLAIM_NOT_RESERVED] == 2


def test_device_in_two_claims_is_reported_with_both_holders() -> None:
    objects = healthy()
    objects[2] = claim("c1", ["gpu-0"], reserved_for=[("p1", "uid-p1")])
    report = check.check_snapshot(snapshot_of(*objects))
    [violation] = report.violations
    assert violation.rule == check.DEVICE_ALLOCATED_TWICE
    assert violation.subject == f"device {DRIVER}/node-a/gpu-0"
    assert "team/c0" in violation.message and "team/c1" in violation.message


def test_device_twice_in_one_claim_is_reported() -> None:
    objects = [slice_("s", [{"name": "gpu-0"}]), claim("c0", ["gpu-0", "gpu-0"])]
    report = check.check_snapshot(snapshot_of(*objects))
    assert rules_hit(report) == {check.DEVICE_ALLOCATED_TWICE}


def test_admin_access_results_may_share_a_device() -> None:
    objects = [
        slice_("s", [{"name": "gpu-0"}]),
        claim("c0", ["gpu-0"]),
        claim("monitor", [{"device": "gpu-0", "adminAccess": True}]),
    ]
    assert check.check_snapshot(snapshot_of(*objects)).ok


def multi_device(capacity: str = "40Gi") -> dict[str, Any]:
    return {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "capacity": {"memory": {"value": capacity}},
    }


def share(share_id: str, memory: str) -> dict[str, Any]:
    return {"device": "gpu-0", "shareID": share_id, "consumedCapacity": {"memory": memory}}


def test_shares_within_capacity_are_fine() -> None:
    objects = [
        slice_("s", [multi_device()]),
        claim("a", [share(SHARE_A, "20Gi")]),
        claim("b", [share(SHARE_B, "20Gi")]),
    ]
    report = check.check_snapshot(snapshot_of(*objects))
    assert report.ok, report.violations
    assert report.checked[check.CAPACITY_EXCEEDED] == 1


def test_shares_over_capacity_are_reported() -> None:
    objects = [
        slice_("s", [multi_device()]),
        claim("a", [share(SHARE_A, "30Gi")]),
        claim("b", [share(SHARE_B, "20Gi")]),
    ]
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert violation.rule == check.CAPACITY_EXCEEDED
    assert "50Gi" in violation.message and "40Gi" in violation.message


def test_capacity_the_device_does_not_publish_is_reported() -> None:
    objects = [
        slice_("s", [multi_device()]),
        claim("a", [{"device": "gpu-0", "shareID": SHARE_A, "consumedCapacity": {"cores": "1"}}]),
    ]
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert violation.rule == check.CAPACITY_EXCEEDED
    assert f"{DRIVER}/cores" in violation.message


def test_shares_of_a_dedicated_device_and_repeated_share_ids_are_reported() -> None:
    dedicated = [
        slice_("s", [{"name": "gpu-0", "capacity": {"memory": {"value": "40Gi"}}}]),
        claim("a", [share(SHARE_A, "1Gi")]),
    ]
    assert rules_hit(check.check_snapshot(snapshot_of(*dedicated))) == {
        check.DEVICE_ALLOCATED_TWICE
    }
    same_share = [
        slice_("s", [multi_device()]),
        claim("a", [share(SHARE_A, "1Gi")]),
        claim("b", [share(SHARE_A, "1Gi")]),
    ]
    [violation] = check.check_snapshot(snapshot_of(*same_share)).violations
    assert SHARE_A in violation.message


def test_exclusive_and_shared_use_of_one_device_is_reported() -> None:
    objects = [
        slice_("s", [multi_device()]),
        claim("a", ["gpu-0"]),
        claim("b", [share(SHARE_B, "1Gi")]),
    ]
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert "exclusively and shared" in violation.message


def partitioned(allocated: list[str]) -> list[dict[str, Any]]:
    """A pool with 4 memory units shared by three 2-unit partitions."""
    partitions = [
        {
            "name": f"part-{i}",
            "consumesCounters": [{"counterSet": "gpu", "counters": {"memory": {"value": "2"}}}],
        }
        for i in range(3)
    ]
    return [
        slice_("counters", counters=[{"name": "gpu", "counters": {"memory": {"value": "4"}}}],
               count=2),
        slice_("parts", partitions, count=2),
        *(claim(f"c-{name}", [name]) for name in allocated),
    ]  # fmt: skip


def test_counters_within_the_pool_are_fine() -> None:
    report = check.check_snapshot(snapshot_of(*partitioned(["part-0", "part-1"])))
    assert report.ok, report.violations
    assert report.checked[check.COUNTERS_EXCEEDED] == 1


def test_counters_over_the_pool_are_reported() -> None:
    report = check.check_snapshot(snapshot_of(*partitioned(["part-0", "part-1", "part-2"])))
    [violation] = report.violations
    assert violation.rule == check.COUNTERS_EXCEEDED
    assert violation.subject == f"pool {DRIVER}/node-a"
    assert "consume 6" in violation.message and "has 4" in violation.message


def test_only_the_newest_pool_generation_counts() -> None:
    objects = partitioned(["part-0", "part-1"])
    stale = copy.deepcopy(objects[0])
    stale["metadata"]["name"] = "counters-old"
    stale["spec"]["pool"]["generation"] = 0
    stale["spec"]["sharedCounters"][0]["counters"]["memory"]["value"] = "1"
    assert check.check_snapshot(snapshot_of(*objects, stale)).ok


def test_reservation_for_a_missing_pod_is_reported() -> None:
    objects = healthy()
    del objects[4]  # pod p1
    violations = check.check_snapshot(snapshot_of(*objects)).violations
    assert [(v.rule, v.subject) for v in violations] == [
        (check.RESERVED_FOR_MISSING_POD, "ResourceClaim team/c1")
    ]
    assert "does not exist" in violations[0].message


def test_reservation_for_a_recreated_pod_is_reported() -> None:
    objects = healthy()
    objects[4] = pod("p1", [{"name": "gpu", "resourceClaimName": "c1"}], uid="new", node="node-a")
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert violation.rule == check.RESERVED_FOR_MISSING_POD
    assert "uid-p1" in violation.message and "now has uid new" in violation.message


def test_pod_rules_are_skipped_on_a_snapshot_without_pods() -> None:
    objects = [o for o in healthy() if o["kind"] != "Pod"]
    report = check.check_snapshot(snapshot_of(*objects))
    assert report.ok
    assert check.RESERVED_FOR_MISSING_POD in report.skipped
    forced = check.check_snapshot(snapshot_of(*objects), pods_complete=True)
    assert len(forced.by_rule(check.RESERVED_FOR_MISSING_POD)) == 2


def test_allocated_claim_without_finalizer_is_reported() -> None:
    objects = healthy()
    objects[1] = claim("c0", ["gpu-0"], reserved_for=[("p0", "uid-p0")], finalizer=False)
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert violation.rule == check.ALLOCATED_WITHOUT_FINALIZER
    assert FINALIZER in violation.message


def test_in_tree_claims_need_the_in_tree_finalizer() -> None:
    body = claim("c0", ["gpu-0"], finalizer=False)
    body["apiVersion"] = "resource.k8s.io/v1"
    body["metadata"]["finalizers"] = [FINALIZER]  # ours does not protect an in-tree claim
    [violation] = check.check_snapshot(snapshot_of(body)).violations
    assert "resource.kubernetes.io/delete-protection" in violation.message
    body["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    assert check.check_snapshot(snapshot_of(body)).ok


def test_gated_pod_with_a_missing_claim_is_reported() -> None:
    objects = [
        *healthy(),
        pod("named", [{"name": "gpu", "resourceClaimName": "nowhere"}], gated=True),
        pod(
            "generated",
            [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            gated=True,
            statuses=[{"name": "gpu", "resourceClaimName": "generated-gpu-x1"}],
        ),
    ]
    violations = check.check_snapshot(snapshot_of(*objects)).violations
    assert [(v.rule, v.subject) for v in violations] == [
        (check.GATED_POD_CLAIM_MISSING, "Pod team/generated"),
        (check.GATED_POD_CLAIM_MISSING, "Pod team/named"),
    ]
    assert "generated claim generated-gpu-x1" in violations[0].message


def test_bound_pod_rule_is_opt_in_and_catches_unreserved_claims() -> None:
    objects = healthy()
    objects[2] = claim("c1", ["gpu-1"], reserved_for=[])
    assert check.check_snapshot(snapshot_of(*objects)).ok
    report = check.check_snapshot(snapshot_of(*objects), [check.BOUND_POD_CLAIM_NOT_RESERVED])
    [violation] = report.violations
    assert violation.subject == "Pod team/p1"
    assert "not reserved for the pod" in violation.message


def test_unknown_rule_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown rule"):
        check.check_snapshot(snapshot_of(*healthy()), ["no-such-rule"])


def test_render_lists_violations_and_json_is_structured() -> None:
    objects = healthy()
    objects[1] = claim("c0", ["gpu-0"], reserved_for=[("p0", "uid-p0")], finalizer=False)
    report = check.check_snapshot(snapshot_of(*objects))
    table = check.render_report(report)
    assert table.splitlines()[0].startswith("allocated-without-finalizer: ResourceClaim team/c0")
    assert "1 violation(s)" in table
    data = json.loads(check.render_report(report, "json"))
    assert data["ok"] is False
    assert data["violations"][0]["rule"] == check.ALLOCATED_WITHOUT_FINALIZER


def test_cli_check_exit_status(
    write_snapshot: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    good = write_snapshot(healthy(), "good.yaml")
    assert cli.main(["check", "-f", str(good)]) == 0
    assert "no violations" in capsys.readouterr().out
    objects = healthy()
    objects[2] = claim("c1", ["gpu-0"], reserved_for=[("p1", "uid-p1")])
    bad = write_snapshot(objects, "bad.yaml")
    assert cli.main(["check", "-f", str(bad)]) == 1
    assert check.DEVICE_ALLOCATED_TWICE in capsys.readouterr().out
    assert cli.main(["check", "-f", str(bad), "--rule", "allocated-without-finalizer"]) == 0


def test_tolerant_snapshot_leaves_out_only_what_does_not_parse() -> None:
    broken = pod("typo", [{"name": "gpu"}])  # neither resourceClaimName nor template
    objects = [*healthy(), broken]
    snapshot, unreadable = check.tolerant_snapshot(objects_from_documents("test", objects))
    assert "team/typo" not in snapshot.pods and "team/p0" in snapshot.pods
    [problem] = unreadable
    assert "Pod team/typo" in problem and "resourceClaimName" in problem
    report = check.check_snapshot(snapshot, unreadable=unreadable)
    assert report.ok and report.unreadable == unreadable
    assert "left out (does not parse)" in check.render_report(report)


def devices(*entries: tuple[str, str, list[str]]) -> str:
    """A devices annotation: (entry name, claim name, device names on node-a)."""
    return json.dumps(
        [
            {
                "name": entry,
                "resourceClaimName": claim_name,
                "devices": [
                    {"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": d}
                    for d in names
                ],
            }
            for entry, claim_name, names in entries
        ]
    )


def with_devices(body: dict[str, Any], annotation: str) -> dict[str, Any]:
    body["metadata"]["annotations"]["resource.dralloc.dev/devices"] = annotation
    return body


def test_a_devices_annotation_that_agrees_with_the_claims_passes() -> None:
    objects = healthy()
    with_devices(objects[3], devices(("gpu", "c0", ["gpu-0"])))
    report = check.check_snapshot(snapshot_of(*objects))
    assert report.ok, report.violations
    assert report.checked[check.DEVICES_ANNOTATION_MISMATCH] == 1


def test_devices_annotations_that_disagree_with_the_claims_are_reported_by_pod() -> None:
    victim_claim = claim("victim-gpu-x1", ["gpu-1"], reserved_for=[("victim", "uid-victim")])
    victim_claim["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "victim", "uid": "uid-victim",
         "controller": True},
    ]  # fmt: skip
    objects = [
        slice_("node-a-gpus", [{"name": f"gpu-{i}"} for i in range(4)]),
        claim("c0", ["gpu-0"], reserved_for=[("p0", "uid-p0")]),
        claim("free", []),
        victim_claim,
        # devices of another GPU than its claim's
        with_devices(
            pod("p0", [{"name": "gpu", "resourceClaimName": "c0"}], node="node-a"),
            devices(("gpu", "c0", ["gpu-3"])),
        ),
        # forged on a pod whose claim was never allocated
        with_devices(
            pod("forger", [{"name": "gpu", "resourceClaimName": "free"}], node="node-a"),
            devices(("gpu", "free", ["gpu-2"])),
        ),
        # another pod's generated claim recorded in the claim statuses (the hijack)
        with_devices(
            pod(
                "hijacker",
                [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                node="node-a",
                statuses=[{"name": "gpu", "resourceClaimName": "victim-gpu-x1"}],
            ),
            devices(("gpu", "victim-gpu-x1", ["gpu-1"])),
        ),
        # an entry the pod does not have
        with_devices(pod("extra", [], node="node-a"), devices(("gpu", "c0", ["gpu-0"]))),
        with_devices(pod("garbled", [], node="node-a"), "{not json"),
    ]
    violations = check.check_snapshot(snapshot_of(*objects)).by_rule(
        check.DEVICES_ANNOTATION_MISMATCH
    )
    assert [(v.subject, v.message) for v in violations] == [
        (
            "Pod team/extra",
            "the annotation lists claim entry gpu, which the pod does not have",
        ),
        ("Pod team/forger", "claim entry gpu: the annotation lists devices, but claim free "
         "is not allocated"),
        ("Pod team/garbled", "annotation resource.dralloc.dev/devices is not valid: is not "
         "valid JSON: Expecting property name enclosed in double quotes at character 1"),
        ("Pod team/hijacker", "claim entry gpu: the annotation lists devices, but claim "
         "victim-gpu-x1 was not generated for this pod (another pod owns it)"),
        ("Pod team/p0", "claim entry gpu: the annotation lists gpu.example.com/node-a/gpu-3, "
         "claim c0 has gpu.example.com/node-a/gpu-0"),
    ]  # fmt: skip


def test_a_missing_entry_for_an_allocated_claim_is_reported() -> None:
    objects = [
        slice_("node-a-gpus", [{"name": "gpu-0"}, {"name": "gpu-1"}]),
        claim("a", ["gpu-0"], reserved_for=[("p", "uid-p")]),
        claim("b", ["gpu-1"], reserved_for=[("p", "uid-p")]),
        with_devices(
            pod(
                "p",
                [
                    {"name": "one", "resourceClaimName": "a"},
                    {"name": "two", "resourceClaimName": "b"},
                ],
                node="node-a",
            ),
            devices(("one", "a", ["gpu-0"])),
        ),
    ]
    [violation] = check.check_snapshot(snapshot_of(*objects)).violations
    assert violation.message == (
        "claim entry two: claim b is allocated for the pod, but the annotation does not list it"
    )


def class_with(*expressions: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.dralloc.dev/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpus"},
        "spec": {"selectors": [{"cel": {"expression": e}} for e in expressions]},
    }


def test_new_objects_with_selectors_the_api_server_refuses_are_reported() -> None:
    costly = 'semver("1.0.0") != semver("2.0.0")'
    snapshot = snapshot_of(class_with('device.driver == "gpu"', costly, "device.driver =="))
    report = check.check_snapshot(snapshot, [check.INVALID_SELECTOR])
    assert [(v.subject, v.message.split(": ")[0:2]) for v in report.violations] == [
        ("DeviceClass gpus", ["spec.selectors[1].cel.expression", "Forbidden"]),
        ("DeviceClass gpus", ["spec.selectors[2].cel.expression", "Invalid value"]),
    ]
    # Stored objects, as the allocator compiles them: the cost is not checked again, and a
    # field hidden by a gate is declared.
    stored = check.SelectorMode(stored=True, consumable_capacity=False)
    hidden = snapshot_of(class_with(costly, "device.allowMultipleAllocations"))
    assert check.check_snapshot(hidden, [check.INVALID_SELECTOR], selectors=stored).ok
    new = check.SelectorMode(consumable_capacity=False)
    (violation,) = check.check_snapshot(hidden, [check.INVALID_SELECTOR], selectors=new).violations[
        1:
    ]
    assert "undefined field 'allowMultipleAllocations'" in violation.message


def test_check_of_files_refuses_what_admission_refuses(tmp_path: Path) -> None:
    manifest = tmp_path / "class.yaml"
    manifest.write_text(json.dumps(class_with("device.allowMultipleAllocations")))
    assert cli.main(["check", "-f", str(manifest)]) == 0
    gated = ["--feature-gates", "DRAConsumableCapacity=false"]
    assert cli.main(["check", "-f", str(manifest), *gated]) == 1
