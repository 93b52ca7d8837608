"""A scripted API server behind the real client, and object builders, for testing controllers
without a cluster.

The controllers only talk to :class:`operators.kube.KubeClient`. :class:`FakeClient` is that
client, over :class:`FakeServer`, a transport (:class:`operators.kube.Transport`) that answers
like a tiny API server (names, uids, resourceVersions, merge and JSON patches, Events) and
fails the calls a test scripts to fail. So the client's own work runs in the tests: bodies,
preconditions, and the API mode's group rewrite (``FakeClient(api_group="resource.k8s.io")``,
or ``runtime(client, api_group=...)``). A test feeds the shared cache by hand
(``Informer.apply``) and watches what a controller writes, posts and requeues.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from operators.cache.core import (
    ADMIN_ACCESS_LABEL,
    CLAIMS_ANNOTATION,
    FINALIZER,
    SCHEDULING_GATE,
)
from operators.controllers.runtime import Runtime
from operators.groups import GROUP, VERSION
from operators.kube import (
    DEVICE_CLASSES,
    DEVICE_QUOTAS,
    DRALLOC_GROUP,
    JSON_PATCH,
    NAMESPACES,
    NODES,
    RESOURCE_SLICES,
    Connection,
    JsonDict,
    KubeClient,
    Request,
    Resource,
    Response,
)
from operators.settings import Settings

API_VERSION = f"{DRALLOC_GROUP}/v1"
DRIVER = "gpu.example.com"
CLASS = "gpu"

Failure = Callable[[str, str, JsonDict | None], BaseException | None]
"""(method, path, body) -> the exception to raise for this call, or None to answer it."""


WRITES = ("PATCH", "PUT")
"""The methods an object's change comes in: a merge patch, or an update of the object as read
(KubeClient.merge_update, when the cache kept it)."""


@dataclasses.dataclass
class Call:
    method: str
    path: str
    body: Any


@dataclasses.dataclass
class FakeResponse:
    status: int
    body: str

    async def text(self) -> str:
        return self.body

    async def lines(self) -> AsyncIterator[bytes]:
        for line in self.body.splitlines():
            yield line.encode()


class FakeServer:
    """The transport: stores what is created or patched, by path, with fresh resourceVersions;
    answers a GET of a stored object, 404 otherwise. Deletions, evictions and strategic merge
    patches (pod status conditions) are recorded and answered ``{}`` without changing what is
    stored. Preconditions are not checked: a test scripts a conflict with ``fail``."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: list[JsonDict] = []
        self.objects: dict[str, JsonDict] = {}
        self.fail: Failure = lambda _method, _path, _body: None
        self._versions = itertools.count(1000)
        # Discovery: "plural/subresource" names served, by version; a version not here
        # reads as "discovery cannot say" (the callers then fall back to what they know).
        self.subresources: dict[str, frozenset[str]] = {}

    @contextlib.asynccontextmanager
    async def send(self, request: Request) -> AsyncIterator[Response]:
        body = json.loads(request.body) if request.body is not None else None
        self.calls.append(Call(request.method, request.path, body))
        error = self.fail(request.method, request.path, body)
        if error is not None:
            raise error
        status, answer = self._answer(request, body)
        yield FakeResponse(status, json.dumps(answer))

    async def close(self) -> None:
        pass

    def _answer(self, request: Request, body: Any) -> tuple[int, JsonDict]:
        method, path = request.method, request.path
        content_type = (request.headers or {}).get("Content-Type", "")
        if method == "GET" and path.count("/") in (2, 3) and path.startswith(("/apis/", "/api/")):
            return self._discovery(path)
        if method == "POST" and path.endswith("/eviction"):
            return 201, {}
        if method == "POST":
            return 201, self._create(path, body)
        if method == "GET":
            if path not in self.objects:
                return _not_found(path)
            return 200, self.objects[path]
        if method == "PATCH" and "strategic-merge-patch" in content_type:
            return 200, {}
        if method == "PATCH":
            base_path = _object_path(path)
            base = self.objects.get(base_path)
            if base is None:
                return _not_found(base_path)
            if content_type == JSON_PATCH:
                return 200, self._stored(base_path, apply_json_patch(base, body))
            return 200, self._stored(base_path, apply_merge_patch(base, body))
        if method == "PUT":
            return 200, self._stored(_object_path(path), body)
        return 200, {}  # DELETE

    def _discovery(self, path: str) -> tuple[int, JsonDict]:
        served = self.subresources.get(path.rsplit("/", 1)[-1])
        if served is None:
            return _not_found(path)
        return 200, {"resources": [{"name": name} for name in sorted(served)]}

    def _create(self, path: str, body: JsonDict) -> JsonDict:
        metadata = dict(body["metadata"])
        metadata.setdefault("name", f"{metadata.pop('generateName', 'x-')}abcde")
        metadata["uid"] = f"uid-{metadata['name']}"
        if path.endswith("/events"):
            involved = body.get("involvedObject") or {}
            self.events.append(
                {
                    "involved": {
                        "apiVersion": involved.get("apiVersion", ""),
                        "kind": involved.get("kind", ""),
                        "metadata": {
                            k: involved[k]
                            for k in ("name", "namespace", "uid", "resourceVersion")
                            if involved.get(k)
                        },
                    },
                    "reason": body.get("reason"),
                    "message": body.get("message"),
                    "type_": body.get("type"),
                }
            )
        return self._stored(f"{path}/{metadata['name']}", {**body, "metadata": metadata})

    def _stored(self, path: str, body: JsonDict) -> JsonDict:
        stored = json.loads(json.dumps(body))
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        self.objects[path] = stored
        return stored


