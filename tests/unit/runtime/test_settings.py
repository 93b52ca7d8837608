"""Settings: flags over environment over defaults, and refusal of bad values."""

from __future__ import annotations

import pytest
import uvloop

from operators.process import loop_factory
from operators.settings import (
    DevicePolicy,
    EvictionMode,
    FeatureGates,
    NodePolicy,
    Settings,
    SettingsError,
)


def test_defaults() -> None:
    settings = Settings.from_sources({}, {})
    assert settings.node_policy is NodePolicy.BINPACK
    assert settings.max_evictions_per_minute == 0
    assert settings.eviction_mode is EvictionMode.DELETE  # as upstream
    assert settings.feature_gates["DRAAdminAccess"] is True
    assert settings.feature_gates["DRAListTypeAttributes"] is False


def test_flag_beats_environment() -> None:
    env = {"DRALLOC_NODE_POLICY": "spread", "DRALLOC_LEASE_NAME": "from-env"}
    settings = Settings.from_argv(["--node-policy=first-fit", "--no-webhook"], env)
    assert settings.node_policy is NodePolicy.FIRST_FIT
    assert settings.lease_name == "from-env"
    assert settings.webhook is False


def test_environment_types() -> None:
    env = {
        "DRALLOC_MAX_EVICTIONS_PER_MINUTE": "12",
        "DRALLOC_RETRY_PERIOD": "0.5",
        "DRALLOC_TAINTS_CONTROLLER": "off",
        "DRALLOC_FEATURE_GATES": "DRAAdminAccess=false",
        "DRALLOC_EVICTION_MODE": "evict",
    }
    settings = Settings.from_sources({}, env)
    assert settings.eviction_mode is EvictionMode.EVICT
    assert settings.max_evictions_per_minute == 12
    assert settings.retry_period == 0.5
    assert settings.taints_controller is False
    assert settings.feature_gates["DRAAdminAccess"] is False


@pytest.mark.parametrize(
    "env",
    [
        {"DRALLOC_NODE_POLICY": "random"},
        {"DRALLOC_EVICTION_MODE": "drain"},
        {"DRALLOC_FEATURE_GATES": "DRANoSuchGate=true"},
        {"DRALLOC_FEATURE_GATES": "DRAAdminAccess=maybe"},
        {"DRALLOC_MAX_EVICTIONS_PER_MINUTE": "-1"},
        {"DRALLOC_LEASE_DURATION": "5", "DRALLOC_RENEW_DEADLINE": "10"},
        {"DRALLOC_METRICS_PORT": "eighty"},
        {"DRALLOC_EVENT_LOOP": "trio"},
    ],
)
def test_bad_values_are_refused(env: dict[str, str]) -> None:
    with pytest.raises(SettingsError):
        Settings.from_sources({}, env)


def test_gates_render_round_trip() -> None:
    gates = FeatureGates.parse("DRADeviceTaints=false")
    assert FeatureGates.parse(gates.render()) == gates


@pytest.mark.parametrize("pod_namespace", ["", "team-a", "dralloc-system"])
def test_one_lease_location_for_every_way_of_running(
    monkeypatch: pytest.MonkeyPatch, pod_namespace: str
) -> None:
    """In-cluster ($POD_NAMESPACE set), python -m operators and kopf run (not set) share a Lease."""
    monkeypatch.setenv("POD_NAMESPACE", pod_namespace)
    for settings in (Settings.from_sources({}, {"POD_NAMESPACE": pod_namespace}), Settings()):
        assert (settings.lease_name, settings.effective_lease_namespace) == (
            "dralloc-operator",
            "dralloc-system",
        )
    moved = Settings.from_argv(["--lease-namespace=ops"], {})
    assert moved.effective_lease_namespace == "ops"


def test_device_policy_is_first_fit_unless_set() -> None:
    assert Settings.from_argv([], {}).device_policy is DevicePolicy.FIRST_FIT
    assert Settings.from_argv(["--device-policy=pack"], {}).device_policy is DevicePolicy.PACK
    env = {"DRALLOC_DEVICE_POLICY": "pack"}
    assert Settings.from_argv([], env).device_policy is DevicePolicy.PACK
    with pytest.raises(SettingsError, match="first-fit, pack"):
        Settings.from_sources({"device_policy": "tetris"}, {})


def test_the_operator_runs_on_uvloop_unless_told_otherwise() -> None:
    assert Settings.from_sources({}, {}).event_loop == "uvloop"
    factory = loop_factory("uvloop")
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()
    assert loop_factory("asyncio") is None


def test_the_operator_builds_the_cel_parser_before_it_starts_operating(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from operators import metrics, process
    from operators.cel import parser

    monkeypatch.setattr(parser, "_parser", None)
    monkeypatch.setattr(metrics, "serve", lambda port, addr: None)
    seen: list[bool] = []

    async def operate(settings: Settings) -> None:
        seen.append(parser._parser is not None)

    monkeypatch.setattr(process, "operate", operate)
    process.main(["--event-loop=asyncio", "--log-format=json"])
    assert seen == [True]
