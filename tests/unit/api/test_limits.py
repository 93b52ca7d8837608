"""Every upstream validation limit and name format, each reported with its field path.

Each case takes a valid sample, breaks one thing, and expects `parse_object` to fail with
a message `<field path>: <problem>`. A sanity test checks that the unbroken samples pass,
so a case cannot succeed merely because its sample was already invalid.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from operators.api import InvalidObjectError, limits, parse_object
from tests.unit.api import samples

Obj = dict[str, Any]


def _dev(o: Obj, i: int = 0) -> Obj:
    return o["spec"]["devices"][i]  # type: ignore[no-any-return]


def _req(o: Obj, i: int = 0) -> Obj:
    return o["spec"]["devices"]["requests"][i]  # type: ignore[no-any-return]


def _exactly(o: Obj) -> Obj:
    return _req(o)["exactly"]  # type: ignore[no-any-return]


def _alloc(o: Obj) -> Obj:
    return o["status"]["allocation"]  # type: ignore[no-any-return]


def _set(target: Callable[[Obj], Obj], key: str, value: Any) -> Callable[[Obj], None]:
    def mutate(o: Obj) -> None:
        target(o)[key] = value

    return mutate


def _spec(o: Obj) -> Obj:
    return o["spec"]  # type: ignore[no-any-return]


def _many(item: Callable[[int], Any], n: int) -> list[Any]:
    return [item(i) for i in range(n)]


def _taint(i: int) -> Obj:
    return {"key": f"example.com/t{i}", "effect": "NoSchedule"}


def _condition(i: int) -> Obj:
    return {
        "type": f"C{i}",
        "status": "True",
        "reason": "R",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }


def _selector(i: int) -> Obj:
    return {"cel": {"expression": "true"}}


def _opaque(i: int = 0) -> Obj:
    return {"opaque": {"driver": "gpu.example.com", "parameters": {}}}


LONG_DOMAIN = ("a" * 60) + ".com"  # 64 characters

# (sample, mutation, expected "path: message" fragment)
CASES: list[tuple[str, Callable[[], Obj], Callable[[Obj], object], str]] = [
    # -- ResourceSlice ----------------------------------------------------------------------
    (
        "driver-length",
        samples.slice_,
        _set(_spec, "driver", "a" * 64),
        "spec.driver: must be at most 63 characters",
    ),
    (
        "driver-format",
        samples.slice_,
        _set(_spec, "driver", "GPU_driver"),
        "spec.driver: must be a DNS subdomain",
    ),
    (
        "pool-name",
        samples.slice_,
        _set(lambda o: o["spec"]["pool"], "name", "a//b"),
        "spec.pool.name: must be one or more DNS subdomains separated by '/'",
    ),
    (
        "pool-name-length",
        samples.slice_,
        _set(lambda o: o["spec"]["pool"], "name", "a" * 254),
        "spec.pool.name: must be at most 253 characters",
    ),
    (
        "pool-generation",
        samples.slice_,
        _set(lambda o: o["spec"]["pool"], "generation", -1),
        "spec.pool.generation: Input should be greater than or equal to 0",
    ),
    (
        "pool-slice-count",
        samples.slice_,
        _set(lambda o: o["spec"]["pool"], "resourceSliceCount", 0),
        "spec.pool.resourceSliceCount: Input should be greater than 0",
    ),
    (
        "devices-128",
        lambda: samples.slice_(devices=129),
        lambda o: None,
        "spec.devices: must have at most 128 items",
    ),
    (
        "devices-64-advanced",
        lambda: samples.slice_(devices=65),
        lambda o: _dev(o).__setitem__("taints", [_taint(0)]),
        "spec.devices: must have at most 64 devices when any device uses taints",
    ),
    (
        "devices-64-lists",
        lambda: samples.slice_(devices=65),
        lambda o: _dev(o, 9)["attributes"].__setitem__("l", {"ints": [1]}),
        "spec.devices: must have at most 64 devices",
    ),
    (
        "device-name",
        samples.slice_,
        _set(lambda o: _dev(o, 1), "name", "GPU 1"),
        "spec.devices[1].name: must be a DNS label",
    ),
    (
        "device-name-unique",
        samples.slice_,
        _set(lambda o: _dev(o, 2), "name", "gpu-1"),
        "spec.devices[2].name: duplicate value 'gpu-1'",
    ),
    (
        "attribute-name",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("bad key", {"int": 1}),
        "spec.devices[0].attributes[bad key]: must be a C identifier of at most 32 characters",
    ),
    (
        "attribute-id-length",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("a" * 33, {"int": 1}),
        f"spec.devices[0].attributes.{'a' * 33}: must be a C identifier",
    ),
    (
        "attribute-domain-length",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__(f"{LONG_DOMAIN}/x", {"int": 1}),
        f"spec.devices[0].attributes[{LONG_DOMAIN}/x]: domain must be at most 63 characters",
    ),
    (
        "attribute-string-length",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("model", {"string": "x" * 65}),
        "spec.devices[0].attributes.model.string: must be at most 64 characters",
    ),
    (
        "attribute-version",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("driverVersion", {"version": "1.2"}),
        "spec.devices[0].attributes.driverVersion.version: must be a semantic version",
    ),
    (
        "attribute-one-value",
        samples.slice_,
        lambda o: _dev(o, 3)["attributes"].__setitem__("index", {"int": 1, "string": "x"}),
        "spec.devices[3].attributes.index: exactly one of int, bool, string, version",
    ),
    (
        "attribute-no-value",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("index", {}),
        "spec.devices[0].attributes.index: exactly one of",
    ),
    (
        "attribute-empty-list",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("l", {"strings": []}),
        "spec.devices[0].attributes.l: a list value must not be empty",
    ),
    (
        "attribute-int-type",
        samples.slice_,
        lambda o: _dev(o)["attributes"].__setitem__("index", {"int": "1"}),
        "spec.devices[0].attributes.index.int: Input should be a valid integer",
    ),
    (
        "attributes-and-capacity-32",
        samples.slice_,
        lambda o: _dev(o)["attributes"].update({f"a{i}": {"int": i} for i in range(28)}),
        "spec.devices[0]: attributes and capacity together must have at most 32 entries",
    ),
    (
        "attribute-values-48",
        samples.slice_,
        lambda o: _dev(o)["attributes"].update(
            {"l1": {"ints": list(range(25))}, "l2": {"ints": list(range(25))}}
        ),
        "spec.devices[0].attributes: must have at most 48 values in total",
    ),
    (
        "capacity-quantity",
        samples.slice_,
        lambda o: _dev(o)["capacity"]["memory"].__setitem__("value", "lots"),
        "spec.devices[0].capacity.memory.value: quantity 'lots' must match",
    ),
    (
        "capacity-name",
        samples.slice_,
        lambda o: _dev(o)["capacity"].__setitem__("9lives", {"value": "1"}),
        "spec.devices[0].capacity[9lives]: must be a C identifier",
    ),
    (
        "node-selection-none",
        samples.slice_,
        lambda o: o["spec"].pop("nodeName"),
        "spec: exactly one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection must be set",
    ),
    (
        "node-selection-two",
        samples.slice_,
        _set(_spec, "allNodes", True),
        "spec: exactly one of nodeName, nodeSelector, allNodes or perDeviceNodeSelection",
    ),
    (
        "node-selector-one-term",
        samples.counters_slice,
        lambda o: (
            o["spec"].pop("allNodes"),
            o["spec"].__setitem__("nodeSelector", {"nodeSelectorTerms": [{}, {}]}),
        ),
        "spec.nodeSelector.nodeSelectorTerms: must have exactly one term",
    ),
    (
        "devices-xor-counters",
        samples.slice_,
        _set(_spec, "sharedCounters", [{"name": "c", "counters": {"c": {"value": "1"}}}]),
        "spec: devices and sharedCounters must not both be set",
    ),
    (
        "per-device-node-without-flag",
        samples.slice_,
        _set(lambda o: _dev(o, 1), "allNodes", True),
        "spec.devices[1]: nodeName, nodeSelector and allNodes may only be set when perDeviceNodeSelection is true",
    ),
    (
        "per-device-node-missing",
        samples.advanced_slice,
        lambda o: _dev(o, 2).pop("allNodes"),
        "spec.devices[2]: exactly one of nodeName, nodeSelector or allNodes must be set",
    ),
    (
        "counter-sets-8",
        samples.counters_slice,
        _set(
            _spec,
            "sharedCounters",
            [{"name": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(9)],
        ),
        "spec.sharedCounters: must have at most 8 items",
    ),
    (
        "counter-set-unique",
        samples.counters_slice,
        _set(
            _spec,
            "sharedCounters",
            [
                {"name": "s", "counters": {"c": {"value": "1"}}},
                {"name": "s", "counters": {"c": {"value": "1"}}},
            ],
        ),
        "spec.sharedCounters[1].name: duplicate value 's'",
    ),
    (
        "counters-32",
        samples.counters_slice,
        lambda o: o["spec"]["sharedCounters"][0].__setitem__(
            "counters", {f"c{i}": {"value": "1"} for i in range(33)}
        ),
        "spec.sharedCounters[0].counters: must have at most 32 items",
    ),
    (
        "counter-name",
        samples.counters_slice,
        lambda o: o["spec"]["sharedCounters"][0].__setitem__("counters", {"Mem": {"value": "1"}}),
        "spec.sharedCounters[0].counters.Mem: must be a DNS label",
    ),
    (
        "consumes-counters-2",
        samples.advanced_slice,
        _set(
            _dev,
            "consumesCounters",
            [{"counterSet": f"s{i}", "counters": {"c": {"value": "1"}}} for i in range(3)],
        ),
        "spec.devices[0].consumesCounters: must have at most 2 items",
    ),
    (
        "consumes-counters-unique",
        samples.advanced_slice,
        _set(
            _dev, "consumesCounters", [{"counterSet": "s", "counters": {"c": {"value": "1"}}}] * 2
        ),
        "spec.devices[0].consumesCounters[1].counterSet: duplicate value 's'",
    ),
    (
        "compatibility-groups-2",
        samples.advanced_slice,
        _set(
            _dev,
            "consumesCounters",
            [
                {
                    "counterSet": "s",
                    "counters": {"c": {"value": "1"}},
                    "compatibilityGroups": ["a", "b", "c"],
                }
            ],
        ),
        "spec.devices[0].consumesCounters[0].compatibilityGroups: must have at most 2 items",
    ),
    (
        "compatibility-groups-unique",
        samples.advanced_slice,
        _set(
            _dev,
            "consumesCounters",
            [
                {
                    "counterSet": "s",
                    "counters": {"c": {"value": "1"}},
                    "compatibilityGroups": ["a", "a"],
                }
            ],
        ),
        "spec.devices[0].consumesCounters[0].compatibilityGroups[1]: duplicate value 'a'",
    ),
    (
        "consumed-counters-32",
        samples.advanced_slice,
        _set(
            _dev,
            "consumesCounters",
            [{"counterSet": "s", "counters": {f"c{i}": {"value": "1"} for i in range(33)}}],
        ),
        "spec.devices[0].consumesCounters[0].counters: must have at most 32 items",
    ),
    (
        "taints-16",
        samples.slice_,
        _set(_dev, "taints", _many(_taint, 17)),
        "spec.devices[0].taints: must have at most 16 items",
    ),
    (
        "taint-effect",
        samples.slice_,
        _set(_dev, "taints", [{"key": "k", "effect": "Evict"}]),
        "spec.devices[0].taints[0].effect: unsupported value 'Evict'",
    ),
    (
        "taint-key",
        samples.slice_,
        _set(_dev, "taints", [{"key": "-k", "effect": "None"}]),
        "spec.devices[0].taints[0].key: must be a label key",
    ),
    (
        "taint-value",
        samples.slice_,
        _set(_dev, "taints", [{"key": "k", "value": "a b", "effect": "None"}]),
        "spec.devices[0].taints[0].value: must be a label value",
    ),
    (
        "binding-conditions-4",
        samples.advanced_slice,
        _set(_dev, "bindingConditions", [f"c{i}" for i in range(5)]),
        "spec.devices[0].bindingConditions: must have at most 4 items",
    ),
    (
        "binding-failure-conditions-4",
        samples.advanced_slice,
        _set(_dev, "bindingFailureConditions", [f"c{i}" for i in range(5)]),
        "spec.devices[0].bindingFailureConditions: must have at most 4 items",
    ),
    (
        "binding-conditions-pair",
        samples.advanced_slice,
        lambda o: _dev(o).pop("bindingFailureConditions"),
        "spec.devices[0].bindingFailureConditions: bindingConditions and bindingFailureConditions must be set together",
    ),
    (
        "binding-conditions-overlap",
        samples.advanced_slice,
        _set(_dev, "bindingFailureConditions", ["example.com/Attached"]),
        "must not be in both bindingConditions and bindingFailureConditions",
    ),
    (
        "binding-conditions-unique",
        samples.advanced_slice,
        _set(_dev, "bindingConditions", ["a", "a"]),
        "spec.devices[0].bindingConditions[1]: duplicate value 'a'",
    ),
    (
        "request-policy-needs-multi",
        samples.advanced_slice,
        lambda o: _dev(o).pop("allowMultipleAllocations"),
        "spec.devices[0].capacity.memory.requestPolicy: may only be set when allowMultipleAllocations is true",
    ),
    (
        "request-policy-one-kind",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["memory"]["requestPolicy"].__setitem__(
            "validValues", ["1Gi"]
        ),
        "spec.devices[0].capacity.memory.requestPolicy: at most one of validValues and validRange",
    ),
    (
        "valid-values-10",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["bandwidth"]["requestPolicy"].__setitem__(
            "validValues", [str(i) for i in range(1, 12)]
        ),
        "spec.devices[0].capacity.bandwidth.requestPolicy.validValues: must have at most 10 items",
    ),
    (
        "valid-values-ascending",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["bandwidth"]["requestPolicy"].__setitem__(
            "validValues", ["50", "10", "100"]
        ),
        "spec.devices[0].capacity.bandwidth.requestPolicy.validValues[1]: values must be strictly ascending",
    ),
    (
        "valid-values-default",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["bandwidth"]["requestPolicy"].__setitem__("default", "20"),
        "spec.devices[0].capacity.bandwidth.requestPolicy.default: must be one of validValues",
    ),
    (
        "valid-range-default",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["memory"]["requestPolicy"].__setitem__("default", "512Mi"),
        "spec.devices[0].capacity.memory.requestPolicy.default: must be within validRange",
    ),
    (
        "valid-range-step",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["memory"]["requestPolicy"].__setitem__("default", "1.5Gi"),
        "spec.devices[0].capacity.memory.requestPolicy.default: must be min plus a multiple of step",
    ),
    (
        "valid-range-min",
        samples.advanced_slice,
        lambda o: _dev(o)["capacity"]["memory"]["requestPolicy"]["validRange"].__setitem__(
            "min", "41Gi"
        ),
        "spec.devices[0].capacity.memory.requestPolicy.validRange.min: must not exceed the capacity value",
    ),
    # -- ResourceClaim ----------------------------------------------------------------------
    (
        "requests-32",
        samples.claim,
        lambda o: o["spec"]["devices"].__setitem__(
            "requests", [{"name": f"r{i}", "exactly": {"deviceClassName": "c"}} for i in range(33)]
        ),
        "spec.devices.requests: must have at most 32 items",
    ),
    (
        "request-name",
        samples.claim,
        _set(_req, "name", "GPU"),
        "spec.devices.requests[0].name: must be a DNS label",
    ),
    (
        "request-name-unique",
        samples.claim,
        _set(lambda o: _req(o, 1), "name", "gpu"),
        "spec.devices.requests[1].name: duplicate value 'gpu'",
    ),
    (
        "request-neither",
        samples.claim,
        lambda o: _req(o).pop("exactly"),
        "spec.devices.requests[0]: exactly one of exactly or firstAvailable must be set",
    ),
    (
        "request-both",
        samples.claim,
        _set(_req, "firstAvailable", [{"name": "a", "deviceClassName": "c"}]),
        "spec.devices.requests[0]: exactly one of exactly or firstAvailable must be set",
    ),
    (
        "first-available-8",
        samples.claim,
        _set(
            lambda o: _req(o, 1),
            "firstAvailable",
            [{"name": f"s{i}", "deviceClassName": "c"} for i in range(9)],
        ),
        "spec.devices.requests[1].firstAvailable: must have at most 8 items",
    ),
    (
        "subrequest-unique",
        samples.claim,
        _set(lambda o: _req(o, 1), "firstAvailable", [{"name": "s", "deviceClassName": "c"}] * 2),
        "spec.devices.requests[1].firstAvailable[1].name: duplicate value 's'",
    ),
    (
        "subrequest-count-all",
        samples.claim,
        lambda o: _req(o, 1)["firstAvailable"][1].__setitem__("count", 2),
        "spec.devices.requests[1].firstAvailable[1].count: must not be set when allocationMode is All",
    ),
    (
        "class-name",
        samples.claim,
        _set(_exactly, "deviceClassName", "GPU!"),
        "spec.devices.requests[0].exactly.deviceClassName: must be a DNS subdomain",
    ),
    (
        "class-name-required",
        samples.claim,
        lambda o: _exactly(o).pop("deviceClassName"),
        "spec.devices.requests[0].exactly.deviceClassName: required value",
    ),
    (
        "selectors-32",
        samples.claim,
        _set(_exactly, "selectors", _many(_selector, 33)),
        "spec.devices.requests[0].exactly.selectors: must have at most 32 items",
    ),
    (
        "cel-length",
        samples.claim,
        _set(
            _exactly,
            "selectors",
            [{"cel": {"expression": "x" * (limits.CEL_SELECTOR_EXPRESSION_MAX_LENGTH + 1)}}],
        ),
        "spec.devices.requests[0].exactly.selectors[0].cel.expression: must be at most 10240 characters",
    ),
    (
        "count-positive",
        samples.claim,
        _set(_exactly, "count", 0),
        "spec.devices.requests[0].exactly.count: must be greater than zero",
    ),
    (
        "count-with-all",
        samples.claim,
        _set(_exactly, "allocationMode", "All"),
        "spec.devices.requests[0].exactly.count: must not be set when allocationMode is All",
    ),
    (
        "allocation-mode",
        samples.claim,
        _set(_exactly, "allocationMode", "Some"),
        "spec.devices.requests[0].exactly.allocationMode: unsupported value 'Some'",
    ),
    (
        "tolerations-16",
        samples.claim,
        _set(_exactly, "tolerations", [{"operator": "Exists"}] * 17),
        "spec.devices.requests[0].exactly.tolerations: must have at most 16 items",
    ),
    (
        "toleration-empty-key",
        samples.claim,
        _set(_exactly, "tolerations", [{"value": "v"}]),
        "spec.devices.requests[0].exactly.tolerations[0].operator: must be Exists when key is empty",
    ),
    (
        "toleration-exists-value",
        samples.claim,
        _set(_exactly, "tolerations", [{"key": "k", "operator": "Exists", "value": "v"}]),
        "spec.devices.requests[0].exactly.tolerations[0].value: must be empty when operator is Exists",
    ),
    (
        "toleration-effect",
        samples.claim,
        _set(_exactly, "tolerations", [{"key": "k", "effect": "Sometimes"}]),
        "spec.devices.requests[0].exactly.tolerations[0].effect: unsupported value 'Sometimes'",
    ),
    (
        "capacity-request-name",
        samples.claim,
        _set(_exactly, "capacity", {"requests": {"a/b/c": "1"}}),
        "spec.devices.requests[0].exactly.capacity.requests[a/b/c]: must be a C identifier",
    ),
    (
        "constraints-32",
        samples.claim,
        lambda o: o["spec"]["devices"].__setitem__(
            "constraints", [{"matchAttribute": "a.b/c"}] * 33
        ),
        "spec.devices.constraints: must have at most 32 items",
    ),
    (
        "constraint-neither",
        samples.claim,
        lambda o: o["spec"]["devices"]["constraints"][0].pop("matchAttribute"),
        "spec.devices.constraints[0]: exactly one of matchAttribute or distinctAttribute must be set",
    ),
    (
        "constraint-fully-qualified",
        samples.claim,
        lambda o: o["spec"]["devices"]["constraints"][0].__setitem__("matchAttribute", "numa"),
        "spec.devices.constraints[0].matchAttribute: must be '<domain>/<identifier>'",
    ),
    (
        "constraint-reference",
        samples.claim,
        lambda o: o["spec"]["devices"]["constraints"][0].__setitem__(
            "requests", ["gpu", "nic/slow"]
        ),
        "spec.devices.constraints[0].requests[1]: 'nic/slow' is not a request or subrequest of the claim",
    ),
    (
        "config-32",
        samples.claim,
        lambda o: o["spec"]["devices"].__setitem__("config", _many(_opaque, 33)),
        "spec.devices.config: must have at most 32 items",
    ),
    (
        "config-reference",
        samples.claim,
        lambda o: o["spec"]["devices"]["config"][0].__setitem__("requests", ["cpu"]),
        "spec.devices.config[0].requests[0]: 'cpu' is not a request",
    ),
    (
        "opaque-size",
        samples.claim,
        lambda o: o["spec"]["devices"]["config"][0]["opaque"].__setitem__(
            "parameters", {"x": "y" * limits.OPAQUE_PARAMETERS_MAX_LENGTH}
        ),
        "spec.devices.config[0].opaque.parameters: must be at most 10240 bytes of JSON",
    ),
    (
        "opaque-driver",
        samples.claim,
        lambda o: o["spec"]["devices"]["config"][0]["opaque"].__setitem__("driver", "a" * 64),
        "spec.devices.config[0].opaque.driver: must be at most 63 characters",
    ),
    (
        "opaque-required",
        samples.claim,
        lambda o: o["spec"]["devices"]["config"][0].pop("opaque"),
        "spec.devices.config[0].opaque: required value",
    ),
    (
        "reserved-for-256",
        samples.claim,
        lambda o: o["status"].__setitem__(
            "reservedFor",
            [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(257)],
        ),
        "status.reservedFor: must have at most 256 items",
    ),
    (
        "reserved-for-unique",
        samples.claim,
        lambda o: o["status"]["reservedFor"].append(dict(o["status"]["reservedFor"][0])),
        "status.reservedFor[1].uid: duplicate value 'p-uid'",
    ),
    (
        "reserved-for-needs-allocation",
        samples.claim,
        lambda o: o["status"].pop("allocation"),
        "status.reservedFor: must be empty while the claim is not allocated",
    ),
    (
        "results-32",
        samples.claim,
        lambda o: _alloc(o)["devices"].__setitem__(
            "results",
            [{"request": "gpu", "driver": "d", "pool": "p", "device": f"d{i}"} for i in range(33)],
        ),
        "status.allocation.devices.results: must have at most 32 items",
    ),
    (
        "result-share-id",
        samples.claim,
        lambda o: _alloc(o)["devices"]["results"][0].__setitem__(
            "shareID", samples.SHARE_ID.upper()
        ),
        "status.allocation.devices.results[0].shareID: must be a lowercase UUID",
    ),
    (
        "result-request",
        samples.claim,
        lambda o: _alloc(o)["devices"]["results"][0].__setitem__("request", "a/b/c"),
        "status.allocation.devices.results[0].request: must be a request name or '<request>/<subrequest>'",
    ),
    (
        "allocation-config-64",
        samples.claim,
        lambda o: _alloc(o)["devices"].__setitem__(
            "config", [{"source": "FromClass", **_opaque()}] * 65
        ),
        "status.allocation.devices.config: must have at most 64 items",
    ),
    (
        "allocation-config-source",
        samples.claim,
        lambda o: _alloc(o)["devices"]["config"][0].__setitem__("source", "FromPod"),
        "status.allocation.devices.config[0].source: unsupported value 'FromPod'",
    ),
    (
        "device-status-conditions-8",
        samples.claim,
        lambda o: o["status"]["devices"][0].__setitem__("conditions", _many(_condition, 9)),
        "status.devices[0].conditions: must have at most 8 items",
    ),
    (
        "device-status-data",
        samples.claim,
        lambda o: o["status"]["devices"][0].__setitem__(
            "data", {"x": "y" * limits.ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH}
        ),
        "status.devices[0].data: must be at most 10240 bytes of JSON",
    ),
    (
        "network-ips-16",
        samples.claim,
        lambda o: o["status"]["devices"][0]["networkData"].__setitem__("ips", ["10.0.0.1/8"] * 17),
        "status.devices[0].networkData.ips: must have at most 16 items",
    ),
    (
        "network-interface-name",
        samples.claim,
        lambda o: o["status"]["devices"][0]["networkData"].__setitem__("interfaceName", "x" * 257),
        "status.devices[0].networkData.interfaceName: must be at most 256 characters",
    ),
    (
        "network-hardware-address",
        samples.claim,
        lambda o: o["status"]["devices"][0]["networkData"].__setitem__(
            "hardwareAddress", "x" * 129
        ),
        "status.devices[0].networkData.hardwareAddress: must be at most 128 characters",
    ),
    (
        "device-status-allocated",
        samples.claim,
        lambda o: o["status"]["devices"][0].__setitem__("device", "gpu-7"),
        "status.devices[0]: must refer to a device (and shareID) in status.allocation",
    ),
    (
        "device-status-unique",
        samples.claim,
        lambda o: o["status"]["devices"].append(dict(o["status"]["devices"][0])),
        "status.devices[1]: duplicate entry for this device and shareID",
    ),
    (
        "condition-reason",
        samples.claim,
        lambda o: o["status"]["devices"][0]["conditions"][0].__setitem__("reason", "not camel"),
        "status.devices[0].conditions[0].reason: must be a CamelCase reason",
    ),
    (
        "template-spec",
        samples.claim_template,
        lambda o: o["spec"]["spec"]["devices"]["requests"][0].__setitem__("name", "-x"),
        "spec.spec.devices.requests[0].name: must be a DNS label",
    ),
    # -- DeviceClass --------------------------------------------------------------------------
    (
        "class-selectors-32",
        samples.device_class,
        _set(_spec, "selectors", _many(_selector, 33)),
        "spec.selectors: must have at most 32 items",
    ),
    (
        "class-config-32",
        samples.device_class,
        _set(_spec, "config", _many(_opaque, 33)),
        "spec.config: must have at most 32 items",
    ),
    (
        "class-cel-required",
        samples.device_class,
        _set(_spec, "selectors", [{"cel": {"expression": ""}}]),
        "spec.selectors[0].cel.expression: must not be empty",
    ),
    # -- DeviceTaintRule ----------------------------------------------------------------------
    (
        "rule-conditions-8",
        samples.taint_rule,
        lambda o: o["status"].__setitem__("conditions", _many(_condition, 9)),
        "status.conditions: must have at most 8 items",
    ),
    (
        "rule-selector-driver",
        samples.taint_rule,
        lambda o: o["spec"]["deviceSelector"].__setitem__("driver", "X"),
        "spec.deviceSelector.driver: must be a DNS subdomain",
    ),
    (
        "rule-taint-effect",
        samples.taint_rule,
        lambda o: o["spec"]["taint"].pop("effect"),
        "spec.taint.effect: required value",
    ),
]


@pytest.mark.parametrize(
    ("sample", "mutate", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_limit_is_enforced_with_its_field_path(
    sample: Callable[[], Obj], mutate: Callable[[Obj], object], expected: str
) -> None:
    obj = sample()
    mutate(obj)
    with pytest.raises(InvalidObjectError) as info:
        parse_object(obj)
    messages = [str(e) for e in info.value.errors]
    assert any(expected in m for m in messages), messages


@pytest.mark.parametrize("name", sorted(samples.ALL_SAMPLES))
def test_unmodified_samples_are_valid(name: str) -> None:
    parse_object(samples.ALL_SAMPLES[name]())


def test_slice_at_exactly_the_limits_is_valid() -> None:
    full = samples.slice_(devices=limits.RESOURCE_SLICE_MAX_DEVICES)
    parse_object(full)
    advanced = samples.slice_(devices=limits.RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES)
    advanced["spec"]["devices"][0]["taints"] = [
        _taint(i) for i in range(limits.DEVICE_TAINTS_MAX_LENGTH)
    ]
    parse_object(advanced)
    many = samples.slice_(devices=1)
    many["spec"]["devices"][0]["attributes"] = {
        "l1": {"ints": list(range(24))},
        "l2": {"strings": ["x"] * 24},
    }
    parse_object(many)


def test_error_names_the_object_and_lists_every_problem() -> None:
    obj = samples.slice_()
    obj["spec"]["driver"] = "BAD"
    obj["spec"]["devices"][1]["name"] = "BAD"
    with pytest.raises(InvalidObjectError) as info:
        parse_object(obj)
    assert str(info.value).startswith("ResourceSlice node-1-gpu is invalid: ")
    paths = [e.path for e in info.value.errors]
    assert paths == ["spec.driver", "spec.devices[1].name"]


@pytest.mark.parametrize(
    ("sample", "mutate", "expected"),
    [
        (
            samples.counters_slice,
            lambda o: o["spec"]["sharedCounters"][0].__setitem__("counters", {}),
            "spec.sharedCounters[0].counters: must have at least 1 items",
        ),
        (
            samples.slice_,
            _set(_spec, "allNodes", False),
            "spec.allNodes: must be either unset or set to true",
        ),
        (
            samples.slice_,
            _set(_spec, "nodeName", "Node_1"),
            "spec.nodeName: must be a DNS subdomain",
        ),
        (
            samples.advanced_slice,
            _set(lambda o: _dev(o, 2), "allNodes", False),
            "spec.devices[2].allNodes: must be either unset or set to true",
        ),
        (
            samples.slice_,
            _set(lambda o: _dev(o, 1), "allNodes", False),
            "spec.devices[1]: nodeName, nodeSelector and allNodes may only be set",
        ),
    ],
)
def test_upstream_quirks_of_node_selection_and_counters(
    sample: Callable[[], Obj], mutate: Callable[[Obj], object], expected: str
) -> None:
    obj = sample()
    mutate(obj)
    with pytest.raises(InvalidObjectError) as info:
        parse_object(obj)
    assert any(expected in str(e) for e in info.value.errors), info.value.errors


def test_request_policy_default_above_capacity_is_upstream_valid_without_values() -> None:
    # Upstream checks default only against validValues / validRange; toolkit input must parse.
    obj = samples.advanced_slice()
    obj["spec"]["devices"][0]["capacity"]["extra"] = {
        "value": "1",
        "requestPolicy": {"default": "2"},
    }
    parse_object(obj)


def test_explicit_nulls_do_not_count_as_values_or_advanced_features() -> None:
    obj = samples.slice_(devices=limits.RESOURCE_SLICE_MAX_DEVICES)
    obj["spec"]["devices"][0]["attributes"]["index"] = {"int": 0, "string": None, "ints": None}
    parse_object(obj)
