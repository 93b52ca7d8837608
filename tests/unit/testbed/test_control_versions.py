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


@pytest.mark.parametrize(
    ("version", "dra", "field_gate"),
    [("v1.37.2", True, True), ("v1.37.2", False, False), ("v1.36.3", True, False)],
)
def test_the_api_server_keeps_alpha_dra_fields(
    control: ModuleType, tmp_path: Path, version: str, dra: bool, field_gate: bool
) -> None:
    """In-tree, a slice's compatibilityGroups and skipNodeOperations and a request's
    derivedAttributes survive only if the API server has their gates (1.37); the other
    components keep their defaults."""
    s = state(control, tmp_path, version, dra=dra)
    flags = control.apiserver_feature_gates(s)
    for gate in (
        "DRADeviceCompatibilityGroups",
        "DRADerivedAttributes",
        "DRAOptionalNodeOperations",
    ):
        assert (f"{gate}=true" in "".join(flags)) is field_gate
        assert gate not in "".join(control.feature_gates(s))
    for flag in control.feature_gates(s):  # 1.36's DRADeviceTaintRules: one flag for both
        assert len(flags) == 1 and flags[0].startswith(flag)


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


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--dra", "--no-kcm-dra"], {"kcm_dra": False, "workload_api": False}),
        (["--workload-api"], {"kcm_dra": True, "workload_api": True}),
    ],
)
def test_up_parses_no_kcm_dra_and_workload_api(
    control: ModuleType,
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    expected: dict[str, bool],
) -> None:
    seen: dict[str, object] = {}

    def fake_up(*args: object) -> None:
        seen["kcm_dra"], seen["workload_api"] = args[-2:]
        raise control.TestbedError("stop here")

    monkeypatch.setattr(control, "up", fake_up)
    assert control.main(["up", *flags, "--dir", "/nonexistent/x"]) != 0
    assert seen == expected


# --- --workload-api: upstream's Workload API (PodGroups) ------------------------------------


def workload_state(control: ModuleType, tmp_path: Path, version: str, dra: bool) -> object:
    s = state(control, tmp_path, version, dra=dra)
    s.workload_api = True  # type: ignore[attr-defined]
    return s


@pytest.mark.parametrize("dra", [False, True])
def test_workload_api_turns_on_its_gate_and_version_beside_the_dra_ones(
    control: ModuleType, tmp_path: Path, dra: bool
) -> None:
    s = workload_state(control, tmp_path, "v1.37.2", dra)
    assert control.feature_gates(s) == ["--feature-gates=GenericWorkload=true"]
    assert control.runtime_config(s) == ["--runtime-config=scheduling.k8s.io/v1beta1=true"]


def test_workload_api_gates_merge_into_one_flag(control: ModuleType, tmp_path: Path) -> None:
    """Not that any minor before 1.37 takes --workload-api (up refuses it): the flags of
    several features are one --feature-gates and one --runtime-config."""
    s = workload_state(control, tmp_path, "v1.36.3", True)
    assert control.feature_gates(s) == [
        "--feature-gates=DRADeviceTaintRules=true,GenericWorkload=true"
    ]
    assert control.runtime_config(s) == [
        "--runtime-config=resource.k8s.io/v1beta2=true,scheduling.k8s.io/v1beta1=true"
    ]


def test_without_workload_api_the_flags_are_the_dra_ones(
    control: ModuleType, tmp_path: Path
) -> None:
    for version in ("v1.37.2", "v1.36.3", "v1.34.4"):
        s = state(control, tmp_path, version)
        assert control.feature_gates(s) == control.dra_gates(s)
        assert control.runtime_config(s) == control.dra_runtime_config(s)


def test_workload_api_adds_the_podgroup_protection_controller(control: ModuleType) -> None:
    plain = control.default_kcm_controllers(False)
    assert "podgroup-protection-controller" not in plain
    assert control.default_kcm_controllers(False, workload_api=True) == [
        *plain,
        "podgroup-protection-controller",
    ]


def test_workload_api_needs_a_release_that_serves_v1beta1(
    control: ModuleType, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for binary in ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"):
        (bin_dir / binary).write_text("")
    (bin_dir / ".complete").write_text("key=x\nk8s=v1.36.3 etcd=v3.6.16\n")
    with pytest.raises(control.TestbedError) as refused:
        control.up(tmp_path / "state", bin_dir, False, 0, workload_api=True)
    assert "--workload-api needs Kubernetes 1.37+" in str(refused.value)
    assert not (tmp_path / "state" / "state.json").exists()  # refused before anything ran
