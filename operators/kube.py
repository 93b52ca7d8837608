"""The narrow, typed seam between dralloc and the Kubernetes API.

Controllers talk to the API server only through :class:`KubeClient`: raw JSON dicts in and out
(no client-side model classes: deserializing a large ResourceSlice into kubernetes_asyncio
models costs ~6 ms, and the generated watch code crashes on ``resource.k8s.io`` claims), each
write carrying a precondition (``resourceVersion`` in a merge patch or a JSON-patch ``test``,
``uid`` in delete options), and watches as plain async iterators. The server and credentials
come from ``operators.kubeconfig``; ``operators.credentials`` keeps the credentials current
(a request refused with 401 is sent once more when they were renewed).

Under the client, a :class:`Transport` carries one :class:`Request` and opens its
:class:`Response`, the httpx way: the verbs, the API mode, preconditions, credentials and errors
are the client's; connections, TLS and timeouts the transport's (:class:`AiohttpTransport` for
the API server; the controllers' unit tests put an in-memory API server of their own there, so
they run the real client, group rewrite included, in both modes).

The API mode is a setting of this seam: controllers name the DRA kinds by dralloc's group
(:data:`RESOURCE_CLAIMS` and the rest), and a client made with ``api_group="resource.k8s.io"``
sends every such request to the in-tree kinds instead (same schema, other group).

Errors come back as :class:`ApiError` subclasses named after what the caller does next:
:class:`Conflict` (requeue), :class:`NotFound`, :class:`Gone` (relist). :func:`failure_kind`
sorts any exception a request can raise into the three answers a controller has for it: read
again and retry now, back off and retry the same thing, or tell the user and wait for a fix.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final, Literal, Protocol, TypeGuard

import aiohttp
import orjson
import re2
import structlog

from operators import gojson, metrics
from operators.credentials import Auth, CredentialSource
from operators.groups import GROUP, VERSION
from operators.shapes import Shape

log = structlog.get_logger(__name__)

JsonDict = dict[str, Any]

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

DRALLOC_GROUP = GROUP
DRALLOC_VERSION = VERSION


@dataclasses.dataclass(frozen=True)
class Resource:
    """One API resource: where it lives and whether it is namespaced."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    follows_mode: bool = True  # a DRA kind the API mode moves to resource.k8s.io

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def typed(self) -> bool:
        """The core group's kinds: decoded by the API server into Go structs whose integers
        fit 64 bits (no opaque values, no custom resources)."""
        return not self.group

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str = ""
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
            if subresource:
                base += f"/{subresource}"
        return base


PODS = Resource("", "v1", "pods", "Pod", True)
NODES = Resource("", "v1", "nodes", "Node", False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
EVENTS = Resource("", "v1", "events", "Event", True)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease", True)
SELF_SUBJECT_REVIEWS = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False
)
DEVICE_CLASSES = Resource(DRALLOC_GROUP, DRALLOC_VERSION, "deviceclasses", "DeviceClass", False)
RESOURCE_CLAIMS = Resource(DRALLOC_GROUP, DRALLOC_VERSION, "resourceclaims", "ResourceClaim", True)
RESOURCE_CLAIM_TEMPLATES = Resource(
    DRALLOC_GROUP, DRALLOC_VERSION, "resourceclaimtemplates", "ResourceClaimTemplate", True
)
RESOURCE_SLICES = Resource(DRALLOC_GROUP, DRALLOC_VERSION, "resourceslices", "ResourceSlice", False)
DEVICE_TAINT_RULES = Resource(
    DRALLOC_GROUP, DRALLOC_VERSION, "devicetaintrules", "DeviceTaintRule", False
)
# dralloc's own kind in both API modes (in-tree DRA has no allocation-time quota to mirror).
DEVICE_QUOTAS = Resource(
    DRALLOC_GROUP, DRALLOC_VERSION, "devicequotas", "DeviceQuota", True, follows_mode=False
)

# Upstream's Workload API (Kubernetes 1.37, GenericWorkload gate): read where served, as
# gangs (operators/api/podgroup.py). Not a DRA kind: the same group in both API modes.
POD_GROUPS = Resource("scheduling.k8s.io", "v1beta1", "podgroups", "PodGroup", True)

