"""lab-training for real: four PyTorch DDP workers (gloo over TCP) in the hosts of
leaf-spine-2x2, their gradients forwarded by switchd.

The lab's whole scenario runs once (a module fixture) and the tests read what it observed:
the clean run reaches its target and crosses the spines; every impaired run is slower than
clean or reported stalled in time; a step synchronises parameters × 4 bytes and each worker
puts its ring share, 2(N−1)/N of that, on the wire. Then one more job, whose fabric
black-holes mid-run, is reported STALLED and leaves no worker behind; while it ran, its
gradients rode the lossy class and its workers lived in namespaces with no route out of
198.18.0.0/15.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field, replace

import pytest
from conftest import unique_lab_name
from pyroute2 import IPRoute

from rocelab.runtime import calibration
from rocelab.kernel import control
from rocelab.engines import builtin_engines
from rocelab.kernel.netns import cmdline, pids_in
from rocelab.model.lab import load_lab
from rocelab.runtime.scenario import agent_sockets, run, start_clean
from rocelab.train.core import TrainSpec
from rocelab.train.runner import run_training

pytestmark = pytest.mark.root
pytest.importorskip("torch", reason="the training lab needs the train extra: pip install -e '.[train]'")
pytest.importorskip("sklearn", reason="the training lab needs the train extra: pip install -e '.[train]'")

FABRIC = ipaddress.ip_network("198.18.0.0/15")
LEAF_UPLINKS = (("leaf1", "eth3"), ("leaf1", "eth4"), ("leaf2", "eth3"), ("leaf2", "eth4"))
SEGMENT_HEADER_BYTES = 14 + 20 + 32  # Ethernet, IPv4, TCP with timestamps: added to every segment
LOSSY_QUEUE, ROCE_QUEUE = 0, 3  # roce-lossless: DSCP 0 → TC 0 → queue 0 (no PFC); DSCP 26 → 3 (PFC)
BLACK_HOLE_AT_STEP = 2
BLACK_HOLED_MAX_STEPS = 60  # the black-holed job's own end, far beyond where the black hole stops it
STALL_TIMEOUT_S = 6.0
KILL_MARGIN_S = 6.0  # after the stall timeout: the watch's own wake-up, SIGKILL and reaping, on a busy machine


@pytest.fixture(scope="module")
def lab():
    spec = replace(load_lab("lab-training"), name=unique_lab_name("training"))
    engine = builtin_engines().get("netns")
    record = calibration.up(engine, spec)
    try:
        yield spec, record
    finally:
        engine.down(record)


@dataclass
class Observed:
    cases: dict  # case name → CaseResult
    run: object = None  # the ScenarioRun: its verdict over lab.yml's checks
    streamed: list = field(default_factory=list)  # (case, step number) as on_step heard them
    case_started: dict = field(default_factory=dict)  # case name → time


@pytest.fixture(scope="module")
def scenario(lab):
    spec, record = lab
    seen = Observed({})
    current = []

    def on_case(case):
        current[:] = [case.name]
        seen.case_started[case.name] = time.monotonic()

    result = run(record, spec.scenario, spec.profile, spec.fabric, on_case=on_case,
                 on_step=lambda step, workers: seen.streamed.append((current[0], step.step)))
    seen.cases = {c.case.name: c for c in result.cases}
    seen.run = result
    return seen


def test_the_labs_own_checks_pass_where_the_agents_kept_up(scenario):
    """lab-training's whole scenario is judged here (tests/live/test_labs.py types its guide's
    `run` for the clean case only: the four cases train twice otherwise)."""
    run = scenario.run
    failed = [r.check.text for r in run.checks if not r.passed and not run.inconclusive(r)]
    assert run.verdict != "failed", failed
    if run.verdict == "inconclusive":
        pytest.skip("; ".join(c.fidelity.line() for c in run.cases if c.fidelity and not c.fidelity.kept_up))


def test_clean_run_reaches_its_target_accuracy(lab, scenario):
    spec, _ = lab
    clean = scenario.cases["clean"]
    target = clean.case.training.target_accuracy
    assert clean.error is None and clean.observations["stalled"] == 0
    assert clean.observations["reached_target"] == 1 and clean.observations["final_accuracy"] >= target
    # DDP keeps the replicas identical: every worker measured the same accuracy after every step.
    per_rank = clean.job["steps"]
    assert sorted(per_rank) == ["0", "1", "2", "3"]
    assert len({tuple(s["accuracy"] for s in steps) for steps in per_rank.values()}) == 1


def test_rank_zero_streams_every_step(scenario):
    """Every step, in order; that each comes while the job runs, not at its end, is the
    black-holed job's to show (below)."""
    clean = scenario.cases["clean"]
    heard = [n for case, n in scenario.streamed if case == "clean"]
    assert heard == list(range(1, int(clean.observations["steps"]) + 1))


