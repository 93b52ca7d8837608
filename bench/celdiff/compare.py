"""Classify each case by how dralloc's verdict differs from upstream's, and print figures.

The categories the issue's "done" criteria count (each should be 0):

- ``error kind``: compile error / runtime error / none differ, as a user creating the
  object meets it (``new``) or as the allocator meets a stored one (``stored``);
- ``result``: both evaluated without error to different booleans;
- ``cost limit``: both compile the new expression, one refuses it for its estimated cost;
- ``actual > estimate``: dralloc counted more at run time than it estimated;
- ``crash``: dralloc raised something that is not a CEL error.

Reported beside them, not counted: upstream's internal errors (its bugs, where dralloc
keeps the spec's answer), estimates or actual costs that differ (what the cost model has
to match), and upstream's own actual > estimate. dralloc's actual > estimate is not counted
either when upstream's is the same case of its own bug: the estimates are equal (it decides
the limit, so dralloc must give upstream's), upstream's actual cost is above it too (an
estimate is a worst case: cel-go's size estimate is wrong there, e.g. ``"".split(",")`` is
estimated empty but has one element) and dralloc's actual cost is not above upstream's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TextIO

from bench.celdiff.cases import Case
from bench.celdiff.sides import Verdict

COUNTED = ("error kind", "result", "cost limit", "actual > estimate", "crash")
NOTED = (
    "upstream internal error",
    "actual > estimate as upstream",
    "estimate differs",
    "actual cost differs",
    "upstream actual > estimate",
)


@dataclass(frozen=True)
class Finding:
    category: str
    #: Finer grouping within the category (e.g. "new: upstream compile, dralloc none").
    detail: str
    case: Case
    upstream: Verdict
    dralloc: Verdict


def classify(case: Case, up: Verdict, dr: Verdict) -> list[Finding]:
    found: list[Finding] = []

    def add(category: str, detail: str) -> None:
        found.append(Finding(category, detail, case, up, dr))

    if dr.crash is not None:
        add("crash", dr.crash.split(":")[0])
    if (up.runtime_error or "").startswith("internal error:") and dr.kind_stored != "compile":
        # A failure of upstream's implementation (kept on purpose: see _distinct in
        # operators/cel/functions.py), not an answer to match.
        add("upstream internal error", up.runtime_error or "")
    elif up.kind_new != dr.kind_new:
        add("error kind", f"new: upstream {_kind(up, True)}, dralloc {_kind(dr, True)}")
    elif up.kind_stored != dr.kind_stored:
        add("error kind", f"stored: upstream {_kind(up, False)}, dralloc {_kind(dr, False)}")
    if up.kind_stored == dr.kind_stored == "none" and up.result != dr.result:
        add("result", f"upstream {up.result}, dralloc {dr.result}")
    if up.new_error is None and dr.new_error is None:
        if up.refused != dr.refused:
            add(
                "cost limit",
                "refused by upstream only" if up.refused else "refused by dralloc only",
            )
        if up.estimate != dr.estimate:
            add(
                "estimate differs",
                "dralloc higher" if (dr.estimate or 0) > (up.estimate or 0) else "dralloc lower",
            )
    if dr.actual_cost is not None and dr.estimate is not None and dr.actual_cost > dr.estimate:
        if (
            up.estimate == dr.estimate
            and up.actual_cost is not None
            and dr.actual_cost <= up.actual_cost
            and up.actual_cost > up.estimate
        ):
            add("actual > estimate as upstream", "upstream's estimate is below its own actual cost")
        else:
            add("actual > estimate", "dralloc")
    if up.actual_cost is not None and up.estimate is not None and up.actual_cost > up.estimate:
        add("upstream actual > estimate", "upstream")
    if (
        up.kind_stored == dr.kind_stored != "compile"
        and up.actual_cost is not None
        and dr.actual_cost is not None
        and up.actual_cost != dr.actual_cost
    ):
        add(
            "actual cost differs",
            "dralloc higher" if dr.actual_cost > up.actual_cost else "dralloc lower",
        )
    return found


#: Compile errors by what refused the expression (upstream's wording; dralloc uses the same).
_COMPILE_REASONS = (
    ("Syntax error", "parse"),
    ("invalid int literal", "parse"),
    ("program instantiation failed", "folding"),
    ("exceeds cost limit", "cost"),
    ("found no matching overload", "type check"),
    ("expected type", "type check"),
    ("cannot be range of a comprehension", "type check"),
    ("must evaluate to", "type check"),
    ("error during formatting", "type check"),
    ("undefined field", "declarations"),
    ("undeclared reference", "declarations"),
)


def _kind(verdict: Verdict, new: bool) -> str:
    """The verdict's kind, with why for a compile error: what has to change to match it."""
    kind = verdict.kind_new if new else verdict.kind_stored
    if kind != "compile":
        return kind
    message = (verdict.new_error if new and verdict.new_error else verdict.stored_error) or ""
    reason = next((r for text, r in _COMPILE_REASONS if text in message), "other")
    return f"compile ({reason})"


@dataclass
class Summary:
    cases: int = 0
    findings: list[Finding] = field(default_factory=list)

    def by_category(self) -> Counter[str]:
        # A case counts once per category.
        return Counter(
            {c: len({f.case.id for f in self.findings if f.category == c}) for c in COUNTED + NOTED}
        )

    def by_detail(self, category: str) -> Counter[str]:
        return Counter(f.detail for f in self.findings if f.category == category)

    def mismatched_cases(self) -> int:
        return len({f.case.id for f in self.findings if f.category in COUNTED})


def summarize(
    cases: Sequence[Case], upstream: Sequence[Verdict], dralloc: Sequence[Verdict]
) -> Summary:
    summary = Summary(cases=len(cases))
    for case, up, dr in zip(cases, upstream, dralloc, strict=True):
        summary.findings.extend(classify(case, up, dr))
    return summary


def _side(v: Verdict) -> str:
    if v.crash:
        return f"crash {v.crash}"
    parts = []
    if v.new_error:
        parts.append(f"new: {v.new_error.splitlines()[0]}")
    if v.stored_error:
        parts.append(f"stored: {v.stored_error.splitlines()[0]}")
    elif v.runtime_error:
        parts.append(f"runtime: {v.runtime_error}")
    elif v.stored_error is None:
        parts.append(f"result {v.result}")
    parts.append(f"estimate {v.estimate} refused {v.refused} actual {v.actual_cost}")
    return "; ".join(parts)


def report(summary: Summary, out: TextIO, examples: int = 3) -> None:
    counts = summary.by_category()
    print(f"{summary.cases} cases, {summary.mismatched_cases()} with a counted mismatch", file=out)
    print("\n| category | cases |\n|---|---:|", file=out)
    for category in COUNTED + NOTED:
        note = "" if category in COUNTED else " (noted)"
        print(f"| {category}{note} | {counts[category]} |", file=out)
    for category in COUNTED + NOTED:
        details = summary.by_detail(category)
        if not details:
            continue
        print(f"\n## {category}", file=out)
        for detail, n in details.most_common():
            print(f"- {detail}: {n}", file=out)
            if category in ("estimate differs", "actual cost differs"):
                continue
            shown = [f for f in summary.findings if f.category == category and f.detail == detail]
            for f in shown[:examples]:
                print(f"  - #{f.case.id} `{f.case.expression}`", file=out)
                print(f"    upstream: {_side(f.upstream)}", file=out)
                print(f"    dralloc:  {_side(f.dralloc)}", file=out)
