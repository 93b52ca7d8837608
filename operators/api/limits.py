"""Upstream resource.k8s.io/v1 validation limits and name formats, in one place.

The models enforce these through pydantic-core constraints (max_length, pattern) where a
single field suffices, so that validating a 128-device slice stays in compiled code; the
few rules that span fields run once per object in Python. The CRD generator reads the same
constraints, so the API server and the operator agree on what is valid.

Patterns are anchored because pydantic-core and the API server's OpenAPI validation both
search rather than match. They use only syntax shared by Rust's regex crate, Go's RE2 and
Python's re.
"""

from __future__ import annotations

from typing import Final

# -- sizes (upstream validation) ------------------------------------------------------

DRIVER_NAME_MAX_LENGTH: Final = 63
POOL_NAME_MAX_LENGTH: Final = 253
DNS_LABEL_MAX_LENGTH: Final = 63
DNS_SUBDOMAIN_MAX_LENGTH: Final = 253
RESOURCE_SLICE_MAX_DEVICES: Final = 128
RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES: Final = 64
RESOURCE_SLICE_MAX_COUNTER_SETS: Final = 8
RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET: Final = 32
RESOURCE_SLICE_MAX_DEVICE_COUNTER_CONSUMPTIONS_PER_DEVICE: Final = 2
RESOURCE_SLICE_MAX_COUNTERS_PER_DEVICE_COUNTER_CONSUMPTION: Final = 32
DEVICE_COMPATIBILITY_GROUPS_MAX_SIZE: Final = 2
RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE: Final = 32
RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE: Final = 48
DEVICE_MAX_DOMAIN_LENGTH: Final = 63
DEVICE_MAX_ID_LENGTH: Final = 32
DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH: Final = 64
DEVICE_TAINTS_MAX_LENGTH: Final = 16
BINDING_CONDITIONS_MAX_SIZE: Final = 4
BINDING_FAILURE_CONDITIONS_MAX_SIZE: Final = 4
DEVICE_REQUESTS_MAX_SIZE: Final = 32
DEVICE_CONSTRAINTS_MAX_SIZE: Final = 32
DEVICE_CONFIG_MAX_SIZE: Final = 32
DEVICE_SELECTORS_MAX_SIZE: Final = 32
FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE: Final = 8
DEVICE_TOLERATIONS_MAX_LENGTH: Final = 16
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024
CEL_SELECTOR_EXPRESSION_MAX_COST: Final = 1_000_000
DEVICE_DERIVED_ATTRIBUTES_MAX_SIZE: Final = 32
# One budget for the estimated cost of all derived-attribute expressions of a claim.
DEVICE_CLAIM_DERIVED_ATTRIBUTE_CEL_MAX_COST: Final = 1_000_000
OPAQUE_PARAMETERS_MAX_LENGTH: Final = 10 * 1024
RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE: Final = 256
ALLOCATION_RESULTS_MAX_SIZE: Final = 32
ALLOCATION_CONFIG_MAX_SIZE: Final = 2 * DEVICE_CONFIG_MAX_SIZE
ALLOCATED_DEVICE_STATUS_MAX_CONDITIONS: Final = 8
ALLOCATED_DEVICE_STATUS_DATA_MAX_LENGTH: Final = 10 * 1024
NETWORK_DEVICE_DATA_INTERFACE_NAME_MAX_LENGTH: Final = 256
NETWORK_DEVICE_DATA_MAX_IPS: Final = 16
NETWORK_DEVICE_DATA_HARDWARE_ADDRESS_MAX_LENGTH: Final = 128
DEVICE_TAINT_RULE_STATUS_MAX_CONDITIONS: Final = 8
DEVICE_QUOTA_STATUS_MAX_CONDITIONS: Final = 8
DEVICE_QUOTA_MAX_CAPACITIES: Final = 16  # dralloc's own bound: a quota names a few capacities
RESOURCE_CLAIM_STATUS_MAX_CONDITIONS: Final = 8  # dralloc extension (not upstream)
# dralloc extension: every result's device name (a DNS label), comma-separated
RESOURCE_CLAIM_STATUS_ALLOCATED_DEVICES_MAX_LENGTH: Final = ALLOCATION_RESULTS_MAX_SIZE * (
    DNS_LABEL_MAX_LENGTH + 1
)
# dralloc extension: every reservedFor entry's name (a DNS subdomain), comma-separated
RESOURCE_CLAIM_STATUS_RESERVED_FOR_NAMES_MAX_LENGTH: Final = (
    RESOURCE_CLAIM_RESERVED_FOR_MAX_SIZE * (DNS_SUBDOMAIN_MAX_LENGTH + 1)
)
# dralloc extension (not upstream): entries of the pod claims annotation, which mirrors
# pod.spec.resourceClaims. Kubernetes 1.36 puts no count limit on that list (its pod
# validation checks names and sources only); upstream's one count limit on a consumer's
# claims is the PodGroup's (4). Without a limit one pod with thousands of entries keeps
# the claim controller busy while every other pod waits. 32, as upstream's per-claim lists.
POD_RESOURCE_CLAIMS_MAX_SIZE: Final = 32
CAPACITY_REQUEST_POLICY_VALID_VALUES_MAX: Final = 10
NODE_SELECTOR_TERMS_PER_SLICE: Final = 1
LABEL_VALUE_MAX_LENGTH: Final = 63
LABEL_NAME_MAX_LENGTH: Final = 63
QUALIFIED_NAME_MAX_LENGTH: Final = DEVICE_MAX_DOMAIN_LENGTH + 1 + DEVICE_MAX_ID_LENGTH
LABEL_KEY_MAX_LENGTH: Final = DNS_SUBDOMAIN_MAX_LENGTH + 1 + LABEL_NAME_MAX_LENGTH
CONDITION_MESSAGE_MAX_LENGTH: Final = 32768
CONDITION_REASON_MAX_LENGTH: Final = 1024
SHARE_ID_LENGTH: Final = 36

