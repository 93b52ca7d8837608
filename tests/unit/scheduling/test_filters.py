"""kube-scheduler's filters as dralloc applies them before any device search."""

from __future__ import annotations

from typing import Any

from operators.scheduling import filters
from operators.scheduling.model import Node, PodNeeds, parse_node, parse_pod_needs
from operators.scheduling.usage import ClusterUsage

HOST = "kubernetes.io/hostname"


def node(name: str, labels: dict[str, str] | None = None, cpu: str = "4", **spec: Any) -> Node:
    return parse_node(
        {
            "metadata": {"name": name, "labels": {HOST: name, **(labels or {})}},
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"}},
        }
    )


def pod(
    name: str = "p",
    labels: dict[str, str] | None = None,
    namespace: str = "ns",
    node_name: str = "",
    cpu: str = "",
    **spec: Any,
) -> PodNeeds:
    containers = spec.pop("containers", None) or [
        {"name": "c", "resources": {"requests": {"cpu": cpu}} if cpu else {}}
    ]
    body = {
        "metadata": {"namespace": namespace, "name": name, "labels": labels or {}},
        "spec": {"containers": containers, "nodeName": node_name or None, **spec},
    }
    return parse_pod_needs(body)


def verdicts(
    incoming: PodNeeds,
    nodes: list[Node],
    placed: list[PodNeeds] = (),  # type: ignore[assignment]
    namespaces: dict[str, dict[str, str]] | None = None,
) -> dict[str, list[str]]:
    usage = ClusterUsage()
    for other in placed:
        usage.update((other.namespace, other.name), other)
    prepared = filters.prepare(
        incoming,
        usage,
        nodes,
        lambda ns: (namespaces or {}).get(ns, {}),
        key=(incoming.namespace, incoming.name),
    )
    return {n.name: prepared.reasons(n) for n in nodes}


def test_selector_affinity_taints_and_unschedulable_in_the_schedulers_words() -> None:
    p = pod(
        nodeSelector={"zone": "a"},
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}]}}},
        tolerations=[{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    )  # fmt: skip
    nodes = [
        node("ok", {"zone": "a", "gpu": "1"}, taints=[{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]),
        node("zone-b", {"zone": "b", "gpu": "1"}),
        node("no-gpu", {"zone": "a"}),
        node("broken", {"zone": "a", "gpu": "1"}, taints=[{"key": "broken", "effect": "NoExecute"}]),
        node("cordoned", {"zone": "a", "gpu": "1"}, unschedulable=True),
        node("prefer", {"zone": "a", "gpu": "1"}, taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
    ]  # fmt: skip
    assert verdicts(p, nodes) == {
        "ok": [],
        "zone-b": [filters.REASON_NODE_AFFINITY],
        "no-gpu": [filters.REASON_NODE_AFFINITY],
        "broken": ["node(s) had untolerated taint {broken: }"],
        "cordoned": [filters.REASON_UNSCHEDULABLE],
        "prefer": [],
    }


def test_tolerations() -> None:
    taint = {"key": "k", "value": "v", "effect": "NoSchedule"}
    assert filters.tolerates({"operator": "Exists"}, taint)
    assert filters.tolerates({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, taint)
    assert not filters.tolerates({"key": "k", "operator": "Exists", "effect": "NoExecute"}, taint)
    assert filters.tolerates({"key": "k", "value": "v"}, taint)
    assert not filters.tolerates({"key": "k", "value": "w"}, taint)


def test_resources_count_the_pods_on_each_node() -> None:
    nodes = [node("small", cpu="2"), node("big", cpu="8")]
    assert verdicts(pod(cpu="4"), nodes) == {"small": ["Insufficient cpu"], "big": []}
    running = pod("running", node_name="big", cpu="6")
    assert verdicts(pod(cpu="4"), nodes, [running]) == {
        "small": ["Insufficient cpu"],
        "big": ["Insufficient cpu"],
    }
    finished = parse_pod_needs(
        {
            "metadata": {"namespace": "ns", "name": "done"},
            "spec": {"nodeName": "big", "containers": [{"resources": {"requests": {"cpu": "8"}}}]},
            "status": {"phase": "Succeeded"},
        }
    )
    assert verdicts(pod(cpu="4"), nodes, [finished])["big"] == []


def test_a_node_without_allocatable_is_not_refused_for_resources() -> None:
    bare = parse_node({"metadata": {"name": "bare"}})
    assert verdicts(pod(cpu="64"), [bare]) == {"bare": []}


def test_pinned_pods_count_before_they_are_bound_and_assumed_ones_too() -> None:
    pin = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}}  # fmt: skip
    released = parse_pod_needs(
        {
            "metadata": {"namespace": "ns", "name": "released",
                         "annotations": {"resource.dralloc.dev/devices": "[]"}},
            "spec": {"affinity": pin, "containers": [{"resources": {"requests": {"cpu": "3"}}}]},
        }
    )  # fmt: skip
    assert released.placed_node == "n1"
    stuck = pod("stuck-daemon", cpu="3", affinity=pin)  # pinned by someone else, unbound
    assert stuck.placed_node == "", "an unbound pod dralloc did not release holds nothing"
    gated = pod("gated", cpu="3", affinity=pin, schedulingGates=[{"name": "g"}])
    assert gated.placed_node == ""
    nodes = [node("n1")]
    assert verdicts(pod(cpu="2"), nodes, [released])["n1"] == ["Insufficient cpu"]
    usage = ClusterUsage()
    usage.update("gated", gated)
    usage.assume("gated", gated, "n1")
    assert usage.on_node("n1").requested == {"cpu": 3000}
    usage.forget("gated")
    assert usage.on_node("n1").requested == {}
    usage.assume("gated", gated, "n1")
    usage.update("gated", released)  # the watch shows our pin: no longer an assumption
    usage.forget("gated")
    assert usage.on_node("n1").requested == {"cpu": 3000}
    usage.update("gated", None)
    assert usage.on_node("n1").pods == 0


def test_a_retried_pod_does_not_count_against_itself() -> None:
    usage = ClusterUsage()
    me = pod("me", cpu="4")
    usage.assume(("ns", "me"), me, "n1")
    prepared = filters.prepare(me, usage, [node("n1")], lambda ns: {}, key=("ns", "me"))
    assert prepared.reasons(node("n1")) == []


def test_host_ports_conflict_by_protocol_port_and_ip() -> None:
    def with_port(name: str, port: int, protocol: str = "TCP", ip: str = "", **kw: Any) -> PodNeeds:
        container = {"name": "c", "ports": [{"containerPort": port, "hostPort": port, "protocol": protocol, "hostIP": ip}]}  # fmt: skip
        return pod(name, containers=[container], **kw)

    nodes = [node("a"), node("b")]
    placed = [with_port("web", 8080, node_name="a")]
    assert verdicts(with_port("new", 8080), nodes, placed) == {
        "a": [filters.REASON_PORTS],
        "b": [],
    }
    assert verdicts(with_port("udp", 8080, "UDP"), nodes, placed)["a"] == []
    assert verdicts(with_port("other", 8081), nodes, placed)["a"] == []
    on_ip = [with_port("web", 8080, ip="10.0.0.1", node_name="a")]
    assert verdicts(with_port("new", 8080, ip="10.0.0.2"), nodes, on_ip)["a"] == []
    assert verdicts(with_port("new", 8080), nodes, on_ip)["a"] == [filters.REASON_PORTS]


def anti(labels: dict[str, str], key: str = HOST, **term: Any) -> dict[str, Any]:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key, **term}]}}  # fmt: skip


