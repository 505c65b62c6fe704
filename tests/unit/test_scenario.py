"""Scenario observations per switch port and over the uplinks, from real counters of switch
cores that forwarded RoCE frames, and the checks that may name them; PFC-storm cases
(background jobs, expected stalls, the watchdog's storms and restorations)."""

from __future__ import annotations

import collections
import math

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from rocelab.engines.state import LabState
from rocelab.errors import InputError
from rocelab.qos.model import PfcWatchdog
from rocelab.model.scenario import (
    Case, Impairment, evaluate, fib_observations, load_scenario, only_cases, parse_check, port_observations, queued_bytes,
    switch_observations,
)
from rocelab.runtime.scenario import CaseResult, ScenarioRun, stormed_queues
from rocelab.switch import Fib, NextHop
from rocelab.traffic.spec import JobSpec
from rocelab.yamlfile import load_yaml
from test_switch_support import (
    LOSSLESS_TC, PORTS, RATE_BPS, drive, fib, host_ip, host_mac, lossless_profile, make_switch, pfc_from_peer,
    qos_profile, roce, run, switch_mac,
)

UPLINKS = ("eth2", "eth3", "eth4")  # leaf1's host sits on eth1; three spines behind the others
REMOTE = "198.18.100.7"
FRAME_BYTES = 1000
RATE = {(leaf, p): RATE_BPS for leaf in ("leaf1", "leaf2") for p in PORTS}


def leaf(sports: list[int], frames_per_flow: int) -> tuple[dict, collections.Counter]:
    """A leaf that forwarded `frames_per_flow` frames of each flow (one per UDP source port)
    from its host to the remote rack: its counters, and the bytes each uplink sent."""
    routes = dict(fib().routes)
    routes["198.18.100.0/24"] = [NextHop(p, f"02:00:00:00:02:0{p[-1]}") for p in UPLINKS]
    switch = make_switch(qos_profile({}), routes=Fib(routes, fib().local))
    for sport in sports:
        head = (Ether(src=host_mac("eth1"), dst=switch_mac("eth1"))
                / IP(src=host_ip("eth1"), dst=REMOTE, tos=26 << 2 | 2) / UDP(sport=sport, dport=4791))
        frame = bytes(head / bytes(FRAME_BYTES - len(head)))
        for _ in range(frames_per_flow):
            switch.receive("eth1", frame, 0.0)
    sent = collections.Counter()
    for _t, port, frame in run(switch, 0.0, 10.0):
        sent[port] += len(frame)
    return switch.counters(10.0), sent


def uplinks_of(*leaves: str) -> set[tuple[str, str]]:
    return {(name, p) for name in leaves for p in UPLINKS}


def test_every_port_reports_the_bytes_it_sent_and_its_utilisation():
    counters, sent = leaf([49152 + i for i in range(30)], 5)
    wall_s = 0.002
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), wall_s)
    for port in PORTS:
        assert obs[f"port_tx_bytes.leaf1:{port}"] == sent[port]
        assert obs[f"port_tx_util.leaf1:{port}"] == pytest.approx(sent[port] * 8 / (RATE_BPS * wall_s))
    assert sum(sent[p] for p in UPLINKS) == 30 * 5 * FRAME_BYTES
    assert obs["uplink_max_util"] == pytest.approx(max(sent[p] for p in UPLINKS) * 8 / (RATE_BPS * wall_s))


def test_one_flow_takes_one_uplink_and_the_imbalance_is_the_uplink_count():
    counters, sent = leaf([49152], 20)
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), 0.001)
    assert sorted(sent[p] for p in UPLINKS) == [0, 0, 20 * FRAME_BYTES]
    assert obs["uplink_imbalance"] == pytest.approx(len(UPLINKS))


def test_many_flows_spread_and_the_imbalance_is_busiest_over_mean():
    counters, sent = leaf([49152 + i for i in range(300)], 1)
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), 0.001)
    per_uplink = [sent[p] for p in UPLINKS]
    assert min(per_uplink) > 0
    assert obs["uplink_imbalance"] == pytest.approx(max(per_uplink) / (sum(per_uplink) / len(UPLINKS)))
    assert 1.0 <= obs["uplink_imbalance"] < 1.5