def test_clean_gradients_cross_the_spines(scenario):
    obs = scenario.cases["clean"].observations
    # The ring h1 → h2 → h3 → h4 → h1 has two hops between racks (h2 → h3, h4 → h1), each
    # carrying one worker's ring share through a spine (whichever ECMP picked).
    assert obs["spine_tx_bytes"] >= 2 * obs["ring_bytes_per_worker"]
    uplinks = sum(obs[f"port_tx_bytes.{leaf}:{port}"] for leaf, port in LEAF_UPLINKS)
    assert uplinks >= 2 * obs["ring_bytes_per_worker"]


@pytest.mark.parametrize("case", ["latency", "loss", "both"])
def test_each_impaired_run_is_slower_than_clean_or_reported_stalled_in_time(scenario, case):
    clean, impaired = scenario.cases["clean"].observations, scenario.cases[case].observations
    training = scenario.cases[case].case.training
    if impaired["stalled"]:
        # Every step it finished took less than the stall timeout, and the last one never came.
        limit = training.start_timeout_s + (impaired["steps"] + 1) * training.stall_timeout_s + KILL_MARGIN_S
        assert impaired["train_time_s"] <= limit
        assert "stalled" in scenario.cases[case].error
    else:
        # The AllReduce time: what the fabric costs a step, which a busy CPU does not move (the
        # wall-clock training time it does, more for the clean case than 10% loss does).
        assert impaired["reached_target"] == 1
        assert impaired["sync_time_s"] > clean["sync_time_s"]
    if case != "latency":
        assert impaired["drops.impairment_loss"] > 0


def test_a_step_synchronises_the_parameters_and_each_worker_sends_its_ring_share(lab, scenario):
    spec, _ = lab
    obs = scenario.cases["clean"].observations
    assert obs["model_params"] == 993_930
    assert obs["sync_bytes_per_step"] == obs["model_params"] * 4  # fp32 gradients
    assert obs["ring_bytes_per_worker"] == pytest.approx(obs["steps"] * 2 * 3 / 4 * obs["sync_bytes_per_step"])
    # On the wire each worker's ring share comes in segments of at most MTU − 52 bytes, each
    # with 66 bytes of headers (lower bound); on top, at most one 66-byte ACK per segment it
    # receives (it receives as much as it sends), and 0.5 % for rendezvous, gloo's message
    # headers and the TCP store. The clean case dropped nothing, so nothing was resent.
    mss = spec.fabric.links[0].mtu - 20 - 32
    per_segment = SEGMENT_HEADER_BYTES / mss
    ring = obs["ring_bytes_per_worker"]
    assert obs["drops"] == 0
    assert ring * (1 + per_segment) <= obs["worker_tx_bytes_min"]
    assert obs["worker_tx_bytes_max"] <= ring * (1 + 2 * per_segment + 0.005)


@dataclass
class BlackHoled:
    result: object
    returned_after_s: float  # from the black hole to run_training's return
    workers: dict  # host → worker pids, while it ran
    routes: dict  # host → destinations in its namespace's main table
    uplink_queues: dict  # queue → bytes the leaf uplinks sent, before the black hole
    left: dict  # host → worker pids after it returned


