"""Text output of the toolkit: aligned tables for people, JSON or YAML for programs.

Reports are frozen dataclasses; JSON and YAML are their ``dataclasses.asdict`` form, so the
machine output has exactly the fields the table shows, and more.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import yaml

from operators.toolkit.explain import Explanation
from operators.toolkit.simulate import SimulationReport

FORMATS = ("table", "json", "yaml")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = []
    for row in [headers, *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=True)]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def structured(report: Any, fmt: str) -> str:
    data = dataclasses.asdict(report)
    if fmt == "json":
        return json.dumps(data, indent=2)
    return yaml.safe_dump(data, sort_keys=False).rstrip()


def simulation(report: SimulationReport, fmt: str = "table") -> str:
    if fmt != "table":
        return structured(report, fmt)
    out = [f"scenario: {report.scenario}", f"snapshot: {report.snapshot}"]
    out.extend(f"note: {note}" for note in report.notes)
    if report.evictions:
        out += ["", "EVICTED"]
        if any(e.budget for e in report.evictions):
            out.append(
                table(
                    ["POD", "CLAIM", "DEVICE", "TAINT", "REFUSED BY (eviction mode evict)"],
                    [
                        [e.pod, e.claim, e.device, e.taint, e.budget or "-"]
                        for e in report.evictions
                    ],
                )
            )
        else:
            out.append(
                table(
                    ["POD", "CLAIM", "DEVICE", "TAINT"],
                    [[e.pod, e.claim, e.device, e.taint] for e in report.evictions],
                )
            )
    if report.preemptions:
        out += ["", "PREEMPTED"]
        rows = [
            [victim, str(priority), f"{p.pod} ({p.priority})", p.node]
            for p in report.preemptions
            for victim, priority in zip(p.victims, p.victim_priorities, strict=True)
        ]
        out.append(table(["POD", "PRIORITY", "FOR (PRIORITY)", "NODE"], rows))
        violating = sum(p.budget_violations for p in report.preemptions)
        if violating:
            out.append(
                f"{violating} of these evictions violate a PodDisruptionBudget: no node "
                "needed fewer (as kube-scheduler's preemption)"
            )
    if report.placed:
        out += ["", "PLACED"]
        rows = []
        for p in report.placed:
            devices = ", ".join(f"{d.request}={d.device}" for d in p.devices) or "-"
            rows.append([p.pod, p.origin, p.node or "-", devices])
        out.append(table(["POD", "ORIGIN", "NODE", "DEVICES"], rows))
    if report.pending:
        out += ["", "PENDING"]
        out.append(
            table(
                ["POD", "ORIGIN", "REASON"],
                [[p.pod, p.origin, p.reason] for p in report.pending],
            )
        )
    verdict = "fits" if report.fits else "DOES NOT FIT"
    out += [
        "",
        f"result: {verdict} ({len(report.placed)} placed, {len(report.pending)} pending, "
        f"{len(report.evictions)} evicted"
        + (
            f", {sum(len(p.victims) for p in report.preemptions)} preempted"
            if report.preemptions
            else ""
        )
        + f") in {report.seconds:.2f}s",
    ]
    return "\n".join(out)


def explanation(result: Explanation, fmt: str = "table") -> str:
    if fmt != "table":
        return structured(result, fmt)
    out = [f"{result.subject}: {result.status}", f"  {result.summary}"]
    if result.gang:
        out.append(f"  {result.gang}")
    if result.preemption:
        out.append(f"  {result.preemption}")
    if result.claims:
        out.append(f"  claims: {', '.join(result.claims)}")
    if result.devices:
        out.append("  devices:")
        out.extend(f"    {d.claim} {d.request}: {d.device}" for d in result.devices)
    if result.nodes:
        out.append("")
        rows = []
        for verdict in result.nodes:
            reasons = list(verdict.reasons) or ["fits"]
            rows.append([verdict.node, "yes" if verdict.fits else "no", reasons[0]])
            rows.extend(["", "", more] for more in reasons[1:])
        out.append(table(["NODE", "FITS", "REASON"], rows))
    return "\n".join(out)
