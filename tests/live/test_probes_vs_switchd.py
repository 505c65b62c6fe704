"""A probe on a lab link agrees with switchd's own counters, and sees go-back-N."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rocelab.kernel import control
from rocelab.kernel.netns import cmdline
from rocelab.probes import Probe
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

pytestmark = pytest.mark.root
PROFILES = Path(__file__).resolve().parents[2] / "profiles"


def leaf(spec) -> dict:
    return control.request(control.socket_path(spec.name, "leaf1"), "counters")["counters"]


def clear_all(spec, record) -> None:
    for p in record.processes:
        control.request(control.socket_path(spec.name, p["node"]), "clear")


def test_probes_count_what_switchd_counts_during_a_pfc_incast(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json",
                            nic="emulated", roce={"cc_algorithm": "none"})
    clear_all(spec, record)
    sender_link = Probe(record.node("leaf1").netns, "eth1").start()
    receiver_link = Probe(record.node("leaf1").netns, "eth5").start()
    run_job(record, JobSpec(pattern="incast", hosts=("h1", "h2", "h3", "h4", "h5"), size_bytes=2_000_000,
                            iterations=1, verb="write", options={"root": "h5"}))
    time.sleep(0.3)  # the last XON and the frames still on the dilated cables
    counted = leaf(spec)["ports"]
    sent = sender_link.stop().to_json()
    received = receiver_link.stop().to_json()
    pfc_tx = [r for r in sent["pfc"] if r["direction"] == "tx" and r["priority"] == 3]
    probe_frames = sum(r["xoff_frames"] + r["xon_frames"] for r in pfc_tx)
    assert probe_frames > 0
    assert probe_frames == counted["eth1"]["pfc_tx_frames"][3]
    ce = sum(f["ce_packets"] for f in received["flows"])
    assert ce > 0
    assert ce == sum(q["ecn_marked_packets"] for q in counted["eth5"]["queues"])


def test_a_probe_sees_go_back_n_when_loss_is_injected(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json",
                            nic="emulated")
    control.request(control.socket_path(spec.name, "leaf1"), "impair", port="eth2", loss_pct=2.0)
    clear_all(spec, record)
    sender_link = Probe(record.node("leaf1").netns, "eth1").start()
    report, _ = run_job(record, JobSpec(pattern="elephant", hosts=("h1", "h2"), size_bytes=2_000_000, iterations=1))
    seen = sender_link.stop().to_json()
    lost = leaf(spec)["ports"]["eth2"]["drops"]["impairment_loss"]["packets"]
    rewinds = sum(q["rewinds"] for q in seen["qps"])
    assert lost > 0
    assert rewinds > 0
    assert sum(q["retransmitted_packets"] for q in seen["qps"]) == report["total"]["counters"]["retransmitted_packets"]


@pytest.mark.parametrize("wait_s", [0.0, 3.0], ids=["while-its-capture-starts", "while-it-captures"])
def test_a_probe_without_a_duration_stops_on_sigterm_with_its_report(bring_up, wait_s):
    """Started as a background job of a non-interactive shell starts it (SIGINT ignored), a
    capture that runs until Ctrl-C still ends on SIGTERM and prints its report, whether the
    signal comes as its capture child starts (the command's own start-up may take seconds on a
    busy machine) or once it captures (well within 3 s of the child starting)."""
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json",
                            nic="emulated", roce={"cc_algorithm": "none"})
    probe = subprocess.Popen([sys.executable, "-m", "rocelab", "probe", "leaf1:eth5", "--lab", spec.name, "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not any(b"rocelab.probes" in cmdline(int(p)) for p in os.listdir("/proc")
                                                  if p.isdigit()):
        time.sleep(0.01)
    time.sleep(wait_s)
    probe.send_signal(signal.SIGTERM)
    out, err = probe.communicate(timeout=30)
    assert probe.returncode == 0, err
    assert "flows" in json.loads(out)
