"""Find (or build into the cache) one of the benchmarks' Go programs (see bench/gobuild).

Each program has a ``build`` script whose last stdout line is the binary's path, and an
environment variable that names a binary to use instead.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class GoProgramUnavailable(RuntimeError):
    """The Go program cannot be built or found; the message says why."""


def go_binary(build_script: Path, override_env: str, *, build: bool = True) -> Path:
    """Path of the program, building it if allowed (``--check`` otherwise)."""
    override = os.environ.get(override_env)
    if override:
        return Path(override)
    name = f"{build_script.parent.parent.name}/{build_script.parent.name}/{build_script.name}"
    args = [str(build_script)] + ([] if build else ["--check"])
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise GoProgramUnavailable(f"{name}: {error}") from error
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        reason = (proc.stderr or proc.stdout).strip().splitlines()
        raise GoProgramUnavailable(reason[-1] if reason else f"{name} exited {proc.returncode}")
    return Path(lines[-1])


def run_scenario(
    binary: Path, scenario: Path, what: str, args: Sequence[str] = ()
) -> dict[str, Any]:
    """Run bench/upstream on an expanded scenario file (``args``: more of its flags); its JSON
    answer (``what`` names the scenario in the error when it fails)."""
    proc = subprocess.run(
        [str(binary), "-scenario", str(scenario), *args],
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"upstream-bench failed on {what}: {proc.stderr.strip()}")
    answer: dict[str, Any] = json.loads(proc.stdout)
    return answer
