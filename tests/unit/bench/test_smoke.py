"""Smoke test of the benchmark harness (benchmarks are not tests; this only checks they run).

Tiny workloads only: the definitions expand into valid objects, dralloc's replay places every
pod, the Go harness (when its build is cached) makes the same placements, and the report
renders. Speed is never asserted.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from bench import level1, report
from bench.scenario import expand, load, load_all, placement_digest
from operators.api import parse_object


def test_every_workload_definition_loads() -> None:
    workloads = load_all()
    keys = {w.key for w in workloads}
    assert {"template_5000pods_500nodes", "steady_full_500nodes", "claim_2000pods_100nodes"} <= keys
    for workload in workloads:
        assert workload.mode in ("fill", "steady"), workload.key
        assert workload.measured_pods > 0, workload.key


def test_steady_preallocation_never_reuses_a_device() -> None:
    scenario = expand(load("steady_full_100nodes").scaled(0.05))
    devices = Counter(
        (r["pool"], r["device"])
        for claim in scenario.preallocated
        for r in claim["status"]["allocation"]["devices"]["results"]
    )
    assert len(devices) == 990
    assert max(devices.values()) == 1


def test_dralloc_replay_places_every_pod() -> None:
    result = level1.run_dralloc(expand(load("template_fast")))
    assert (result.pods, result.unschedulable) == (10, 0)
    # Full cluster: only 10 devices free, 10 pods in flight: works only if deleted pods' claims
    # are released before the next pod is placed.
    steady = level1.run_dralloc(expand(load("steady_full_100nodes").scaled(0.03)))
    assert (steady.pods, steady.unschedulable) == (30, 0)


def test_roomy_quotas_check_every_pod_and_change_no_placement() -> None:
    scenario = expand(load("template_fast"))
    without = level1.run_dralloc(scenario)
    replay = level1.DrallocReplay(scenario, quotas="roomy")
    placements: list[tuple[str, str]] = []
    replay.run(scenario.init_steps, placements)
    replay.run(scenario.measure_steps, placements)
    assert placement_digest(placements) == without.digest
    book = replay.state.quotas
    counted = sum(book.used(q).devices for q in book.all_quotas())
    assert counted == len(replay.state.allocated.exclusive) > 0


def test_shared_claims_pin_later_pods_to_the_first_pods_node() -> None:
    scenario = expand(load("claim_2000pods_100nodes").scaled(0.01))
    replay = level1.DrallocReplay(scenario)
    nodes = [replay.place(step) for step in scenario.init_steps[:5]]
    assert nodes[0] and len(set(nodes)) == 1


def test_upstream_harness_makes_the_same_placements() -> None:
    try:
        binary = level1.upstream_binary(build=False)
    except level1.UpstreamUnavailable as error:
        pytest.skip(f"the Go harness is not built (bench/upstream/build): {error}")
    scenario = expand(load("steady_half_100nodes").scaled(0.05))
    comparison = level1.compare(scenario, "steady_half_100nodes", binary)
    assert comparison.upstream is not None
    assert comparison.upstream.pods == comparison.dralloc.pods == 50
    assert comparison.same_placements


def test_report_renders_a_table_and_json(tmp_path: Path) -> None:
    comparison = level1.compare(expand(load("template_fast")), "template_fast", None)
    rows = [comparison.to_json()]
    results = {"quick": True, "machine": report.machine(), "level1": rows, "skipped": {"x": "why"}}
    written = report.write(results, tmp_path)
    markdown = (tmp_path / "quick.md").read_text()
    assert "SchedulingWithResourceClaimTemplate/fast" in markdown
    assert "x skipped: why" in markdown
    assert json.loads((tmp_path / "quick.json").read_text())["level1"][0]["dralloc"]["pods"] == 10
    assert len(written) == 2


def test_operator_profile_summary_attributes_samples_to_functions(tmp_path: Path) -> None:
    from bench.level2 import summarize_stacks

    stacks = tmp_path / "stacks.txt"
    stacks.write_text(
        "main (/r/operators/run.py:10);search (/r/operators/allocator/search.py:20) 30\n"
        "main (/r/operators/run.py:11);loads (/usr/lib/json/decoder.py:5) 10\n"
    )
    summary = summarize_stacks(stacks)
    assert "40 samples" in summary
    assert "75.0%  search (/r/operators/allocator/search.py)" in summary
    assert "100.0%  main (/r/operators/run.py)" in summary


def test_level2_systems_are_parameters_of_one_harness() -> None:
    from bench import level2

    by_name = {s.name: s for s in level2.SYSTEMS}
    assert list(by_name) == ["in-tree", "dralloc", "dralloc in-tree mode", "pods without claims"]
    pods = {name: level2.pod_manifest("test", "p", s) for name, s in by_name.items()}
    in_tree, crd, in_tree_mode = pods["in-tree"], pods["dralloc"], pods["dralloc in-tree mode"]
    # The floor: the same pod, asking for nothing, on a control plane without DRA.
    floor = by_name["pods without claims"]
    assert not floor.dra and floor.operator is None
    assert pods["pods without claims"] == {
        **in_tree,
        "spec": {"containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]},
    }
    assert "schedulingGates" not in in_tree["spec"] and in_tree["spec"]["resourceClaims"]
    assert level2.CLAIMS_ANNOTATION in crd["metadata"]["annotations"]
    assert "resourceClaims" not in crd["spec"]
    assert in_tree_mode["spec"]["resourceClaims"] == in_tree["spec"]["resourceClaims"]
    assert in_tree_mode["spec"]["schedulingGates"] == [{"name": level2.GATE}]
    mode = by_name["dralloc in-tree mode"]
    assert mode.operator == ("--api-group=resource.k8s.io",) and mode.dra
    assert not mode.kcm_dra
    assert level2.systems_named(["dralloc in-tree mode"]) == (mode,)
    with pytest.raises(SystemExit, match="unknown level-2 system"):
        level2.systems_named(["nope"])


def test_level2_table_has_a_line_per_system_with_its_ratio_to_in_tree() -> None:
    rows = [
        {
            "workload": "w",
            "system": name,
            "pods": 10,
            "podsPerSecond": rate,
            "writesPerPod": 5.0,
            "writeMs": 1.25,
        }
        for name, rate in (("in-tree", 20.0), ("dralloc", 30.0), ("dralloc in-tree mode", 10.0))
    ]
    lines = report.level2_table(rows)
    assert lines[2].startswith("| w | in-tree | 20.0 | 1.00x | 5.00 | 1.25 | 10 |")
    assert "| dralloc | 30.0 | 1.50x |" in lines[3]
    assert "| dralloc in-tree mode | 10.0 | 0.50x |" in lines[4]


def test_a_quota_run_also_measures_the_engine_without_quotas() -> None:
    scenario = expand(load("template_fast"))
    comparison = level1.compare(scenario, "template_fast", None, quotas="roomy")
    plain = comparison.dralloc_no_quotas
    assert plain is not None and plain.digest == comparison.dralloc.digest
    row = comparison.to_json()
    assert row["drallocNoQuotas"]["pods"] == row["dralloc"]["pods"] == 10
    assert level1.compare(scenario, "template_fast", None).dralloc_no_quotas is None


@pytest.mark.parametrize(("mode", "tallied"), [("roomy", False), ("checked", True)])
def test_roomy_quotas_skip_the_check_per_device_and_checked_ones_do_not(
    mode: str, tallied: bool
) -> None:
    scenario = expand(load("template_fast"))
    replay = level1.DrallocReplay(scenario, quotas=mode)
    claims = replay.state.compile_claims([parse_object(scenario.measure_steps[0].new_claims[0])])
    assert (replay.state.quotas.tally(claims) is not None) is tallied
    assert replay.run(scenario.measure_steps, [])[0] == 10


def test_scale_rows_report_the_memory_each_engine_holds() -> None:
    scenario = expand(load("template_fast"))
    comparison = level1.compare(scenario, "template_fast", None, memory=True)
    assert comparison.dralloc.heap_bytes > 0
    assert level1.compare(scenario, "template_fast", None).dralloc.heap_bytes == 0
    row = {**comparison.to_json(), "upstream": {"pods_per_second": 1.0, "heap_bytes": 2**21}}
    cells = [cell.strip() for cell in report.scale_table([row])[2].split("|")]
    assert cells[-3] != "-" and cells[-2] == "2"  # dralloc MiB measured, upstream 2 MiB
