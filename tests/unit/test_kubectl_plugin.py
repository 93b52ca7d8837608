"""kubectl-dralloc translates kubectl's habits into dralloc's arguments: the live cluster by
default, the context's namespace, kubectl's -o names, -A only where it means something."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from operators import cli
from operators.kubectl_plugin import PluginUsageError, context_namespace, main, translate


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    path = tmp_path / "config"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "team",
                "contexts": [
                    {"name": "team", "context": {"cluster": "c", "namespace": "team-a"}},
                    {"name": "bare", "context": {"cluster": "c"}},
                ],
            }
        )
    )
    return path


def test_explain_reads_the_live_cluster_in_the_contexts_namespace(kubeconfig: Path) -> None:
    args = translate(["explain", "pod/trainer", f"--kubeconfig={kubeconfig}"])
    assert args[:2] == ["explain", "pod/trainer"]
    assert "--live" in args and f"--kubeconfig={kubeconfig}" in args
    assert "--namespace=team-a" in args


def test_an_explicit_namespace_and_context_win(kubeconfig: Path) -> None:
    args = translate(["explain", "pod/x", "-n", "other", "--kubeconfig", str(kubeconfig),
                      "--context", "bare"])  # fmt: skip
    assert "--namespace=other" in args and "--context=bare" in args


def test_a_context_without_namespace_means_default(kubeconfig: Path) -> None:
    assert context_namespace(str(kubeconfig), "bare") is None
    args = translate(["explain", "pod/x", f"--kubeconfig={kubeconfig}", "--context=bare"])
    assert "--namespace=default" in args


def test_kubeconfig_env_is_used_like_kubectl(
    kubeconfig: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{kubeconfig}")
    assert context_namespace(None, None) == "team-a"


def test_files_instead_of_the_cluster(kubeconfig: Path) -> None:
    args = translate(["simulate", "-f", "snap.yaml", "--add-pods", "2", "--template", "t",
                      f"--kubeconfig={kubeconfig}"])  # fmt: skip
    assert "--live" not in args and not any(a.startswith("--kubeconfig") for a in args)
    assert args[:3] == ["simulate", "-f", "snap.yaml"]


def test_output_names_of_kubectl(kubeconfig: Path) -> None:
    assert "--output=table" in translate(["check", "-o", "wide", f"--kubeconfig={kubeconfig}"])
    assert "--output=json" in translate(["check", "-ojson", f"--kubeconfig={kubeconfig}"])
    with pytest.raises(PluginUsageError, match="-o name"):
        translate(["check", "-o", "name"])


def test_all_namespaces_only_for_check(
    kubeconfig: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = translate(["check", "-A", f"--kubeconfig={kubeconfig}"])
    assert not any(a.startswith("--namespace") for a in args)
    with pytest.raises(PluginUsageError, match="-A"):
        translate(["explain", "pod/x", "-A"])
    translate(["check", "-n", "team-b", f"--kubeconfig={kubeconfig}"])
    assert "whole cluster" in capsys.readouterr().err


def test_bad_usage_exits_2_with_the_usage(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == cli.EXIT_USAGE
    assert "usage: kubectl dralloc" in capsys.readouterr().err
    assert main(["frobnicate"]) == cli.EXIT_USAGE
    assert "unknown command 'frobnicate'" in capsys.readouterr().err


def test_version_passes_through(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version", "--short"]) == cli.EXIT_OK
    assert capsys.readouterr().out.strip()
