"""The API seam: paths, error classes, and preconditions as sent on the wire."""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from operators.kube import (
    PODS,
    RESOURCE_CLAIMS,
    ApiError,
    Conflict,
    Connection,
    FailureKind,
    Gone,
    KubeClient,
    NotFound,
    decode_json,
    failure_kind,
    json_body,
    merge_patched,
)


@contextlib.asynccontextmanager
async def served(handler: Any) -> AsyncIterator[KubeClient]:
    """A client of a local HTTP server answering every request with ``handler``."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient(Connection(f"http://127.0.0.1:{port}", False, {}))
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


def test_paths() -> None:
    assert PODS.path("ns", "p") == "/api/v1/namespaces/ns/pods/p"
    assert PODS.path("ns", "p", "status") == "/api/v1/namespaces/ns/pods/p/status"
    assert (
        RESOURCE_CLAIMS.path("ns") == "/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims"
    )


@pytest.mark.parametrize(
    ("status", "body", "cls"),
    [
        (404, {"reason": "NotFound"}, NotFound),
        (409, {"reason": "Conflict"}, Conflict),
        (410, {"reason": "Expired"}, Gone),
        (422, {"message": "the server rejected our request: test operation failed"}, Conflict),
        (422, {"message": "spec.devices: Invalid value"}, ApiError),
    ],
)
def test_error_classes(status: int, body: dict[str, str], cls: type[ApiError]) -> None:
    error = ApiError.from_status(status, body)
    assert type(error) is cls


async def test_writes_carry_preconditions() -> None:
    seen: list[tuple[str, str, str, Any]] = []

    async def record(request: web.Request) -> web.StreamResponse:
        body = await request.text()
        seen.append(
            (request.method, request.path, request.content_type, json.loads(body) if body else None)
        )
        if request.method == "GET" and request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            for event in ({"type": "ADDED", "object": {"metadata": {"name": "a"}}},
                          {"type": "ERROR", "object": {"code": 410, "reason": "Expired"}}):  # fmt: skip
                await response.write((json.dumps(event) + "\n").encode())
            return response
        return web.json_response({"metadata": {"resourceVersion": "2"}})

    async with served(record) as client:
        await client.merge_patch(
            PODS, "p", {"metadata": {"labels": {"a": "b"}}}, namespace="ns", resource_version="7"
        )
        await client.json_patch(RESOURCE_CLAIMS, "c", [{"op": "remove", "path": "/x"}], namespace="ns",
                                resource_version="8", subresource="status")  # fmt: skip
        await client.delete(PODS, "p", namespace="ns", uid="u1")
        stored = {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "resourceVersion": "9",
                "labels": {"x": "y"},
            },
            "spec": {"schedulingGates": [{"name": "g"}], "future": {"kept": True}},
        }
        gate_lifted = {"metadata": {"labels": {"a": "b"}}, "spec": {"schedulingGates": None}}
        await client.merge_update(
            PODS, "p", gate_lifted, base=stored, namespace="ns", resource_version="9"
        )
        await client.merge_update(
            PODS, "p", gate_lifted, base=stored, namespace="ns", resource_version="10",
            subresource="status",
        )  # fmt: skip
        events = []
        with pytest.raises(Gone):
            async for event in client.watch(PODS, "5"):
                events.append(event)
    merge, jsonpatch, delete, update, stale, _watch = seen
    assert merge[2] == "application/merge-patch+json"
    assert merge[3]["metadata"] == {"labels": {"a": "b"}, "resourceVersion": "7"}
    assert (jsonpatch[1], jsonpatch[2]) == (
        "/apis/resource.dralloc.dev/v1/namespaces/ns/resourceclaims/c/status",
        "application/json-patch+json",
    )
    assert jsonpatch[3][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "8"}
    assert delete[3]["preconditions"] == {"uid": "u1"}
    # With the object as read at the precondition's version: the patch applied here, the
    # whole object sent back (fields this client does not know included).
    assert (update[0], update[1], update[2]) == ("PUT", PODS.path("ns", "p"), "application/json")
    assert update[3] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "9",
                     "labels": {"x": "y", "a": "b"}},
        "spec": {"future": {"kept": True}},
    }  # fmt: skip
    # Read at another version: the server applies the patch, with the same precondition.
    assert (stale[0], stale[1], stale[2]) == (
        "PATCH",
        PODS.path("ns", "p") + "/status",
        "application/merge-patch+json",
    )
    assert stale[3] == {"metadata": {"labels": {"a": "b"}, "resourceVersion": "10"},
                        "spec": {"schedulingGates": None}}  # fmt: skip
    assert [e.type for e in events] == ["ADDED"]


def test_bodies_are_encoded_as_go_encodes_them() -> None:
    """Compact, UTF-8, with <, >, & and the line separators escaped, floats as Go writes
    them: the server compares the bytes of opaque parameters stored at creation with those
    of every later update, which Go clients write (tests/unit/runtime/test_gojson.py)."""
    body = {"spec": {"parameters": {"a": "<b> & c", "n": [1, 2.5, 2.0], "é": "\u2028"}}}
    text = json_body(body)
    expected = (
        '{"spec":{"parameters":{"a":"\\u003cb\\u003e \\u0026 c","n":[1,2.5,2],"é":"\\u2028"}}}'
    )
    assert text == expected.encode()
    assert json.loads(text) == body


@pytest.mark.parametrize(
    "text",
    [
        '{"metadata":{"name":"p","resourceVersion":"12"},"spec":{"n":[1,-2,2.5,true,null]}}',
        '{"parameters":{"big":100000000000000000000,"small":18446744073709551615}}',
        '{"parameters":{"neg":[-123456789012345678901]}}',
        '{"a":"\\ud800","b":"\\u00e9"}',
        '{"a":NaN,"b":1e400}',
        '{"a":1,"a":2}',
        '{"image":"r@sha256:12345678901234567890abc"}',
    ],
)
def test_the_api_servers_json_is_read_as_json_reads_it(text: str) -> None:
    """orjson where it reads the same; json for what it would read otherwise (an integer
    beyond 64 bits must stay an integer: written back as a float it would change bytes the
    API server compares)."""
    expected = json.loads(text)
    for given in (text, text.encode()):
        decoded = decode_json(given)
        assert json.dumps(decoded) == json.dumps(expected)  # types too: 1e20 is not 10**20


async def test_only_core_kinds_skip_the_scan_for_integers_beyond_64_bits() -> None:
    """A claim's opaque parameters keep an integer beyond 64 bits exact, in lists and
    watches alike; a pod cannot hold one (the API server's structs), so its pages and events
    go to orjson unscanned (what orjson makes of such a number shows which path was taken)."""
    big = 10**20

    async def answer(request: web.Request) -> web.Response:
        item = {"metadata": {"name": "x", "resourceVersion": "5"}, "spec": {"n": big}}
        if request.query.get("watch"):
            return web.Response(text=json.dumps({"type": "ADDED", "object": item}) + "\n")
        page = {"metadata": {"resourceVersion": "5"}, "items": [item]}
        return web.Response(text=json.dumps(page), content_type="application/json")

    async with served(answer) as client:
        for resource, exact in ((RESOURCE_CLAIMS, True), (PODS, False)):
            (listed,), _ = await client.list(resource)
            events = [e async for e in client.watch(resource, "5")]
            for got in (listed["spec"]["n"], events[0].object["spec"]["n"]):
                assert (type(got) is int and got == big) if exact else type(got) is float


def test_json_that_is_not_json_is_refused_as_json_refuses_it() -> None:
    with pytest.raises(ValueError):
        decode_json('{"a":')


def test_a_refused_eviction_keeps_the_causes_that_name_the_budget() -> None:
    body = {
        "reason": "TooManyRequests",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget keep-one needs 1 healthy pods and has 1 currently",
                }
            ]
        },
    }
    error = ApiError.from_status(429, body)
    assert error.causes == (
        "The disruption budget keep-one needs 1 healthy pods and has 1 currently",
    )


def test_only_a_disruption_budget_cause_makes_a_429_a_budget_refusal() -> None:
    refused = ApiError.from_status(
        429,
        {
            "kind": "Status",
            "reason": "TooManyRequests",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "needs 1"}]},
        },
    )
    throttled = ApiError.from_status(
        429, {"kind": "Status", "reason": "TooManyRequests", "message": "Too many requests"}
    )
    assert refused.refused_by_disruption_budget
    assert not throttled.refused_by_disruption_budget
    assert failure_kind(throttled) is FailureKind.UNAVAILABLE  # backed off and retried


class TokenServer:
    """An API server that accepts the tokens in ``accepted`` and answers who sent them; a
    watch gets one event naming the sender."""

    def __init__(self) -> None:
        self.accepted: set[str] = set()
        self.seen: list[str] = []  # the token of every request, accepted or not
        self.runner: web.AppRunner | None = None

    async def start(self) -> str:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        self.seen.append(token)
        if token not in self.accepted:
            return web.json_response({"reason": "Unauthorized"}, status=401)
        if request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            event = {"type": "ADDED", "object": {"metadata": {"name": token}}}
            await response.write((json.dumps(event) + "\n").encode())
            return response
        return web.json_response({"user": token})


def kubeconfig_for(path: Path, server: str, user: dict[str, Any]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "ctx",
            }
        )
    )
    return str(path)


async def test_a_refused_token_file_is_read_again_and_the_request_sent_again(
    tmp_path: Path,
) -> None:
    server = TokenServer()
    url = await server.start()
    token = tmp_path / "token"
    token.write_text("one")
    server.accepted = {"one"}
    client = await KubeClient.connect(
        kubeconfig_for(tmp_path / "config", url, {"tokenFile": str(token)})
    )
    try:
        assert await client.get(PODS, "p", "ns") == {"user": "one"}
        token.write_text("two")  # rotated, the old token revoked
        server.accepted = {"two"}
        assert await client.get(PODS, "p", "ns") == {"user": "two"}
        assert server.seen == ["one", "one", "two"]
        # A watch connects with the current credentials, and after a refusal again once.
        token.write_text("three")
        server.accepted = {"three"}
        names = [event.object["metadata"]["name"] async for event in client.watch(PODS, "1")]
        assert names == ["three"]
    finally:
        await client.close()
        assert server.runner is not None
        await server.runner.cleanup()


async def test_a_refused_exec_credential_is_obtained_again_and_a_fixed_token_is_not(
    tmp_path: Path,
) -> None:
    server = TokenServer()
    url = await server.start()
    token, runs = tmp_path / "token", tmp_path / "runs"
    token.write_text("one")
    script = tmp_path / "plugin.py"
    script.write_text(
        "import json, sys\n"
        "open(sys.argv[2], 'a').write('.')\n"
        "print(json.dumps({'status': {'token': open(sys.argv[1]).read()}}))\n"
    )
    spec = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "command": sys.executable,
        "args": [str(script), str(token), str(runs)],
    }
    server.accepted = {"one"}
    client = await KubeClient.connect(kubeconfig_for(tmp_path / "config", url, {"exec": spec}))
    fixed = await KubeClient.connect(kubeconfig_for(tmp_path / "fixed", url, {"token": "one"}))
    try:
        assert await client.get(PODS, "p") == {"user": "one"}
        token.write_text("two")
        server.accepted = {"two"}
        assert await client.get(PODS, "p") == {"user": "two"}
        assert runs.read_text() == ".."
        with pytest.raises(ApiError) as refused:
            await fixed.get(PODS, "p")
        assert refused.value.status == 401
        assert server.seen == ["one", "one", "two", "one"]  # the fixed token: sent once
    finally:
        await client.close()
        await fixed.close()
        assert server.runner is not None
        await server.runner.cleanup()


def test_a_merge_patch_is_applied_here_as_the_api_server_applies_it() -> None:
    doc = {"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": 1}}
    patch = {"a": {"b": None, "c": [3], "n": {"m": None, "k": 1}}, "d": {"g": 2}, "h": None}
    assert merge_patched(doc, patch) == {
        "a": {"c": [3], "n": {"k": 1}},  # null removes, a list replaces, nulls inside go
        "d": {"g": 2},  # an object replaces a scalar
        "e": {"f": 1},  # untouched
    }
    assert doc == {"a": {"b": 1, "c": [1, 2]}, "d": "x", "e": {"f": 1}}, "the document changed"


async def test_a_role_that_may_patch_but_not_update_gets_patches() -> None:
    """An operator deployed with a role from before it updated pods (patch only) keeps
    working: refused an update by the authorizer, it patches, and from then on patches at
    once. A refusal by admission (a policy's 403) is the caller's to handle, as before."""
    seen: list[str] = []
    refusal = {"by": "role"}

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append(request.method)
        if request.method == "PUT":
            message = (
                'pods "p" is forbidden: User "system:serviceaccount:dralloc-system:dralloc-'
                'operator" cannot update resource "pods" in API group "" in the namespace "ns"'
                if refusal["by"] == "role"
                else "pods \"p\" is forbidden: ValidatingAdmissionPolicy 'fence' denied request"
            )
            body = {"kind": "Status", "code": 403, "reason": "Forbidden", "message": message}
            return web.json_response(body, status=403)
        return web.json_response({"metadata": {"resourceVersion": "10"}})

    stored = {"metadata": {"name": "p", "namespace": "ns", "resourceVersion": "9"}}
    patch = {"spec": {"schedulingGates": None}}
    async with served(answer) as client:
        for _ in range(2):
            await client.merge_update(
                PODS, "p", patch, base=stored, namespace="ns", resource_version="9"
            )
        assert seen == ["PUT", "PATCH", "PATCH"], seen
        assert client.updates_refused == {"pods"}
        seen.clear()
        refusal["by"] = "policy"
        with pytest.raises(ApiError, match="ValidatingAdmissionPolicy"):
            await client.merge_update(
                PODS, "p", patch, base=stored, namespace="ns", resource_version="9",
                subresource="status",
            )  # fmt: skip
        assert seen == ["PUT"], "a policy's refusal was sent again as a patch"
