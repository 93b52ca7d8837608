"""Write a benchmark run to ``bench/results/``: JSON, a markdown table and PNG plots.

Why ratios first: the machine is shared and small, so absolute pods/s move from run to run;
the ratio between two engines measured in the same run on the same objects is what holds.
The machine description goes with every result so numbers are never read without it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def machine() -> dict[str, Any]:
    """Where the numbers come from: CPU, cores, memory, interpreter and toolchain versions."""
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = 0.0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {
        "cpu": cpu or platform.processor(),
        "cores": os.cpu_count(),
        "memoryGiB": mem_gib,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "go": _command(["go", "version"]),
        "commit": _command(
            ["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).resolve().parent
        ),
        "loadAverage": _load(),
    }


def _command(args: Sequence[str], cwd: Path | None = None) -> str:
    try:
        proc = subprocess.run(
            args, capture_output=True, text=True, timeout=10, check=False, cwd=cwd
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def geometric_mean(values: Iterable[float]) -> float | None:
    vals = [v for v in values if v and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def _engine_cells(row: Mapping[str, Any]) -> str:
    """The cells level 1's tables share: workload, size, both rates, ratio, same placements."""
    upstream = row.get("upstream") or {}
    same = row.get("samePlacements")
    return (
        f"| {row['workload']} | {row['nodes']} | {row['devices']} "
        f"| {_fmt(row['dralloc']['pods_per_second'])} | {_fmt(upstream.get('pods_per_second'))} "
        f"| {_ratio(row.get('ratio'))} | {'-' if same is None else ('yes' if same else 'NO')} "
    )


_ENGINE_HEADER = (
    "| workload | nodes | devices | dralloc pods/s | upstream pods/s | ratio | same placements "
)


def level1_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        _ENGINE_HEADER + "| dralloc binpack pods/s |",
        "|---|---:|---:|---:|---:|---:|:---:|---:|",
    ]
    for row in rows:
        binpack = (row.get("drallocBinpack") or {}).get("pods_per_second")
        lines.append(_engine_cells(row) + f"| {_fmt(binpack)} |")
    return lines


def _mib(value: Any) -> str:
    return f"{value / 2**20:,.0f}" if value else "-"


def scale_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The scale rows: rates and ratio as level 1, and memory (what each engine holds with
    the cluster loaded: Go's live heap, Python's traced allocations)."""
    lines = [
        _ENGINE_HEADER + "| dralloc MiB | upstream MiB |",
        "|---|---:|---:|---:|---:|---:|:---:|---:|---:|",
    ]
    for row in rows:
        upstream = row.get("upstream") or {}
        lines.append(
            _engine_cells(row)
            + f"| {_mib(row['dralloc'].get('heap_bytes'))} | {_mib(upstream.get('heap_bytes'))} |"
        )
    return lines


WRITES_FLOOR = (
    "Writes per pod count every write to the API server in the window but the harness's own "
    "and Lease renewals; ms/write is the API server's mean time on them "
    "(apiserver_request_duration_seconds). The floor for a pod with one claim from a "
    "template: in CRD mode 5 (the claim created, its allocation written to its status, the "
    "pod's scheduling gate lifted, kube-scheduler's binding and its Scheduled event); in "
    "in-tree mode 6 (the claim's name also goes to the pod's status, a subresource of its "
    "own); in-tree DRA 6 (claim created, its name in the pod's status, the claim's finalizer, "
    "its allocation, the binding, the event). A steady workload adds the pod's and the "
    "claim's deletion and the claim's deallocation. Above the floor: pod conditions written "
    "for pods that waited (dralloc explains a pod only after it waited 1 s), and in-tree "
    "DRA's scheduler status patches; with `spec.resourceClaims` (in-tree mode, in-tree DRA) "
    "kube-scheduler also writes the pod's `status.nominatedNodeName` before binding (its "
    "DynamicResources PreBind has work to announce). Refused writes count too, listed apart "
    "with their code in `latest.json`: on steady workloads, in every system, a deletion of "
    "a claim already on its way out (404 or 409, 0.8-1.4 per pod; the garbage collector "
    "races its deleter) and kwok's deletion of a pod already deleted (404, about 1 per pod)."
)


LEVEL2_REFERENCE = "in-tree"
"""The system level 2's ratios are taken against."""


