"""Pods of a snapshot, read as the operator reads them.

A snapshot's pod is the operator's own view (:class:`operators.cache.core.Pod`), parsed by the
same function, so ``simulate``, ``explain`` and ``check`` see a pod's claims, its node filters and
its gang exactly as the allocation controller does. A snapshot may hold pods of both API modes:
one that asks for claims by dralloc's annotation is read in dralloc's mode, any other in-tree.
What the toolkit adds is strictness (a malformed claim list or gang annotation is an error
pointing at the object and field, where the operator would tell the pod) and simulated pods:
copies of a pod, replacements after an eviction, and a stand-in for "any pod using this claim".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from operators.api.annotations import (
    CLAIMS_ANNOTATION,
    DEVICES_ANNOTATION,
    AnnotationError,
    GangRef,
    PodResourceClaim,
    parse_claim_statuses,
    pod_gang,
)
from operators.api.extendedresources import ENTRY_NAME
from operators.api.podgroup import PodGroup, resolve_gang
from operators.api.podprotocol import DRALLOC, KUBERNETES, PodProtocol
from operators.cache.core import Pod
from operators.cache.core import parse_pod as parse_operator_view
from operators.toolkit.usererrors import ObjectRef, SnapshotError


def protocol_of(body: Mapping[str, Any]) -> PodProtocol:
    """A pod that asks by annotation is dralloc's; any other is read in-tree."""
    return DRALLOC if DRALLOC.asks_for_claims(body) else KUBERNETES


def parse_pod(ref: ObjectRef, body: Mapping[str, Any]) -> Pod:
    """The operator's view of a pod of the snapshot; what the operator would refuse (and tell
    the pod) is a :class:`SnapshotError` naming the field."""
    protocol = protocol_of(body)
    raw = dict(body)
    raw.setdefault("metadata", {})
    meta = dict(raw["metadata"] or {})
    meta.setdefault("namespace", "default")
    meta.setdefault("uid", f"uid-{meta.get('namespace')}-{meta.get('name')}")
    raw["metadata"] = meta
    pod = parse_operator_view(raw, protocol)
    if pod.claims_error:
        raise SnapshotError(ref, pod.claims_error, protocol.claims_text(raw)[1])
    statuses_text, where = protocol.statuses_text(raw)
    if statuses_text:
        try:
            parse_claim_statuses(statuses_text)
        except AnnotationError as exc:
            raise SnapshotError(ref, "; ".join(exc.problems), where) from exc
    if pod.gang_error:
        try:
            pod_gang(pod.annotations)
        except AnnotationError as exc:
            where = f"metadata.annotations[{exc.annotation}]"
            raise SnapshotError(ref, "; ".join(exc.problems), where) from exc
    return pod


def gang_of(pod: Pod, pod_groups: Mapping[str, PodGroup]) -> tuple[GangRef | None, str]:
    """The pod's gang as the operator resolves it, and why it cannot be decided ('' = it can):
    its gang annotations, else its PodGroup's gang (a missing PodGroup, or one whose policy
    dralloc cannot follow, is the problem)."""
    if pod.gang is not None or not pod.pod_group:
        return pod.gang, ""
    group = pod_groups.get(f"{pod.namespace}/{pod.pod_group}")
    return resolve_gang(None, "", pod.namespace, pod.pod_group, group)


def copy_of(pod: Pod, name: str, *, keep_claims: bool = False) -> Pod:
    """A simulated pod like ``pod``: its own name and UID, no node, gated, nothing recorded.

    Its claims are its own: each template entry gets a claim generated for it, and the claim
    made for the original's extended resources is made again for the copy (from the
    original's spec, see :func:`own_claim_spec`). With ``keep_claims`` the named claims stay
    shared, as a replacement pod made by the original's controller would share them.
    """
    claims = tuple(
        entry.model_copy(update={"resource_claim_name": None})
        if _extended_entry(pod, entry) and not keep_claims
        else entry
        for entry in pod.claims
    )
    uid = f"simulated-{pod.namespace}-{name}"
    needs = dataclasses.replace(
        pod.needs,
        name=name,
        node_name="",
        pinned_node="",
        gated=True,
        terminal=False,
        deleting=False,
        started="",
    )
    return dataclasses.replace(
        pod,
        name=name,
        uid=uid,
        node_name="",
        phase="Pending",
        deleting=False,
        claims=claims,
        claim_statuses=(),
        conditions=(),
        created="",
        needs=needs,
        annotations={k: v for k, v in pod.annotations.items() if k != DEVICES_ANNOTATION},
    )


def own_claim_spec(pod: Pod, entry: PodResourceClaim) -> Mapping[str, Any] | None:
    """The spec of the claim a simulated copy makes for itself for this entry: the claim the
    original's extended resources became (None for any other entry)."""
    if pod.extended is None or entry.name != ENTRY_NAME or entry.resource_claim_name:
        return None
    return pod.extended.claim_spec()


def _extended_entry(pod: Pod, entry: PodResourceClaim) -> bool:
    return (
        pod.extended is not None
        and entry.name == ENTRY_NAME
        and entry.resource_claim_name == pod.extended.claim_name
    )


def made_up(
    namespace: str, name: str, entries: Sequence[Mapping[str, str]], protocol: PodProtocol = DRALLOC
) -> Pod:
    """A pod the toolkit makes up (a scenario's, or a stand-in for a claim's users), read by the
    same parser as any other: pending on no node, asking for ``entries`` (``name`` and
    ``resourceClaimName`` or ``resourceClaimTemplateName``)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": namespace,
            "name": name,
            "uid": f"simulated-{namespace}-{name}",
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Pending"},
    }
    if protocol.claims_in_spec:
        body["spec"]["resourceClaims"] = [dict(e) for e in entries]
    else:
        body["metadata"]["annotations"] = {
            CLAIMS_ANNOTATION: json.dumps([dict(e) for e in entries])
        }
    return parse_operator_view(body, protocol)
