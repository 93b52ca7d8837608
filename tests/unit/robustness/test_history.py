"""Objects as the API server sends them, in both modes, reduced to the checker's facts."""

from __future__ import annotations

import json

from robustness.history import DeviceId, claim_facts, pod_facts, pod_group_facts, quota_facts


def test_a_claims_results_say_how_each_device_is_held_and_through_which_class() -> None:
    obj = {
        "metadata": {
            "namespace": "ns", "name": "c", "uid": "u1", "resourceVersion": "7",
            "ownerReferences": [{"kind": "Pod", "uid": "pod-uid", "controller": True}],
        },
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpus"}},
            {"name": "any", "firstAvailable": [{"name": "big", "deviceClassName": "big-gpus"}]},
        ]}},
        "status": {
            "allocation": {"devices": {"results": [
                {"request": "gpu", "driver": "d", "pool": "p", "device": "dev-0"},
                {"request": "any/big", "driver": "d", "pool": "p", "device": "dev-1", "shareID": "s"},
                {"request": "gpu", "driver": "d", "pool": "p", "device": "dev-2", "adminAccess": True},
            ]}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
        },
    }  # fmt: skip
    facts = claim_facts(obj)
    assert facts.allocated and facts.owner_pod == "pod-uid"
    assert facts.reserved_for == {"pod-uid"}
    assert [(h.device, h.access, h.device_class) for h in facts.devices] == [
        (DeviceId("d", "p", "dev-0"), "exclusive", "gpus"),
        (DeviceId("d", "p", "dev-1"), "share", "big-gpus"),
        (DeviceId("d", "p", "dev-2"), "admin", "gpus"),
    ]


def test_an_unallocated_claim_holds_nothing() -> None:
    facts = claim_facts({"metadata": {"namespace": "ns", "name": "c"}, "status": {}})
    assert not facts.allocated and facts.devices == () and facts.reserved_for == frozenset()


def test_an_in_tree_pods_claims_and_statuses_come_from_its_spec_and_status() -> None:
    obj = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
        "spec": {"nodeName": "n", "resourceClaims": [
            {"name": "a", "resourceClaimName": "shared"},
            {"name": "b", "resourceClaimTemplateName": "t"},
        ]},
        "status": {
            "phase": "Running",
            "resourceClaimStatuses": [{"name": "b", "resourceClaimName": "p-b-x"}],
            "extendedResourceClaimStatus": {"resourceClaimName": "p-extended-resources-y"},
        },
    }  # fmt: skip
    facts = pod_facts(obj)
    assert facts.bound and facts.has_claims and not facts.gated
    assert facts.claim_names() == (("shared", "p-b-x", "p-extended-resources-y"), ())


def test_a_crd_mode_pods_claims_and_statuses_come_from_its_annotations() -> None:
    claims = [
        {"name": "b", "resourceClaimTemplateName": "t"},
        {"name": "c", "resourceClaimTemplateName": "t"},
    ]
    statuses = [{"name": "b", "resourceClaimName": "p-b"}]
    obj = {
        "metadata": {"namespace": "ns", "name": "p", "uid": "u", "annotations": {
            "resource.dralloc.dev/claims": json.dumps(claims),
            "resource.dralloc.dev/claim-statuses": json.dumps(statuses),
            "resource.dralloc.dev/gang": "g",
            "resource.dralloc.dev/gang-size": "3",
        }},
        "spec": {"schedulingGates": [{"name": "resource.dralloc.dev/allocation"}]},
        "status": {"conditions": [{
            "type": "resource.dralloc.dev/DevicesAllocated", "status": "False", "message": "no fit",
        }]},
    }  # fmt: skip
    facts = pod_facts(obj)
    assert not facts.bound and facts.explained and facts.gated
    assert (facts.gang, facts.gang_size) == ("g", 3)
    assert facts.claim_names() == (("p-b",), ("c",))