def test_leaves_count_in_proportion_to_their_uplink_bytes():
    # leaf1 sends the data of 30 flows; leaf2 a trickle on one flow (the ACKs coming back)
    data, data_sent = leaf([49152 + i for i in range(30)], 10)
    acks, acks_sent = leaf([50000], 2)
    obs = port_observations({"leaf1": data, "leaf2": acks}, RATE, uplinks_of("leaf1", "leaf2"), 0.001)
    busiest = max(data_sent[p] for p in UPLINKS) + max(acks_sent[p] for p in UPLINKS)
    mean = (sum(data_sent[p] for p in UPLINKS) + sum(acks_sent[p] for p in UPLINKS)) / len(UPLINKS)
    assert obs["uplink_imbalance"] == pytest.approx(busiest / mean)
    assert obs["uplink_imbalance"] < 2.0  # the trickle's imbalance of 3 barely moves the figure


def test_nothing_on_the_uplinks_leaves_the_imbalance_undefined():
    counters, _ = leaf([], 0)
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), 0.001)
    assert math.isnan(obs["uplink_imbalance"])
    assert obs["uplink_max_util"] == 0
    assert math.isnan(port_observations({"leaf1": counters}, RATE, set(), 0.001)["uplink_max_util"])


def test_a_job_that_never_finished_has_no_utilisation():
    counters, sent = leaf([49152], 3)
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), float("nan"))
    assert obs[f"port_tx_bytes.leaf1:{max(UPLINKS, key=lambda p: sent[p])}"] == 3 * FRAME_BYTES
    assert all(math.isnan(obs[f"port_tx_util.leaf1:{p}"]) for p in PORTS)


LAB = """\
scenario:
  - case: one-qp
    traffic: elephant
    with: {{hosts: [h1, h2]}}
checks:
  - "one-qp: {observation} > 0.4"
"""
SWITCH_PORTS = {("leaf1", p) for p in PORTS}


def load_text(tmp_path, text: str):
    """The scenario of a lab.yml with this text, on a lab of leaf1 and hosts h1, h2."""
    path = tmp_path / "lab.yml"
    path.write_text(text)
    return load_scenario(load_yaml(path), tmp_path, {"h1", "h2"}, SWITCH_PORTS,
                         SWITCH_PORTS | {("h1", "eth1"), ("h2", "eth1")})


def load(tmp_path, observation: str):
    return load_text(tmp_path, LAB.format(observation=observation))


@pytest.mark.parametrize("observation", ["port_tx_util.leaf1:eth3", "port_tx_bytes.leaf1:eth1",
                                         "uplink_imbalance", "uplink_max_util", "port_queued_after_steps.leaf1:eth3",
                                         "fib_next_hops.leaf1:198.19.1.0/24"])
def test_checks_may_name_port_and_uplink_observations(tmp_path, observation):
    (check,) = load(tmp_path, observation).checks
    assert check.observation == observation


@pytest.mark.parametrize("observation, message", [
    ("port_tx_util.leaf1:eth9", "names no switch port of this lab"),
    ("fib_next_hops.spine9:198.19.1.0/24", "names no switch and IPv4 prefix of this lab"),
    ("fib_next_hops.leaf1:198.19.1.0", "names no switch and IPv4 prefix of this lab"),
    ("port_tx_util.h1:eth1", "names no switch port of this lab"),
    ("port_rx_util.leaf1:eth3", "is not an observation"),
])
def test_checks_naming_a_port_that_is_not_there_are_refused(tmp_path, observation, message):
    with pytest.raises(InputError) as exc:
        load(tmp_path, observation)
    (problem,) = exc.value.problems
    assert observation in problem.message and message in problem.message


STORM_LAB = """\
scenario:
  - case: storm
    traffic: elephant
    with: {{hosts: [h1, h2]}}
    storm: {{host: h2, priority: 3}}
    background: {background}
checks:
  - "storm: stalled == 1"
"""


def load_storm(tmp_path, background: str):
    return load_text(tmp_path, STORM_LAB.format(background=background))


def test_a_background_job_is_a_traffic_pattern_with_its_own_overrides(tmp_path):
    (case,) = load_storm(tmp_path, "{traffic: elephant, with: {hosts: [h2, h1], qps: 8}}").cases
    assert case.background.pattern == "elephant"
    assert case.background.hosts == ("h2", "h1") and case.background.qps == 8
    assert case.traffic.hosts == ("h1", "h2")