def _object_path(path: str) -> str:
    """The object a subresource's path belongs to."""
    for subresource in ("/status", "/binding", "/eviction"):
        if path.endswith(subresource):
            return path[: -len(subresource)]
    return path


def _not_found(path: str) -> tuple[int, JsonDict]:
    name = path.rsplit("/", 1)[-1]
    message = f"{path.rsplit('/', 2)[-2]} {name!r} not found"
    return 404, {"kind": "Status", "reason": "NotFound", "message": message, "code": 404}


class FakeClient(KubeClient):
    """The real client over a :class:`FakeServer`; the server's records are read through it
    (``calls``, ``events``, ``objects``, ``fail``, ``subresources``)."""

    def __init__(self, api_group: str = GROUP) -> None:
        self.server = FakeServer()
        connection = Connection("https://fake.invalid", False, {})
        super().__init__(connection, api_group=api_group, transport=self.server)

    def serve(self, api_group: str) -> None:
        """Serve the DRA kinds under ``api_group`` from now on (the runtime's API mode)."""
        self.api_group = api_group
        self._resolved.clear()

    @property
    def calls(self) -> list[Call]:
        return self.server.calls

    @property
    def events(self) -> list[JsonDict]:
        return self.server.events

    @property
    def objects(self) -> dict[str, JsonDict]:
        return self.server.objects

    @property
    def subresources(self) -> dict[str, frozenset[str]]:
        return self.server.subresources

    @property
    def fail(self) -> Failure:
        return self.server.fail

    @fail.setter
    def fail(self, failure: Failure) -> None:
        self.server.fail = failure

    def path(
        self, resource: Resource, namespace: str | None = None, name: str | None = None
    ) -> str:
        """Where this client sends requests about ``resource`` (its API mode's group)."""
        return self.resolve(resource).path(namespace, name)

    def remember(self, resource: Resource, raw: JsonDict) -> None:
        """Make a live GET of this object answer ``raw``."""
        metadata = raw["metadata"]
        self.objects[self.path(resource, metadata.get("namespace"), metadata["name"])] = raw

    def writes(self, path_part: str) -> list[Call]:
        """Writes whose path contains ``path_part``; a path of dralloc's group names the DRA
        kind in this client's API mode (tests name kinds as the controllers do)."""
        wanted = self._in_mode(path_part)
        return [c for c in self.calls if c.method != "GET" and wanted in c.path]

    def _in_mode(self, path: str) -> str:
        prefix = f"/apis/{GROUP}/{VERSION}/"
        if self.api_group == GROUP or prefix not in path or DEVICE_QUOTAS.plural in path:
            return path
        return path.replace(prefix, f"/apis/{self.api_group}/{VERSION}/")


