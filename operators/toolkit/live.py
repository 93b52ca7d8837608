"""Read a snapshot from a live cluster, read-only.

Only GET requests are sent (discovery of ``/apis``, then paginated lists); nothing is
watched or written, so the command is safe on a production cluster and needs only
``list`` RBAC. Requests go through ``operators.kube.KubeClient`` (raw JSON, no
kubernetes_asyncio models: those reject partial objects and are slow on large slices).
The result goes through the same path as snapshot files (``objects_from_documents``), so
file and live snapshots behave identically. Which DRA API group to read is chosen by what
the server offers: dralloc's CRDs if installed, otherwise in-tree ``resource.k8s.io/v1``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from operators.api import podgroup
from operators.groups import API_GROUPS
from operators.kube import ApiError, Connection, KubeClient, NotFound, Resource
from operators.toolkit.sources import RawObject, objects_from_documents
from operators.toolkit.usererrors import ToolkitError

DRA_KINDS = {
    "DeviceClass": ("deviceclasses", False),
    "ResourceSlice": ("resourceslices", False),
    "ResourceClaim": ("resourceclaims", True),
    "ResourceClaimTemplate": ("resourceclaimtemplates", True),
    "DeviceTaintRule": ("devicetaintrules", False),
}
OWN_KINDS = {"DeviceQuota": ("devicequotas", True)}
"""dralloc's own kinds: read from resource.dralloc.dev whichever group the DRA kinds are."""
POLICY_KINDS = {"PodDisruptionBudget": ("poddisruptionbudgets", True)}
"""policy/v1: which simulated evictions a budget would refuse (optional: an account that may
not read budgets still gets a snapshot)."""
WORKLOAD_KINDS = {"PodGroup": ("podgroups", True)}
"""scheduling.k8s.io/v1beta1, upstream's Workload API: PodGroups that make gangs (optional:
a cluster without the GenericWorkload gate, or an account that may not read them, has none)."""
CORE_KINDS = {"Pod": ("pods", True), "Node": ("nodes", False), "Namespace": ("namespaces", False)}
GROUPS = API_GROUPS
DRA_VERSION = "v1"
PAGE_SIZE = 500


@dataclass(frozen=True)
class ListCall:
    """One list request of a live read."""

    resource: Resource
    optional: bool
    """A 404 means "this cluster has no such kind" (e.g. DeviceTaintRule is not in the
    in-tree v1 API) and yields an empty list instead of an error."""
    forbidden_ok: bool = False
    """A 403 also yields an empty list (the account may not read the kind)."""


class ReadOnlyClient(Protocol):
    """The part of ``KubeClient`` a live read uses: GETs only."""

    async def request(
        self, method: str, path: str, *, params: Mapping[str, str] | None = None
    ) -> dict[str, Any]: ...

    async def list(
        self, resource: Resource, namespace: str | None = None, *, limit: int = ...
    ) -> tuple[list[dict[str, Any]], str]: ...


def list_calls(group: str) -> tuple[ListCall, ...]:
    """Every list request a live read of ``group`` sends, in order."""
    if group not in GROUPS:
        raise ToolkitError(f"unknown DRA API group {group!r}; expected one of {GROUPS}")
    calls = [
        ListCall(Resource(group, DRA_VERSION, plural, kind, namespaced), optional=True)
        for kind, (plural, namespaced) in DRA_KINDS.items()
    ]
    calls += [
        ListCall(Resource(GROUPS[0], DRA_VERSION, plural, kind, namespaced), optional=True)
        for kind, (plural, namespaced) in OWN_KINDS.items()
    ]
    calls += [
        ListCall(Resource("policy", "v1", plural, kind, namespaced), optional=True)
        for kind, (plural, namespaced) in POLICY_KINDS.items()
    ]
    calls += [
        ListCall(
            Resource(podgroup.GROUP, podgroup.VERSION, plural, kind, namespaced),
            optional=True,
            forbidden_ok=True,
        )
        for kind, (plural, namespaced) in WORKLOAD_KINDS.items()
    ]
    calls += [
        ListCall(Resource("", "v1", plural, kind, namespaced), optional=False)
        for kind, (plural, namespaced) in CORE_KINDS.items()
    ]
    return tuple(calls)


def read_cluster(
    kubeconfig: str | None = None, context: str | None = None, group: str | None = None
) -> list[RawObject]:
    """List the DRA kinds, pods, nodes and namespaces of the cluster."""
    try:
        documents = asyncio.run(_read(kubeconfig, context, group))
    except ToolkitError:
        raise
    except Exception as exc:  # the client raises many types; the user needs the message
        raise ToolkitError(f"cannot read the cluster: {exc}") from exc
    return objects_from_documents("cluster", documents)


async def read_documents(client: ReadOnlyClient, group: str | None = None) -> list[Any]:
    """One ``List`` document per kind, items complete with apiVersion and kind."""
    chosen = await pick_group(client, group)
    documents: list[Any] = []
    for call in list_calls(chosen):
        items = await _list(client, call)
        documents.append({"apiVersion": "v1", "kind": "List", "items": items})
    return documents


async def pick_group(client: ReadOnlyClient, wanted: str | None = None) -> str:
    """The DRA group to read: ``wanted`` if the server offers it in v1, else the first of
    GROUPS it offers. Asking discovery first turns "nothing installed" into a clear error
    instead of an empty snapshot."""
    found = await _get(client, "/apis")
    offered = {
        group.get("name")
        for group in found.get("groups") or []
        if any(v.get("version") == DRA_VERSION for v in group.get("versions") or [])
    }
    if wanted is not None:
        if wanted not in offered:
            raise ToolkitError(f"the cluster does not serve {wanted}/{DRA_VERSION}")
        return wanted
    for group in GROUPS:
        if group in offered:
            return group
    raise ToolkitError(
        f"the cluster serves neither resource.dralloc.dev/{DRA_VERSION} nor "
        f"resource.k8s.io/{DRA_VERSION}: install the CRDs (kubectl apply -k crds/) "
        "or enable in-tree DRA"
    )


async def _read(kubeconfig: str | None, context: str | None, group: str | None) -> list[Any]:
    # The kubeconfig ($KUBECONFIG, ~/.kube/config) with an optional context, else in-cluster.
    connection = await Connection.load(kubeconfig or "", context)
    async with KubeClient(connection, user_agent="dralloc-toolkit") as client:
        return await read_documents(client, group)


async def _list(client: ReadOnlyClient, call: ListCall) -> list[dict[str, Any]]:
    path = call.resource.path()
    try:
        items, _ = await client.list(call.resource, limit=PAGE_SIZE)
    except NotFound:
        if call.optional:
            return []
        raise ToolkitError(f"GET {path}: not found") from None
    except ApiError as exc:
        if call.forbidden_ok and exc.status == 403:
            return []
        raise ToolkitError(f"GET {path}: {exc}") from exc
    return items


async def _get(client: ReadOnlyClient, path: str) -> dict[str, Any]:
    try:
        return await client.request("GET", path)
    except ApiError as exc:
        raise ToolkitError(f"GET {path}: {exc}") from exc
