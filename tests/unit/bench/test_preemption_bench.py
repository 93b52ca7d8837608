"""The preemption benchmark runs (its figures are not asserted): its random clusters are
full, its preemptor has a choice, and the table has a row per choice."""

from __future__ import annotations

import io
import random

from bench import preemption_bench


def test_a_workload_is_a_full_cluster_and_a_pending_pod() -> None:
    items, need = preemption_bench.workload(random.Random(3), nodes=2)
    held = [
        r
        for i in items
        if i["kind"] == "ResourceClaim"
        for r in ((i.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results", [])
    ]
    assert len(held) == 2 * preemption_bench.GPUS, "every GPU is held"
    assert need in (2, 4, 8)


def test_the_table_has_a_row_per_choice() -> None:
    out = io.StringIO()
    preemption_bench.run(workloads=2, nodes=2, seed=1, out=out)
    text = out.getvalue()
    for row in ("| dralloc |", "| upstream greedy |", "| optimum |"):
        assert row in text, text


def test_the_latency_table_compares_the_full_phase_with_the_room_phase() -> None:
    from bench import preemption_latency

    phases = [
        preemption_latency.Phase("room", 2, 0.1, 0.2, 0.2, 0),
        preemption_latency.Phase("full", 2, 0.4, 0.5, 0.5, 2),
    ]
    text = preemption_latency.table(phases)
    assert "| full | 2 | 0.40 | 0.50 | 0.50 | 4.00x | 1.00 |" in text, text