@pytest.mark.parametrize("background, message", [
    ("elephant", "is not a background job"),
    ("{traffic: elephant, size: 4MB}", "is not a background job"),
    ("{traffic: no-such-pattern}", "no-such-pattern"),
    ("{traffic: elephant, with: {qps: 0}}", "not a whole number"),
    ("{traffic: elephant, with: {verb: atomic}}", "'atomic' is not a verb; expected one of: send, write, read"),
])
def test_a_bad_background_job_names_the_case_and_the_key(tmp_path, background, message):
    with pytest.raises(InputError) as exc:
        load_storm(tmp_path, background)
    (problem,) = exc.value.problems
    assert problem.path.startswith("scenario[0].background") and message in str(problem)


def storm_run(observations: dict[str, float], error: str | None, check: str) -> ScenarioRun:
    case = Case("storm", "storm", JobSpec(pattern="elephant"))
    result = CaseResult(case, observations, error=error)
    return ScenarioRun("lab", [result], evaluate((parse_check(check),), {"storm": observations}))


def test_a_stall_passes_only_where_a_check_expects_it():
    stalled = {"stalled": 1.0, "drops": 0.0}
    assert storm_run(stalled, "no progress for 6 s", "storm: stalled == 1").passed
    # The same stall in a lab that does not ask about it is a failed case, whatever else passed.
    assert not storm_run(stalled, "no progress for 6 s", "storm: drops == 0").passed
    # A QP that failed is never excused by a stall check.
    failed = {"stalled": 0.0, "drops": 0.0}
    assert not storm_run(failed, "h1: QP 17 entered the error state", "storm: stalled == 0").passed


def test_the_watchdog_counts_a_storm_and_its_restoration_and_names_the_stormed_queue():
    wd = PfcWatchdog(action="drop", detection_time_ms=200, restoration_time_ms=200)
    switch = make_switch(lossless_profile(pfc_wd=wd))
    storm = [(i * 0.05, "eth2", pfc_from_peer("eth2", {LOSSLESS_TC: 0xFFFF})) for i in range(10)]
    traffic = [(0.01 + i * 0.02, "eth1", roce("eth1", "eth2", 1000)) for i in range(20)]
    drive(switch, storm + traffic, 0.0, 0.3)
    assert stormed_queues({"leaf1": switch.counters(0.3)}) == [f"leaf1:eth2/{LOSSLESS_TC}"]
    obs = switch_observations({"leaf1": switch.counters(0.3)}, set())
    assert (obs["pfcwd_storms"], obs["pfcwd_restored"]) == (1, 0) and obs["drops.pfcwd_drop"] > 0
    drive(switch, [], 0.3, 2.0)  # the storm is over: restoration time passes without a pause
    assert stormed_queues({"leaf1": switch.counters(2.0)}) == []
    assert switch_observations({"leaf1": switch.counters(2.0)}, set())["pfcwd_restored"] == 1


THREE_CASES = """\
scenario:
  - {case: a, traffic: elephant, with: {hosts: [h1, h2]}}
  - {case: b, traffic: elephant, with: {hosts: [h1, h2]}}
  - {case: c, traffic: elephant, with: {hosts: [h1, h2]}}
checks:
  - "a: drops == 0"
  - "b: drops == 0"
  - "c: job_time_s > a: job_time_s"
  - "c: stalled == 0"
"""


def test_a_run_of_some_cases_keeps_only_the_checks_it_can_decide(tmp_path):
    scenario = load_text(tmp_path, THREE_CASES)
    path = tmp_path / "lab.yml"
    cut = only_cases(scenario, ["c", "b"], str(path))
    assert [c.name for c in cut.cases] == ["b", "c"]  # the lab's order, not the command line's
    assert [c.text for c in cut.checks] == ["b: drops == 0", "c: stalled == 0"]
    with pytest.raises(InputError) as exc:
        only_cases(scenario, ["b", "storm"], str(path))
    assert "has no case 'storm'" in str(exc.value) and "cases: a, b, c" in str(exc.value)


STEPS_LAB = """\
scenario:
  - case: shut
    traffic: elephant
    with: {{hosts: [h1, h2]}}
    steps: {steps}
"""


def test_a_case_types_switch_steps_in_time_order(tmp_path):
    (case,) = load_text(tmp_path, STEPS_LAB.format(steps=(
        '[{at: 2ms, on: leaf1, do: "config interface startup Ethernet4"}, '
        '{at: 500us, on: leaf1, do: "config interface shutdown Ethernet4"}]'))).cases
    assert [(c.at_s, c.node, c.argv) for c in case.steps] == [
        (0.0005, "leaf1", ("config", "interface", "shutdown", "Ethernet4")),
        (0.002, "leaf1", ("config", "interface", "startup", "Ethernet4"))]


