"""A simulated cluster: the snapshot loaded into the allocator, plus what a scenario changes.

The allocator (``operators.allocator``) does every device decision; this module only does
the bookkeeping that the operator's controllers would do around it: resolve a pod's claims
(generating claims from templates like the claim controller), choose among the nodes where
the allocator says the claims fit, record the allocation, free it again on eviction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from operators.allocator.errors import AllocationError, NodeAllocationError
from operators.allocator.features import Features
from operators.allocator.nodes import (
    OPTIONAL_NODE_OPERATIONS,
    NodeInfo,
    NodeSelector,
    NodeSelectorError,
)
from operators.allocator.results import ClaimAllocation
from operators.allocator.state import AllocatorState
from operators.api.annotations import GANG_SIZE_MAX
from operators.cache.core import Pod
from operators.scheduling import filters
from operators.scheduling.usage import ClusterUsage
from operators.toolkit.pods import own_claim_spec
from operators.toolkit.snapshot import NodeEntry, Snapshot

JsonDict = dict[str, Any]


@dataclass(frozen=True)
class DeviceLine:
    """One allocated device of a pod's claim."""

    claim: str
    request: str
    device: str
    """``driver/pool/device``."""


@dataclass(frozen=True)
class NodeVerdict:
    """Why a pod's claims do or do not fit one node."""

    node: str
    fits: bool
    reasons: tuple[str, ...] = ()
    devices: tuple[DeviceLine, ...] = ()


@dataclass(frozen=True)
class ClaimUse:
    """A claim of a pod, resolved: its key, its body, and whether it is allocated."""

    entry: str
    key: str
    body: JsonDict
    generated: bool


@dataclass
class Placement:
    """Outcome of trying to place one pod."""

    pod: str
    node: str | None
    devices: tuple[DeviceLine, ...] = ()
    reason: str = ""
    verdicts: list[NodeVerdict] = field(default_factory=list)
    allocations: dict[str, ClaimAllocation] = field(default_factory=dict)
    """Claim key -> the allocator's result on ``node``, for claims not allocated before."""


