"""The dralloc command line: exit codes, output formats and error messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from operators import __version__
from operators.cli import EXIT_DOES_NOT_FIT, EXIT_OK, EXIT_USAGE, main

FIXTURES = Path(__file__).resolve().parent / "toolkit" / "fixtures"
INTREE = str(FIXTURES / "intree-cluster.yaml")
ADD_GANG = ["simulate", "-f", INTREE, "--add-gang", "2", "--template", "team-a/one-gpu"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--short"]) == EXIT_OK
    assert capsys.readouterr().out.strip() == __version__
    assert main(["version"]) == EXIT_OK
    assert "kopf" in capsys.readouterr().out


def test_simulate_that_fits_exits_zero_with_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "-f", INTREE, "--add-pods", "1", "--template", "team-a/one-gpu"])
    out = capsys.readouterr().out
    assert code == EXIT_OK
    assert "PLACED" in out and "team-a/one-gpu-sim-0" in out
    assert "result: fits" in out


def test_simulate_that_does_not_fit_exits_one(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["simulate", "-f", INTREE, "-n", "team-a", "--add-pods", "3", "--template", "numa-pair"]
    )
    out = capsys.readouterr().out
    assert code == EXIT_DOES_NOT_FIT
    assert "PENDING" in out and "DOES NOT FIT" in out


def test_simulate_a_gang_that_does_not_fit_places_none(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "-f", INTREE, "-n", "team-a", "--add-gang", "4", "--template", "one-gpu"]
    code = main(argv)
    out = capsys.readouterr().out
    assert code == EXIT_DOES_NOT_FIT
    assert "one-gpu-sim-0  added   at most 3 of the gang's 4 members fit at once" in out
    assert main([*argv, "--gang-size", "3"]) == EXIT_OK


def test_simulate_a_gang_kept_to_a_device_attribute(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "-f", INTREE, "-n", "team-a", "--add-gang", "3", "--template", "one-gpu"]
    # After settling, the three free GPUs (node-a/gpu-3, node-b/gpu-2, gpu-3) share NUMA 1.
    assert main([*argv, "--gang-topology", "attribute:gpu.example.com/numa"]) == EXIT_OK
    capsys.readouterr()
    code = main([*argv, "--gang-topology", "attribute:gpu.example.com/nvlinkDomain"])
    out = capsys.readouterr().out
    assert code == EXIT_DOES_NOT_FIT
    assert (
        "no value of device attribute gpu.example.com/nvlinkDomain has room for 3 members "
        "together: no device on the members' candidate nodes has the attribute"
    ) in out


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_simulate_machine_output(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["simulate", "-f", INTREE, "--taint-device", "gpu.example.com/node-a/gpu-0", "-o", fmt]
    )
    out = capsys.readouterr().out
    data = json.loads(out) if fmt == "json" else yaml.safe_load(out)
    assert code == EXIT_OK
    assert data["evictions"][0]["pod"] == "team-a/trainer"
    assert data["fits"] is True
    assert {"placed", "pending", "scenario", "snapshot"} <= set(data)


def test_explain_prints_a_row_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "pod/west-pair", "-n", "team-a", "-f", INTREE]) == EXIT_OK
    out = capsys.readouterr().out
    assert out.startswith("pod/team-a/west-pair: pending")
    for node in ("node-a", "node-b", "node-c"):
        assert node in out


def test_explain_accepts_namespace_in_the_subject(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "resourceclaim/team-a/trainer-gpus", "-f", INTREE, "-o", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "allocated"


def test_bad_snapshot_exits_two_naming_file_object_and_field(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["simulate", "-f", str(FIXTURES / "bad-field.yaml")])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "bad-field.yaml (object #2): ResourceClaim team-a/broken" in err
    assert "spec.devices.requests[0].name" in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "-f", INTREE, "--add-pods", "1"], "exactly one of --template or --like-pod"),
        (["simulate", "-f", INTREE, "--template", "x"], "go with --add-pods"),
        (["simulate", "-f", INTREE, "--add-gang", "2"], "--add-gang needs --template"),
        (["simulate", "-f", INTREE, "--gang-size", "2"], "go with --add-gang N"),
        (["simulate", "-f", INTREE, "--gang-topology", "zone"], "go with --add-gang N"),
        (
            [*ADD_GANG, "--gang-topology", "attribute:numa"],
            "--gang-topology: 'numa' is not a fully qualified device attribute name",
        ),
        (["simulate"], "-f PATH"),
        (["simulate", "-f", INTREE, "--feature-gates", "NoSuchGate=true"], "NoSuchGate"),
        (["check", "-f", INTREE, "--live"], "not both"),
        (["explain", "pod/x", "-f", INTREE, "--live"], "not both"),
    ],
)
def test_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    assert message in capsys.readouterr().err


def test_feature_gates_reach_the_allocator(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", "-f", INTREE, "--feature-gates", "DRAPrioritizedList=false"])
    assert code == EXIT_OK
    capsys.readouterr()


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--live"],
        ["simulate", "--live"],
        ["explain", "pod/x", "--live"],
    ],
)
def test_an_unreadable_cluster_exits_two(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    assert main([*argv, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"dralloc {argv[0]}: cannot read the cluster")