def test_a_forged_annotation_reads_as_no_claims_not_as_an_error() -> None:
    obj = {"metadata": {"name": "p", "annotations": {
        "resource.dralloc.dev/claims": "{not json", "resource.dralloc.dev/gang-size": "x",
    }}}  # fmt: skip
    facts = pod_facts(obj)
    assert not facts.has_claims and facts.gang_size == 0


def test_a_quota_names_its_class_and_limits() -> None:
    facts = quota_facts(
        {"metadata": {"namespace": "ns", "name": "q"},
         "spec": {"deviceClassName": "gpus", "hard": {"devices": 2}}}
    )  # fmt: skip
    assert (facts.device_class, facts.hard_devices, facts.hard_claims, facts.selectors) == (
        "gpus", 2, None, False,
    )  # fmt: skip


def test_a_scheduling_gate_is_no_explanation_of_a_wait() -> None:
    gated = {"metadata": {"name": "p"}, "status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
        "message": "Scheduling is blocked due to non-empty scheduling gates",
    }]}}  # fmt: skip
    assert not pod_facts(gated).explained
    refused = {"metadata": {"name": "p"}, "status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": "0/3 nodes are available",
    }]}}  # fmt: skip
    facts = pod_facts(refused)
    assert facts.explained and facts.why == "PodScheduled Unschedulable: 0/3 nodes are available"


def test_a_claims_node_comes_from_its_allocations_node_selector() -> None:
    selector = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["node-3"]},
    ]}]}  # fmt: skip
    obj = {"metadata": {"name": "c"}, "status": {"allocation": {"nodeSelector": selector}}}
    assert claim_facts(obj).nodes == {"node-3"}


def test_a_pod_of_a_pod_group_is_in_its_gang_and_the_group_gives_the_size() -> None:
    member = pod_facts(
        {
            "metadata": {"namespace": "ns", "name": "p", "uid": "u"},
            "spec": {"schedulingGroup": {"podGroupName": "train"}, "resourceClaims": []},
        }
    )
    assert (member.gang, member.gang_size) == ("podgroup:train", 0)
    group = {"metadata": {"namespace": "ns", "name": "train"}}
    gang = pod_group_facts({**group, "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})
    assert (gang.key, gang.min_count) == ("ns/train", 3)
    basic = pod_group_facts({**group, "spec": {"schedulingPolicy": {"basic": {}}}})
    assert basic.min_count is None


def test_a_victim_is_one_dralloc_marked_with_upstreams_preemption_reason() -> None:
    def marked(reason: str, message: str, status: str = "True") -> dict[str, object]:
        condition = {"type": "DisruptionTarget", "status": status, "reason": reason}
        return {
            "metadata": {"namespace": "ns", "name": "v", "uid": "u"},
            "spec": {"priority": 5, "preemptionPolicy": "Never"},
            "status": {"conditions": [condition | {"message": message}]},
        }

    ours = "dralloc: preempting to accommodate a higher priority pod"
    facts = pod_facts(marked("PreemptionByScheduler", ours))
    assert facts.preempted and facts.priority == 5 and not facts.preempts
    assert not pod_facts(marked("PreemptionByScheduler", "default-scheduler: ...")).preempted
    assert not pod_facts(marked("DeletionByTaintManager", ours)).preempted
    assert not pod_facts(marked("PreemptionByScheduler", ours, status="False")).preempted
    plain = pod_facts({"metadata": {"name": "p"}, "spec": {}, "status": {}})
    assert plain.priority == 0 and plain.preempts and not plain.preempted


def test_drallocs_word_on_a_pod_the_scheduler_does_not_bind_explains_it() -> None:
    def with_condition(status: str, reason: str) -> dict[str, object]:
        return {"metadata": {"name": "p"}, "status": {"conditions": [{
            "type": "resource.dralloc.dev/DevicesAllocated", "status": status,
            "reason": reason, "message": "its ResourceClaim c is being deleted",
        }]}}  # fmt: skip

    assert pod_facts(with_condition("True", "SchedulerRefused")).explained
    assert not pod_facts(with_condition("True", "Allocated")).explained
