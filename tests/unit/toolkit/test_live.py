"""The live read: which requests it sends (GETs only), pagination, group choice and errors.

A small stdlib HTTP server plays the API server and records every request, so the whole path
(kubeconfig and context loading, the JSON client, paging) runs as it does against a cluster.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from operators.toolkit.live import (
    CORE_KINDS,
    DRA_KINDS,
    OWN_KINDS,
    POLICY_KINDS,
    WORKLOAD_KINDS,
    list_calls,
    read_cluster,
)
from operators.toolkit.snapshot import DRA_KINDS as SNAPSHOT_DRA_KINDS
from operators.toolkit.usererrors import ToolkitError


@dataclass
class Seen:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str


@dataclass
class FakeApiServer:
    """Discovery, lists (pods in two pages) and a 404 for kinds the group does not serve."""

    groups: list[str] = field(default_factory=lambda: ["resource.k8s.io"])
    status_for: dict[str, int] = field(default_factory=dict)
    """Path -> error status to answer with."""
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        if path in self.status_for:
            code = self.status_for[path]
            return code, {"kind": "Status", "code": code, "reason": "Forbidden", "message": "no"}
        if path == "/apis":
            versions = [{"version": "v1beta2"}, {"version": "v1"}]
            return 200, {"groups": [{"name": g, "versions": versions} for g in self.groups]}
        if path.endswith("/devicetaintrules") and path.startswith("/apis/resource.k8s.io/"):
            return 404, {"kind": "Status", "code": 404, "reason": "NotFound", "message": "x"}
        if path == "/api/v1/pods":
            if "continue" not in query:
                page = [_item("first", "ns")]
                return 200, {"items": page, "metadata": {"continue": "token-2"}}
            return 200, {"items": [_item("second", "ns")], "metadata": {"resourceVersion": "9"}}
        if path.endswith("/deviceclasses"):
            return 200, {"items": [_item("gpu", None)], "metadata": {}}
        return 200, {"items": [], "metadata": {}}


def _item(name: str, namespace: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {"metadata": metadata, "spec": {}}


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    fake = FakeApiServer()

    class Handler(BaseHTTPRequestHandler):
        def _handle(self) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            fake.seen.append(
                Seen(self.command, url.path, query, self.headers.get("Authorization", ""))
            )
            status, body = fake.answer(url.path, query)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def kubeconfig(api: FakeApiServer, tmp_path: Path) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "fake", "cluster": {"server": api.url}}],
        "users": [
            {"name": "alice", "user": {"token": "alice-token"}},
            {"name": "bob", "user": {"token": "bob-token"}},
        ],
        "contexts": [
            {"name": "as-alice", "context": {"cluster": "fake", "user": "alice"}},
            {"name": "as-bob", "context": {"cluster": "fake", "user": "bob"}},
        ],
        "current-context": "as-alice",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def test_the_plan_lists_every_kind_a_snapshot_reads_cluster_wide() -> None:
    calls = list_calls("resource.dralloc.dev")
    kinds = [c.resource.kind for c in calls]
    assert set(kinds) == set(SNAPSHOT_DRA_KINDS) | {"Pod", "Node", "Namespace"} | set(
        POLICY_KINDS
    ) | set(WORKLOAD_KINDS)
    assert len(kinds) == len(set(kinds))
    assert len(kinds) == len(DRA_KINDS) + len(OWN_KINDS) + len(POLICY_KINDS) + len(
        WORKLOAD_KINDS
    ) + len(CORE_KINDS)
    for call in calls:
        path = call.resource.path()
        assert "/namespaces/" not in path, f"{path} is not a cluster-wide list"
        if call.resource.kind in SNAPSHOT_DRA_KINDS:
            assert path.startswith("/apis/resource.dralloc.dev/v1/")
            assert call.optional
        elif call.resource.kind in POLICY_KINDS:
            assert path.startswith("/apis/policy/v1/")
            assert call.optional
        elif call.resource.kind in WORKLOAD_KINDS:
            assert path.startswith("/apis/scheduling.k8s.io/v1beta1/")
            assert call.optional and call.forbidden_ok
        else:
            assert path.startswith("/api/v1/")
            assert not call.optional
    in_tree = {c.resource.kind: c.resource.group for c in list_calls("resource.k8s.io")}
    assert in_tree["DeviceQuota"] == "resource.dralloc.dev"  # dralloc's kind in both modes
    with pytest.raises(ToolkitError, match="unknown DRA API group"):
        list_calls("example.com")


def test_a_read_sends_only_gets_follows_pages_and_fills_kinds(
    api: FakeApiServer, kubeconfig: str
) -> None:
    objects = read_cluster(kubeconfig)
    assert {s.method for s in api.seen} == {"GET"}
    assert api.seen[0].path == "/apis"
    listed = [s.path for s in api.seen[1:]]
    assert "/apis/resource.k8s.io/v1/resourceslices" in listed
    assert "/apis/resource.k8s.io/v1/resourceclaims" in listed
    pod_pages = [s.query for s in api.seen if s.path == "/api/v1/pods"]
    assert pod_pages == [{"limit": ["500"]}, {"limit": ["500"], "continue": ["token-2"]}]
    by_name = {o.body["metadata"]["name"]: o for o in objects}
    assert set(by_name) == {"first", "second", "gpu"}
    assert (by_name["first"].api_version, by_name["first"].kind) == ("v1", "Pod")
    assert (by_name["second"].api_version, by_name["second"].kind) == ("v1", "Pod")
    assert (by_name["gpu"].api_version, by_name["gpu"].kind) == (
        "resource.k8s.io/v1",
        "DeviceClass",
    )
    assert all(o.ref.source == "cluster" for o in objects)


def test_the_context_chooses_the_credentials(api: FakeApiServer, kubeconfig: str) -> None:
    read_cluster(kubeconfig, context="as-bob")
    assert {s.authorization for s in api.seen} == {"Bearer bob-token"}


def test_dralloc_crds_win_over_the_in_tree_group(api: FakeApiServer, kubeconfig: str) -> None:
    api.groups = ["resource.k8s.io", "resource.dralloc.dev"]
    read_cluster(kubeconfig)
    dra_paths = [s.path for s in api.seen if s.path.startswith("/apis/resource.")]
    assert dra_paths
    assert all(p.startswith("/apis/resource.dralloc.dev/v1/") for p in dra_paths)
    # DeviceTaintRule is served by the CRDs, so it is listed from them.
    assert "/apis/resource.dralloc.dev/v1/devicetaintrules" in dra_paths


def test_a_group_the_server_does_not_offer_is_an_error(api: FakeApiServer, kubeconfig: str) -> None:
    with pytest.raises(ToolkitError, match=r"does not serve resource.dralloc.dev/v1"):
        read_cluster(kubeconfig, group="resource.dralloc.dev")
    api.groups = []
    with pytest.raises(ToolkitError, match="serves neither"):
        read_cluster(kubeconfig)
    assert all(s.path == "/apis" for s in api.seen), "nothing is listed before a group is known"


def test_errors_name_the_request(api: FakeApiServer, kubeconfig: str) -> None:
    api.status_for["/api/v1/pods"] = 403
    with pytest.raises(ToolkitError, match=r"GET /api/v1/pods: 403 Forbidden"):
        read_cluster(kubeconfig)


def test_an_unreachable_server_is_a_toolkit_error(tmp_path: Path) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ToolkitError, match="cannot read the cluster"):
        read_cluster(str(path))


def test_pod_groups_are_read_and_optional(api: FakeApiServer, kubeconfig: str) -> None:
    path = "/apis/scheduling.k8s.io/v1beta1/podgroups"
    read_cluster(kubeconfig)
    assert path in [s.path for s in api.seen]
    for status in (404, 403):  # not served (the Workload API is off) or not readable: none
        api.seen.clear()
        api.status_for[path] = status
        read_cluster(kubeconfig)
        assert path in [s.path for s in api.seen]
    api.status_for["/apis/policy/v1/poddisruptionbudgets"] = 500
    with pytest.raises(ToolkitError, match="poddisruptionbudgets: 500"):
        read_cluster(kubeconfig)