# Read to choose preemption victims as kube-scheduler does (the fewest budget violations).
DISRUPTION_BUDGETS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True)


DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"  # policy/v1's cause of a refused eviction


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        causes: tuple[str, ...] = (),
        cause_reasons: tuple[str, ...] = (),
        name: str = "",
    ) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.causes = causes  # details.causes[].message (a refused eviction names the budget)
        # details.causes[].reason: "DisruptionBudget" tells a budget's refusal of an eviction
        # from any other 429 (the API server's own throttling).
        self.cause_reasons = cause_reasons
        # details.name: the object the answer is about. A 404 that names it says the object
        # is gone; one that names nothing may be the route (a kind not served, a proxy).
        self.name = name

    @property
    def refused_by_disruption_budget(self) -> bool:
        return self.status == 429 and DISRUPTION_BUDGET_CAUSE in self.cause_reasons

    @staticmethod
    def from_status(status: int, body: Any) -> ApiError:
        reason = message = ""
        causes: tuple[str, ...] = ()
        cause_reasons: tuple[str, ...] = ()
        name = ""
        if isinstance(body, dict):
            reason = str(body.get("reason", ""))
            message = str(body.get("message", ""))
            details = body.get("details")
            if isinstance(details, dict):
                listed = [c for c in details.get("causes") or () if isinstance(c, dict)]
                causes = tuple(str(c["message"]) for c in listed if c.get("message"))
                cause_reasons = tuple(str(c["reason"]) for c in listed if c.get("reason"))
                name = str(details.get("name") or "")
        elif body:
            message = str(body)[:500]
        cls: type[ApiError] = {404: NotFound, 409: Conflict, 410: Gone}.get(status, ApiError)
        if status == 422 and "test operation" in message.lower():
            cls = Conflict  # a failed JSON-patch `test` is a stale precondition, not bad input
        return cls(status, reason, message, causes, cause_reasons, name)


class NotFound(ApiError):
    """404: the object (or its namespace) does not exist."""


class Conflict(ApiError):
    """409, or a failed JSON-patch test: a precondition did not hold; requeue and re-read."""


class Gone(ApiError):
    """410: the resourceVersion is too old to watch from; relist."""


class FailureKind(enum.Enum):
    """What a controller does about a failed request."""

    STALE = "stale"
    """A precondition failed or the object moved on (409, 404, 410): re-read, retry now."""
    UNAVAILABLE = "unavailable"
    """The server cannot answer now (429, 5xx, 401, connection lost, timeout): back off."""
    REJECTED = "rejected"
    """The request itself was refused (400, 403, 422, ...): say why; retrying soon is futile."""


TRANSPORT_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError, TimeoutError, OSError)
"""What a request raises when no answer came back (connection refused or reset, timeout)."""
REQUEST_ERRORS: tuple[type[Exception], ...] = (ApiError, *TRANSPORT_ERRORS)
"""Everything a request raises that is no bug of ours."""


UNREACHABLE_RETRY_CAP_S: Final = 3.0
"""Longest wait between retries while the API server refuses connections. Backoff caps (30 s,
as client-go's) spare a server that answers with errors; one that is down is not helped by
waiting, and after a 40 s restart doubled delays had reached 25.6 s, so the operator idled
for 20 s after the server was back."""


def unreachable(error: BaseException) -> bool:
    """True if no connection could be made (refused, no route): the server is down, not busy."""
    return isinstance(error, aiohttp.ClientConnectorError)


FENCING_REFUSAL: Final = "only the dralloc operator that holds the Lease"
"""What the fencing policy (manifests/base/claim-allocation-fencing.yaml) says when it refuses
a write of an operator that does not hold the Lease (or so the API server's cache says)."""
ADMISSION_NOT_READY: Final = ("no params found for policy binding", "not yet synced")
"""What an admission policy says while its parameter is missing or its cache is not synced
(a Lease about to be created, an API server starting): passing states, not a judgement."""


def fencing_refusal(error: BaseException) -> TypeGuard[ApiError]:
    """The fencing policy refused the request (this replica does not hold the Lease, or the
    API server's cache of it says so)."""
    return isinstance(error, ApiError) and error.status == 403 and FENCING_REFUSAL in error.message


