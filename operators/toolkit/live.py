"""Read a snapshot from a live cluster, read-only.

Only GET (list) requests are sent; nothing is watched or written. The result goes through
the same path as snapshot files (``objects_from_documents``), so file and live snapshots
behave identically. Which DRA API group to read is chosen by what the server offers:
dralloc's CRDs if installed, otherwise in-tree ``resource.k8s.io/v1``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from operators.toolkit.errors import ToolkitError
from operators.toolkit.sources import RawObject, objects_from_documents

DRA_PLURALS = {
    "DeviceClass": "deviceclasses",
    "ResourceSlice": "resourceslices",
    "ResourceClaim": "resourceclaims",
    "ResourceClaimTemplate": "resourceclaimtemplates",
    "DeviceTaintRule": "devicetaintrules",
}
CORE_PLURALS = {"Pod": "pods", "Node": "nodes", "Namespace": "namespaces"}
GROUPS = ("resource.dralloc.dev", "resource.k8s.io")


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


async def _read(kubeconfig: str | None, context: str | None, group: str | None) -> list[Any]:
    from operators.kube import KubeClient

    client = KubeClient(await _connection(kubeconfig, context), user_agent="dralloc-toolkit")
    async with client:
        chosen = group or await _pick_group(client)
        documents: list[Any] = []
        for kind, plural in DRA_PLURALS.items():
            documents.append(
                await _list(client, f"/apis/{chosen}/v1/{plural}", f"{chosen}/v1", kind)
            )
        for kind, plural in CORE_PLURALS.items():
            documents.append(await _list(client, f"/api/v1/{plural}", "v1", kind))
        return documents


async def _connection(kubeconfig: str | None, context: str | None) -> Any:
    """The kubeconfig (``$KUBECONFIG``, ~/.kube/config) with an optional context, else in-cluster."""
    import os

    from kubernetes_asyncio import client, config

    from operators.kube import Connection

    configuration = client.Configuration()
    path = kubeconfig or os.environ.get("KUBECONFIG") or None
    if path is None and not context and os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)
    else:
        await config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration
        )
    return Connection.from_configuration(configuration)


async def _pick_group(client: Any) -> str:
    found = await _get(client, "/apis")
    offered = {g.get("name") for g in (found or {}).get("groups", [])}
    for group in GROUPS:
        if group in offered:
            return group
    raise ToolkitError(
        "the cluster serves neither resource.dralloc.dev nor resource.k8s.io: "
        "install the CRDs (kubectl apply -k crds/) or enable in-tree DRA"
    )


async def _list(client: Any, path: str, api_version: str, kind: str) -> dict[str, Any]:
    items: list[Any] = []
    params = {"limit": "500"}
    while True:
        page = await _get(client, path, params)
        items.extend((page or {}).get("items") or [])
        token = ((page or {}).get("metadata") or {}).get("continue")
        if not token:
            break
        params = {"limit": "500", "continue": token}
    for item in items:
        # List items come without apiVersion and kind; put them back for the parser.
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind)
    return {"apiVersion": "v1", "kind": "List", "items": items}


async def _get(
    client: Any, path: str, params: dict[str, str] | None = None
) -> dict[str, Any] | None:
    from operators.kube import ApiError, NotFound

    try:
        result: dict[str, Any] = await client.request("GET", path, params=params)
    except NotFound:
        if path.startswith("/apis/resource."):
            return None  # e.g. no DeviceTaintRule kind in this cluster
        raise ToolkitError(f"GET {path}: not found") from None
    except ApiError as exc:
        raise ToolkitError(f"GET {path}: {exc}") from exc
    return result