class Cluster:
    """Snapshot state plus simulated changes, on top of one AllocatorState."""

    def __init__(
        self,
        snapshot: Snapshot,
        features: Features | None = None,
        policy: str = "binpack",
        device_policy: str = "first-fit",
        max_gang_size: int = GANG_SIZE_MAX,
    ) -> None:
        self.snapshot = snapshot
        self.policy = policy
        self.max_gang_size = max_gang_size
        """The operator's setting: a gang that needs more members placed together is
        refused, on each member, as the operator refuses it."""
        self.state = AllocatorState(features or Features(), device_policy=device_policy)
        for slice_ in snapshot.resource_slices.values():
            self.state.upsert_slice(slice_)
        for device_class in snapshot.device_classes.values():
            self.state.upsert_class(device_class)
        for rule in snapshot.taint_rules.values():
            self.state.upsert_taint_rule(rule)
        for quota in snapshot.quotas.values():
            self.state.upsert_quota(quota)
        self.claims: dict[str, JsonDict] = {}
        self.allocations: dict[str, JsonDict] = {}
        """Claim key -> status.allocation JSON, for every allocated claim."""
        self.consumers: dict[str, set[str]] = {}
        """Claim key -> pods (``namespace/name``) using it."""
        for key, claim in snapshot.claims.items():
            body = claim.to_kube()
            self.claims[key] = body
            allocation = (body.get("status") or {}).get("allocation")
            if allocation:
                self.state.upsert_claim(body)
                self.allocations[key] = allocation
                reserved = (body.get("status") or {}).get("reservedFor") or []
                pods = {
                    f"{claim.metadata.namespace}/{r['name']}"
                    for r in reserved
                    if r.get("resource") == "pods"
                }
                self.consumers[key] = pods
        self.pods: dict[str, Pod] = dict(snapshot.pods)
        self.node_names = snapshot.node_names
        # cpu, memory, ports, ... held per node, so "does it fit" means what kube-scheduler
        # would say, and moves with every simulated placement and eviction.
        self.usage = ClusterUsage()
        for key, pod in self.pods.items():
            self.usage.update(key, pod.needs)

    # --- claims of a pod -----------------------------------------------------------------

    def resolve(self, pod: Pod) -> tuple[list[ClaimUse], str]:
        """The pod's claims, or an empty list and the reason they cannot be resolved."""
        uses: list[ClaimUse] = []
        for entry in pod.claims:
            name = pod.claim_name(entry)
            named = entry.resource_claim_name is not None
            if name:
                key = f"{pod.namespace}/{name}"
                body = self.claims.get(key)
                if body is None:
                    if named:
                        return [], f"claim {entry.name}: ResourceClaim {key} not found"
                else:
                    uses.append(ClaimUse(entry.name, key, body, generated=not named))
                    continue
            spec = own_claim_spec(pod, entry)
            if spec is not None:  # a copy's own claim, as the claim controller makes it
                claim_name = f"{pod.name}-{entry.name}"
                key = f"{pod.namespace}/{claim_name}"
                self.claims.setdefault(key, {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": claim_name, "namespace": pod.namespace,
                                 "uid": f"simulated-{pod.namespace}-{claim_name}"},
                    "spec": dict(spec),
                })  # fmt: skip
                uses.append(ClaimUse(entry.name, key, self.claims[key], generated=True))
                continue
            template_key = f"{pod.namespace}/{entry.resource_claim_template_name}"
            template = self.snapshot.templates.get(template_key)
            if template is None:
                return [], f"claim {entry.name}: ResourceClaimTemplate {template_key} not found"
            claim_name = f"{pod.name}-{entry.name}"
            key = f"{pod.namespace}/{claim_name}"
            body = self.claims.get(key) or {
                "apiVersion": template.api_version,
                "kind": "ResourceClaim",
                "metadata": {
                    "name": claim_name,
                    "namespace": pod.namespace,
                    "uid": f"simulated-{pod.namespace}-{claim_name}",
                    **template.spec.metadata.to_kube(),
                },
                "spec": template.spec.spec.to_kube(),
            }
            self.claims[key] = body
            uses.append(ClaimUse(entry.name, key, body, generated=True))
        problem = self._admin_access_problem(pod, uses)
        return (uses, "") if not problem else ([], problem)

    def _admin_access_problem(self, pod: Pod, uses: Iterable[ClaimUse]) -> str:
        if pod.namespace not in self.snapshot.namespaces:
            return ""  # namespace not in the snapshot: its labels are unknown
        if pod.namespace in self.snapshot.admin_namespaces:
            return ""
        for use in uses:
            for request in ((use.body.get("spec") or {}).get("devices") or {}).get("requests", []):
                if (request.get("exactly") or {}).get("adminAccess"):
                    return (
                        f"claim {use.key}: admin access to devices requires the "
                        f'resource.dralloc.dev/admin-access: "true" label on namespace '
                        f"{pod.namespace}"
                    )
        return ""

    # --- placement -----------------------------------------------------------------------

    def evaluate(self, pod: Pod, *, every_node: bool = False) -> Placement:
        """Where the pod's claims go: the allocator's ``find_node`` picks among the nodes the
        pod may use. With ``every_node`` each node also gets its own verdict (for explain).
        """
        uses, problem = self.resolve(pod)
        if problem:
            return Placement(pod.ref, None, reason=problem)
        allocated = [u for u in uses if u.key in self.allocations]
        pending = [u for u in uses if u.key not in self.allocations]
        candidates, excluded, problem = self.candidates(pod, uses)
        if problem:
            return Placement(pod.ref, None, reason=problem)
        held = tuple(line for u in allocated for line in lines_of(u.key, self.allocations[u.key]))
        placement = Placement(pod.ref, None)
        allocations: dict[str, dict[str, Any]] = {}
        if not pending:
            if candidates:
                placement.node, placement.devices = candidates[0].name, held
        else:
            found = self.state.find_node([u.body for u in pending], candidates, self.policy)
            if found.node is not None:
                placement.node = found.node
                placement.allocations = {
                    use.key: allocation
                    for use, allocation in zip(pending, found.allocations, strict=True)
                }
                new = [
                    line
                    for use, allocation in zip(pending, found.allocations, strict=True)
                    for line in lines_of(use.key, allocation.to_dict())
                ]
                placement.devices = held + tuple(new)
            elif found.explanation is not None and found.explanation.fatal_error:
                placement.reason = found.explanation.fatal_error
                return placement
            if found.explanation is not None:
                for reason in found.explanation.reasons:
                    excluded[reason.node] = NodeVerdict(
                        reason.node,
                        False,
                        (
                            reason.summary,
                            *(f.line() for f in reason.requests if f.blocking_stage()),
                        ),
                    )
        if every_node and pending:
            allocations = self._per_node(pending, candidates, excluded)
        for name in self.node_names:
            if name in excluded:
                placement.verdicts.append(excluded[name])
            elif name == placement.node:
                placement.verdicts.append(NodeVerdict(name, True, (), placement.devices))
            elif name in allocations or not pending:
                devices = held + tuple(
                    line
                    for key, allocation in allocations.get(name, {}).items()
                    for line in lines_of(key, allocation)
                )
                placement.verdicts.append(NodeVerdict(name, True, (), devices))
        if placement.node is None and not placement.reason:
            placement.reason = summarize(placement.verdicts)
        return placement

    def candidates(
        self, pod: Pod, uses: list[ClaimUse]
    ) -> tuple[list[NodeInfo], dict[str, NodeVerdict], str]:
        """The nodes the pod may use (scheduler filters, its allocated claims' nodes), the
        verdicts on the others, or a problem that rules out every node."""
        pinned: list[tuple[str, NodeSelector]] = []
        # An allocated claim with a device that skips node operations: only nodes whose
        # kubelet declares it (as kube-scheduler's DRA Filter and the operator).
        skipping = [
            use.key
            for use in uses
            if any(
                result.get("skipNodeOperations")
                for result in (
                    ((self.allocations.get(use.key) or {}).get("devices") or {}).get("results")
                    or ()
                )
            )
        ]
        for use in uses:
            selector = (self.allocations.get(use.key) or {}).get("nodeSelector")
            if selector:
                try:
                    pinned.append((use.key, NodeSelector.parse(selector)))
                except NodeSelectorError as exc:
                    return [], {}, f"claim {use.key}: {exc}"
        excluded: dict[str, NodeVerdict] = {}
        candidates: list[NodeInfo] = []
        pod_filter = filters.prepare(
            pod.needs,
            self.usage,
            [e.view for e in self.snapshot.nodes.values() if e.view is not None],
            lambda ns: self.snapshot.namespace_labels.get(ns, {}),
            key=pod.ref,
        )
        for name in self.node_names:
            verdict = self._node_filter(pod_filter, name, pinned, skipping)
            if verdict is None:
                candidates.append(node_info(self.snapshot.nodes.get(name), name))
            else:
                excluded[name] = verdict
        return candidates, excluded, ""

    def _node_filter(
        self,
        pod_filter: filters.PodFilter,
        name: str,
        pinned: list[tuple[str, NodeSelector]],
        skipping: list[str],
    ) -> NodeVerdict | None:
        """A verdict if the pod may not use the node at all, before any device question."""
        entry = self.snapshot.nodes.get(name)
        pod = pod_filter.pod
        if pod.node_name and pod.node_name != name:
            return NodeVerdict(name, False, (f"pod is bound to node {pod.node_name}",))
        info = node_info(entry, name)
        if entry is not None and entry.view is not None and not pod.node_name:
            reasons = pod_filter.reasons(entry.view, info)
            if reasons:
                return NodeVerdict(name, False, tuple(reasons))
        for key, selector in pinned:
            if not selector.matches(info):
                return NodeVerdict(name, False, (f"claim {key} is allocated on another node",))
        if skipping and OPTIONAL_NODE_OPERATIONS not in info.declared_features:
            reason = (
                f"claim {skipping[0]} has devices that skip node operations, and the node does "
                f"not declare {OPTIONAL_NODE_OPERATIONS}"
            )
            return NodeVerdict(name, False, (reason,))
        return None

    def _per_node(
        self,
        pending: list[ClaimUse],
        candidates: list[NodeInfo],
        verdicts: dict[str, NodeVerdict],
    ) -> dict[str, dict[str, dict[str, Any]]]:
        """Ask the allocator about every candidate node; failures get its explanation."""
        bodies = [u.body for u in pending]
        fitting: dict[str, dict[str, dict[str, Any]]] = {}
        failed: list[NodeInfo] = []
        errors: dict[str, str] = {}
        for node in candidates:
            if node.name in verdicts:
                continue
            try:
                search = self.state.search(bodies, node)
                result = search.run()
            except NodeAllocationError as exc:
                errors[node.name] = str(exc)
                failed.append(node)
                continue
            except AllocationError as exc:
                verdicts[node.name] = NodeVerdict(node.name, False, (str(exc),))
                continue
            if result is None:
                refusal = search.quota_refusal()
                if refusal is not None:
                    errors[node.name] = refusal
                failed.append(node)
            else:
                fitting[node.name] = {
                    use.key: allocation.to_dict()
                    for use, allocation in zip(pending, result, strict=True)
                }
        if failed:
            explanation = self.state.explain(bodies, failed, errors)
            for reason in explanation.reasons:
                verdicts[reason.node] = NodeVerdict(
                    reason.node,
                    False,
                    (reason.summary, *(f.line() for f in reason.requests if f.blocking_stage())),
                )
        return fitting

    def commit(self, pod: Pod, placement: Placement) -> None:
        """Record a successful placement, as the operator's writes would."""
        uses, _ = self.resolve(pod)
        for key, allocation in placement.allocations.items():
            self._record(key, allocation)
        for use in uses:
            self.consumers.setdefault(use.key, set()).add(pod.ref)
        self.pods[pod.ref] = pod
        if placement.node is not None and not pod.node_name:
            self.usage.assume(pod.ref, pod.needs, placement.node)

    def _record(self, key: str, allocation: ClaimAllocation) -> None:
        self.state.assume(self.claims[key], allocation)
        self.allocations[key] = allocation.to_dict()

    def release_pod(self, pod_key: str) -> list[str]:
        """The pod is gone: drop it as a consumer; deallocate claims nobody uses any more.

        Returns the claims that were deallocated.
        """
        freed = []
        for key, pods in list(self.consumers.items()):
            if pod_key not in pods:
                continue
            pods.discard(pod_key)
            if not pods and key in self.allocations:
                del self.allocations[key]
                self.state.remove_claim(self.claims[key])
                freed.append(key)
        self.pods.pop(pod_key, None)
        self.usage.update(pod_key, None)
        return freed

    def pod_is_allocated(self, pod: Pod) -> bool:
        uses, problem = self.resolve(pod)
        return not problem and all(u.key in self.allocations for u in uses)


def node_info(entry: NodeEntry | None, name: str) -> NodeInfo:
    """The allocator's view of a node (a node missing from the snapshot has its name only)."""
    labels = dict(entry.labels) if entry is not None else {"kubernetes.io/hostname": name}
    features = entry.view.declared_features if entry is not None and entry.view else frozenset()
    return NodeInfo(name=name, labels=labels, declared_features=features)


def lines_of(claim: str, allocation: Mapping[str, Any]) -> list[DeviceLine]:
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        DeviceLine(claim, str(r.get("request")), f"{r['driver']}/{r['pool']}/{r['device']}")
        for r in results
    ]


def summarize(verdicts: list[NodeVerdict]) -> str:
    """``0/N nodes are available: ...`` with reasons grouped, like kube-scheduler says it."""
    if not verdicts:
        return "no nodes in the snapshot"
    counts: dict[str, int] = {}
    for verdict in verdicts:
        if verdict.fits:
            continue
        reason = verdict.reasons[0] if verdict.reasons else "cannot allocate all claims"
        counts[reason] = counts.get(reason, 0) + 1
    fitting = sum(1 for v in verdicts if v.fits)
    parts = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda x: -x[1]))
    return f"{fitting}/{len(verdicts)} nodes are available: {parts}."
