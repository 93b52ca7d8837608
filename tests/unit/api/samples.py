"""Valid example objects of every kind, in Kubernetes JSON form, for the api tests.

Each function returns a fresh dict so a test can break one field without affecting others.
"""

from __future__ import annotations

from typing import Any

DRALLOC = "resource.dralloc.dev/v1"
K8S = "resource.k8s.io/v1"
SHARE_ID = "0b9f6a1e-1c1b-4c38-9a9e-6d2f4f4d0c11"


def device_class(api_version: str = DRALLOC) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.example.com"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.example.com'"}}],
            "config": [{"opaque": {"driver": "gpu.example.com", "parameters": {"mode": "x"}}}],
            "extendedResourceName": "example.com/gpu",
        },
    }


def claim_spec() -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "gpu.example.com",
                        "selectors": [
                            {
                                "cel": {
                                    "expression": "device.attributes['gpu.example.com'].index == 0"
                                }
                            }
                        ],
                        "allocationMode": "ExactCount",
                        "count": 2,
                        "adminAccess": False,
                        "tolerations": [
                            {
                                "key": "example.com/broken",
                                "operator": "Exists",
                                "effect": "NoExecute",
                                "tolerationSeconds": 30,
                            },
                            {"key": "example.com/zone", "value": "a", "effect": "NoSchedule"},
                        ],
                        "capacity": {"requests": {"memory": "10Gi"}},
                    },
                },
                {
                    "name": "nic",
                    "firstAvailable": [
                        {"name": "fast", "deviceClassName": "nic.example.com", "count": 1},
                        {
                            "name": "any",
                            "deviceClassName": "nic.example.com",
                            "allocationMode": "All",
                        },
                    ],
                },
            ],
            "constraints": [
                {"requests": ["gpu", "nic/fast"], "matchAttribute": "example.com/numa"},
                {"distinctAttribute": "gpu.example.com/uuid"},
            ],
            "config": [
                {
                    "requests": ["gpu"],
                    "opaque": {"driver": "gpu.example.com", "parameters": {"sharing": "timeslice"}},
                }
            ],
        }
    }


def claim(api_version: str = DRALLOC) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaim",
        "metadata": {
            "name": "pod-gpu-x7k",
            "namespace": "default",
            "uid": "c-uid",
            "resourceVersion": "42",
            "annotations": {"resource.dralloc.dev/pod-claim-name": "gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": "pod",
                    "uid": "p-uid",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["resource.dralloc.dev/delete-protection"],
        },
        "spec": claim_spec(),
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": "gpu.example.com",
                            "pool": "node-1",
                            "device": "gpu-0",
                            "tolerations": [{"key": "example.com/broken", "operator": "Exists"}],
                            "bindingConditions": ["example.com/Attached"],
                            "bindingFailureConditions": ["example.com/AttachFailed"],
                            "shareID": SHARE_ID,
                            "consumedCapacity": {"memory": "10Gi"},
                        },
                        {
                            "request": "nic/fast",
                            "driver": "nic.example.com",
                            "pool": "node-1",
                            "device": "eth1",
                            "adminAccess": True,
                        },
                    ],
                    "config": [
                        {
                            "source": "FromClass",
                            "opaque": {"driver": "gpu.example.com", "parameters": {"mode": "x"}},
                        },
                        {
                            "source": "FromClaim",
                            "requests": ["gpu"],
                            "opaque": {"driver": "gpu.example.com", "parameters": {}},
                        },
                    ],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["node-1"]}
                            ]
                        }
                    ]
                },
                "allocationTimestamp": "2026-01-01T10:00:00Z",
            },
            "reservedFor": [{"resource": "pods", "name": "pod", "uid": "p-uid"}],
            "devices": [
                {
                    "driver": "gpu.example.com",
                    "pool": "node-1",
                    "device": "gpu-0",
                    "shareID": SHARE_ID,
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Up",
                            "message": "",
                            "lastTransitionTime": "2026-01-01T10:00:01Z",
                        }
                    ],
                    "data": {"any": ["json"]},
                    "networkData": {
                        "interfaceName": "net1",
                        "ips": ["192.0.2.5/24"],
                        "hardwareAddress": "aa:bb:cc:dd:ee:ff",
                    },
                }
            ],
        },
    }


def claim_template(api_version: str = DRALLOC) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": "default"},
        "spec": {"metadata": {"labels": {"team": "a"}}, "spec": claim_spec()},
    }


def device(i: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "model": {"string": "A100"},
            "index": {"int": i},
            "driverVersion": {"version": "1.2.3-rc.1"},
            "example.com/healthy": {"bool": True},
        },
        "capacity": {"memory": {"value": "80Gi"}},
    }


def slice_(api_version: str = DRALLOC, devices: int = 4) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu", "generation": 3},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
            "nodeName": "node-1",
            "devices": [device(i) for i in range(devices)],
        },
    }


def advanced_slice(api_version: str = DRALLOC) -> dict[str, Any]:
    """Partitionable, multi-allocatable, tainted, per-device nodes, binding conditions."""
    return {
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": "fabric"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "fabric/rack-1", "generation": 0, "resourceSliceCount": 2},
            "perDeviceNodeSelection": True,
            "devices": [
                {
                    "name": "part-0",
                    "attributes": {"tags": {"strings": ["a", "b"]}},
                    "capacity": {
                        "memory": {
                            "value": "40Gi",
                            "requestPolicy": {
                                "default": "1Gi",
                                "validRange": {"min": "1Gi", "max": "40Gi", "step": "1Gi"},
                            },
                        },
                        "bandwidth": {
                            "value": "100",
                            "requestPolicy": {"default": "10", "validValues": ["10", "50", "100"]},
                        },
                    },
                    "allowMultipleAllocations": True,
                    "consumesCounters": [
                        {
                            "counterSet": "gpu-0",
                            "counters": {"memory": {"value": "40Gi"}},
                            "compatibilityGroups": ["full"],
                        }
                    ],
                    "nodeName": "node-1",
                    "taints": [
                        {
                            "key": "example.com/maintenance",
                            "value": "soon",
                            "effect": "NoSchedule",
                            "timeAdded": "2026-01-01T00:00:00Z",
                        }
                    ],
                    "bindsToNode": True,
                    "bindingConditions": ["example.com/Attached"],
                    "bindingFailureConditions": ["example.com/AttachFailed"],
                },
                {
                    "name": "part-1",
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "rack", "operator": "In", "values": ["1"]}
                                ]
                            }
                        ]
                    },
                },
                {"name": "part-2", "allNodes": True},
            ],
        },
    }


def counters_slice(api_version: str = DRALLOC) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "ResourceSlice",
        "metadata": {"name": "fabric-counters"},
        "spec": {
            "driver": "gpu.example.com",
            "pool": {"name": "fabric/rack-1", "generation": 0, "resourceSliceCount": 2},
            "allNodes": True,
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
        },
    }


def taint_rule(api_version: str = DRALLOC) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-gpu-0"},
        "spec": {
            "deviceSelector": {"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"},
            "taint": {"key": "example.com/broken", "value": "ecc", "effect": "NoExecute"},
        },
        "status": {
            "conditions": [
                {
                    "type": "EvictionInProgress",
                    "status": "False",
                    "reason": "Completed",
                    "message": "0 pods to evict",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                    "observedGeneration": 1,
                }
            ]
        },
    }


ALL_SAMPLES = {
    "device_class": device_class,
    "claim": claim,
    "claim_template": claim_template,
    "slice": slice_,
    "advanced_slice": advanced_slice,
    "counters_slice": counters_slice,
    "taint_rule": taint_rule,
}
