"""The admission webhooks: pods that ask for claims start behind a scheduling gate, and
classes, claims and templates with a selector upstream's API server would refuse are refused.

Without the gate, kube-scheduler could bind a pod before the allocator has chosen a node with
free devices. The mutating webhook only adds the gate; everything else about the pod stays as
the user wrote it. The validating one compiles the CEL selectors of dralloc's kinds as the API
server compiles those of resource.k8s.io (in-tree it does that itself): a selector that does
not compile, has a type error, is too costly or uses a field its feature gate hides is refused
at ``kubectl apply`` naming the field, not only at allocation. Both run on every replica
(admission must not depend on who is leader).

Serving: kopf's aiohttp webhook server. With certificate files it uses them; without, it
generates a self-signed certificate for its hostnames. kopf would do that through
``certbuilder``/``oscrypto``, and oscrypto cannot load OpenSSL 3.0.10 and newer, so
:class:`SelfSignedWebhookServer` builds the certificate with ``cryptography`` instead.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import AsyncIterator, Collection, Iterable, Mapping
from typing import Any

import kopf

from operators.api import InvalidObjectError, parse_object
from operators.api.deviceclass import DeviceClass
from operators.api.extendedresources import (
    ENTRY_NAME,
    EXTENDED_RESOURCES_ANNOTATION,
    RANDOM_LENGTH,
    ExtendedResourceError,
    Translation,
    served_mapping,
    translate,
)
from operators.api.models import GROUP
from operators.api.podprotocol import DRALLOC, PodProtocol, protocol_for
from operators.cache.core import SCHEDULING_GATE, Namespace
from operators.cache.informer import Key
from operators.cel.admission import Checked, invalid_message, refused_selectors
from operators.certificates import build_self_signed_certificate
from operators.controllers.runtime import MEMO_KEY, current_settings
from operators.kube import DEVICE_CLASSES, NAMESPACES
from operators.settings import Settings

WEBHOOK_ID = "scheduling-gate"
#: Handler ids (and so URL paths) of the selector webhooks, one per kind.
SELECTOR_WEBHOOK_IDS = {
    "deviceclasses": "selectors-deviceclasses",
    "resourceclaims": "selectors-resourceclaims",
    "resourceclaimtemplates": "selectors-resourceclaimtemplates",
}
#: The API server's status code for an invalid object.
UNPROCESSABLE = 422
#: Seconds a starting replica's webhook waits for its cache (the DeviceClasses) before it
#: admits a pod untranslated (the claim controller then reports it).
CLASSES_WAIT_S = 4.0


def gate_patch(
    pod: Mapping[str, Any], protocol: PodProtocol = DRALLOC
) -> list[dict[str, str]] | None:
    """The schedulingGates value a new pod should have, or None if nothing to change.

    No gate for what it cannot serve: a pod created with ``spec.nodeName`` is bound already
    (the API server refuses gates on it; dralloc allocates on that node), and an empty
    request asks for no claims (nobody would ever lift the gate). A claims annotation that
    does not parse is gated all the same: the pod must not run without the devices it meant
    to ask for, and the claim controller reports the problem on it.
    """
    if not protocol.asks_for_claims(pod):
        return None
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return None
    claims, error = protocol.pod_claims(pod)
    if not claims and not error:
        return None
    gates = list(spec.get("schedulingGates") or [])
    if any(gate.get("name") == SCHEDULING_GATE for gate in gates):
        return None
    return [*gates, {"name": SCHEDULING_GATE}]


def extended_translation(
    pod: Mapping[str, Any], classes: Iterable[DeviceClass], settings: Settings
) -> Translation | None:
    """The claim a new pod's DRA extended resources become, or None (none asked for, or
    their classes are left to kube-scheduler). Raises ExtendedResourceError for a request no
    claim can serve."""
    served = served_mapping(classes, settings.scheduler_classes)
    return translate(pod, served, secrets.token_hex(RANDOM_LENGTH // 2))


@kopf.on.mutate("v1", "pods", id=WEBHOOK_ID, operations=["CREATE"], ignore_failures=True)
async def add_scheduling_gate(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any
) -> None:
    settings = current_settings()
    protocol = protocol_for(settings.api_group)
    namespace = (body.get("metadata") or {}).get("namespace") or ""
    pod: Mapping[str, Any] = body
    translation = None
    runtime = memo.get(MEMO_KEY)
    if settings.translates_extended_resources and runtime is not None:
        forged = _dralloc_s_own(body)
        if forged and await _serves(memo, settings, namespace):
            raise kopf.AdmissionError(forged, code=UNPROCESSABLE)
        if not runtime.cache.synced:  # a replica starting: its classes are not known yet
            with contextlib.suppress(TimeoutError):
                await runtime.cache.wait_synced(timeout=CLASSES_WAIT_S)
        classes = runtime.cache[DEVICE_CLASSES].values()
        try:
            translation = extended_translation(body, classes, settings)
        except ExtendedResourceError as error:
            if await _serves(memo, settings, namespace):
                raise kopf.AdmissionError(str(error), code=UNPROCESSABLE) from None
        if translation is not None and await _serves(memo, settings, namespace):
            changed = copy.deepcopy(dict(body))
            translation.apply(changed)
            pod = changed
            patch.metadata["annotations"] = {
                EXTENDED_RESOURCES_ANNOTATION: translation.claim.to_annotation()
            }
            if translation.init_containers is not None:
                patch.spec["initContainers"] = translation.init_containers
            patch.spec["containers"] = translation.containers
            patch.spec["resourceClaims"] = translation.resource_claims
        else:
            translation = None
    gates = gate_patch(pod, protocol)
    if gates is None:
        return
    if translation is None and not await _serves(memo, settings, namespace):
        return  # left to kube-scheduler (in-tree), or to whoever serves it
    patch.spec["schedulingGates"] = gates


def _dralloc_s_own(pod: Mapping[str, Any]) -> str:
    """Why a new pod may not carry what the webhook writes for its extended resources
    ('' = it does not): the claim controller would create the claim it names."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if EXTENDED_RESOURCES_ANNOTATION in annotations:
        return (
            f"annotation {EXTENDED_RESOURCES_ANNOTATION}: set by dralloc's webhook only (it "
            "records the claim a pod's extended resources become)"
        )
    entries = (pod.get("spec") or {}).get("resourceClaims") or ()
    if any(isinstance(e, Mapping) and e.get("name") == ENTRY_NAME for e in entries):
        return (
            f"spec.resourceClaims: the entry name {ENTRY_NAME!r} is dralloc's, for the claim "
            "of the pod's extended resources"
        )
    return ""


