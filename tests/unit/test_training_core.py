"""The training job's pure parts: the bytes a step synchronises, the progress lines workers
print, stall detection on an injected clock, a case's `train:` in lab.yml and its errors,
the observations and the slowdown table; and that lab-training's gradients ride the lossy
class of its profile. None of it needs torch.distributed or a namespace."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.qos.sonic import load_config_db
from rocelab.model.topology import load_topology
from rocelab.train.core import (
    Done, Ready, StallWatch, Step, TrainResult, TrainSpec, bucket_bytes, event_line, parse_line, ring_share_bytes,
    slowdown_rows, sync_span_s, training_observations,
)

ROOT = Path(__file__).resolve().parents[2]
MLP_PARAMS = 64 * 1024 + 1024 + 1024 * 896 + 896 + 896 * 10 + 10  # the worker's 64 → 1024 → 896 → 10


def step(rank: int, n: int, accuracy: float = 0.5, step_time_s: float = 0.5, sync: int = MLP_PARAMS * 4,
         sync_s: float = 0.25) -> Step:
    return Step(rank, n, 1.0, accuracy, step_time_s, n * 0.6, sync, ring_share_bytes(sync, 4), sync_s)


# ---------------------------------------------------------------- bytes

def test_a_step_synchronises_every_parameter_once_and_each_worker_sends_its_ring_share():
    # DDP's buckets: a small first bucket, then the rest; fp32 gradients, 4 bytes each.
    buckets = [(262_144, 4), (MLP_PARAMS - 262_144, 4)]
    assert bucket_bytes(buckets) == MLP_PARAMS * 4 == 3_975_720
    assert ring_share_bytes(3_975_720, 4) == 1.5 * 3_975_720  # 2(4−1)/4
    assert ring_share_bytes(1000, 2) == 1000  # two workers: each sends half out and gets half back, twice
    assert ring_share_bytes(1000, 1024) == pytest.approx(2 * 1023 / 1024 * 1000)


def test_a_steps_allreduce_time_is_the_span_of_its_buckets_not_their_sum():
    assert sync_span_s([(10.0, 10.4), (10.1, 10.5)]) == pytest.approx(0.5)  # overlapping buckets
    assert sync_span_s([(3.0, 3.25)]) == pytest.approx(0.25)
    assert sync_span_s([]) == 0.0


def test_half_precision_buckets_halve_the_bytes():
    assert bucket_bytes([(MLP_PARAMS, 2)]) == MLP_PARAMS * 2


# ---------------------------------------------------------------- progress lines

@pytest.mark.parametrize("event", [Ready(0, 4, MLP_PARAMS, 4), step(2, 7, 0.93), Done(1, 27, True)])
def test_every_event_survives_its_json_line(event):
    line = event_line(event)
    assert "\n" not in line and parse_line(line) == event and parse_line(line.encode() + b"\n") == event


@pytest.mark.parametrize("line", ["", "W0401 gloo warning", "[1, 2]", '{"event": "lunch"}', '{"event": "step"}',
                                  '{"rank": 0}'])
def test_lines_that_are_not_events_are_ignored(line):
    assert parse_line(line) is None


# ---------------------------------------------------------------- stall detection

class FakeClock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_start_timeout_until_every_worker_is_ready_then_stall_timeout_between_steps():
    clock = FakeClock()
    watch = StallWatch(clock, start_timeout_s=60, stall_timeout_s=10)
    clock.now += 59  # importing torch, rendezvous: slow but allowed
    assert not watch.stalled() and watch.remaining_s() == pytest.approx(1)
    watch.ready()
    clock.now += 9.9
    assert not watch.stalled()
    watch.progress()  # a step
    clock.now += 10.5
    assert watch.stalled() and watch.remaining_s() == pytest.approx(-0.5)


def test_a_job_that_never_gets_ready_stalls_after_the_start_timeout():
    clock = FakeClock()
    watch = StallWatch(clock, start_timeout_s=30, stall_timeout_s=5)
    clock.now += 29
    assert not watch.stalled()
    clock.now += 2
    assert watch.stalled()


# ---------------------------------------------------------------- results and observations

def result_of(lead: list[Step], spec: TrainSpec = TrainSpec(), stalled: bool = False, wall_s: float = 40.0):
    result = TrainResult(("h1", "h2", "h3", "h4"), spec, wall_s=wall_s, stalled=stalled)
    result.add(Ready(0, 4, MLP_PARAMS, 4))
    for s in lead:
        result.add(s)
    return result


def counters(rx: dict[tuple[str, str], int], tx: dict[tuple[str, str], int]) -> dict[str, dict]:
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    return {s.name: {"ports": {p.name: {"rx_bytes": rx.get((s.name, p.name), 0), "tx_bytes": tx.get((s.name, p.name), 0)}
                               for p in s.ports}} for s in fabric.switches}


def test_observations_of_a_finished_run():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    lead = [step(0, 1, 0.5, 0.6), step(0, 2, 0.8, 0.5), step(0, 3, 0.91, 0.4)]
    host_port = {p.peer_node: (s.name, p.name) for s in fabric.switches for p in s.ports if p.peer_node.startswith("h")}
    rx = {host_port["h1"]: 18_000_000, host_port["h2"]: 17_900_000, host_port["h3"]: 18_100_000,
          host_port["h4"]: 17_950_000}
    tx = {("spine1", "eth1"): 9_000_000, ("spine2", "eth2"): 9_000_001}
    obs = training_observations(result_of(lead), counters(rx, tx), fabric)
    assert obs["steps"] == 3 and obs["final_accuracy"] == 0.91 and obs["reached_target"] == 1
    assert obs["train_time_s"] == pytest.approx(1.8)  # the last step's elapsed, not the 40 s with start-up
    assert obs["step_time_s"] == pytest.approx(0.5)
    assert obs["sync_time_s"] == pytest.approx(0.75)  # three steps' AllReduce
    assert obs["sync_bytes_per_step"] == MLP_PARAMS * 4 and obs["model_params"] == MLP_PARAMS
    assert obs["ring_bytes_per_worker"] == pytest.approx(3 * 1.5 * MLP_PARAMS * 4)
    assert (obs["worker_tx_bytes_min"], obs["worker_tx_bytes_max"]) == (17_900_000, 18_100_000)
    assert obs["spine_tx_bytes"] == 18_000_001


def test_a_stalled_run_takes_its_wall_time_and_did_not_reach_its_target():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    obs = training_observations(result_of([step(0, 1, 0.5)], stalled=True, wall_s=41.5), counters({}, {}), fabric)
    assert obs["train_time_s"] == 41.5 and obs["reached_target"] == 0 and obs["steps"] == 1


def test_a_run_that_never_stepped_has_no_figures_to_invent():
    fabric = load_topology(ROOT / "topologies" / "leaf-spine-2x2.yml")
    obs = training_observations(result_of([], stalled=True, wall_s=12.0), counters({}, {}), fabric)
    assert math.isnan(obs["final_accuracy"]) and math.isnan(obs["step_time_s"]) and obs["steps"] == 0


def test_slowdown_is_against_the_first_case_and_a_stall_says_so():
    rows = slowdown_rows([("clean", {"train_time_s": 10.0, "steps": 27, "final_accuracy": 0.95, "step_time_s": 0.37,
                                     "reached_target": 1, "stalled": 0}),
                          ("latency", {"train_time_s": 14.0, "steps": 27, "final_accuracy": 0.95,
                                       "step_time_s": 0.52, "reached_target": 1, "stalled": 0}),
                          ("black hole", {"train_time_s": 31.0, "steps": 3, "final_accuracy": 0.6,
                                          "step_time_s": 0.4, "reached_target": 0, "stalled": 1})])
    assert [r[5] for r in rows] == ["1.00×", "1.40×", "3.10×"]
    assert [r[6] for r in rows] == ["reached target", "reached target", "STALLED"]
    assert rows[1][1:5] == ["14.00 s", "27", "0.950", "520 ms"]


# ---------------------------------------------------------------- lab.yml

def test_lab_training_trains_in_every_case_on_four_hosts_across_the_spines():
    lab = load_lab("lab-training")
    assert lab.fabric.name == "leaf-spine-2x2" and lab.dataplane == "switchd"
    assert [c.name for c in lab.scenario.cases] == ["clean", "latency", "loss", "both"]
    for case in lab.scenario.cases:
        assert case.traffic is None and case.training is not None and case.training.hosts in ((), ("h1", "h2", "h3", "h4"))
    assert [h.name for h in lab.fabric.hosts] == ["h1", "h2", "h3", "h4"]
    # h1, h2 on leaf1 and h3, h4 on leaf2: the ring's h2 → h3 and h4 → h1 hops cross a spine.
    leaf_of = {h.name: lab.fabric.peer(h.ports[0]).node for h in lab.fabric.hosts}
    assert leaf_of == {"h1": "leaf1", "h2": "leaf1", "h3": "leaf2", "h4": "leaf2"}


def test_gloo_tcp_lands_in_a_lossy_class_of_the_labs_profile():
    lab = load_lab("lab-training")
    for port in load_config_db(lab.profile).ports.values():
        tc = port.dscp_to_tc[0]  # Linux sends TCP with DSCP 0 unless told otherwise; gloo does not tell it
        assert tc not in port.pfc_enable and not port.lossless_pg(port.tc_to_pg[tc])
        assert port.dscp_to_tc[26] in port.pfc_enable  # RoCE's DSCP 26 is the lossless one


def test_train_defaults_when_empty(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nscenario:\n  - case: clean\n    train: {}\n")
    (case,) = load_lab("l1").scenario.cases
    assert case.training == TrainSpec() and case.traffic is None


@pytest.mark.parametrize("train,path,message", [
    ("{target_accuracy: 1.5}", "train.target_accuracy", "is not an accuracy"),
    ("{max_steps: 0}", "train.max_steps", "is not a whole number"),
    ("{stall_timeout: soon}", "train.stall_timeout", "is not a delay"),
    ("{hosts: [h1, h9]}", "train.hosts", "are not hosts of this lab"),
    ("{epochs: 3}", "train.epochs", "unknown key 'epochs'"),
    ("[h1, h2]", "scenario[0].train", "is not a mapping"),
])
def test_a_bad_train_names_the_file_the_key_and_what_is_expected(lab_home, train, path, message):
    lab_home.write_text(f"topology: leaf-spine-2x2\nscenario:\n  - case: clean\n    train: {train}\n")
    with pytest.raises(InputError) as exc:
        load_lab("l1")
    (problem,) = exc.value.problems
    assert problem.file.endswith("lab.yml") and path in problem.path and "line 4" in problem.path
    assert message in problem.message


def test_a_case_may_not_both_train_and_run_traffic(lab_home):
    lab_home.write_text("topology: leaf-spine-2x2\nscenario:\n  - case: clean\n    train: {}\n"
                        "    traffic: ring-allreduce\n")
    with pytest.raises(InputError, match="has both `traffic` and `train`"):
        load_lab("l1")


def test_the_worker_model_has_about_a_million_parameters():
    pytest.importorskip("torch", reason="the worker needs the train extra: pip install -e '.[train]'")
    from rocelab.train.worker import mlp

    assert sum(p.numel() for p in mlp(64, 10).parameters()) == MLP_PARAMS == 993_930


def test_without_the_train_extra_the_lab_says_what_to_install(monkeypatch):
    import importlib.util

    from rocelab.train import runner

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "torch" else object())
    with pytest.raises(InputError) as exc:
        runner.require_torch("labs/lab-training/lab.yml")
    (problem,) = exc.value.problems
    assert "torch is not installed" in problem.message and "rocelab[train]" in problem.hint
