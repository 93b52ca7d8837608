"""Priority preemption on the in-tree fixture (fixtures/intree-cluster.yaml): node-a's trainer
(priority 0) holds gpu-0..2, node-b's four GPUs are held by four pods of priority 500 here,
node-c is tainted. A pod of priority 1000 that needs a NUMA pair fits nowhere until someone
goes: the trainer (one victim of priority 0) is cheaper than two of node-b's."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from operators.toolkit.explain import explain
from operators.toolkit.render import simulation
from operators.toolkit.simulate import simulate
from operators.toolkit.snapshot import Snapshot, build_snapshot
from operators.toolkit.sources import read_objects

from .conftest import find, load_items


def holder(name: str, node: str, device: str, priority: int, **labels: str) -> list[dict[str, Any]]:
    """A running pod of ``priority`` on ``node`` and its claim, allocated ``device``."""
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"{name}-gpu", "namespace": "team-a", "uid": f"uid-claim-{name}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": "gpu.example.com", "pool": node,
                         "device": device}
                    ]
                },
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
            },
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-pod-{name}"}],
        },
    }  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-pod-{name}",
                     "labels": labels},
        "spec": {"nodeName": node, "priority": priority,
                 "containers": [{"name": "main", "image": "pause"}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]},
        "status": {"phase": "Running", "startTime": "2026-12-01T00:00:00Z"},
    }  # fmt: skip
    return [claim, pod]


def vip(priority: int = 1000, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vip", "namespace": "team-a", "uid": "uid-pod-vip"},
        "spec": {"priority": priority, "containers": [{"name": "main", "image": "pause"}],
                 "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "numa-pair"}],
                 **spec},
        "status": {"phase": "Pending"},
    }  # fmt: skip


@pytest.fixture
def full(write_snapshot: Callable[..., Path]) -> Callable[..., Snapshot]:
    def make(
        pod: dict[str, Any],
        *extra: dict[str, Any],
        trainer: int = 0,
        others: int = 500,
        node_a_cpu: str = "",
        shared_trainer_claim: bool = False,
        trainer_deleting: bool = False,
        trainer_unpinned: bool = False,
    ) -> Snapshot:
        items = [i for i in load_items() if i["metadata"]["name"] != "west-pair"]
        if trainer_deleting:
            find(items, "Pod", "trainer")["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
        if trainer_unpinned:  # devices reachable from every node: no node selector
            del find(items, "ResourceClaim", "trainer-gpus")["status"]["allocation"]["nodeSelector"]
        if shared_trainer_claim:
            reserved = find(items, "ResourceClaim", "trainer-gpus")["status"]["reservedFor"]
            reserved.append({"resource": "pods", "name": "keeper", "uid": "uid-pod-keeper"})
        if node_a_cpu:
            node_a = find(items, "Node", "node-a")
            node_a["status"] = {"allocatable": {"cpu": node_a_cpu, "pods": "110"}}
        find(items, "Pod", "trainer")["spec"]["priority"] = trainer
        find(items, "Pod", "trainer")["metadata"]["labels"] = {"app": "trainer"}
        for i in range(4):
            items += holder(f"b{i}", "node-b", f"gpu-{i}", others)
        return build_snapshot(read_objects([write_snapshot([*items, pod, *extra])]))

    return make


def test_explain_names_the_cheapest_victims(full: Callable[..., Snapshot]) -> None:
    result = explain(full(vip()), "pod/vip", "team-a")
    assert result.status == "pending"
    assert "would preempt team-a/trainer (priority 0) on node node-a" in result.preemption


def test_simulate_preempts_with_the_setting_and_only_tells_without_it(
    full: Callable[..., Snapshot],
) -> None:
    snapshot = full(vip())
    told = simulate(snapshot, [])
    [waiting] = [p for p in told.pending if p.pod == "team-a/vip"]
    assert "Preemption (off) would preempt team-a/trainer on node node-a" in waiting.reason
    assert not told.preemptions
    done = simulate(snapshot, [], preemption=True)
    [preemption] = done.preemptions
    assert (preemption.pod, preemption.node, preemption.victims) == (
        "team-a/vip",
        "node-a",
        ("team-a/trainer",),
    )
    [placed] = [p for p in done.placed if p.pod == "team-a/vip"]
    assert placed.node == "node-a"
    assert {d.device.rsplit("/", 1)[1] for d in placed.devices} <= {"gpu-0", "gpu-1", "gpu-2"}
    # The trainer comes back (its controller makes it again) and waits: nothing is free.
    [again] = [p for p in done.pending if p.origin == "preempted"]
    assert again.pod == "team-a/trainer-new"
    assert "PREEMPTED" in simulation(done) and "1 preempted" in simulation(done)


def test_equal_priority_waits_and_says_what_it_would_take(full: Callable[..., Snapshot]) -> None:
    result = explain(full(vip(priority=0)), "pod/vip", "team-a")
    assert "it would need to preempt 1 pod(s) of priority 0 or more" in result.preemption
    # Where nobody uses priorities, nothing is said about them.
    report = simulate(full(vip(priority=0), others=0), [], preemption=True)
    assert not report.preemptions
    [waiting] = [p for p in report.pending if p.pod == "team-a/vip"]
    assert "preempt" not in waiting.reason
    assert not explain(full(vip(priority=0), others=0), "pod/vip", "team-a").preemption
    equal = simulate(full(vip(priority=500), trainer=500), [], preemption=True)
    assert not equal.preemptions
    [waiting] = [p for p in equal.pending if p.pod == "team-a/vip"]
    assert "it would need to preempt 1 pod(s) of priority 500 or more" in waiting.reason


def test_a_pod_with_preemption_policy_never_waits(full: Callable[..., Snapshot]) -> None:
    snapshot = full(vip(preemptionPolicy="Never"))
    assert not simulate(snapshot, [], preemption=True).preemptions
    assert "preemptionPolicy is Never" in explain(snapshot, "pod/vip", "team-a").preemption


def test_a_victim_a_budget_protects_is_passed_over_for_another_node(
    full: Callable[..., Snapshot],
) -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "trainer", "namespace": "team-a", "generation": 1},
        "spec": {"selector": {"matchLabels": {"app": "trainer"}}},
        "status": {"disruptionsAllowed": 0, "observedGeneration": 1},
    }
    report = simulate(full(vip(), budget), [], preemption=True)
    preemption = report.preemptions[0]
    assert preemption.pod == "team-a/vip"
    assert preemption.node == "node-b" and len(preemption.victims) == 2
    assert preemption.budget_violations == 0
    # The two come back at priority 500: one fits node-a's free GPU, the other has only the
    # trainer to preempt, and does so against its budget (no node needs fewer).
    later = report.preemptions[1:]
    assert [p.victims for p in later] == [("team-a/trainer",)]
    assert later[0].budget_violations == 1


def test_the_victims_free_the_nodes_cpu_too(full: Callable[..., Snapshot]) -> None:
    """node-a has 4 cpus, all requested by a priority-0 pod holding gpu-3: the trainer's GPUs
    alone make a NUMA pair but no cpu for a pod that also wants one; both go (the two of
    node-b would be a priority of 500)."""
    hog = holder("hog", "node-a", "gpu-3", 0)
    hog[1]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "4"}}
    wants_cpu = vip()
    wants_cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    report = simulate(full(wants_cpu, *hog, node_a_cpu="4"), [], preemption=True)
    first = report.preemptions[0]
    assert first.node == "node-a"
    assert sorted(first.victims) == ["team-a/hog", "team-a/trainer"]


def test_a_claim_shared_with_a_pod_that_stays_is_not_freed(
    full: Callable[..., Snapshot],
) -> None:
    """The trainer's claim is reserved for a priority-2000 pod as well: preempting the trainer
    would free nothing, so the two of node-b go instead."""
    keeper = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "keeper", "namespace": "team-a", "uid": "uid-pod-keeper"},
        "spec": {"nodeName": "node-a", "priority": 2000,
                 "containers": [{"name": "main", "image": "pause"}],
                 "resourceClaims": [{"name": "gpus", "resourceClaimName": "trainer-gpus"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip
    report = simulate(full(vip(), keeper, shared_trainer_claim=True), [], preemption=True)
    first = report.preemptions[0]
    assert first.node == "node-b" and len(first.victims) == 2


def test_a_claim_the_preemptor_uses_itself_is_not_freed(full: Callable[..., Snapshot]) -> None:
    """vip shares the trainer's claim and wants a NUMA pair besides: preempting the trainer
    would free nothing vip does not hold already (it would need 5 of node-a's 4 GPUs)."""
    shares = vip()
    shares["spec"]["resourceClaims"].append({"name": "shared", "resourceClaimName": "trainer-gpus"})
    result = explain(full(shares), "pod/vip", "team-a")
    assert "team-a/trainer" not in result.preemption, result.preemption


def test_explain_says_a_preemption_the_operator_made_is_under_way(
    full: Callable[..., Snapshot],
) -> None:
    waiting = vip()
    waiting["status"]["conditions"] = [
        {
            "type": "resource.dralloc.dev/DevicesAllocated",
            "status": "False",
            "reason": "Preempting",
            "message": "preempting 1 lower-priority pod(s) on node node-a: team-a/trainer",
        }
    ]
    result = explain(full(waiting), "pod/vip", "team-a")
    assert result.preemption.startswith("preemption: under way: preempting 1")


def test_a_budget_with_an_empty_selector_protects_nobody_from_preemption(
    full: Callable[..., Snapshot],
) -> None:
    """As upstream's preemption reads it (the Eviction API would read it as every pod)."""
    everyone = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "all", "namespace": "team-a", "generation": 1},
        "spec": {"selector": {}},
        "status": {"disruptionsAllowed": 0, "observedGeneration": 1},
    }
    first = simulate(full(vip(), everyone), [], preemption=True).preemptions[0]
    assert (first.node, first.victims, first.budget_violations) == (
        "node-a",
        ("team-a/trainer",),
        0,
    )


