"""The API group is a setting of the client: DRA kinds are sent to the mode's group."""

from __future__ import annotations

import pytest

from operators.kube import (
    DRALLOC_GROUP,
    PODS,
    RESOURCE_CLAIMS,
    Connection,
    KubeClient,
)


@pytest.mark.asyncio
async def test_dra_kinds_follow_the_api_group_and_core_kinds_do_not() -> None:
    connection = Connection(server="https://127.0.0.1:1", ssl_context=False, headers={})
    async with KubeClient(connection, api_group="resource.k8s.io") as client:
        claims = client.resolve(RESOURCE_CLAIMS)
        assert claims.path("ns", "c") == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"
        assert claims.api_version == "resource.k8s.io/v1"
        assert client.resolve(PODS) is PODS
    async with KubeClient(connection) as client:
        assert client.api_group == DRALLOC_GROUP
        assert client.resolve(RESOURCE_CLAIMS) is RESOURCE_CLAIMS


async def test_the_client_speaks_through_its_transport_in_either_mode() -> None:
    """The verbs, the API mode's group and the preconditions are the client's; the transport
    (here the controllers' tests' in-memory API server) only carries the request."""
    from operators.kube import DEVICE_QUOTAS, RESOURCE_CLAIMS

    from ..controllers.fakes import FakeClient

    for group in ("resource.dralloc.dev", "resource.k8s.io"):
        client = FakeClient(api_group=group)
        body = {"metadata": {"name": "c", "namespace": "ns"}, "spec": {}}
        created = await client.create(RESOURCE_CLAIMS, body, "ns")
        assert created["apiVersion"] == f"{group}/v1"
        await client.merge_patch(
            RESOURCE_CLAIMS, "c", {"status": {}}, namespace="ns", resource_version="7",
            subresource="status",
        )  # fmt: skip
        await client.create(DEVICE_QUOTAS, {"metadata": {"name": "q"}}, "ns")
        post, patch, quota = client.calls
        assert post.path == f"/apis/{group}/v1/namespaces/ns/resourceclaims"
        assert patch.path == f"/apis/{group}/v1/namespaces/ns/resourceclaims/c/status"
        assert patch.body["metadata"] == {"resourceVersion": "7"}
        assert quota.path.startswith("/apis/resource.dralloc.dev/v1/"), "quotas are always ours"
        assert client.writes(RESOURCE_CLAIMS.path("ns", "c")) == [patch]