def level2_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per workload and system (in the order they ran), with the ratio of its
    pods/s to in-tree DRA's on the same workload."""
    lines = [
        "| workload | system | pods/s | vs in-tree | writes/pod | ms/write | pods bound | note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    by_workload: dict[str, dict[str, Mapping[str, Any]]] = {}
    for row in rows:
        by_workload.setdefault(row["workload"], {})[row["system"]] = row
    for workload, systems in by_workload.items():
        reference = (systems.get(LEVEL2_REFERENCE) or {}).get("podsPerSecond")
        for name, row in systems.items():
            rate = row.get("podsPerSecond")
            ratio = f"{rate / reference:.2f}x" if rate and reference else "-"
            lines.append(
                f"| {workload} | {name} | {_fmt(rate, 1)} | {ratio} "
                f"| {_fmt(row.get('writesPerPod'), 2)} | {_fmt(row.get('writeMs'), 2)} "
                f"| {row.get('pods', 0)} "
                f"| {row.get('note') or ''} |"
            )
    return lines


LEVEL2_FLOOR = "pods without claims"
"""The system whose CPU per pod is what every system pays before its DRA work."""


def level2_cpu_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """CPU milliseconds per bound pod by process, one line per workload and system; with
    the floor measured on the workload, each system's CPU above it (its DRA work's cost)
    and that cost as a share of in-tree DRA's."""
    names: list[str] = []
    for row in rows:
        for name in row.get("cpuMsPerPod") or {}:
            if name not in names:
                names.append(name)
    if not names:
        return []
    totals: dict[tuple[str, str], float] = {
        (row["workload"], row["system"]): sum((row.get("cpuMsPerPod") or {}).values())
        for row in rows
        if row.get("cpuMsPerPod")
    }
    lines = [
        f"| workload | system | {' | '.join(names)} | total | above the floor | vs in-tree |",
        f"|---|---|{'---:|' * (len(names) + 3)}",
    ]
    for row in rows:
        cpu = row.get("cpuMsPerPod") or {}
        if not cpu:
            continue
        workload, total = row["workload"], totals[(row["workload"], row["system"])]
        floor = totals.get((workload, LEVEL2_FLOOR))
        above = above_ratio = None
        if floor is not None and row["system"] != LEVEL2_FLOOR:
            above = total - floor
            reference = totals.get((workload, LEVEL2_REFERENCE))
            if reference is not None and reference - floor > 0:
                above_ratio = above / (reference - floor)
        cells = " | ".join(_fmt(cpu.get(name), 1) for name in names)
        share = f"{above_ratio:.2f}" if above_ratio is not None else "-"
        lines.append(
            f"| {workload} | {row['system']} | {cells} | {_fmt(total, 1)} "
            f"| {_fmt(above, 1)} | {share} |"
        )
    return lines


def apiserver_parts_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per part of the API server's work, a column per profiled system (per
    workload profiled, in the order they ran)."""
    profiled = [row for row in rows if row.get("apiserverMsPerPod")]
    if not profiled:
        return []
    parts: list[str] = []
    for row in profiled:
        for part in row["apiserverMsPerPod"]:
            if part not in parts:
                parts.append(part)
    workloads = list(dict.fromkeys(row["workload"] for row in profiled))
    heads = [
        row["system"] if len(workloads) == 1 else f"{row['system']} ({row['workload']})"
        for row in profiled
    ]
    lines = [
        f"| part | {' | '.join(heads)} |",
        f"|---|{'---:|' * len(heads)}",
    ]
    for part in parts:
        label = part.replace("  ", "&nbsp;&nbsp;", 1) if part.startswith("  ") else part
        cells = " | ".join(_fmt(row["apiserverMsPerPod"].get(part), 2) for row in profiled)
        lines.append(f"| {label} | {cells} |")
    return lines


def cache_scale_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = [
        "| API group | nodes | pods (with claims) | sync (s) | RSS once synced (MiB) | peak RSS (MiB) "
        "| before listing (MiB) | targets met |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        if "error" in row:
            lines.append(f"| {row.get('apiGroup', '?')} | failed: {row['error'][-200:]} |")
            continue
        lines.append(
            f"| {row['apiGroup']} | {row['nodes']:,} | {row['pods']:,} ({row['claimPods']:,}) "
            f"| {row['syncSeconds']:.1f} | {row['rssMiB']:.0f} | {row['peakRssMiB']:.0f} "
            f"| {row['rssBeforeMiB']:.0f} | {'yes' if row['met'] else 'no'} |"
        )
    return lines


def markdown(results: Mapping[str, Any]) -> str:
    out = ["# dralloc benchmark results", ""]
    m = results.get("machine", {})
    out.append(
        f"Run {results.get('started', '')} ({'quick' if results.get('quick') else 'full'}) on "
        f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memoryGiB', '?')} GiB; "
        f"Python {m.get('python', '?')}, {m.get('go', '?')}; load average at start "
        f"{m.get('loadAverage', [])}; commit {m.get('commit') or '?'}. The machine is shared: read ratios, "
        "not absolute rates."
    )
    out.append("")
    level1 = results.get("level1") or []
    if level1:
        summary = results.get("level1Summary", {})
        out += [
            "## Level 1: allocation engine (same objects, same first-fit job)",
            "",
            f"Geometric mean of the ratios (dralloc / upstream): **{_ratio(summary.get('geomean'))}**; "
            f"lowest {_ratio(summary.get('min'))} ({summary.get('minWorkload', '-')}). "
            "Targets: >= 1.0x on every workload, >= 5x geometric mean.",
            "",
            *level1_table(level1),
            "",
        ]
    scale = results.get("scale") or []
    if scale:
        out += [
            "## Scale: allocations/s by cluster size (steady state, half the devices in use)",
            "",
        ]
        out += scale_table(scale)
        out.append("")
    cache = results.get("cacheScale") or []
    if cache:
        out += [
            "## The operator's cache at scale (`python -m bench.cache_scale`)",
            "",
            "A restart on upstream's scalability envelope: every kind listed in pages of 500 "
            "through the operator's client, informers and controllers' handlers, in a process "
            "of its own. Targets: RSS at most 1 GiB, sync at most 20 s.",
            "",
            *cache_scale_table(cache),
            "",
        ]
    level2 = results.get("level2") or []
    if level2:
        identity = {
            "installed": "The operator runs as installed: its ServiceAccount's token, its "
            "roles and the admission policies on its own writes.",
            "admin": "The operator runs as the testbed's admin (a client certificate, no "
            "admission policies on its writes).",
        }.get(results.get("operatorIdentity", ""), "")
        out += [
            "## Level 2: end to end on the testbed",
            "",
            *([identity, ""] if identity else []),
            *level2_table(level2),
            "",
            WRITES_FLOOR,
            "",
        ]
        cpu_table = level2_cpu_table(level2)
        if cpu_table:
            out += [
                "CPU per bound pod, by process (ms, user + system, the measured window): "
                f"with {m.get('cores', '?')} cores, N pods/s leave {m.get('cores', '?')}000/N "
                "ms of CPU per pod to share. Above the floor: the total less that of the same "
                "pods without claims (the DRA work's own cost); vs in-tree: that cost over "
                "in-tree DRA's.",
                "",
                *cpu_table,
                "",
            ]
        parts_table = apiserver_parts_table(level2)
        if parts_table:
            out += [
                "### Where the API server's time goes",
                "",
                "kube-apiserver's CPU per bound pod (ms) by part of its work, from its own "
                "profiler over 15 s of the measured window (`go tool pprof`, time inside each "
                "part with what it calls; parts overlap, an indented one is inside the one "
                "above it).",
                "",
                *parts_table,
                "",
            ]
    skipped = results.get("skipped") or {}
    for part, reason in skipped.items():
        out.append(f"- {part} skipped: {reason}")
    footprint = results.get("footprint")
    if footprint:
        out += ["", "## Operator footprint", ""]
        for key, value in footprint.items():
            out.append(f"- {key}: {value}")
    operator_profile = results.get("operatorProfile")
    if operator_profile:
        out += [
            "",
            "## Where the operator's time goes (py-spy, level 2)",
            "",
            "```",
            operator_profile.rstrip(),
            "```",
        ]
    profile = results.get("profile")
    if profile:
        out += [
            "",
            "## Where dralloc's time goes (cProfile, slowest ratio)",
            "",
            "```",
            profile.rstrip(),
            "```",
        ]
    out.append("")
    return "\n".join(out)


def plots(results: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """Bar chart of pods/s per workload (both engines) and a ratio chart; [] without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    rows = [r for r in (results.get("level1") or []) if r.get("upstream")]
    if rows:
        names = [r.get("file") or r["workload"] for r in rows]
        dralloc = [r["dralloc"]["pods_per_second"] for r in rows]
        upstream = [r["upstream"]["pods_per_second"] for r in rows]
        fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 9))
        xs = range(len(rows))
        ax1.bar([x - 0.2 for x in xs], dralloc, width=0.4, label="dralloc (Python)")
        ax1.bar([x + 0.2 for x in xs], upstream, width=0.4, label="upstream (Go)")
        ax1.set_yscale("log")
        ax1.set_ylabel("pods/s (log)")
        ax1.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
        ax1.legend()
        ax1.set_title("Level 1: allocation engine throughput")
        ratios = [r["ratio"] or 0 for r in rows]
        ax2.bar(list(xs), ratios, color=["tab:green" if v >= 1 else "tab:red" for v in ratios])
        ax2.axhline(1.0, color="black", linewidth=0.8)
        ax2.axhline(3.0, color="gray", linewidth=0.8, linestyle="--")
        ax2.set_ylabel("dralloc / upstream")
        ax2.set_xticks(list(xs), names, rotation=60, ha="right", fontsize=7)
        fig.tight_layout()
        path = out_dir / "level1.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    scale = [r for r in (results.get("scale") or []) if r.get("upstream")]
    if scale:
        fig, ax = plt.subplots(figsize=(6, 4))
        nodes = [r["nodes"] for r in scale]
        ax.plot(
            nodes, [r["dralloc"]["pods_per_second"] for r in scale], marker="o", label="dralloc"
        )
        ax.plot(
            nodes, [r["upstream"]["pods_per_second"] for r in scale], marker="o", label="upstream"
        )
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("nodes (10 devices each, half in use)")
        ax.set_ylabel("allocations/s")
        ax.legend()
        fig.tight_layout()
        path = out_dir / "scale.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    level2 = results.get("level2") or []
    names = list(dict.fromkeys(r["workload"] for r in level2))
    if names:
        fig, ax = plt.subplots(figsize=(8, 4))
        systems = list(dict.fromkeys(r["system"] for r in level2))
        width = 0.8 / len(systems)
        for index, system in enumerate(systems):
            rates = {
                r["workload"]: r.get("podsPerSecond") or 0 for r in level2 if r["system"] == system
            }
            offset = (index - (len(systems) - 1) / 2) * width
            ax.bar(
                [i + offset for i in range(len(names))],
                [rates.get(n, 0) for n in names],
                width=width,
                label=system,
            )
        ax.set_xticks(
            list(range(len(names))), [n.split("/", 1)[-1] for n in names], rotation=30, ha="right"
        )
        ax.set_ylabel("pods bound/s")
        ax.set_title("Level 2: end to end on the testbed")
        ax.legend()
        fig.tight_layout()
        path = out_dir / "level2.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def summarize_level1(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Geometric mean and minimum of the ratios, leaving out smoke-sized workloads."""
    rated = [(r["workload"], r["ratio"]) for r in rows if r.get("ratio") and not r.get("smoke")]
    if not rated:
        return {}
    low = min(rated, key=lambda item: item[1])
    return {
        "geomean": geometric_mean(v for _, v in rated),
        "min": low[1],
        "minWorkload": low[0],
        "count": len(rated),
    }


def write(results: dict[str, Any], out_dir: Path = RESULTS_DIR, stem: str = "") -> list[Path]:
    """``latest.*`` for a full run, ``quick.*`` for --quick, ``level<N>.*`` for one level only."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = stem or ("quick" if results.get("quick") else "latest")
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json.dumps(results, indent=2) + "\n")
    md_path = out_dir / f"{stem}.md"
    md_path.write_text(markdown(results))
    written = [json_path, md_path]
    if not results.get("quick"):
        written += plots(results, out_dir)
    return written
