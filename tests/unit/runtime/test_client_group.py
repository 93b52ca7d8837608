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
