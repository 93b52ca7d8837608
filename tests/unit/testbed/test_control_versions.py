"""testbed/control.py: the DRA feature gates and the DeviceTaintRule API version per Kubernetes
minor (the version matrix runs 1.34-1.37 with the same code)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.testbed_scripts import load_testbed_script


@pytest.fixture
def control() -> ModuleType:
    return load_testbed_script("control", "testbed_control_unit")


def state(control: ModuleType, tmp_path: Path, version: str, dra: bool = True) -> object:
    (tmp_path / ".complete").write_text(f"key=x\nk8s={version} etcd=v3.6.16\n")
    ports = control.Ports(*range(6))
    return control.State(str(tmp_path), str(tmp_path), dra, "kc", "https://x", ports)


@pytest.mark.parametrize(
    ("version", "gates", "runtime_config"),
    [
        ("v1.37.2", [], []),
        ("v1.38.0", [], []),
        (
            "v1.36.3",
            ["--feature-gates=DRADeviceTaintRules=true"],
            ["--runtime-config=resource.k8s.io/v1beta2=true"],
        ),
        (
            "v1.35.4",
            ["DRADeviceTaintRules=true"],
            ["--runtime-config=resource.k8s.io/v1alpha3=true"],
        ),
        ("v1.34.4", ["DRADeviceTaints=true"], ["--runtime-config=resource.k8s.io/v1alpha3=true"]),
    ],
)
def test_gates_by_version(
    control: ModuleType, tmp_path: Path, version: str, gates: list[str], runtime_config: list[str]
) -> None:
    s = state(control, tmp_path, version)
    flags = control.dra_gates(s)
    if version in ("v1.35.4", "v1.34.4"):
        assert len(flags) == 1 and flags[0].startswith("--feature-gates=")
        assert gates[0] in flags[0].split("=", 1)[1].split(",")
        assert "DRAConsumableCapacity=true" in flags[0]
        if version == "v1.34.4":
            assert "DRADeviceTaintRules" not in flags[0]  # no such gate in 1.34
    else:
        assert flags == gates
    assert control.dra_runtime_config(s) == runtime_config


def test_no_gates_without_dra(control: ModuleType, tmp_path: Path) -> None:
    s = state(control, tmp_path, "v1.34.4", dra=False)
    assert control.dra_gates(s) == [] and control.dra_runtime_config(s) == []


def test_version_from_apiserver_when_no_stamp(control: ModuleType, tmp_path: Path) -> None:
    fake = tmp_path / "kube-apiserver"
    fake.write_text("#!/bin/sh\necho Kubernetes v1.35.4\n")
    fake.chmod(0o755)
    assert control.k8s_minor(tmp_path) == 35


@pytest.mark.parametrize(
    ("dra", "real_nodes", "kcm_dra", "has_dra", "has_real_node_parts"),
    [
        (True, False, True, True, False),
        (True, False, False, False, False),
        (True, True, False, False, True),
        (False, False, True, False, False),
    ],
)
def test_no_kcm_dra_leaves_out_only_kcms_dra_controllers(
    control: ModuleType,
    dra: bool,
    real_nodes: bool,
    kcm_dra: bool,
    has_dra: bool,
    has_real_node_parts: bool,
) -> None:
    """`up --no-kcm-dra` (dralloc replaces kcm's DRA controllers) keeps every other default."""
    controllers = control.default_kcm_controllers(dra, real_nodes, kcm_dra)
    assert controllers[: len(control.BASE_KCM_CONTROLLERS)] == list(control.BASE_KCM_CONTROLLERS)
    assert ("resourceclaim-controller" in controllers) is has_dra
    assert ("device-taint-eviction-controller" in controllers) is has_dra
    assert ("job-controller" in controllers) is has_real_node_parts


def test_up_parses_no_kcm_dra(control: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_up(*args: object) -> None:
        seen["kcm_dra"] = args[-1]
        raise control.TestbedError("stop here")

    monkeypatch.setattr(control, "up", fake_up)
    assert control.main(["up", "--dra", "--no-kcm-dra", "--dir", "/nonexistent/x"]) != 0
    assert seen == {"kcm_dra": False}
