"""The allocator loop hands the operator's feature gates to the allocator."""

from __future__ import annotations

from operators.controllers.allocation import allocator_features
from operators.settings import FeatureGates


def test_allocator_features_follow_gates() -> None:
    gates = FeatureGates.parse("DRAAdminAccess=false,DRAListTypeAttributes=true")
    features = allocator_features(gates)
    assert features.admin_access is False
    assert features.list_type_attributes is True
    assert features.device_taints is True  # default kept