def passing_refusal(error: BaseException) -> bool:
    """A refusal (nothing landed) whose cause passes by itself: the fencing policy judging by
    a Lease its cache has not caught up with (a replica that is really fenced stops anyway),
    or an admission policy whose parameter or cache is not there yet. Retried with backoff,
    not after the long wait of a refusal someone must fix."""
    return fencing_refusal(error) or (
        isinstance(error, ApiError)
        and error.status == 403
        and any(text in error.message for text in ADMISSION_NOT_READY)
    )


def failure_kind(error: BaseException) -> FailureKind | None:
    """How to react to an exception from a request; None if it is no request failure (a bug).

    An unanswered write may still have been applied: callers that must know re-read first.
    401 counts as unavailable because credentials rotate (a restarted API server, a renewed
    token); 403 does not, because RBAC or an admission policy said no (and the write did not
    land; see :func:`passing_refusal` for refusals worth retrying soon).
    """
    if isinstance(error, (Conflict, NotFound, Gone)):
        return FailureKind.STALE
    if isinstance(error, ApiError):
        if error.status in (401, 429) or error.status >= 500:
            return FailureKind.UNAVAILABLE
        return FailureKind.REJECTED
    if isinstance(error, TRANSPORT_ERRORS):
        return FailureKind.UNAVAILABLE
    return None


@dataclasses.dataclass(frozen=True)
class WatchEvent:
    type: Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]
    object: JsonDict


@dataclasses.dataclass(frozen=True)
class Connection:
    """Where the API server is and how to authenticate to it: fixed ``headers``, or, from a
    kubeconfig, a ``credentials`` source that renews them (then ``headers`` and
    ``ssl_context`` are only its credentials at the time the connection was made)."""

    server: str
    ssl_context: ssl.SSLContext | bool
    headers: Mapping[str, str] = dataclasses.field(repr=False)  # the token
    credentials: CredentialSource | None = None

    @classmethod
    async def load(cls, kubeconfig: str = "", context: str | None = None) -> Connection:
        """Kubeconfig file (explicit or $KUBECONFIG), else in-cluster, else ~/.kube/config
        (see ``operators.kubeconfig``; an exec plugin runs in a thread)."""
        return cls.from_source(await CredentialSource.load(kubeconfig or None, context))

    @classmethod
    def from_source(cls, source: CredentialSource) -> Connection:
        """A connection authenticated by ``source``, shared with whoever else holds it (kopf's
        login handler): one load, one renewal, for every client of the process."""
        current = source.current
        return cls(
            server=current.credentials.server,
            ssl_context=current.ssl_context,
            headers=current.headers,
            credentials=source,
        )


@dataclasses.dataclass(frozen=True)
class Request:
    """One HTTP request to the API server, as the client has made it."""

    method: str
    path: str
    params: Mapping[str, str] | None = None
    body: bytes | None = None
    """JSON (see :func:`json_body`), or None."""
    headers: Mapping[str, str] | None = None
    """Content type and the renewable credentials' headers (fixed ones are the transport's)."""
    ssl_context: ssl.SSLContext | bool | None = None
    """TLS for this request when the credentials carry a client certificate of their own."""
    timeout: float | None = None
    """Seconds for the whole request; None for a stream (a watch), bounded by ``read_timeout``."""
    read_timeout: float | None = None
    """Seconds between two reads of a stream before the connection counts as dead."""


class Response(Protocol):
    """An open response: its status, then its body whole or line by line (a watch)."""

    @property
    def status(self) -> int: ...

    async def text(self) -> str: ...

    def lines(self) -> AsyncIterator[bytes]: ...


class Transport(Protocol):
    """Sends a request and opens its response; raises one of :data:`TRANSPORT_ERRORS` when
    no answer comes back."""

    def send(self, request: Request) -> AbstractAsyncContextManager[Response]: ...

    async def close(self) -> None: ...


class _AiohttpResponse:
    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response

    @property
    def status(self) -> int:
        return self._response.status

    async def text(self) -> str:
        return await self._response.text()

    async def lines(self) -> AsyncIterator[bytes]:
        async for line in self._response.content:
            yield line


