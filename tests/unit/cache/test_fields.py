"""A pod listed with only the fields its readers read parses as the whole pod parses."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, get_args, get_type_hints, is_typeddict

import pytest
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from operators.api.models import GROUP
from operators.api.podprotocol import PodProtocol, protocol_for
from operators.cache.backoff import Backoff
from operators.cache.core import SCHEDULING_GATE, gated_by_dralloc, parse_pod
from operators.cache.fields import PodFields
from operators.cache.informer import Informer, Key, Meta
from operators.cache.kinds import LISTED_FIELDS, RAW_KEPT
from operators.cache.rawkept import RawKept
from operators.kube import PODS, JsonDict, KubeClient
from operators.shapes import Shape
from tests.unit.runtime.test_kube import served

PROTOCOLS = [protocol_for(GROUP), protocol_for("resource.k8s.io")]


def running_pod(index: int) -> JsonDict:
    """A pod of a Deployment as the API server serves it: most of it read by no one."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-{index}",
            "generateName": "web-7d9c8b6f5-",
            "namespace": "shop",
            "uid": f"uid-{index}",
            "resourceVersion": str(100 + index),
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "web", "pod-template-hash": "7d9c8b6f5"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2026-11-30T08:00:00Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9c8b6f5",
                    "uid": "rs",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:phase": {}}},
                }
            ],
        },
        "spec": {
            "containers": [
                {
                    "name": "web",
                    "image": "registry.example.com/web:v3",
                    "env": [{"name": "MODE", "value": "prod"}],
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {
                        "requests": {"cpu": "500m", "memory": "512Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080}},
                }
            ],
            "volumes": [{"name": "config", "configMap": {"name": "web"}}],
            "nodeName": "worker-1",
            "priority": 0,
            "preemptionPolicy": "PreemptLowerPriority",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-01-01T00:00:05Z",
            "podIP": "10.0.0.5",
            "conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [{"name": "web", "ready": True, "restartCount": 0}],
        },
    }


def device_pod(index: int) -> JsonDict:
    """A pod with every field some reader of a pod reads: claims both ways, statuses,
    sidecars and init containers with host ports, affinity of every kind, spread, a gang,
    a PodGroup, being deleted."""
    pod = running_pod(index)
    pod["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    pod["metadata"]["annotations"].update(
        {
            f"{GROUP}/gang": "train",
            f"{GROUP}/gang-size": "2",
            f"{GROUP}/claims": json.dumps([{"name": "gpu", "resourceClaimName": "c-1"}]),
            f"{GROUP}/claim-statuses": json.dumps([{"name": "gpu", "resourceClaimName": "c-1"}]),
        }
    )
    spec = pod["spec"]
    spec["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": 8080, "hostIP": "0.0.0.0"}]
    spec["initContainers"] = [
        {
            "name": "proxy",
            "restartPolicy": "Always",
            "image": "proxy",
            "resources": {"requests": {"cpu": "100m"}},
            "ports": [{"hostPort": 9090}],
        },
        {"name": "setup", "image": "setup", "resources": {"requests": {"cpu": "2"}}},
    ]
    spec["overhead"] = {"cpu": "50m"}
    spec["resources"] = {"requests": {"memory": "2Gi"}}
    spec["priority"] = 1000
    spec["preemptionPolicy"] = "Never"
    spec["schedulingGates"] = [{"name": "example.com/other"}]
    spec["schedulingGroup"] = {"podGroupName": "workers"}
    spec["nodeSelector"] = {"pool": "gpu"}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "kubernetes.io/hostname",
                                "operator": "In",
                                "values": ["worker-1"],
                            }
                        ]
                    }
                ]
            }
        },
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]},
    }
    spec["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "web"}},
        }
    ]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c-1"}]
    pod["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "c-1"}]
    return pod


def corpus() -> list[JsonDict]:
    odd = running_pod(3)
    odd["metadata"].pop("labels")
    odd["spec"].pop("tolerations")
    odd["spec"]["containers"][0].pop("resources")
    del odd["status"]
    unread = running_pod(4)
    unread["spec"] = {"volumes": [], "containers": [{"name": "c", "image": "i"}]}
    unread["status"] = {"containerStatuses": []}
    return [
        running_pod(1),
        device_pod(2),
        odd,
        unread,
        {"metadata": {"name": "bare", "uid": "u"}},
    ]


def page_text(pods: list[JsonDict]) -> str:
    items = [{k: v for k, v in p.items() if k not in ("apiVersion", "kind")} for p in pods]
    return json.dumps({"kind": "PodList", "metadata": {"resourceVersion": "9"}, "items": items})


def listed(pods: list[JsonDict]) -> list[JsonDict]:
    page = Shape(PodFields).decode(page_text(pods))
    assert page is not None
    return [dict(item, apiVersion="v1", kind="Pod") for item in page["items"]]


# --- every field read is decoded ----------------------------------------------------------


class Recorded(Mapping[str, Any]):
    """A level of a pod the shape names field by field: records each field asked for.

    A Mapping but no dict: what reads a dict's storage directly (``dict.get`` called on the
    class, orjson, ``type(x) is dict`` checks) fails here instead of reading unrecorded."""

    def __init__(self, path: str, data: dict[str, Any], asked: set[str]) -> None:
        self._data = data
        self.path = path
        self.asked = asked

    def _ask(self, name: Any) -> None:
        self.asked.add(f"{self.path}.{name}" if self.path else str(name))

    def __getitem__(self, name: str) -> Any:
        self._ask(name)
        return self._data[name]

    def get(self, name: str, default: Any = None) -> Any:
        self._ask(name)
        return self._data.get(name, default)

    def __contains__(self, name: object) -> bool:
        self._ask(name)
        return name in self._data

    def __iter__(self) -> Iterator[str]:  # keys(), items(), values(), ==, dict(x), {**x}
        self._ask("*every field*")
        return iter(self._data)

    def __len__(self) -> int:
        self._ask("*every field*")
        return len(self._data)

    def __bool__(self) -> bool:
        # ``raw.get("spec") or {}``: whether it is empty, which a shaped level may not be
        # when the whole is (only unread fields in it). The differential tests below hold
        # such pods; what reads emptiness for more than a default shows there.
        return bool(self._data)

    def __eq__(self, other: object) -> bool:
        self._ask("*every field*")
        return self._data == other

    __hash__ = None  # type: ignore[assignment]


def _typeddict_of(hint: Any) -> tuple[type | None, bool]:
    """The TypedDict a field's hint names (alone, in a list, or with None), and whether
    it is a list of them."""
    if is_typeddict(hint):
        return hint, False
    for arg in get_args(hint):
        found, in_list = _typeddict_of(arg)
        if found is not None:
            return found, in_list or getattr(hint, "__origin__", None) is list
    return None, False


def recorded(value: Any, fields: type, path: str, asked: set[str]) -> Any:
    """``value`` with each level ``fields`` names field by field made a :class:`Recorded`."""
    if not isinstance(value, dict):
        return value
    hints = get_type_hints(fields)
    level = {}
    for name, item in value.items():
        nested, in_list = _typeddict_of(hints.get(name))
        inner = f"{path}.{name}" if path else name
        if nested is not None and in_list and isinstance(item, list):
            item = [recorded(x, nested, inner + "[]", asked) for x in item]
        elif nested is not None:
            item = recorded(item, nested, inner, asked)
        level[name] = item
    return Recorded(path, level, asked)


def named(fields: type, path: str = "") -> set[str]:
    """Every field the shape names, as dotted paths."""
    names = set()
    for name, hint in get_type_hints(fields).items():
        inner = f"{path}.{name}" if path else name
        names.add(inner)
        nested, in_list = _typeddict_of(hint)
        if nested is not None:
            names |= named(nested, inner + ("[]" if in_list else ""))
    return names


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.group)
def test_the_readers_of_a_pod_read_only_fields_a_list_decodes(protocol: PodProtocol) -> None:
    asked: set[str] = set()
    for pod in corpus():
        parse_pod(recorded(copy.deepcopy(pod), PodFields, "", asked), protocol)
        gated_by_dralloc(recorded(copy.deepcopy(pod), PodFields, "", asked))
        Meta.of(recorded(copy.deepcopy(pod), PodFields, "", asked))
    assert "spec.containers[].resources" in asked  # the recording reaches every level
    missing = {a for a in asked if a.rpartition(".")[2] != "*every field*"} - named(PodFields)
    iterated = {a for a in asked if a.endswith("*every field*")}
    assert not missing, f"read but not decoded by a list (name them in PodFields): {missing}"
    assert not iterated, f"a level read whole must be Any in PodFields: {iterated}"