DEVICE_TAINT_CONDITION_EVICTION_IN_PROGRESS: Final = "EvictionInProgress"
# dralloc extension: ResourceClaim.status.conditions. False (with the allocator's
# explanation as message) while the claim waits for devices, True once allocated.
RESOURCE_CLAIM_CONDITION_ALLOCATED: Final = "Allocated"

# -- name formats ---------------------------------------------------------------------------

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = rf"{_LABEL}(?:\.{_LABEL})*"
_C_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]{0,31}"
_LABEL_NAME = r"(?:[A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
_SEMVER_NUM = r"(?:0|[1-9][0-9]*)"
_SEMVER_PRE_ID = r"(?:0|[1-9][0-9]*|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"

DNS_LABEL_PATTERN: Final = rf"^{_LABEL}$"
DNS_SUBDOMAIN_PATTERN: Final = rf"^{_SUBDOMAIN}$"
POOL_NAME_PATTERN: Final = rf"^{_SUBDOMAIN}(?:/{_SUBDOMAIN})*$"
C_IDENTIFIER_PATTERN: Final = rf"^{_C_IDENTIFIER}$"
QUALIFIED_NAME_PATTERN: Final = rf"^(?:{_SUBDOMAIN}/)?{_C_IDENTIFIER}$"
FULLY_QUALIFIED_NAME_PATTERN: Final = rf"^{_SUBDOMAIN}/{_C_IDENTIFIER}$"
# Request references in constraints and config: "request" or "request/subrequest".
REQUEST_REFERENCE_PATTERN: Final = rf"^{_LABEL}(?:/{_LABEL})?$"
LABEL_KEY_PATTERN: Final = rf"^(?:{_SUBDOMAIN}/)?{_LABEL_NAME}$"
LABEL_VALUE_PATTERN: Final = rf"^(?:{_LABEL_NAME})?$"
SEMVER_PATTERN: Final = (
    rf"^{_SEMVER_NUM}\.{_SEMVER_NUM}\.{_SEMVER_NUM}"
    rf"(?:-{_SEMVER_PRE_ID}(?:\.{_SEMVER_PRE_ID})*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?$"
)
UUID_PATTERN: Final = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
CONDITION_REASON_PATTERN: Final = r"^[A-Za-z](?:[A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

# What each pattern means, in the words an error message should use.
PATTERN_DESCRIPTIONS: Final[dict[str, str]] = {
    DNS_LABEL_PATTERN: (
        "must be a DNS label (lowercase alphanumerics or '-', starting and ending with an "
        "alphanumeric, at most 63 characters)"
    ),
    DNS_SUBDOMAIN_PATTERN: (
        "must be a DNS subdomain (dot-separated DNS labels: lowercase alphanumerics, '-' "
        "and '.', starting and ending with an alphanumeric)"
    ),
    POOL_NAME_PATTERN: "must be one or more DNS subdomains separated by '/'",
    C_IDENTIFIER_PATTERN: "must be a C identifier of at most 32 characters",
    QUALIFIED_NAME_PATTERN: (
        "must be a C identifier of at most 32 characters, optionally prefixed by a DNS "
        "subdomain of at most 63 characters and '/'"
    ),
    FULLY_QUALIFIED_NAME_PATTERN: (
        "must be '<domain>/<identifier>': a DNS subdomain of at most 63 characters, '/', "
        "and a C identifier of at most 32 characters"
    ),
    REQUEST_REFERENCE_PATTERN: "must be a request name or '<request>/<subrequest>'",
    LABEL_KEY_PATTERN: (
        "must be a label key: an optional DNS subdomain prefix and '/', then a name of at "
        "most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric"
    ),
    LABEL_VALUE_PATTERN: (
        "must be a label value: empty, or at most 63 alphanumerics, '-', '_' or '.', "
        "starting and ending with an alphanumeric"
    ),
    SEMVER_PATTERN: "must be a semantic version (semver 2.0.0, for example 1.2.3-rc.1)",
    UUID_PATTERN: "must be a lowercase UUID",
    CONDITION_REASON_PATTERN: "must be a CamelCase reason",
}


def describe_pattern(pattern: str) -> str:
    """The human phrase for a pattern, or the pattern itself if it is not one of ours."""
    return PATTERN_DESCRIPTIONS.get(pattern, f"must match the regular expression {pattern!r}")