class AiohttpTransport:
    """The API server over one aiohttp session (connection pool) per client."""

    def __init__(self, connection: Connection, *, user_agent: str, connect_timeout: float) -> None:
        # Renewable credentials go with each request (the client's); fixed ones with the
        # session.
        fixed = connection.headers if connection.credentials is None else {}
        self._connect_timeout = connect_timeout
        self._session = aiohttp.ClientSession(
            base_url=connection.server,
            headers={**fixed, "User-Agent": user_agent, "Accept": "application/json"},
            connector=aiohttp.TCPConnector(ssl=connection.ssl_context, limit=64),
            read_bufsize=4 * 1024 * 1024,  # watch lines can be as large as a ResourceSlice
        )

    @asynccontextmanager
    async def send(self, request: Request) -> AsyncIterator[Response]:
        timeout = aiohttp.ClientTimeout(
            total=request.timeout,
            connect=self._connect_timeout if request.timeout is None else None,
            sock_read=request.read_timeout,
        )
        # A client certificate of the credentials' goes with the request: aiohttp pools
        # connections by TLS context, so none made with an old certificate is reused.
        extra: dict[str, Any] = {}
        if request.ssl_context is not None:
            extra["ssl"] = request.ssl_context
        async with self._session.request(
            request.method,
            request.path,
            params=request.params,
            data=request.body,
            headers=request.headers,
            timeout=timeout,
            **extra,
        ) as response:
            yield _AiohttpResponse(response)

    async def close(self) -> None:
        await self._session.close()


def refused_by_role(error: ApiError, verb: str) -> bool:
    """Whether the API server's authorizer refused ``verb`` (RBAC's "cannot <verb> resource"),
    not admission (a policy's or a webhook's refusal is also a 403)."""
    return error.status == 403 and f"cannot {verb} resource" in error.message


def merge_patched(doc: Mapping[str, Any], patch: Mapping[str, Any]) -> JsonDict:
    """``patch`` applied to ``doc`` as the API server applies a JSON merge patch (RFC 7386):
    objects merge key by key, ``null`` removes a key, anything else replaces. ``doc`` is not
    changed; parts the patch does not touch are shared with it, not copied."""
    out = dict(doc)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            current = out.get(key)
            out[key] = merge_patched(current if isinstance(current, Mapping) else {}, value)
        else:
            out[key] = value
    return out


# RE2: a linear scan, ten times faster than ``re`` on this pattern (7 against 42 us per pod).
_LONG_NUMBER = re2.compile(r"[:,\[]\s*-?[0-9]{20}")
_LONG_NUMBER_BYTES = re2.compile(rb"[:,\[]\s*-?[0-9]{20}")


def decode_json(text: str | bytes, *, typed: bool = False) -> Any:
    """The API server's JSON as Python objects, as ``json`` reads it, in about half the time.

    orjson reads a realistic pod in about half the time ``json`` takes (most of an operator's
    restart on a big cluster is decoding lists: ``bench/cache_scale.py``). Where the two
    differ, ``json`` reads the text: orjson refuses an escaped lone surrogate, NaN and
    overflowing exponents, and reads an integer beyond 64 bits as a float, which written back
    would change the bytes of an opaque value the API server compares (:func:`json_body`).
    Such an integer has at least 20 digits; a text with such a run right after ``:``, ``,``
    or ``[`` (rare inside strings too) goes to ``json`` whole.

    ``typed``: the text is a kind the API server decodes into Go structs whose integers are
    all 64 bits at most (the core group's: no opaque values), so the scan is skipped (a
    sixth of decoding a pod)."""
    long_number = _LONG_NUMBER_BYTES if isinstance(text, bytes) else _LONG_NUMBER
    if typed or long_number.search(text) is None:  # type: ignore[arg-type]
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def json_body(body: Any) -> bytes:
    """A request body as Go's encoding/json writes it (:mod:`operators.gojson`): the API
    server compares the bytes of an opaque value (a ResourceClaim's config ``parameters``)
    as its creator wrote them with the bytes of every later update, whoever writes it. A
    resource.k8s.io claim written with spaces in them (the default of ``json.dumps``), a raw
    ``<`` or an escaped ``é`` could never be updated again by the other writer ("spec:
    Invalid value ...: field is immutable")."""
    return gojson.dumps(body)