def near(labels: dict[str, str], key: str = HOST) -> dict[str, Any]:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": key}]}}  # fmt: skip


def test_anti_affinity_both_ways() -> None:
    nodes = [node("a", {"zone": "z1"}), node("b", {"zone": "z1"}), node("c", {"zone": "z2"})]
    web = pod("web", {"app": "web"}, node_name="a")
    assert verdicts(pod(affinity=anti({"app": "web"})), nodes, [web]) == {
        "a": [filters.REASON_ANTI_AFFINITY],
        "b": [],
        "c": [],
    }
    zonal = pod(affinity=anti({"app": "web"}, "zone"))
    assert verdicts(zonal, nodes, [web])["b"] == [filters.REASON_ANTI_AFFINITY]
    # an existing pod that repels the newcomer's kind
    guard = pod("guard", {"app": "guard"}, node_name="a", affinity=anti({"app": "db"}))
    assert verdicts(pod(labels={"app": "db"}), nodes, [guard]) == {
        "a": [filters.REASON_EXISTING_ANTI_AFFINITY],
        "b": [],
        "c": [],
    }
    assert verdicts(pod(labels={"app": "db"}, namespace="other"), nodes, [guard])["a"] == []


def test_anti_affinity_namespaces_and_namespace_selectors() -> None:
    nodes = [node("a"), node("b")]
    web = pod("web", {"app": "web"}, namespace="team-b", node_name="a")
    own_namespace = pod(affinity=anti({"app": "web"}))
    assert verdicts(own_namespace, nodes, [web])["a"] == []
    listed = pod(affinity=anti({"app": "web"}, namespaces=["team-b"]))
    assert verdicts(listed, nodes, [web])["a"] == [filters.REASON_ANTI_AFFINITY]
    by_label = pod(affinity=anti({"app": "web"}, namespaceSelector={"matchLabels": {"t": "b"}}))
    labels = {"team-b": {"t": "b"}}
    assert verdicts(by_label, nodes, [web], labels)["a"] == [filters.REASON_ANTI_AFFINITY]
    assert verdicts(by_label, nodes, [web], {})["a"] == []
    everywhere = pod(affinity=anti({"app": "web"}, namespaceSelector={}))
    assert verdicts(everywhere, nodes, [web])["a"] == [filters.REASON_ANTI_AFFINITY]


