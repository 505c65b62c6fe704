"""The agents' lateness, measured in their loop, and the fidelity verdict drawn from it."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest

from rocelab.engines.state import LabState
from rocelab.kernel.loop import LATENESS_BOUNDS_S, Loop, LoopStats
from rocelab.model.scenario import Case, evaluate, parse_check
from rocelab.runtime.fidelity import (AgentTiming, cpu_share, cpu_times, headroom_drops, held_frames, judge,
                                      switch_pipelines, timings)
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


def test_a_wake_up_counts_once_among_the_stalls_at_its_latest_event():
    """A stall is one late event, or a few (its due event, each port's oldest frame), however
    long it lasts: `wakes` counts each wake-up once, at the latest of what it served late."""
    times = iter([1.0002, 1.025, 1.031])
    loop = Loop(_Core(), {}, controls=[], clock=lambda: next(times))
    loop._transmit(due=1.0)  # 0.2 ms late
    loop.stats.lateness.record(0.029)  # a port's oldest frame waited 29 ms: the same stall
    loop.stats.lateness.end_wake(0.5)  # the wake-up before ended half a second before this one
    loop._transmit(due=1.0)  # the next wake-up: 25 ms late
    loop.stats.lateness.end_wake(0.5)
    loop._transmit(due=2.0)  # nothing due: no wake-up to count
    loop.stats.lateness.end_wake(0.5)
    late = loop.stats.lateness
    assert sum(late.counts) == 3 and sum(late.wakes) == 2
    assert late.wakes[LATENESS_BOUNDS_S.index(3e-2)] == 2


def test_a_catch_up_over_several_wake_ups_counts_its_stall_once():
    """A 40 ms stall whose backlog takes three wake-ups 1 ms apart to read: each finds a frame
    that waited ~40 ms, but only the first was 40 ms behind since the wake-up before it."""
    late = LoopStats().lateness
    for since_last_s in (0.2, 1e-3, 1e-3):
        late.record(0.04)
        late.end_wake(since_last_s)
    assert late.wakes[LATENESS_BOUNDS_S.index(5e-2)] == 1 and late.wakes[LATENESS_BOUNDS_S.index(1e-3)] == 2
    assert sum(late.counts) == 3 and late.counts[LATENESS_BOUNDS_S.index(5e-2)] == 3  # the events as they were


def reading(node: str, lateness_s: list[float], rx_dropped: int = 0) -> AgentReading:
    stats = LoopStats(rx_dropped=rx_dropped)
    for late in lateness_s:
        stats.lateness.record(late)
        stats.lateness.end_wake(1.0)
    return AgentReading(node, "switchd", {"loop": asdict(stats)})


def test_a_window_is_the_difference_of_two_readings():
    before = [reading("leaf1", [1e-4] * 10), AgentReading("leaf2", "switchd", None)]
    after = [reading("leaf1", [1e-4] * 10 + [3e-3] * 5, rx_dropped=7), reading("leaf2", [1e-4])]
    (window,) = timings(before, after)
    assert window.node == "leaf1" and window.events == 5 and window.rx_dropped == 7 and sum(window.wakes) == 5
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


def pg_counters(drops: int, watermark_bytes: int, lossless: bool = True) -> dict:
    """leaf1's counters with one PG (eth2 PG 3) that dropped `drops` 4,154 B frames for headroom."""
    pgs = [{"lossless": False, "rx_packets": 0, "rx_bytes": 0, "headroom_watermark_bytes": 0, "drops": {}}] * 8
    pg = {"lossless": lossless, "rx_packets": 700, "rx_bytes": 700 * 4154, "headroom_watermark_bytes": watermark_bytes,
          "drops": {"headroom_exceeded": {"packets": drops, "bytes": drops * 4154}} if drops else {}}
    return {"leaf1": {"ports": {"eth2": {"pgs": [*pgs[:3], pg, *pgs[4:]]}}}}


LINKS = {("leaf1", "eth2"): (100e9, 2.0)}  # 100G, 2 m: the emulated physics leaves ~8.7 KB in headroom


def stalled(node: str, agent: str, wakes: int, late_s: float, on_time: int = 10_000) -> AgentTiming:
    """A loop that served `on_time` events in time and woke `wakes` times `late_s` late."""
    counts = [0] * (len(LATENESS_BOUNDS_S) + 1)
    counts[0] = on_time
    counts[LATENESS_BOUNDS_S.index(late_s)] = wakes
    return AgentTiming(node, agent, tuple(counts), 0, tuple(counts))


def test_how_long_a_loop_ran_behind_is_at_least_its_late_wake_ups_past_the_bound():
    """Each wake-up L late was more than the bound behind for L - bound, L at its bucket's low end."""
    low = LATENESS_BOUNDS_S[LATENESS_BOUNDS_S.index(2e-2) - 1]  # the 20 ms bucket starts at 15 ms
    assert stalled("h1", "nicd", 40, 2e-2).behind_s(BOUND_S) == pytest.approx(40 * (low - BOUND_S))
    assert stalled("h1", "nicd", 40, 2e-3).behind_s(BOUND_S) == 0.0  # 1.5-2 ms: the bound is inside it


def test_an_agent_that_stalls_for_longer_than_its_share_of_the_window_fell_behind_however_few_its_late_events():
    """A nicd stopped 20 ms every 0.1 s: 40 late events of 10,000 (0.4%, under LATE_SHARE_ALLOWED),
    but behind for over half a second of a 4 s window."""
    windows = [stalled("h1, h2", "nicd", 40, 2e-2), window("leaf1", 10_000, 0)]
    late = judge(windows, TDF, BOUND_S)
    assert late.kept_up  # what the late events alone say
    judged = late.judge_stalls(windows, 4.0)
    assert not judged.kept_up and judged.advice_tdf >= 2 * TDF
    assert judged.behind_s == pytest.approx(windows[0].behind_s(BOUND_S)) and judged.window_s == 4.0
    assert "nicd on h1, h2" in judged.line() and "2% of the 4 s" in judged.line()
    assert judged.to_json()["behind_s"]["emulated"] == judged.behind_s
    # The same stalls over a window 20 times longer are under LATE_TIME_ALLOWED of it: kept up.
    kept = late.judge_stalls(windows, 80.0)
    assert kept.kept_up and kept.behind_s == judged.behind_s
    # A window whose length is not known is judged on its late events alone.
    assert late.judge_stalls(windows, 0.0) == late


def test_lossless_drops_the_agents_lateness_accounts_for_mean_the_emulation_fell_behind():
    # One event 10 ms late (5 µs production, 62 KB at 100G) with 41,540 B of headroom used of 45,056:
    # the frames that arrived meanwhile, not the fabric, overflowed it.
    windows = [window("leaf1", 36_000, 1, late_s=0.01)]
    judged = judge(windows, TDF, BOUND_S)
    assert judged.kept_up  # 1 late event of 36,000: within the 1 % the per-event judgement allows
    late = judged.judge_headroom(headroom_drops(pg_counters(1, 41_540), LINKS), windows)
    assert not late.kept_up and late.advice_tdf > TDF
    assert "1 frame dropped for headroom on lossless PGs (leaf1 eth2 PG 3: 1)" in late.line()
    assert "FELL BEHIND" in late.line() and late.to_json()["overrun"]


def test_lossless_drops_beyond_what_lateness_explains_are_the_fabrics():
    windows = [window("leaf1", 36_000, 1, late_s=0.01)]
    judged = judge(windows, TDF, BOUND_S)
    # A NIC that ignores the pause: hundreds of drops, far more than one late event lets through.
    assert judged.judge_headroom(headroom_drops(pg_counters(300, 41_540), LINKS), windows).kept_up
    # No event later than the spare headroom lasts (~33 KB at 100G: 5.3 ms at TDF 2000).
    on_time = [window("leaf1", 36_000, 5, late_s=0.003)]
    assert judge(on_time, TDF, BOUND_S).judge_headroom(headroom_drops(pg_counters(1, 41_540), LINKS), on_time).kept_up
    # Headroom too small for even the emulated cable (xoff 4,096 B: no frame fits): physics, not lateness.
    assert judged.judge_headroom(headroom_drops(pg_counters(6, 0), LINKS), windows).kept_up
    # Lossy PGs tail-drop by design; headroom drops are a lossless PG's only.
    assert headroom_drops(pg_counters(1, 41_540, lossless=False), LINKS) == []


def test_headroom_drops_in_a_window_are_those_since_the_counters_read_before_it():
    """A job's judgement (rocelab.traffic.job.run_job) reads the counters before and after it, as
    they run on from the last clear: only the drops in between count, over the frames in between."""
    before, after = pg_counters(4, 41_540), pg_counters(6, 41_540)
    after["leaf1"]["ports"]["eth2"]["pgs"][3] |= {"rx_packets": 1_700, "rx_bytes": 700 * 4154 + 1_000 * 1_000}
    (drop,) = headroom_drops(after, LINKS, since=before)
    assert drop.drops == 2 and drop.frame_bytes == pytest.approx(1_000)
    assert headroom_drops(pg_counters(4, 41_540), LINKS, since=before) == []  # none in the window
    # Cleared meanwhile: what the counters hold is all since the clear, within the window.
    assert headroom_drops(pg_counters(1, 41_540), LINKS, since=before)[0].drops == 1


def test_frames_a_switch_held_for_its_late_xoff_count_as_its_late_events_and_are_said():
    """A switch holds past the headroom what reached it only because its own XOFF left late
    (rocelab.switch.pipeline): each held frame is a frame its link carried that a switch on time
    would not have let in, one more late event of its loop. A few at one late XOFF: kept up, and
    the line says so; as many as a switch that stalls often lets in: fell behind."""
    def held(n: int) -> dict:
        counters = pg_counters(0, 41_540)
        port = counters["leaf1"]["ports"]["eth2"]
        port["pgs"] = [{**pg, "held_packets": n if i == 3 else 0} for i, pg in enumerate(port["pgs"])]
        return counters

    assert held_frames(held(7), held(3)) == {"leaf1": 4}
    assert held_frames(held(2), held(3)) == {"leaf1": 2}  # cleared meanwhile: all since the clear
    cleared = held(5)
    cleared["leaf1"]["ports"]["eth2"]["pgs"][3]["rx_packets"] = 10  # fewer than before: cleared, then 5 held
    assert held_frames(cleared, held(3)) == {"leaf1": 5}
    assert held_frames(held(5), {}) == {"leaf1": 5}  # a switch read for the first time
    windows = [window("leaf1", 36_000, 100), replace(window("h1", 36_000, 0), agent="nicd")]
    judged = judge(windows, TDF, BOUND_S)
    assert judged.judge_held({"leaf1": 0}, windows) == judged
    few = judged.judge_held({"leaf1": 4}, windows)
    assert few.kept_up and "; 4 lossless frames held past a PG's headroom, not dropped" in few.line()
    assert few.to_json()["held"] == 4
    many = judged.judge_held({"leaf1": 300}, windows)  # 100 late + 300 held > 1% of 36,400
    assert not many.kept_up and many.advice_tdf >= 2 * TDF and "FELL BEHIND" in many.line()
    assert "leaf1: 300 held, 100 late of 36,100 events" in many.line() and many.to_json()["held"] == 300
    # Held frames and headroom drops the lateness accounts for, in one window: the line gives both.
    late = [window("leaf1", 36_000, 100, late_s=0.01)]
    both = judge(late, TDF, BOUND_S).judge_held({"leaf1": 300}, late).judge_headroom(
        headroom_drops(pg_counters(1, 41_540), LINKS), late)
    assert "held more frames past a lossless PG's headroom" in both.line()
    assert "1 frame dropped for headroom on lossless PGs" in both.line()
    # A NIC's loop holds nothing; frames held by a switch weigh on that switch's loop only.
    assert judged.judge_held({"h1": 300}, windows).kept_up
    assert "held past" not in judged.line()
    # One switchd serving every switch: what any of them held weighs on the one loop.
    shared = [window("spine1, leaf1", 36_000, 100), replace(window("h1", 36_000, 0), agent="nicd")]
    by_one = judge(shared, TDF, BOUND_S).judge_held({"spine1": 0, "leaf1": 300}, shared)
    assert not by_one.kept_up and "spine1, leaf1: 300 held" in by_one.line()


def test_a_labs_state_keeps_its_links_for_the_headroom_judgement():
    from rocelab.engines.netns import plan
    from rocelab.model.lab import load_lab
    from rocelab.runtime.fidelity import port_links, record_links

    lab = replace(load_lab("lab-pfc"), tdf=2000)
    record = LabState.from_json(json.loads(json.dumps(plan(lab).to_json())))
    assert record_links(record) == port_links(lab.fabric) and record_links(record)
    old = json.loads(json.dumps(plan(lab).to_json()))
    for node in old["nodes"]:  # the state of a lab brought up before the links were kept
        for interface in node["interfaces"]:
            del interface["rate_bps"], interface["cable_m"]
    assert record_links(LabState.from_json(old)) == {}


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


def test_a_dynamic_check_that_fails_while_the_agents_fell_behind_is_inconclusive():
    from rocelab.fabric.lab import Inconclusive, _judged

    behind = {"kept_up": False, "line": "fidelity: the emulation FELL BEHIND at TDF 2000: …"}
    with pytest.raises(Inconclusive, match="FELL BEHIND"):
        _judged(["incast into h4 with PFC alone: leaf1 eth2 PG3: 1 packets dropped as headroom_exceeded"], behind)
    assert _judged([], behind) == []  # nothing failed: a pass stands, however late the agents ran
    assert _judged(["a failure"], {"kept_up": True, "line": "fidelity: the emulation kept up"}) == ["a failure"]
