"""`dralloc webhook-cert` against an in-memory API: create, keep, renew, patch the caBundle."""

from __future__ import annotations

import base64
import copy
import datetime
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography import x509

from operators.kube import Conflict, NotFound, Resource
from operators.toolkit.usererrors import ToolkitError
from operators.toolkit.webhook_cert import ensure_webhook_certificate, service_hostnames

NOW = datetime.datetime.now(datetime.UTC)


class FakeApi:
    """Just enough of KubeClient: objects by (plural, namespace, name), resourceVersions."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self.writes: list[str] = []
        self.version = 0

    def put(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        meta = stored["metadata"]
        self.objects[(resource.plural, meta.get("namespace"), meta["name"])] = stored
        return stored

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any]:
        try:
            return copy.deepcopy(self.objects[(resource.plural, namespace, name)])
        except KeyError:
            raise NotFound(404, "NotFound", name) from None

    async def create(
        self, resource: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]:
        self.writes.append(f"create {resource.plural}")
        return self.put(resource, body)

    async def replace(self, resource: Resource, body: dict[str, Any]) -> dict[str, Any]:
        meta = body["metadata"]
        current = self.objects[(resource.plural, meta.get("namespace"), meta["name"])]
        if current["metadata"]["resourceVersion"] != meta["resourceVersion"]:
            raise Conflict(409, "Conflict", "stale")
        self.writes.append(f"replace {resource.plural}")
        return self.put(resource, body)

    async def json_patch(
        self,
        resource: Resource,
        name: str,
        operations: Sequence[dict[str, Any]],
        *,
        resource_version: str | None = None,
        **_: Any,
    ) -> dict[str, Any]:
        current = self.objects[(resource.plural, None, name)]
        if (
            resource_version is not None
            and current["metadata"]["resourceVersion"] != resource_version
        ):
            raise Conflict(409, "Conflict", "stale")
        self.writes.append(f"patch {resource.plural}")
        body = copy.deepcopy(current)
        for op in operations:
            index = int(op["path"].split("/")[2])
            body["webhooks"][index]["clientConfig"]["caBundle"] = op["value"]
        return self.put(resource, body)


MWC = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MWC", False)


@pytest.fixture
def api() -> FakeApi:
    fake = FakeApi()
    fake.put(
        MWC,
        {
            "metadata": {"name": "dralloc"},
            "webhooks": [
                {"name": "gate", "clientConfig": {"service": {"name": "dralloc-webhook"}}}
            ],
        },
    )
    return fake


async def ensure(api: FakeApi, now: datetime.datetime = NOW) -> Any:
    return await ensure_webhook_certificate(
        api,  # type: ignore[arg-type]
        namespace="dralloc-system",
        secret="tls",
        service="dralloc-webhook",
        configuration="dralloc",
        now=now,
    )


def secret_cert(api: FakeApi) -> x509.Certificate:
    data = api.objects[("secrets", "dralloc-system", "tls")]["data"]
    return x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))


async def test_creates_the_secret_for_the_service_names_and_patches_the_ca(api: FakeApi) -> None:
    outcome = await ensure(api)
    assert "created" in outcome.secret and outcome.webhooks_patched == 1
    names = secret_cert(api).extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert set(service_hostnames("dralloc-webhook", "dralloc-system")) <= set(
        names.value.get_values_for_type(x509.DNSName)
    )
    bundle = api.objects[("mutatingwebhookconfigurations", None, "dralloc")]["webhooks"][0]
    secret = api.objects[("secrets", "dralloc-system", "tls")]
    assert bundle["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
    assert secret["type"] == "kubernetes.io/tls"


async def test_running_again_changes_nothing(api: FakeApi) -> None:
    await ensure(api)
    api.writes.clear()
    outcome = await ensure(api)
    assert "kept" in outcome.secret and outcome.webhooks_patched == 0
    assert api.writes == []


async def test_renews_a_certificate_close_to_expiry(api: FakeApi) -> None:
    await ensure(api)
    first = secret_cert(api).serial_number
    later = secret_cert(api).not_valid_after_utc - datetime.timedelta(days=10)
    outcome = await ensure(api, now=later)
    assert "renewed" in outcome.secret and outcome.webhooks_patched == 1
    assert secret_cert(api).serial_number != first


async def test_missing_webhook_configuration_is_a_clear_error() -> None:
    with pytest.raises(ToolkitError, match="MutatingWebhookConfiguration dralloc does not exist"):
        await ensure(FakeApi())


async def test_the_selector_webhooks_get_the_ca_too(api: FakeApi) -> None:
    vwc = Resource(
        "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations", "VWC", False
    )
    hooks: list[dict[str, Any]] = [
        {"name": n, "clientConfig": {}} for n in ("classes", "claims", "templates")
    ]
    api.put(vwc, {"metadata": {"name": "dralloc"}, "webhooks": hooks})
    outcome = await ensure(api)
    assert outcome.webhooks_patched == 4
    secret = api.objects[("secrets", "dralloc-system", "tls")]
    validating = api.objects[("validatingwebhookconfigurations", None, "dralloc")]["webhooks"]
    assert {w["clientConfig"]["caBundle"] for w in validating} == {secret["data"]["ca.crt"]}