def apply_merge_patch(base: Any, patch: Any) -> Any:
    """JSON merge patch (RFC 7386): objects merge, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(base, dict):
        base = {}
    merged = dict(base)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = apply_merge_patch(base.get(key), value)
    return merged


def apply_json_patch(base: JsonDict, operations: list[JsonDict]) -> JsonDict:
    """JSON patch (RFC 6902) with the operations the controllers send: test, add, replace,
    remove (a failed test answers as the server would not: the fake checks no preconditions)."""
    document = json.loads(json.dumps(base))
    for op in operations:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")
        ]
        target: Any = document
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target.setdefault(part, {})
        if op["op"] == "test":
            continue
        if op["op"] == "remove":
            if isinstance(target, list):
                del target[int(last)]
            else:
                target.pop(last, None)
        elif isinstance(target, list):
            index = len(target) if last == "-" else int(last)
            if op["op"] == "add":
                target.insert(index, op["value"])
            else:
                target[index] = op["value"]
        else:
            target[last] = op["value"]
    return document


def put(runtime: Runtime, resource: Resource, raw: JsonDict) -> None:
    """An object that exists: in the shared cache (as if watched) and on the fake server."""
    runtime.cache[resource].apply("ADDED", raw)
    client = runtime.client
    assert isinstance(client, FakeClient)
    client.remember(resource, raw)


def runtime(client: FakeClient, **settings: Any) -> Runtime:
    """A runtime whose caches count as listed (whole): the tests feed them events."""
    base = dataclasses.replace(Settings(), leader_election=False)
    chosen = dataclasses.replace(base, **settings)
    client.serve(chosen.api_group)  # the client of the runtime's API mode, as in the operator
    made = Runtime(chosen, client)
    for informer in made.cache.informers.values():
        informer.whole = True
    return made


def one_device_cluster(
    client: FakeClient, *, admin_namespace: bool = False, **settings: Any
) -> Runtime:
    """Namespace "ns", node "n1" with one device of class "gpu"; no pods or claims yet."""
    made = runtime(client, **settings)
    cache = made.cache
    cache[NAMESPACES].apply("ADDED", namespace("ns", admin=admin_namespace))
    cache[NODES].apply("ADDED", node("n1"))
    cache[DEVICE_CLASSES].apply("ADDED", device_class())
    cache[RESOURCE_SLICES].apply("ADDED", resource_slice("n1", devices=1))
    return made


# --- objects ------------------------------------------------------------------------------


def namespace(name: str, *, admin: bool = False) -> JsonDict:
    labels = {ADMIN_ACCESS_LABEL: "true"} if admin else {}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "uid": f"uid-ns-{name}",
            "resourceVersion": "1",
            "labels": labels,
        },
    }


def node(name: str) -> JsonDict:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {},
    }


def device_class() -> JsonDict:
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": CLASS, "uid": "uid-class", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def resource_slice(node_name: str, devices: int) -> JsonDict:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceSlice",
        "metadata": {
            "name": f"{node_name}-gpu",
            "uid": f"uid-slice-{node_name}",
            "resourceVersion": "1",
        },
        "spec": {
            "driver": DRIVER,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"dev-{i}"} for i in range(devices)],
        },
    }


def claim_spec(**request: Any) -> JsonDict:
    return {
        "devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": CLASS, **request}}]}
    }


def template(ns: str, name: str, **request: Any) -> JsonDict:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-t-{name}", "resourceVersion": "1"},
        "spec": {"spec": claim_spec(**request)},
    }


def claim(ns: str, name: str, rv: str = "10", **request: Any) -> JsonDict:
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-c-{name}", "resourceVersion": rv},
        "spec": claim_spec(**request),
    }


def allocated(raw_claim: JsonDict, pod_name: str, pod_uid: str, device: str = "dev-0") -> JsonDict:
    """The claim with our finalizer and an allocation of one device on n1, reserved for a pod."""
    raw_claim["metadata"]["finalizers"] = [FINALIZER]
    result = {"request": "dev", "driver": DRIVER, "pool": "n1", "device": device}
    raw_claim["status"] = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}],
    }
    return raw_claim


def pod(ns: str, name: str, claims: list[dict[str, str]], *, gated: bool = True) -> JsonDict:
    spec: JsonDict = {"containers": [{"name": "c", "image": "registry.invalid/x"}]}
    if gated:
        spec["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-p-{name}",
            "resourceVersion": "5",
            "annotations": {CLAIMS_ANNOTATION: json.dumps(claims)},
        },
        "spec": spec,
    }