@pytest.mark.parametrize("protocol", PROTOCOLS, ids=lambda p: p.group)
def test_a_listed_pod_parses_as_the_whole_pod_parses(protocol: PodProtocol) -> None:
    pods = corpus()
    for whole, shaped in zip(pods, listed(pods), strict=True):
        assert parse_pod(shaped, protocol) == parse_pod(whole, protocol)
        assert Meta.of(shaped) == Meta.of(whole)
        assert gated_by_dralloc(shaped) == gated_by_dralloc(whole)


# Containers made fresh for each draw: one object placed at two paths could be mutated
# into itself (a cycle) and would carry one example's changes into the next.
VALUES = st.one_of(
    st.none(),
    st.builds(dict),
    st.builds(list),
    st.builds(lambda: {"unread": 1}),
    st.text(max_size=3),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, item in items:
        yield (*prefix, key)
        yield from _paths(item, (*prefix, key))


def _outcome(parse: Any, *args: Any) -> Any:
    try:
        return parse(*args)
    except Exception as error:  # a reader that fails must fail alike on both
        return type(error)


@given(st.data())
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_mutated_pods_parse_alike_listed_and_whole(data: st.DataObject) -> None:
    """Fields deleted, nulled, emptied or given other types anywhere in a pod: the pod as a
    list decodes it reads as the whole pod reads, or the page is decoded whole."""
    pod = copy.deepcopy(data.draw(st.sampled_from([running_pod(1), device_pod(2)])))
    for _ in range(data.draw(st.integers(1, 4))):
        path = data.draw(st.sampled_from(list(_paths(pod))))
        parent: Any = pod
        for key in path[:-1]:
            parent = parent[key]
        if isinstance(parent, dict) and data.draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(VALUES)
    page = Shape(PodFields).decode(page_text([pod]))
    if page is None:  # read whole: json reads it
        json.loads(page_text([pod]))
        return
    (shaped,) = page["items"]
    shaped = dict(shaped, apiVersion="v1", kind="Pod")
    for protocol in PROTOCOLS:
        assert _outcome(parse_pod, shaped, protocol) == _outcome(parse_pod, pod, protocol)
    assert _outcome(Meta.of, shaped) == _outcome(Meta.of, pod)
    assert _outcome(gated_by_dralloc, shaped) == _outcome(gated_by_dralloc, pod)


def test_what_no_reader_reads_is_not_decoded() -> None:
    (shaped,) = listed([running_pod(1)])
    assert "managedFields" not in shaped["metadata"]
    assert set(shaped["spec"]["containers"][0]) == {"ports", "resources"}
    assert "containerStatuses" not in shaped["status"]
    assert shaped["metadata"]["labels"] == running_pod(1)["metadata"]["labels"]


# --- through the client and the informer ----------------------------------------------------


@contextlib.asynccontextmanager
async def serving(pages: list[list[JsonDict]]) -> AsyncIterator[KubeClient]:
    """A client of a local server that lists ``pages`` of pods and has no events to tell."""
    stop = asyncio.Event()

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.query.get("watch"):
            response = web.StreamResponse()
            await response.prepare(request)
            await stop.wait()
            return response
        index = int(request.query.get("continue") or 0)
        page = json.loads(page_text(pages[index]))
        if index + 1 < len(pages):
            page["metadata"]["continue"] = str(index + 1)
        return web.json_response(page)

    async with served(answer) as client:
        try:
            yield client
        finally:
            stop.set()


async def test_the_informer_lists_pods_shaped_and_a_page_with_a_pod_it_keeps_whole() -> None:
    gated = running_pod(7)
    gated["spec"]["schedulingGates"] = [{"name": SCHEDULING_GATE}]
    pages = [[running_pod(1), device_pod(2)], [running_pod(3), gated]]
    protocol = protocol_for("resource.k8s.io")
    parsed_whole: dict[str, bool] = {}

    def read(raw: JsonDict) -> Any:
        parsed_whole[raw["metadata"]["name"]] = "managedFields" in raw["metadata"]
        return parse_pod(raw, protocol)

    async with serving(pages) as client:
        informer: Informer[Any] = Informer(
            client,
            PODS,
            read,
            backoff=Backoff(0.01, 0.05),
            raw_kept=RawKept(RAW_KEPT[PODS]),
            listed_fields=LISTED_FIELDS[PODS],
        )
        task = asyncio.create_task(informer.run())
        try:
            await asyncio.wait_for(informer.synced.wait(), 10)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    for pod in (p for page in pages for p in page):
        key = Key(pod["metadata"]["namespace"], pod["metadata"]["name"])
        assert informer.get(key) == parse_pod(pod, protocol)
    kept = informer.raw(Key("shop", "web-7"))
    assert kept is not None and kept["spec"]["containers"][0]["env"] == [
        {"name": "MODE", "value": "prod"}
    ], "the gated pod, kept to be written back whole, was listed whole"
    # The first page was listed shaped; the second, with the gated pod, whole.
    assert parsed_whole == {"web-1": False, "web-2": False, "web-3": True, "web-7": True}