def test_pending_pods_settle_the_higher_priority_first(
    full: Callable[..., Snapshot],
) -> None:
    """Two pending pods want node-a's one free GPU: the one of priority 1000 gets it, though
    the other sorts first by name."""
    first = vip(priority=0)
    first["metadata"].update(name="aaa", uid="uid-pod-aaa")
    first["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    second = vip(priority=1000)
    second["metadata"].update(name="zzz", uid="uid-pod-zzz")
    second["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    report = simulate(full(first, second), [])
    assert [p.pod for p in report.placed] == ["team-a/zzz"]


def test_a_pod_being_deleted_is_nobodys_victim_and_what_it_frees_is_waited_for(
    full: Callable[..., Snapshot],
) -> None:
    """The trainer is on its way out already: it is not chosen (again), nor are two of
    node-b's: the pod waits for the trainer's GPUs, as the operator does."""
    snapshot = full(vip(), trainer_deleting=True)
    result = explain(snapshot, "pod/vip", "team-a")
    assert result.preemption.startswith(
        "preemption: none needed: pods on their way out on node node-a free what it needs"
    ), result.preemption
    assert "team-a/b" not in result.preemption and "trainer" not in result.preemption
    report = simulate(snapshot, [], preemption=True)
    assert not report.preemptions, report.preemptions
    [pending] = [p for p in report.pending if p.pod == "team-a/vip"]
    assert "Pods on their way out on node node-a free what it needs" in pending.reason


def test_what_a_leaving_pod_frees_without_a_node_selector_counts_on_every_node(
    full: Callable[..., Snapshot],
) -> None:
    snapshot = full(vip(), trainer_deleting=True, trainer_unpinned=True)
    result = explain(snapshot, "pod/vip", "team-a")
    assert result.preemption.startswith("preemption: none needed: pods on their way out"), (
        result.preemption
    )
