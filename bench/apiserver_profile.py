"""Where the API server's CPU goes per bound pod, from its own profiler, system by system.

Level 2 is CPU-bound on this machine, and the API server takes the largest share of every
system's CPU. The per-process table says how much; this says on what: a Go CPU profile of
kube-apiserver taken during the measured window (``/debug/pprof/profile``, served to the
testbed's admin), summarized by ``go tool pprof`` into the parts of request handling that
differ between the systems: custom resources pay schema coercion and JSON, merge patches
pay their application, every update pays the field manager.

The parts overlap (a merge patch runs inside a storage update); each is the time spent
inside it, children included, over the pods bound while the profile ran.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

PROFILE_SECONDS = 15
"""Long enough for a few hundred pods at level 2's rates, short enough to end inside a
steady window (20 s)."""

PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("updates (PUT, PATCH)", (r"registry\.\(\*Store\)\.Update$",)),
    ("  merge-patch application", (r"handlers\.\(\*patcher\)\.applyPatch$",)),
    (
        "field manager (managedFields, every write)",
        (
            r"managedfields/internal\.\(\*FieldManager\)\.UpdateNoErrors$",
            r"managedfields/internal\.\(\*FieldManager\)\.Apply$",
        ),
    ),
    ("creations (POST)", (r"registry\.\(\*Store\)\.Create$",)),
    ("deletions (DELETE)", (r"registry\.\(\*Store\)\.Delete$",)),
    ("reads (GET)", (r"registry\.\(\*Store\)\.Get$",)),
    ("lists (LIST)", (r"endpoints/handlers\.ListResource\.func1$",)),
    ("watch serving", (r"endpoints/handlers\.handleWatch$",)),
    ("client-certificate checks", (r"request/x509\.\(\*Authenticator\)\.AuthenticateRequest$",)),
    ("custom-resource schema coercion", (r"\(\*unstructuredSchemaCoercer\)\.apply$",)),
    ("CEL validation rules", (r"schema/cel\.\(\*Validator\)\.Validate$",)),
    ("JSON encoding", (r"^encoding/json\.\(\*encodeState\)\.marshal$",)),
    ("Go garbage collection", (r"^runtime\.gcBgMarkWorker$",)),
)
"""Report rows: a label and the functions (regular expressions over pprof's names) whose
inclusive time it sums. An indented label is part of the row above it."""


class ProfileUnavailable(RuntimeError):
    """No profile could be taken or read; the message says why."""


@dataclass(frozen=True)
class Profile:
    """Inclusive seconds per function over a profile ``duration`` seconds long."""

    duration: float
    total: float
    cumulative: Mapping[str, float]

    def per_pod(self, pods_per_second: float) -> dict[str, float]:
        """Milliseconds of API server CPU per bound pod: the total, then each part."""
        pods = pods_per_second * self.duration
        if pods <= 0:
            return {}
        out = {"total": 1000 * self.total / pods}
        for label, patterns in PARTS:
            compiled = [re.compile(pattern) for pattern in patterns]
            seconds = sum(
                value
                for name, value in self.cumulative.items()
                if any(pattern.search(name) for pattern in compiled)
            )
            out[label] = 1000 * seconds / pods
        return out


_SECONDS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9, "min": 60.0, "h": 3600.0}


def _seconds(text: str) -> float:
    match = re.fullmatch(r"([0-9.]+)(min|ms|us|µs|ns|s|h)", text)
    if match is None:
        raise ValueError(f"not a pprof duration: {text!r}")
    return float(match.group(1)) * _SECONDS[match.group(2)]


def parse_top(text: str) -> Profile:
    """``go tool pprof -top -cum`` output: its header's duration and total, then the rows
    ``flat flat% sum% cum cum% name``."""
    duration = re.search(r"Duration: ([0-9.]+\w+)", text)
    total = re.search(r"Total samples = ([0-9.]+\w+)", text)
    if duration is None or total is None:
        raise ProfileUnavailable("pprof printed no duration or total: not a CPU profile")
    cumulative: dict[str, float] = {}
    row = re.compile(r"^\s*(\S+)\s+\S+%\s+\S+%\s+(\S+)\s+\S+%\s+(.+?)\s*$")
    for line in text.splitlines():
        match = row.match(line)
        if match is None:
            continue
        try:
            value = _seconds(match.group(2))
        except ValueError:
            continue  # the column titles
        name = match.group(3).removesuffix(" (inline)")
        cumulative[name] = max(cumulative.get(name, 0.0), value)
    return Profile(_seconds(duration.group(1)), _seconds(total.group(1)), cumulative)


def summarize(path: Path) -> Profile:
    """Read a pprof file with ``go tool pprof`` (the Go the upstream side is built with)."""
    go = shutil.which("go")
    if go is None:
        raise ProfileUnavailable("the go command is not on PATH (go tool pprof reads the profile)")
    proc = subprocess.run(
        [go, "tool", "pprof", "-top", "-cum", "-nodecount=100000", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if proc.returncode != 0:
        raise ProfileUnavailable(f"go tool pprof: {proc.stderr.strip()[-300:]}")
    return parse_top(proc.stdout)