async def _serves(memo: Any, settings: Settings, namespace: str) -> bool:
    """Whether dralloc serves this namespace, as far as can be known now."""
    if namespace in settings.unserved:
        return False
    if settings.gate_namespace_selector is None:
        return True
    # Labels unknown (no answer): served. An ungated pod would pass dralloc by; a gated one
    # of another namespace is still served, by dralloc. A cached "not selected" is read
    # again live: the label may have been set a moment ago.
    labels = await _namespace_labels(memo, namespace, live=False)
    if labels is not None and not settings.serves_namespace(namespace, labels):
        labels = await _namespace_labels(memo, namespace, live=True)
        if labels is not None and not settings.serves_namespace(namespace, labels):
            return False
    return True


def selector_verdict(
    body: Mapping[str, Any], old: Mapping[str, Any] | None, settings: Settings
) -> str | None:
    """Why the API server would refuse this object for its selectors, or None to admit it.

    ``old`` is the stored object on an update. An object that does not parse is admitted:
    the CRD's schema has already checked what the API server checks, and whatever the
    models refuse beyond that the controllers report where the user looks.
    """
    try:
        obj = parse_object(body)
        previous = parse_object(old) if old is not None else None
    except InvalidObjectError:
        return None
    if not isinstance(obj, Checked) or (previous is not None and not isinstance(previous, Checked)):
        return None
    gates = settings.feature_gates
    problems = refused_selectors(
        obj,
        previous,
        list_attributes=gates["DRAListTypeAttributes"],
        consumable_capacity=gates["DRAConsumableCapacity"],
    )
    if not problems:
        return None
    name = str((body.get("metadata") or {}).get("name") or "")
    return invalid_message(str(body.get("kind")), GROUP, name, problems)


def _refuse_bad_selectors(body: kopf.Body, old: Any) -> None:
    message = selector_verdict(body, old, current_settings())
    if message is not None:
        raise kopf.AdmissionError(message, code=UNPROCESSABLE)


# Claims and templates: the spec is immutable (the CRD says so), so only a create brings
# new expressions; a class's update may change its selectors.
@kopf.on.validate(
    GROUP, "v1", "deviceclasses", id=SELECTOR_WEBHOOK_IDS["deviceclasses"],
    operations=["CREATE", "UPDATE"],
)  # fmt: skip
async def validate_class_selectors(body: kopf.Body, **kwargs: Any) -> None:
    _refuse_bad_selectors(body, kwargs.get("old"))


@kopf.on.validate(
    GROUP, "v1", "resourceclaims", id=SELECTOR_WEBHOOK_IDS["resourceclaims"],
    operations=["CREATE"],
)  # fmt: skip
async def validate_claim_selectors(body: kopf.Body, **_: Any) -> None:
    _refuse_bad_selectors(body, None)


@kopf.on.validate(
    GROUP, "v1", "resourceclaimtemplates", id=SELECTOR_WEBHOOK_IDS["resourceclaimtemplates"],
    operations=["CREATE"],
)  # fmt: skip
async def validate_template_selectors(body: kopf.Body, **_: Any) -> None:
    _refuse_bad_selectors(body, None)


async def _namespace_labels(memo: Any, name: str, *, live: bool) -> Mapping[str, str] | None:
    """A namespace's labels from the shared cache (``live``: or the API server, also when
    the cache lacks it); None if they cannot be known now."""
    runtime = memo.get(MEMO_KEY)
    if runtime is None:
        return None
    cached: Namespace | None = runtime.cache[NAMESPACES].get(Key("", name))
    if cached is not None and not live:
        return cached.labels
    try:
        raw = await runtime.client.get(NAMESPACES, name)
    except Exception:
        return None
    return dict((raw.get("metadata") or {}).get("labels") or {})


class SelfSignedWebhookServer(kopf.WebhookServer):
    """kopf's webhook server, generating its self-signed certificate with ``cryptography``."""

    @staticmethod
    def build_certificate(
        hostnames: Collection[str], password: str | None = None
    ) -> tuple[bytes, bytes]:
        return build_self_signed_certificate(list(hostnames))


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