def test_affinity_needs_a_partner_except_for_the_first_of_a_group() -> None:
    nodes = [node("a", {"zone": "z1"}), node("b", {"zone": "z2"}), node("c")]
    cache = pod("cache", {"app": "cache"}, node_name="a")
    wants_cache = pod(affinity=near({"app": "cache"}, "zone"))
    assert verdicts(wants_cache, nodes, [cache]) == {
        "a": [],
        "b": [filters.REASON_AFFINITY],
        "c": [filters.REASON_AFFINITY],  # no zone label at all
    }
    assert verdicts(wants_cache, nodes) == {key: [filters.REASON_AFFINITY] for key in "abc"}
    first = pod(labels={"app": "cache"}, affinity=near({"app": "cache"}, "zone"))
    assert verdicts(first, nodes) == {"a": [], "b": [], "c": [filters.REASON_AFFINITY]}


def spread(max_skew: int = 1, key: str = HOST, **extra: Any) -> list[dict[str, Any]]:
    return [{"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
             "labelSelector": {"matchLabels": {"app": "w"}}, **extra}]  # fmt: skip


def test_topology_spread_skew_over_eligible_domains() -> None:
    nodes = [node("a"), node("b"), node("c")]
    one = pod("w0", {"app": "w"}, node_name="a")
    incoming = pod("w1", {"app": "w"}, topologySpreadConstraints=spread())
    assert verdicts(incoming, nodes, [one]) == {"a": [filters.REASON_SPREAD], "b": [], "c": []}
    assert verdicts(incoming, nodes) == {"a": [], "b": [], "c": []}
    # ScheduleAnyway constraints are preferences: no filter
    soft = pod(
        "w1", {"app": "w"}, topologySpreadConstraints=spread(whenUnsatisfiable="ScheduleAnyway")
    )
    assert verdicts(soft, nodes, [one])["a"] == []
    # pods of other namespaces do not count
    elsewhere = pod("w0", {"app": "w"}, namespace="other", node_name="a")
    assert verdicts(incoming, nodes, [elsewhere])["a"] == []
    # a node without the key is no domain and cannot take the pod
    zonal = pod("w1", {"app": "w"}, topologySpreadConstraints=spread(key="zone"))
    assert verdicts(zonal, [node("a")]) == {"a": [filters.REASON_SPREAD_LABEL]}


def test_topology_spread_honours_node_affinity_policy_and_min_domains() -> None:
    nodes = [node("a", {"pool": "x"}), node("b", {"pool": "x"}), node("c", {"pool": "y"})]
    placed = [pod("w0", {"app": "w"}, node_name="a"), pod("w1", {"app": "w"}, node_name="b")]
    # c is not eligible (node selector): domains a, b with one pod each -> skew 1 on both
    honoured = pod(
        "w2", {"app": "w"}, nodeSelector={"pool": "x"}, topologySpreadConstraints=spread()
    )
    assert verdicts(honoured, nodes, placed) == {
        "a": [],
        "b": [],
        "c": [filters.REASON_NODE_AFFINITY],
    }
    ignored = pod("w2", {"app": "w"}, nodeSelector={"pool": "x"},
                  topologySpreadConstraints=spread(nodeAffinityPolicy="Ignore"))  # fmt: skip
    # c counts as an empty domain: min 0, skew 2 on a and b
    assert verdicts(ignored, nodes, placed)["a"] == [filters.REASON_SPREAD]
    # one pod in each of three domains: skew 1 everywhere; but with fewer domains than
    # minDomains the global minimum is 0, so every node would make the skew 2
    full = [*placed, pod("w2", {"app": "w"}, node_name="c")]
    plain = pod("w3", {"app": "w"}, topologySpreadConstraints=spread())
    assert verdicts(plain, nodes, full) == {"a": [], "b": [], "c": []}
    min_domains = pod("w3", {"app": "w"}, topologySpreadConstraints=spread(minDomains=4))
    assert verdicts(min_domains, nodes, full) == {key: [filters.REASON_SPREAD] for key in "abc"}


def test_an_empty_spread_selector_counts_no_other_pod() -> None:
    nodes = [node("a"), node("b")]
    placed = [pod("w0", {"app": "w"}, node_name="a"), pod("w1", {"app": "w"}, node_name="a")]
    empty = pod("w2", {"app": "w"}, topologySpreadConstraints=spread(labelSelector={}))
    assert verdicts(empty, nodes, placed) == {"a": [], "b": []}
