"""The mutating admission webhook: pods that ask for claims start behind a scheduling gate.

Without the gate, kube-scheduler could bind a pod before the allocator has chosen a node with
free devices. The webhook only adds the gate; everything else about the pod stays as the user
wrote it. It runs on every replica (admission must not depend on who is leader).

Serving: kopf's aiohttp webhook server. With certificate files it uses them; without, it
generates a self-signed certificate for its hostnames. kopf would do that through
``certbuilder``/``oscrypto``, and oscrypto cannot load OpenSSL 3.0.10 and newer, so
:class:`SelfSignedWebhookServer` builds the certificate with ``cryptography`` instead.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

import kopf

from operators.api.annotations import AnnotationError, parse_pod_claims
from operators.cache.core import CLAIMS_ANNOTATION, SCHEDULING_GATE
from operators.settings import Settings

WEBHOOK_ID = "scheduling-gate"


def gate_patch(pod: Mapping[str, Any]) -> list[dict[str, str]] | None:
    """The schedulingGates value a new pod should have, or None if nothing to change.

    No gate for what it cannot serve: a pod created with ``spec.nodeName`` is bound already
    (the API server refuses gates on it; dralloc allocates on that node), and ``[]`` asks for
    no claims (nobody would ever lift the gate). A claims annotation that does not parse is
    gated all the same: the pod must not run without the devices it meant to ask for, and
    the claim controller reports the problem on it.
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if CLAIMS_ANNOTATION not in annotations:
        return None
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return None
    try:
        if not parse_pod_claims(annotations[CLAIMS_ANNOTATION]):
            return None
    except AnnotationError:
        pass
    gates = list(spec.get("schedulingGates") or [])
    if any(gate.get("name") == SCHEDULING_GATE for gate in gates):
        return None
    return [*gates, {"name": SCHEDULING_GATE}]


@kopf.on.mutate("v1", "pods", id=WEBHOOK_ID, operations=["CREATE"], ignore_failures=True)
def add_scheduling_gate(body: kopf.Body, patch: kopf.Patch, **_: Any) -> None:
    gates = gate_patch(body)
    if gates is not None:
        patch.spec["schedulingGates"] = gates


class SelfSignedWebhookServer(kopf.WebhookServer):
    """kopf's webhook server, generating its self-signed certificate with ``cryptography``."""

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return build_self_signed_certificate(list(hostnames))


def build_self_signed_certificate(hostnames: Sequence[str]) -> tuple[bytes, bytes]:
    """A CA-capable self-signed certificate valid for the hostnames and IPs given."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    names: list[x509.GeneralName] = []
    common_name = ""
    for hostname in dict.fromkeys(hostnames):
        try:
            address = ipaddress.ip_address(hostname)
        except ValueError:
            names.append(x509.DNSName(hostname))
            common_name = common_name or hostname
            continue
        if not address.is_unspecified:
            names.append(x509.IPAddress(address))
            common_name = common_name or str(address)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name or "dralloc")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_pem = certificate.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return cert_pem, key_pem


async def _no_server(fn: Any) -> AsyncIterator[Any]:
    """Stand-in when the webhook is switched off: kopf insists on a server if handlers exist."""
    import asyncio

    await asyncio.Event().wait()
    yield  # pragma: no cover


def configure_admission(kopf_settings: kopf.OperatorSettings, settings: Settings) -> None:
    """Point kopf at the webhook server these settings describe."""
    if not settings.webhook:
        kopf_settings.admission.server = _no_server
        kopf_settings.admission.managed = None
        return
    kopf_settings.admission.server = SelfSignedWebhookServer(
        addr=settings.webhook_addr,
        port=settings.webhook_port or None,
        host=settings.webhook_host or None,
        certfile=settings.webhook_certfile or None,
        pkeyfile=settings.webhook_pkeyfile or None,
        cafile=settings.webhook_cafile or None,
    )
    kopf_settings.admission.managed = settings.webhook_managed or None