@pytest.fixture(scope="module")
def black_holed(lab):
    spec, record = lab
    switches = agent_sockets(record, "switchd")
    for leaf, port in LEAF_UPLINKS:
        control.request(switches[leaf], "impair", port=port)  # the scenario's last impairments off
    start_clean(record, "dcqcn")
    seen = {}

    def on_step(step, workers):
        if step.step == 1:
            seen["workers"] = worker_pids(record)
            seen["routes"] = host_routes(record)
        if step.step == BLACK_HOLE_AT_STEP:
            counters = {leaf: control.request(switches[leaf], "counters")["counters"] for leaf in ("leaf1", "leaf2")}
            seen["queues"] = {q: sum(counters[leaf]["ports"][port]["queues"][q]["tx_bytes"]
                                     for leaf, port in LEAF_UPLINKS) for q in (LOSSY_QUEUE, ROCE_QUEUE)}
            for leaf, port in LEAF_UPLINKS:
                control.request(switches[leaf], "impair", port=port, loss_pct=100.0)
            seen["black_hole"] = time.monotonic()

    job = TrainSpec(target_accuracy=1.0, max_steps=BLACK_HOLED_MAX_STEPS, stall_timeout_s=STALL_TIMEOUT_S)
    result = run_training(record, spec.fabric, job, on_step=on_step)
    returned = time.monotonic()
    for leaf, port in LEAF_UPLINKS:
        control.request(switches[leaf], "impair", port=port)
    return BlackHoled(result, returned - seen["black_hole"], seen["workers"], seen["routes"], seen["queues"],
                      worker_pids(record))


def test_a_job_whose_fabric_black_holes_is_reported_stalled_and_every_worker_is_killed(black_holed):
    result = black_holed.result
    assert result.stalled and "stalled" in result.error
    # The black hole was made when rank 0's line of step BLACK_HOLE_AT_STEP was heard, and the job
    # stopped long before its own end: that line came while the job ran (streamed live, not at the end).
    assert BLACK_HOLE_AT_STEP <= len(result.lead) < BLACK_HOLED_MAX_STEPS
    assert STALL_TIMEOUT_S <= black_holed.returned_after_s  # never declared stalled before the timeout
    assert all(len(pids) == 1 for pids in black_holed.workers.values())  # one worker per host while it ran
    assert black_holed.left == {h: [] for h in ("h1", "h2", "h3", "h4")}


@pytest.mark.timing
def test_the_black_hole_stops_the_step_in_flight_and_the_stall_is_declared_in_time(black_holed):
    lead = black_holed.result.lead
    assert len(lead) == BLACK_HOLE_AT_STEP, (
        f"{len(lead)} steps completed: the black hole, made when step {BLACK_HOLE_AT_STEP}'s line was heard, took "
        f"effect after step {len(lead)} had synchronised (a step took {lead[-1].step_time_s:.2f} s here)")
    assert black_holed.returned_after_s <= STALL_TIMEOUT_S + KILL_MARGIN_S, (
        f"run_training returned {black_holed.returned_after_s:.2f} s after the black hole: more than the "
        f"{STALL_TIMEOUT_S} s stall timeout and the {KILL_MARGIN_S} s margin for killing and reaping")


def test_gloo_tcp_rides_the_lossy_class(black_holed):
    assert black_holed.uplink_queues[LOSSY_QUEUE] > 0 and black_holed.uplink_queues[ROCE_QUEUE] == 0


def test_workers_have_no_route_out_of_the_fabric(black_holed):
    assert set(black_holed.routes) == {"h1", "h2", "h3", "h4"}
    for host, destinations in black_holed.routes.items():
        assert destinations, f"{host} has no route at all"
        assert all(d is not None and d.subnet_of(FABRIC) for d in destinations), f"{host}: {destinations}"


def worker_pids(record) -> dict[str, list[int]]:
    """Each host's workers: forked from the runner's fork server, whose command line names the
    worker module it preloaded."""
    return {n.name: [p for p in pids_in([n.netns]) if b"rocelab.train.worker" in cmdline(p)]
            for n in record.nodes if n.role == "host"}


def host_routes(record) -> dict[str, list]:
    """Every destination of each host namespace's main routing table (None: a default route)."""
    routes = {}
    for node in (n for n in record.nodes if n.role == "host"):
        with IPRoute(netns=node.netns) as ipr:
            routes[node.name] = [ipaddress.ip_network(f"{r.get_attr('RTA_DST')}/{r['dst_len']}")
                                 if r.get_attr("RTA_DST") else None for r in ipr.get_routes(family=2, table=254)]
    return routes