def test_a_case_types_a_hosts_nic_commands(tmp_path):
    (case,) = load_text(tmp_path, STEPS_LAB.format(steps=(
        '[{at: 1ms, on: h2, do: "mlnx_qos -i eth1 --trust pcp"}]'))).cases
    assert [(c.node, c.argv[0]) for c in case.steps] == [("h2", "mlnx_qos")]


@pytest.mark.parametrize("steps, path, message", [
    ('[{at: 1ms, on: h1, do: "show pfc counters"}]', "steps[0]", "is not a step on a switch"),
    ('[{at: 1ms, on: h1, do: "ib_write_bw 198.19.2.2"}]', "steps[0]", "hosts: h1, h2, commands: mlnx_qos"),
    ('[{at: 1ms, on: leaf1, do: "mlnx_qos -i eth1"}]', "steps[0]",
     "commands: show, config, ecnconfig, pfcwd, sonic-clear; hosts"),
    ('[{at: 1ms, on: leaf1, do: "reboot"}]', "steps[0]", "commands: show, config"),
    ('[{at: soon, on: leaf1, do: "show pfc counters"}]', "steps[0].at", "is not a delay"),
    ('[{at: 1ms, on: leaf1}]', "steps[0]", 'write {at: 2ms, on: SWITCH, do: "config interface shutdown Ethernet8"}'),
    ('{at: 1ms, on: leaf1, do: "show pfc counters"}', "steps", "is not a list of steps"),
])
def test_a_bad_case_step_names_the_file_the_case_and_the_entry(tmp_path, steps, path, message):
    with pytest.raises(InputError) as exc:
        load_text(tmp_path, STEPS_LAB.format(steps=steps))
    (problem,) = exc.value.problems
    assert problem.path.startswith(f"scenario[0].{path} (line 5)") and message in str(problem)
    assert str(problem).startswith(problem.file) and problem.file.endswith("lab.yml")


def test_a_step_kills_a_links_transmitter_silently_or_impairs_it_in_the_asic(tmp_path):
    (case,) = load_text(tmp_path, STEPS_LAB.format(steps=(
        '[{at: 1ms, impair: {port: leaf1:eth2, loss: 100%}}, {at: 500us, impair: {port: leaf1:eth1, loss: 0.5%, '
        'delay: 20us}}]'))).cases
    partial, dead = case.steps
    assert (dead.at_s, dead.node, dead.argv, dead.impair.port, dead.impair.silent) == (0.001, "leaf1", (), "eth2", True)
    assert dead.text == "impair leaf1:eth2 loss 100% (silent: the link stays up)"
    assert not partial.impair.silent and partial.text == "impair leaf1:eth1 loss 0.5%, delay 20 us"


@pytest.mark.parametrize("impair, message", [
    ("{port: leaf9:eth1, loss: 100%}", "does not name a switch port"),
    ("{port: leaf1:eth1, loss: 150%}", "is not a share of the frames"),
    ("{port: leaf1:eth1, loss: lots}", "loss 'lots' is not a percentage"),
    ("{port: leaf1:eth1, delay: soon}", "100%: the link dies silently"),
])
def test_a_bad_impair_step_names_the_entry(tmp_path, impair, message):
    with pytest.raises(InputError) as exc:
        load_text(tmp_path, STEPS_LAB.format(steps=f"[{{at: 1ms, impair: {impair}}}]"))
    (problem,) = exc.value.problems
    assert problem.path.startswith("scenario[0].steps[0].impair (line 5)") and message in str(problem)


