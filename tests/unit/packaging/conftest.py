"""The admission policies under test: a module names its file in ``POLICY_FILE``."""

from __future__ import annotations

from typing import Any

import pytest

from .admission import operator_identity, policy_and_binding


@pytest.fixture
def policy(request: pytest.FixtureRequest) -> dict[str, Any]:
    return policy_and_binding(request.module.POLICY_FILE)[0]


@pytest.fixture
def binding(request: pytest.FixtureRequest) -> dict[str, Any]:
    return policy_and_binding(request.module.POLICY_FILE)[1]


@pytest.fixture
def params() -> dict[str, Any]:
    return operator_identity()
