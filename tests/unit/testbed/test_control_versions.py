"""testbed/control.py: the DRA feature gates and the DeviceTaintRule API version per Kubernetes
minor (the version matrix runs 1.34-1.37 with the same code)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

TESTBED_DIR = Path(__file__).resolve().parents[3] / "testbed"


@pytest.fixture
def control(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(TESTBED_DIR))
    spec = importlib.util.spec_from_file_location(
        "testbed_control_unit", TESTBED_DIR / "control.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


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
