"""A scripted API client and object builders for testing controllers without a cluster.

The controllers only talk to :class:`operators.kube.KubeClient`; :class:`FakeClient` answers
its write calls like a tiny API server (names, resourceVersions) and fails the calls a test
scripts to fail, so a test can feed the shared cache by hand (``Informer.apply``) and watch
what a controller writes, posts and requeues.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

from operators.cache.core import (
    ADMIN_ACCESS_LABEL,
    CLAIMS_ANNOTATION,
    FINALIZER,
    SCHEDULING_GATE,
)
from operators.controllers.runtime import Runtime
from operators.kube import (
    DEVICE_CLASSES,
    DRALLOC_GROUP,
    NAMESPACES,
    NODES,
    RESOURCE_SLICES,
    JsonDict,
    NotFound,
    Resource,
)
from operators.settings import Settings

API_VERSION = f"{DRALLOC_GROUP}/v1"
DRIVER = "gpu.example.com"
CLASS = "gpu"

Failure = Callable[[str, str, JsonDict | None], BaseException | None]
"""(method, path, body) -> the exception to raise for this call, or None to answer it."""


@dataclasses.dataclass
class Call:
    method: str
    path: str
    body: Any


class FakeClient:
    """Answers creates and patches by echoing them back with fresh resourceVersions."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.events: list[JsonDict] = []
        self.objects: dict[str, JsonDict] = {}
        self.fail: Failure = lambda _method, _path, _body: None
        self._versions = itertools.count(1000)
        # Discovery: "plural/subresource" names served, by version; a version not here
        # reads as "discovery cannot say" (the callers then fall back to what they know).
        self.subresources: dict[str, frozenset[str]] = {}

    def _answer(self, method: str, path: str, body: Any) -> None:
        self.calls.append(Call(method, path, body))
        error = self.fail(method, path, body)
        if error is not None:
            raise error

    def _stored(self, path: str, body: JsonDict) -> JsonDict:
        stored = json.loads(json.dumps(body))
        stored.setdefault("metadata", {})["resourceVersion"] = str(next(self._versions))
        self.objects[path] = stored
        return stored

    async def create(
        self, resource: Resource, body: JsonDict, namespace: str | None = None
    ) -> JsonDict:
        path = resource.path(namespace)
        self._answer("POST", path, body)
        metadata = dict(body["metadata"])
        metadata.setdefault("name", f"{metadata.pop('generateName', 'x-')}abcde")
        metadata["uid"] = f"uid-{metadata['name']}"
        return self._stored(
            resource.path(namespace, metadata["name"]), {**body, "metadata": metadata}
        )

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
        path = resource.path(namespace, name) + (f"/{subresource}" if subresource else "")
        self._answer("PATCH", path, patch)
        base = self.objects.get(resource.path(namespace, name))
        if base is None:
            raise NotFound(404, "NotFound", f"{resource.plural} {name!r} not found", name=name)
        merged = apply_merge_patch(base, patch)
        return self._stored(resource.path(namespace, name), merged)

    async def serves_subresource(self, resource: Resource, subresource: str) -> bool | None:
        served = self.subresources.get(resource.version)
        return None if served is None else f"{resource.plural}/{subresource}" in served

    async def get(self, resource: Resource, name: str, namespace: str | None = None) -> JsonDict:
        path = resource.path(namespace, name)
        self._answer("GET", path, None)
        if path not in self.objects:
            raise NotFound(404, "NotFound", f"{resource.plural} {name!r} not found", name=name)
        return json.loads(json.dumps(self.objects[path]))

    async def request(self, method: str, path: str, **kwargs: Any) -> JsonDict:
        self._answer(method, path, kwargs.get("body"))
        return {}

    async def delete(self, resource: Resource, name: str, **kwargs: Any) -> JsonDict:
        self._answer("DELETE", resource.path(kwargs.get("namespace"), name), None)
        return {}

    def resolve(self, resource: Resource) -> Resource:
        return resource  # dralloc's group: the fake serves crd mode

    async def post_event(self, involved: JsonDict, **kwargs: Any) -> None:
        self._answer("POST", "/api/v1/events", None)
        self.events.append({"involved": involved, **kwargs})

    def remember(self, resource: Resource, raw: JsonDict) -> None:
        """Make a live GET of this object answer ``raw``."""
        metadata = raw["metadata"]
        self.objects[resource.path(metadata.get("namespace"), metadata["name"])] = raw

    def writes(self, path_part: str) -> list[Call]:
        return [c for c in self.calls if c.method != "GET" and path_part in c.path]


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


def put(runtime: Runtime, resource: Resource, raw: JsonDict) -> None:
    """An object that exists: in the shared cache (as if watched) and on the fake server."""
    runtime.cache[resource].apply("ADDED", raw)
    runtime.client.remember(resource, raw)  # type: ignore[attr-defined]


def runtime(client: FakeClient, **settings: Any) -> Runtime:
    """A runtime whose caches count as listed (whole): the tests feed them events."""
    base = dataclasses.replace(Settings(), leader_election=False)
    made = Runtime(dataclasses.replace(base, **settings), client)  # type: ignore[arg-type]
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
