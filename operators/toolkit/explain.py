"""``dralloc explain``: why a pod or claim is (not) allocated, node by node, request by request.

Nothing is changed: the snapshot is settled like the operator would (other pending pods do
not count as holding devices; only allocated claims do), and the subject is evaluated on
every node. The per-node reasons come from the allocator.
"""

from __future__ import annotations

from dataclasses import dataclass

from operators.allocator.features import Features
from operators.api.annotations import GANG_SIZE_MAX
from operators.api.extendedresources import backing_classes, class_mapping
from operators.api.podgroup import gang_too_large
from operators.api.podprotocol import PROTOCOLS
from operators.cache.core import DEVICES_ALLOCATED_CONDITION, Pod
from operators.toolkit.cluster import Cluster, DeviceLine, NodeVerdict
from operators.toolkit.gangs import gang_key, place_gang
from operators.toolkit.pods import made_up
from operators.toolkit.preempt import in_play, preemption_for
from operators.toolkit.snapshot import Snapshot
from operators.toolkit.usererrors import ToolkitError

POD_KINDS = ("pod", "pods", "po")
CLAIM_KINDS = ("resourceclaim", "resourceclaims")


@dataclass(frozen=True)
class Explanation:
    subject: str
    status: str
    """``allocated`` or ``pending``."""
    summary: str
    claims: tuple[str, ...]
    node: str | None
    devices: tuple[DeviceLine, ...]
    nodes: tuple[NodeVerdict, ...]
    gang: str = ""
    """For a gang member: what the gang as a whole gets (the joint search's answer)."""
    preemption: str = ""
    """For a pod that fits nowhere: which lower-priority pods it would preempt, or why none
    ('' when the question does not arise)."""


def parse_subject(text: str) -> tuple[str, str]:
    """``pod/NAME`` or ``resourceclaim/NAME`` -> (kind, name)."""
    kind, sep, name = text.partition("/")
    kind = kind.lower()
    if not sep or not name:
        raise ToolkitError(f"{text!r}: expected pod/NAME or resourceclaim/NAME")
    if kind in POD_KINDS:
        return "pod", name
    if kind in CLAIM_KINDS:
        return "resourceclaim", name
    raise ToolkitError(f"{text!r}: can explain pod/NAME or resourceclaim/NAME, not {kind}")


def explain(
    snapshot: Snapshot,
    subject: str,
    namespace: str,
    *,
    features: Features | None = None,
    policy: str = "binpack",
    max_gang_size: int = GANG_SIZE_MAX,
) -> Explanation:
    """``max_gang_size``: the operator's setting; a member of a larger gang is refused, as
    the operator refuses it."""
    kind, name = parse_subject(subject)
    cluster = Cluster(snapshot, features, policy, max_gang_size=max_gang_size)
    key = f"{namespace}/{name}"
    if kind == "pod":
        pod = snapshot.pods.get(key)
        if pod is None:
            raise ToolkitError(f"Pod {key} is not in the snapshot")
        extended = _extended_resources(snapshot, pod)
        if not pod.claims and extended:
            raise ToolkitError(_extended_reason(key, snapshot, extended))
        if not pod.claims and not pod.protocol.claims_in_spec:
            raise ToolkitError(
                f"Pod {key} asks for no claims (resource.dralloc.dev/claims is an empty list): "
                "it is not gated, and kube-scheduler places it like any other pod"
            )
        if not pod.claims:
            raise ToolkitError(f"Pod {key} uses no claims (no resource.dralloc.dev/claims)")
        return _explain_pod(cluster, pod, f"pod/{key}")
    if key not in snapshot.claims:
        raise ToolkitError(f"ResourceClaim {key} is not in the snapshot")
    if key in cluster.allocations:
        devices = tuple(
            DeviceLine(key, str(r.get("request")), f"{r['driver']}/{r['pool']}/{r['device']}")
            for r in (cluster.allocations[key].get("devices") or {}).get("results") or []
        )
        users = ", ".join(sorted(cluster.consumers.get(key, ()))) or "no pod"
        return Explanation(
            subject=f"resourceclaim/{key}",
            status="allocated",
            summary=f"allocated; reserved for {users}",
            claims=(key,),
            node=None,
            devices=devices,
            nodes=(),
        )
    # An unallocated claim is explained through a pod that uses it, or on its own.
    using = [p for p in snapshot.pods.values() if _uses(cluster, p, key)]
    if using:
        return _explain_pod(cluster, sorted(using, key=lambda p: p.ref)[0], f"resourceclaim/{key}")
    stand_in = made_up(
        namespace, f"(any pod using {name})", [{"name": "claim", "resourceClaimName": name}]
    )
    return _explain_pod(cluster, stand_in, f"resourceclaim/{key}")


def _extended_resources(snapshot: Snapshot, pod: Pod) -> list[str]:
    """``resource (DeviceClass class)`` for each DRA extended resource the pod asks for."""
    mapping = class_mapping(backing_classes(snapshot.device_classes.values()))
    return [
        f"{name} (DeviceClass {mapping[name]})"
        for name in sorted(pod.needs.requests)
        if name in mapping
    ]