class KubeClient:
    """A small async JSON client for the API server; one aiohttp session per process."""

    def __init__(
        self,
        connection: Connection,
        *,
        request_timeout: float = 30.0,
        user_agent: str = "dralloc",
        api_group: str = DRALLOC_GROUP,
        transport: Transport | None = None,
    ) -> None:
        self.connection = connection
        self.request_timeout = request_timeout
        self.api_group = api_group
        self._resolved: dict[Resource, Resource] = {}
        # Discovery: the resource names a group version serves (subresources included).
        self._discovered: dict[str, frozenset[str]] = {}
        self._credentials = connection.credentials
        self.updates_refused: set[str] = set()
        """Resources (``plural`` or ``plural/subresource``) this identity may patch but not
        update (a role from before dralloc updated pods): merge_update patches them."""
        self.transport: Transport = transport or AiohttpTransport(
            connection, user_agent=user_agent, connect_timeout=request_timeout
        )

    @classmethod
    async def connect(cls, kubeconfig: str = "", **kwargs: Any) -> KubeClient:
        return cls(await Connection.load(kubeconfig), **kwargs)

    async def close(self) -> None:
        await self.transport.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # --- plumbing --------------------------------------------------------------------------

    def resolve(self, resource: Resource) -> Resource:
        """The resource as served in this client's API mode (DRA kinds change group)."""
        resolved = self._resolved.get(resource)
        if resolved is None:
            resolved = resource
            if (
                resource.group == DRALLOC_GROUP
                and resource.follows_mode
                and self.api_group != DRALLOC_GROUP
            ):
                resolved = dataclasses.replace(resource, group=self.api_group)
            self._resolved[resource] = resolved
        return resolved

    async def _auth(self) -> Auth | None:
        """The credentials for the next request (renewed first when due); None when fixed."""
        return None if self._credentials is None else await self._credentials.get()

    async def _renewed(self, refused: Auth | None) -> Auth | None:
        """After a 401: newer credentials than the refused ones, or None if there are none
        (then the 401 stands)."""
        if refused is None or self._credentials is None:
            return None
        renewed = await self._credentials.renew(refused)
        if renewed.headers == refused.headers and renewed.ssl_context is refused.ssl_context:
            return None  # read or obtained again, but the same: sending it again is futile
        return renewed

    @staticmethod
    def _with(auth: Auth | None, request: Request) -> Request:
        """``request`` carrying ``auth``: its headers, and its TLS context (an exec plugin
        may give a new client certificate)."""
        if auth is None:
            return request
        return dataclasses.replace(
            request,
            headers={**auth.headers, **(request.headers or {})},
            ssl_context=auth.ssl_context,
        )

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        typed: bool = False,
        shape: Shape | None = None,
    ) -> JsonDict:
        """One request; its answer decoded (``typed``: see :func:`decode_json`; a list's
        ``shape``: only the fields it names, see :mod:`operators.shapes`)."""
        data = None if body is None else json_body(body)
        headers = {"Content-Type": content_type} if data is not None else None
        request = Request(method, path, params, data, headers, timeout=self.request_timeout)
        auth = await self._auth()
        status, text = await self._send(self._with(auth, request))
        if status == 401 and (renewed := await self._renewed(auth)) is not None:
            # Refused with credentials that have been renewed since: once more with the new.
            status, text = await self._send(self._with(renewed, request))
        payload: Any = None
        if shape is not None and text and status < 400:
            payload = shape.decode(text)
        try:
            if payload is None:
                payload = decode_json(text, typed=typed) if text else {}
        except ValueError:
            payload = text
        if status >= 400:
            raise ApiError.from_status(status, payload)
        return payload if isinstance(payload, dict) else {}

    async def _send(self, request: Request) -> tuple[int, str]:
        try:
            async with self.transport.send(request) as response:
                status = response.status
                text = await response.text()
        except TRANSPORT_ERRORS:
            metrics.API_REQUESTS.labels(method=request.method, code="error").inc()
            raise
        metrics.API_REQUESTS.labels(method=request.method, code=str(status)).inc()
        return status, text

    async def serves_subresource(self, resource: Resource, subresource: str) -> bool | None:
        """Whether the API server serves ``subresource`` of the resource at its version (from
        discovery, asked once per group version), or None when discovery cannot say."""
        resolved = self.resolve(resource)
        base = f"/apis/{resolved.group}/{resolved.version}" if resolved.group else "/api/v1"
        names = self._discovered.get(base)
        if names is None:
            try:
                listing = await self.request("GET", base)
            except REQUEST_ERRORS:
                return None
            names = frozenset(
                str(r.get("name", ""))
                for r in listing.get("resources") or ()
                if isinstance(r, dict)
            )
            self._discovered[base] = names
        return f"{resolved.plural}/{subresource}" in names

    # --- reads -----------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonDict:
        return await self.request("GET", self.resolve(resource).path(namespace, name))

    async def list_pages(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        shape: Shape | None = None,
    ) -> AsyncIterator[tuple[list[JsonDict], str]]:
        """The objects page by page, each page with the list's resourceVersion: a reader that
        keeps less than the whole objects need not hold them all at once (150,000 pods
        as decoded JSON are gigabytes). With a ``shape``, the objects hold only the fields
        it names (:mod:`operators.shapes`)."""
        resource = self.resolve(resource)
        params: dict[str, str] = {"limit": str(limit)}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        while True:
            page = await self.request(
                "GET", resource.path(namespace), params=params, typed=resource.typed, shape=shape
            )
            items: list[JsonDict] = page.get("items") or []
            for item in items:
                # List items carry no apiVersion/kind; fill them so consumers see whole objects.
                item.setdefault("apiVersion", resource.api_version)
                item.setdefault("kind", resource.kind)
            metadata = page.get("metadata") or {}
            del page
            yield items, str(metadata.get("resourceVersion", ""))
            token = metadata.get("continue")
            if not token:
                return
            params["continue"] = token

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
    ) -> tuple[list[JsonDict], str]:
        """All objects (paginated) and the list's resourceVersion to watch from."""
        items: list[JsonDict] = []
        listed = ""
        async for page, version in self.list_pages(
            resource,
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
        ):
            items.extend(page)
            listed = version
        return items, listed

    async def watch(
        self,
        resource: Resource,
        resource_version: str,
        *,
        namespace: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """One watch request; ends when the server closes it. Raises Gone on 410."""
        resource = self.resolve(resource)
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        # No total timeout; the read timeout notices a dead connection (bookmarks arrive
        # about once a minute, and the server ends the request after timeout_seconds).
        request = Request(
            "GET", resource.path(namespace), params, read_timeout=timeout_seconds + 30
        )
        # The credentials as they are at this (re)connect; a refusal renews them and the
        # watch is opened once more with the new ones, as a request is sent once more.
        auth = await self._auth()
        for last_try in (False, True):
            async with self.transport.send(self._with(auth, request)) as response:
                if response.status == 401 and not last_try:
                    renewed = await self._renewed(auth)
                    if renewed is not None:
                        auth = renewed
                        continue
                if response.status >= 400:
                    text = await response.text()
                    try:
                        payload: Any = decode_json(text)
                    except ValueError:
                        payload = text
                    raise ApiError.from_status(response.status, payload)
                async for line in response.lines():
                    if not line.strip():
                        continue
                    event = decode_json(line, typed=resource.typed)
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        raise ApiError.from_status(int(obj.get("code") or 500), obj)
                    yield WatchEvent(kind, obj)
                return

    # --- writes ----------------------------------------------------------------------------

    async def create(
        self, resource: Resource, body: JsonDict, namespace: str | None = None
    ) -> JsonDict:
        resource = self.resolve(resource)
        if body.get("apiVersion") != resource.api_version and resource.group:
            body = {**body, "apiVersion": resource.api_version}
        return await self.request("POST", resource.path(namespace), body=body)

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: JsonDict,
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        subresource: str = "",
    ) -> JsonDict:
        """Merge patch; with ``resource_version`` the server refuses it (409) if stale."""
        if resource_version is not None:
            metadata = dict(patch.get("metadata") or {})
            metadata["resourceVersion"] = resource_version
            patch = {**patch, "metadata": metadata}
        path = self.resolve(resource).path(namespace, name, subresource)
        return await self.request("PATCH", path, body=patch, content_type=MERGE_PATCH)

    async def merge_update(
        self,
        resource: Resource,
        name: str,
        patch: JsonDict,
        *,
        base: Mapping[str, Any] | None,
        namespace: str | None = None,
        resource_version: str,
        subresource: str = "",
    ) -> JsonDict:
        """A merge patch, applied here to ``base`` (the object as the API server sent it) and
        sent as an update (PUT) with ``resource_version`` as its precondition: the server
        decodes the object instead of encoding the stored one, merging and decoding again,
        which costs it less. Without a base at that version, sent as a merge patch."""
        metadata = (base or {}).get("metadata") or {}
        what = f"{resource.plural}/{subresource}" if subresource else resource.plural
        if (
            base is not None
            and str(metadata.get("resourceVersion")) == resource_version
            and what not in self.updates_refused
        ):
            body = merge_patched(base, patch)
            body["metadata"] = {**body["metadata"], "resourceVersion": resource_version}
            resolved = self.resolve(resource)
            body.setdefault("apiVersion", resolved.api_version)
            body.setdefault("kind", resolved.kind)
            path = resolved.path(namespace, name, subresource)
            try:
                return await self.request("PUT", path, body=body)
            except ApiError as error:
                if not refused_by_role(error, "update"):
                    raise
                # Its role lets it patch but not update (granted before dralloc updated
                # pods): patch from now on, and say so once.
                self.updates_refused.add(what)
                log.warning(
                    "the operator's role may not update this resource: merge patches instead, "
                    "which cost the API server more; grant update (manifests/base/clusterrole.yaml)",
                    resource=what,
                )
        return await self.merge_patch(
            resource,
            name,
            patch,
            namespace=namespace,
            resource_version=resource_version,
            subresource=subresource,
        )

    async def json_patch(
        self,
        resource: Resource,
        name: str,
        operations: Sequence[JsonDict],
        *,
        namespace: str | None = None,
        resource_version: str | None = None,
        subresource: str = "",
    ) -> JsonDict:
        """JSON patch; with ``resource_version`` a leading ``test`` makes it conditional."""
        ops = list(operations)
        if resource_version is not None:
            ops.insert(
                0, {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}
            )
        path = self.resolve(resource).path(namespace, name, subresource)
        return await self.request("PATCH", path, body=ops, content_type=JSON_PATCH)

    async def replace_status(self, resource: Resource, body: JsonDict) -> JsonDict:
        """PUT the status subresource; the body's resourceVersion is the precondition."""
        metadata = body["metadata"]
        path = self.resolve(resource).path(metadata.get("namespace"), metadata["name"], "status")
        return await self.request("PUT", path, body=body)

    async def replace(self, resource: Resource, body: JsonDict) -> JsonDict:
        metadata = body["metadata"]
        return await self.request(
            "PUT",
            self.resolve(resource).path(metadata.get("namespace"), metadata["name"]),
            body=body,
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        *,
        namespace: str | None = None,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> JsonDict:
        """Delete, refused by the server (409) if the uid or resourceVersion differ."""
        preconditions = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        body = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if preconditions:
            body["preconditions"] = preconditions  # type: ignore[assignment]
        return await self.request("DELETE", self.resolve(resource).path(namespace, name), body=body)

    async def post_event(
        self,
        involved: JsonDict,
        *,
        reason: str,
        message: str,
        type_: Literal["Normal", "Warning"] = "Normal",
        component: str = "dralloc",
    ) -> None:
        """Record a core/v1 Event about an object; failures are the caller's to ignore."""
        metadata = involved.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        now = timestamp()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "generateName": f"{metadata.get('name', 'object')}.",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", ""),
                "kind": involved.get("kind", ""),
                "name": metadata.get("name", ""),
                "namespace": metadata.get("namespace", ""),
                "uid": metadata.get("uid", ""),
                "resourceVersion": metadata.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message[:1024],
            "type": type_,
            "source": {"component": component},
            "reportingComponent": component,
            "reportingInstance": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self.create(EVENTS, body, namespace)


def timestamp(when: datetime.datetime | None = None) -> str:
    """A metav1.Time as the API writes it (UTC, whole seconds); now if ``when`` is None."""
    moment = when or datetime.datetime.now(datetime.UTC)
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def object_ref(obj: Mapping[str, Any]) -> str:
    """``namespace/name`` (or ``name``) for logs; never the body."""
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))
