"""``dralloc webhook-cert``: one shared serving certificate for the webhook, and its CA in the
webhook configuration.

Why not kopf's per-process self-signed certificate in the cluster: with two replicas behind
one Service each replica would generate its own CA, and the single ``caBundle`` of the
MutatingWebhookConfiguration can trust only the one written last; kopf's managed
configuration also removes its webhooks when a replica stops, which races with the other
replica during a rolling update. So the base manifests run this command once as a Job
(its own ServiceAccount may touch exactly one Secret and the two webhook configurations
named ``dralloc``, mutating and validating); both
replicas mount the Secret, and the operator's own ServiceAccount never reads Secrets.

Idempotent: a valid certificate for the Service's names that is not about to expire is kept,
and the caBundle is only patched when it differs. Re-running it renews a certificate that
expires within ``renew_days``. The certificate itself comes from the same function the
operator uses for its self-signed mode (``operators.webhooks``).
"""

from __future__ import annotations

import base64
import datetime
from dataclasses import dataclass
from typing import Any

from operators.kube import ApiError, Conflict, KubeClient, NotFound, Resource
from operators.toolkit.usererrors import ToolkitError

SECRETS = Resource("", "v1", "secrets", "Secret", True)
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
    False,
)
#: The selector webhooks (CRD mode only: in-tree the API server validates selectors itself).
VALIDATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingwebhookconfigurations",
    "ValidatingWebhookConfiguration",
    False,
)


@dataclass(frozen=True)
class CertOutcome:
    secret: str
    """``created``, ``renewed`` or ``kept``."""
    not_after: datetime.datetime
    webhooks_patched: int

    def describe(self) -> str:
        return (
            f"certificate {self.secret} (valid until {self.not_after:%Y-%m-%d}); "
            f"caBundle updated in {self.webhooks_patched} webhook(s)"
        )


def service_hostnames(service: str, namespace: str) -> list[str]:
    return [
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
        f"{service}.{namespace}",
        service,
    ]


def certificate_status(
    pem: bytes, hostnames: list[str], now: datetime.datetime, renew_days: int
) -> tuple[bool, datetime.datetime]:
    """(usable, not_after): usable if it names every host and does not expire soon."""
    from cryptography import x509

    try:
        certificate = x509.load_pem_x509_certificate(pem)
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, x509.ExtensionNotFound):
        return False, now
    dns = set(names.value.get_values_for_type(x509.DNSName))
    not_after = certificate.not_valid_after_utc
    fresh = not_after - now > datetime.timedelta(days=renew_days)
    return (fresh and set(hostnames) <= dns), not_after


async def ensure_webhook_certificate(
    client: KubeClient,
    *,
    namespace: str,
    secret: str,
    service: str,
    configuration: str,
    renew_days: int = 30,
    now: datetime.datetime | None = None,
) -> CertOutcome:
    now = now or datetime.datetime.now(datetime.UTC)
    hostnames = service_hostnames(service, namespace)
    existing: dict[str, Any] | None
    try:
        existing = await client.get(SECRETS, secret, namespace)
    except NotFound:
        existing = None
    state = "kept"
    data = (existing or {}).get("data") or {}
    cert_pem = base64.b64decode(data.get("tls.crt", "")) if data.get("tls.crt") else b""
    usable, not_after = certificate_status(cert_pem, hostnames, now, renew_days)
    if existing is None or not usable or "tls.key" not in data:
        from operators.certificates import build_self_signed_certificate

        cert_pem, key_pem = build_self_signed_certificate(hostnames)
        _, not_after = certificate_status(cert_pem, hostnames, now, 0)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {
                "name": secret,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/name": "dralloc"},
            },
            "data": {
                "tls.crt": base64.b64encode(cert_pem).decode(),
                "tls.key": base64.b64encode(key_pem).decode(),
                "ca.crt": base64.b64encode(cert_pem).decode(),  # self-signed: its own CA
            },
        }
        if existing is None:
            await client.create(SECRETS, body, namespace)
            state = "created"
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await client.replace(SECRETS, body)  # a concurrent writer makes this a 409
            state = "renewed"
    ca_bundle = base64.b64encode(cert_pem).decode()
    patched = await _patch_ca_bundle(client, MUTATING_WEBHOOKS, configuration, ca_bundle)
    patched += await _patch_ca_bundle(
        client, VALIDATING_WEBHOOKS, configuration, ca_bundle, required=False
    )
    return CertOutcome(f"{namespace}/{secret} {state}", not_after, patched)


async def _patch_ca_bundle(
    client: KubeClient, kind: Resource, name: str, ca_bundle: str, *, required: bool = True
) -> int:
    """Write the CA into every webhook of one configuration; the number of webhooks patched.
    A configuration that is not ``required`` may be missing (0)."""
    for _attempt in range(3):
        try:
            current = await client.get(kind, name)
        except NotFound:
            if not required:
                return 0
            raise ToolkitError(
                f"{kind.kind} {name} does not exist (apply manifests/ first)"
            ) from None
        operations = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": ca_bundle}
            for i, webhook in enumerate(current.get("webhooks") or [])
            if (webhook.get("clientConfig") or {}).get("caBundle") != ca_bundle
        ]
        if not operations:
            return 0
        try:
            await client.json_patch(
                kind,
                name,
                operations,
                resource_version=current["metadata"]["resourceVersion"],
            )
        except Conflict:
            continue  # changed under us: read again
        return len(operations)
    raise ToolkitError(f"{kind.kind} {name} kept changing; try again")


async def run(
    kubeconfig: str,
    *,
    namespace: str,
    secret: str,
    service: str,
    configuration: str,
    renew_days: int,
) -> CertOutcome:
    try:
        async with await KubeClient.connect(kubeconfig) as client:
            return await ensure_webhook_certificate(
                client,
                namespace=namespace,
                secret=secret,
                service=service,
                configuration=configuration,
                renew_days=renew_days,
            )
    except ApiError as exc:
        raise ToolkitError(f"API request failed: {exc}") from exc