def test_a_case_types_its_steps_on_the_dilated_time_line_from_the_jobs_start_until_it_ends():
    import queue
    import threading
    import time

    from rocelab.model.scenario import CaseStep
    from rocelab.runtime.scenario import _typed_at_times

    case = Case("shut", "shut", JobSpec(pattern="elephant"), steps=(
        CaseStep(0.05e-3, "leaf1", ("config", "interface", "shutdown", "Ethernet4")),
        CaseStep(0.2e-3, "leaf1", ("config", "interface", "startup", "Ethernet4"))))
    typed, ran, start = [], [], queue.Queue(maxsize=1)
    # The job's data starts 0.3 s after the steps' thread: its QPs took that long to connect.
    started = time.monotonic() + 0.3
    threading.Timer(0.1, start.put, args=(started,)).start()
    # At TDF 1000, 0.05 ms and 0.2 ms of production time are 50 ms and 200 ms on the lab.
    _typed_at_times(case, lambda c, step: typed.append((step.argv[2], time.monotonic() - started)) or 0,
                    start, threading.Event(), 1000, ran)
    assert [what for what, _ in typed] == ["shutdown", "startup"]
    assert typed[0][1] >= 0.05 and typed[1][1] >= 0.2
    assert [(r.step.argv[2], r.status) for r in ran] == [("shutdown", 0), ("startup", 0)]
    assert ran[0].typed_s >= 0.05e-3 and ran[1].typed_s >= 0.2e-3  # reported production-equivalent
    ended = threading.Event()
    ended.set()  # the job ended before its data started, or before the first step's time: nothing is typed
    typed.clear()
    _typed_at_times(case, lambda c, step: typed.append(step), queue.Queue(), ended, 1000, [])
    start = queue.Queue()
    start.put(time.monotonic())
    _typed_at_times(case, lambda c, step: typed.append(step), start, ended, 1000, [])
    assert typed == []


def test_the_run_says_which_figures_are_emulated_time_and_which_frrs_wall_clock():
    from rocelab.model.scenario import CaseStep
    from rocelab.runtime.scenario import CaseResult, ScenarioRun, StepResult

    step = CaseStep(0.002, "leaf1", ("config", "interface", "shutdown", "Ethernet8"))
    case = CaseResult(Case("shut", "shut", JobSpec(pattern="ring")), {}, steps=[StepResult(step, 0.0021, 0)])
    run = ScenarioRun("lab-link-failure", [case], [])
    assert run.step_rows() == [["shut", "2 ms", "2.1 ms", "leaf1", "config interface shutdown Ethernet8", "0"]]
    bgp = LabState("l", "netns", "l", "switchd", 1000, "up", routing={"mode": "bgp", "fib_routes_per_s": 10500})
    note = run.time_note(bgp)
    assert "emulated time, shown production-equivalent (the lab's wall time ÷ TDF 1,000)" in note
    assert "FIB programming (10,500 routes/s)" in note
    assert "FRR runs on the wall clock" in note and "BFD's 900 ms reads as 900 µs" in note
    assert "silently dead link" not in note
    dead = CaseStep(0.002, "leaf1", impair=Impairment("leaf1", "eth3", loss_pct=100.0))
    silent = ScenarioRun("lab-link-failure", [CaseResult(case.case, {}, steps=[StepResult(dead, 0.002, 0)])], [])
    assert "A silently dead link stays a black hole until BFD notices: 900 ms on a real fabric, 900 µs here" \
        in silent.time_note(bgp)
    assert "far end sees it down at once (link_down_detect_ms: 0)" in note
    static = LabState("l", "netns", "l", "switchd", 1000, "up", routing={"mode": "static", "link_down_detect_s": 0.25})
    assert "FRR" not in run.time_note(static)
    assert "far end sees it down 250 ms later (link_down_detect_ms, emulated time)" in run.time_note(static)
    assert ScenarioRun("lab-pfc", [CaseResult(case.case, {})], []).time_note(static) == ""


def test_bytes_queued_out_of_a_port_after_the_last_step_and_next_hops_per_prefix():
    counters, _ = leaf([49152 + i for i in range(30)], 5)
    now = queued_bytes({"leaf1": counters})
    at_step = {key: value - 100 if key == ("leaf1", "eth3") else value for key, value in now.items()}
    obs = port_observations({"leaf1": counters}, RATE, uplinks_of("leaf1"), 0.002, at_step)
    assert obs["port_queued_after_steps.leaf1:eth3"] == 100 and obs["port_queued_after_steps.leaf1:eth4"] == 0
    assert math.isnan(port_observations({"leaf1": counters}, RATE, set(), 0.002)["port_queued_after_steps.leaf1:eth3"])
    hop = ["eth4", "02:00:00:00:00:07"]
    routes = {"leaf2": {"198.19.1.0/24": [hop], "198.19.2.0/24": [hop, hop]}, "spine1": {"198.19.3.0/24": [hop]}}
    assert fib_observations(routes) == {
        "fib_next_hops.leaf2:198.19.1.0/24": 1, "fib_next_hops.leaf2:198.19.2.0/24": 2,
        "fib_next_hops.leaf2:198.19.3.0/24": 0, "fib_next_hops.spine1:198.19.1.0/24": 0,
        "fib_next_hops.spine1:198.19.2.0/24": 0, "fib_next_hops.spine1:198.19.3.0/24": 1}
