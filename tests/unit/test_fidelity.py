"""The agents' lateness, measured in their loop, and the fidelity verdict drawn from it."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from rocelab.kernel.loop import LATENESS_BOUNDS_S, Loop, LoopStats
from rocelab.model.scenario import Case, evaluate, parse_check
from rocelab.runtime.fidelity import AgentTiming, cpu_share, cpu_times, judge, switch_pipelines, timings
from rocelab.runtime.readings import AgentReading
from rocelab.runtime.scenario import CaseResult, ScenarioRun
from rocelab.traffic.spec import JobSpec

TDF = 2000
BOUND_S = 1.6e-3  # one 4 KB frame at 100G / 2000


class _Core:
    """A core with one frame due at 1.0 s of its clock."""

    def receive(self, port, frame, now):
        pass

    def poll(self, now):
        return []

    def next_event(self, now):
        return 1.0


def test_the_loop_records_how_late_it_ran_what_was_due():
    times = iter([1.004, 1.0004, 0.99])
    loop = Loop(_Core(), {}, controls=[], clock=lambda: next(times))
    loop._transmit(due=1.0)  # 4 ms late
    loop._transmit(due=1.0)  # 0.4 ms late
    loop._transmit(due=1.0)  # not due yet: nothing recorded
    late = loop.stats.lateness
    assert sum(late.counts) == 2 and late.max_s == pytest.approx(0.004)
    assert late.counts[LATENESS_BOUNDS_S.index(5e-3)] == 1 and late.counts[LATENESS_BOUNDS_S.index(5e-4)] == 1


def reading(node: str, lateness_s: list[float], rx_dropped: int = 0) -> AgentReading:
    stats = LoopStats(rx_dropped=rx_dropped)
    for late in lateness_s:
        stats.lateness.record(late)
    return AgentReading(node, "switchd", {"loop": asdict(stats)})


def test_a_window_is_the_difference_of_two_readings():
    before = [reading("leaf1", [1e-4] * 10), AgentReading("leaf2", "switchd", None)]
    after = [reading("leaf1", [1e-4] * 10 + [3e-3] * 5, rx_dropped=7), reading("leaf2", [1e-4])]
    (window,) = timings(before, after)
    assert window.node == "leaf1" and window.events == 5 and window.rx_dropped == 7
    assert window.quantile_s(0.5) == 3e-3 and window.later_than(BOUND_S) == 5
    assert 2e-3 < window.estimate_s(0.5) < 3e-3  # inside the bucket, not at its upper bound


def window(node: str, on_time: int, late: int, late_s: float = 0.02, dropped: int = 0) -> AgentTiming:
    counts = [0] * (len(LATENESS_BOUNDS_S) + 1)
    counts[0] = on_time
    counts[LATENESS_BOUNDS_S.index(late_s)] += late
    return AgentTiming(node, "switchd", tuple(counts), dropped)


def test_agents_within_one_frame_kept_up():
    fidelity = judge([window("leaf1", 10_000, 50), window("h1", 5_000, 0)], TDF, BOUND_S)
    assert fidelity.kept_up and fidelity.events == 15_050 and fidelity.late_events == 50
    assert "kept up at TDF 2000" in fidelity.line() and fidelity.to_json()["p99_s"]["production"] < BOUND_S / TDF


def test_one_agent_often_late_or_one_dropped_frame_means_it_fell_behind_with_advice():
    late = judge([window("leaf1", 10_000, 0), window("spine1", 1_000, 100)], TDF, BOUND_S)
    assert not late.kept_up and late.worst_agent == "switchd on spine1" and late.advice_tdf > TDF
    assert "FELL BEHIND" in late.line() and f"--tdf {late.advice_tdf}" in late.line()
    dropped = judge([window("leaf1", 10_000, 0, dropped=1)], TDF, BOUND_S)
    assert not dropped.kept_up and "1 frames dropped unread" in dropped.line()


def test_a_late_verdict_says_how_busy_the_machine_was_and_what_its_host_took():
    # /proc/stat ticks: user nice system idle iowait irq softirq steal
    share = cpu_share([100, 0, 50, 800, 0, 0, 0, 50], [460, 0, 130, 840, 10, 0, 0, 110], 2)
    assert share.busy == pytest.approx(500 / 550) and share.steal == pytest.approx(60 / 550)
    late = replace(judge([window("spine1", 1_000, 100)], TDF, BOUND_S), machine=share)
    assert "2 CPUs were 91% busy meanwhile, 11% of it taken by the VM's host (steal)" in late.line()
    assert late.to_json()["machine"]["steal"] == pytest.approx(60 / 550)
    quiet = cpu_share([0, 0, 0, 100, 0, 0, 0, 0], [10, 0, 0, 190, 0, 0, 0, 0], 2)
    assert "steal" not in quiet.clause() and "10% busy" in quiet.clause()
    assert len(cpu_times()) == 8 and sum(cpu_times()) > 0  # this machine's own /proc/stat


def test_the_fidelity_line_says_which_pipeline_each_switch_ran_and_why():
    why = "the C core lacks pfcwd:forward (Ethernet0)"
    after = [AgentReading("leaf1", "switchd", {"pipeline": "c", "pipeline_why": "the C core implements it all"}),
             AgentReading("leaf2", "switchd", {"pipeline": "python", "pipeline_why": why}),
             AgentReading("h1", "nicd", {"loop": {}}), AgentReading("spine1", "switchd", None)]
    pipelines = switch_pipelines(after)
    assert [p.node for p in pipelines] == ["leaf1", "leaf2"]
    kept = judge([window("leaf1", 100, 0)], TDF, BOUND_S, pipelines)
    assert kept.line().endswith(f"; switchd on C: leaf1; on Python: leaf2 ({why})")
    assert kept.to_json()["pipelines"][1] == {"node": "leaf2", "pipeline": "python", "why": why}
    behind = judge([window("leaf1", 100, 50)], TDF, BOUND_S, pipelines)
    assert f"on Python: leaf2 ({why}). Results that depend on timing are inconclusive" in behind.line()
    assert judge([window("h1", 100, 0)], TDF, BOUND_S).line().endswith("no frame dropped unread")


def run_with(behind: bool, observations: dict[str, float], check: str) -> ScenarioRun:
    fidelity = judge([window("leaf1", 100, 50 if behind else 0)], TDF, BOUND_S)
    case = Case("pfc", "pfc", JobSpec(pattern="incast"))
    return ScenarioRun("lab", [CaseResult(case, observations, fidelity=fidelity)],
                       evaluate((parse_check(check),), {"pfc": observations}))


def test_a_check_on_a_case_that_fell_behind_is_inconclusive_never_passed_or_failed():
    assert run_with(False, {"drops": 0.0}, "pfc: drops == 0").verdict == "passed"
    assert run_with(False, {"drops": 3.0}, "pfc: drops == 0").verdict == "failed"
    for drops in (0.0, 3.0):
        run = run_with(True, {"drops": drops}, "pfc: drops == 0")
        assert run.verdict == "inconclusive" and not run.passed
        assert run.check_rows()[0][0] == "inconclusive" and run.to_json()["checks"][0]["inconclusive"]