def _extended_reason(key: str, snapshot: Snapshot, extended: list[str]) -> str:
    asked = ", ".join(extended)
    protocols = [PROTOCOLS[group] for group in snapshot.api_groups if group in PROTOCOLS]
    if not any(protocol.extended_resources for protocol in protocols):
        return (
            f"Pod {key} asks for {asked} as extended resources: dralloc serves DRA extended "
            "resources in in-tree mode only (its webhook turns them into a claim of the pod); "
            "here ask with resource.dralloc.dev/claims instead"
        )
    return (
        f"Pod {key} asks for {asked} as extended resources and has no claim for them: it was "
        "created past dralloc's webhook, which turns them into a claim of the pod, so the "
        "operator reports it (ExtendedResourcesNotServed) and kube-scheduler may not allocate "
        "them; delete the pod and create it again (its controller does, if it has one)"
    )


def _uses(cluster: Cluster, pod: Pod, claim_key: str) -> bool:
    return any(f"{pod.namespace}/{pod.claim_name(entry)}" == claim_key for entry in pod.claims)


def _explain_pod(cluster: Cluster, pod: Pod, subject: str) -> Explanation:
    uses, problem = cluster.resolve(pod)
    claims = tuple(u.key for u in uses)
    if problem:
        return Explanation(subject, "pending", problem, claims, None, (), ())
    if uses and all(u.key in cluster.allocations for u in uses) and pod.node_name:
        placement = cluster.evaluate(pod)
        return Explanation(
            subject,
            "allocated",
            f"allocated; running on node {pod.node_name}",
            claims,
            pod.node_name,
            placement.devices,
            tuple(placement.verdicts),
        )
    gang_ref, gang_problem = cluster.snapshot.gang_of(pod)
    if gang_problem:  # its PodGroup is missing, or dralloc cannot follow it
        return Explanation(subject, "pending", gang_problem, claims, None, (), ())
    too_large = gang_too_large(gang_ref, cluster.max_gang_size) if gang_ref else None
    if too_large:
        return Explanation(subject, "pending", too_large, claims, None, (), ())
    placement = cluster.evaluate(pod, every_node=True)
    gang = _gang_view(cluster, pod)
    fitting = [v.node for v in placement.verdicts if v.fits]
    if all(u.key in cluster.allocations for u in uses):
        status = "allocated"
        summary = f"claims allocated; the pod can run on {', '.join(fitting) or 'no node'}"
    elif fitting:
        status = "pending"
        summary = (
            f"{len(fitting)}/{len(placement.verdicts)} nodes can take the claims now "
            f"(first: {fitting[0]}); the operator has not allocated them yet"
        )
    else:
        status = "pending"
        summary = placement.reason
    return Explanation(
        subject,
        status,
        summary,
        claims,
        placement.node,
        placement.devices,
        tuple(placement.verdicts),
        gang,
        _preemption_view(cluster, pod) if status == "pending" and not fitting else "",
    )


def _preemption_view(cluster: Cluster, pod: Pod) -> str:
    """What priority preemption would do for a pod no node can take now, or, for a pod the
    operator preempted for, what it is doing (its condition, and the node nominated)."""
    under_way = next(
        (
            c
            for c in pod.conditions
            if c.get("type") == DEVICES_ALLOCATED_CONDITION and c.get("reason") == "Preempting"
        ),
        None,
    )
    if under_way is not None:
        return f"preemption: under way: {under_way.get('message', '')}"
    if not in_play(cluster, pod):
        return ""  # no priorities in use: nothing to say
    choice = preemption_for(cluster, pod)
    chosen = choice.victims
    if chosen is None:
        return f"preemption: none: {choice.reason} (priority {pod.needs.priority})"
    if (node := choice.waits_for_leaving) is not None:
        return (
            f"preemption: none needed: pods on their way out on node {node} free what it "
            "needs (the operator holds those devices for it meanwhile with --preemption)"
        )
    victims = ", ".join(f"{p.ref} (priority {p.priority})" for p in chosen.pods)
    budgets = (
        f"; {chosen.violations} eviction(s) against a PodDisruptionBudget"
        if chosen.violations
        else ""
    )
    return (
        f"preemption: would preempt {victims} on node {chosen.node}{budgets} "
        f"(this pod's priority: {pod.needs.priority}; the operator does with --preemption)"
    )


def _gang_view(cluster: Cluster, pod: Pod) -> str:
    """What the joint search says about the pod's gang: its waiting members together (the
    nodes above are what the pod could get alone, if the gang did not bind it)."""
    key = gang_key(cluster, pod)
    gang, _ = cluster.snapshot.gang_of(pod)
    if key is None or gang is None:
        return ""
    members = [
        p
        for p in cluster.pods.values()
        if gang_key(cluster, p) == key and p.active and p.claims and not cluster.pod_is_allocated(p)
    ]
    if pod.ref not in {m.ref for m in members}:
        members.append(pod)
    members.sort(key=lambda p: p.ref)
    placed = sum(
        1
        for p in cluster.pods.values()
        if gang_key(cluster, p) == key and cluster.pod_is_allocated(p)
    )
    need = max(gang.size - placed, 1)
    if any(p.pod_group for p in members):
        need = max(need, len(members))  # a PodGroup's waiting members: all or none
    head = (
        f"{gang.label}: {len(members) + placed} of {gang.size} members present ({placed} allocated)"
    )
    outcome = place_gang(cluster, members, need, gang.topology)
    if not outcome.placements:
        return f"{head}; the members cannot be placed together: {outcome.reason}"
    mine = next((p for p in outcome.placements if p.pod == pod.ref), None)
    where = (
        f"this pod on node {mine.node}" if mine is not None and mine.node else "without this pod"
    )
    return f"{head}; placed together: {len(outcome.placements)} members, {where}"
