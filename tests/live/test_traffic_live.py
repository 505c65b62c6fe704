"""Jobs on a live lab: leaf-spine-2x2, nicd on every host, kernel data plane (unshaped
veths: each NIC's own pacing at rate/TDF sets the throughput)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "rocelab"]


@pytest.fixture(scope="module")
def lab(bring_up_for_module):
    """One lab for the jobs that leave it as they found it (each report counts its own job)."""
    return bring_up_for_module("leaf-spine-2x2", nic="emulated", dataplane="kernel", profile=None)


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_ring_allreduce_moves_exact_bytes_per_rank_without_retransmission(lab):
    spec, record = lab
    size, n, iterations = 4_000_000, 4, 2
    report, results = run_job(record, JobSpec("ring-allreduce", size_bytes=size, iterations=iterations))
    for host, rank in report["ranks"].items():
        assert rank["bytes_sent"] == rank["bytes_received"] == iterations * 2 * (n - 1) * size // n
        assert len([s for s in results[host]["steps"] if s[0] == 0]) == 2 * (n - 1)
    total = report["total"]
    assert 0 < total["busbw_vs_line_rate"] <= 1.0, total  # how close to 1 is the benchmark's to say
    assert report["line_rate_bps"] == {"emulated": 100e9 / record.tdf, "production": 100e9}
    assert total["counters"]["retransmitted_bytes"] == 0


def test_ring_allreduce_through_switchd_moves_exact_bytes_within_line_rate(bring_up):
    spec, record = bring_up("leaf-spine-2x2", nic="emulated", dataplane="switchd")
    size, n = 16_000_000, 4
    report, _ = run_job(record, JobSpec("ring-allreduce", size_bytes=size, iterations=1))
    for rank in report["ranks"].values():
        assert rank["bytes_sent"] == rank["bytes_received"] == 2 * (n - 1) * size // n
    # The busbw this machine reaches is benchmarks/bench_allreduce.py's figure, not a test's.
    assert 0 < report["total"]["busbw_vs_line_rate"] <= 1.0, report["total"]


def test_incast_from_the_command_line_completes_and_reports_json(lab, tmp_path):
    spec, record = lab
    result = cli("traffic", "incast", "--lab", spec.name, "--size", "1MB", "--iters", "2", "--json",
                 "--report-dir", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    page = Path(report["report"])
    assert page.parent == tmp_path / "run" and "data:image/png;base64," in page.read_text()
    assert (tmp_path / "run" / "flow_rates.png").stat().st_size > 0  # the NICs sampled while the job ran
    assert report["ranks"]["h4"]["bytes_received"] == 2 * 3 * 1_000_000
    assert report["total"]["iterations_completed"] == 2
    assert "iteration 2/2" in result.stderr  # progress without a terminal: one line per iteration


@pytest.mark.parametrize("pattern", ["halving-doubling", "alltoall"])
def test_other_collectives_complete_with_the_plans_bytes(lab, pattern):
    spec, record = lab
    report, _ = run_job(record, JobSpec(pattern, size_bytes=2_000_000, iterations=1, qps=2))
    for rank in report["ranks"].values():
        assert rank["bytes_sent"] == rank["plan_bytes_sent"] and rank["bytes_received"] == rank["plan_bytes_received"]


def test_pattern_file_with_write_verb_runs_and_renders_a_table(lab, tmp_path):
    spec, record = lab
    pattern = tmp_path / "writes.yml"
    pattern.write_text("pattern: elephant\nhosts: [h1, h4]\nsize: 2MB\nqps: 2\nverb: write\niterations: 2\n")
    result = cli("traffic", str(pattern), "--lab", spec.name)
    assert result.returncode == 0, result.stderr
    assert "busbw" in result.stdout and "verb write" in result.stdout


def test_bw_reports_average_peak_and_message_rate(lab):
    spec, record = lab
    result = cli("bw", "h1", "h3", "--lab", spec.name, "--duration", "1.5", "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["message_bytes"] == 65536 and summary["messages"] > 1
    assert 0 < summary["bw_vs_line_rate"] <= 1.0
    assert summary["bw_peak_bps"]["emulated"] >= summary["bw_average_bps"]["emulated"]
    assert summary["msg_rate_pps"]["production"] == pytest.approx(summary["msg_rate_pps"]["emulated"] * record.tdf)


def test_traffic_on_a_lab_without_nics_exits_2_with_the_fix(bring_up):
    spec, record = bring_up("leaf-spine-2x2", dataplane="kernel", profile=None)
    result = cli("traffic", "ring-allreduce", "--lab", spec.name)
    assert result.returncode == 2
    assert "nic: emulated" in result.stderr and "Traceback" not in result.stderr


def test_a_job_that_stops_moving_fails_with_what_each_host_waits_for(bring_up):
    from pyroute2 import IPRoute

    from rocelab.kernel import control
    from rocelab.traffic.job import JobFailed

    spec, record = bring_up("leaf-spine-2x2", nic="emulated", dataplane="kernel", profile=None)  # its cable is cut

    def cut_h1_cable(progress) -> None:
        if progress.bytes_done:  # once traffic flows, h1's ToR port goes down
            with IPRoute(netns=record.node("leaf1").netns) as ipr:
                ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="down")

    with pytest.raises(JobFailed) as exc:
        run_job(record, JobSpec("elephant", hosts=("h1", "h3"), size_bytes=20_000_000, stall_timeout_s=2.0),
                on_progress=cut_h1_cable)
    message = str(exc.value)
    assert "no progress for " in message and "h1 waits in iteration 0 step 0" in message
    # The job was ended on both hosts: their QPs are gone.
    for host in ("h1", "h3"):
        assert control.request(control.socket_path(record.name, host), "counters")["counters"]["qps"] == {}


def test_incast_on_a_lossless_switchd_fabric_is_held_by_pfc(bring_up):
    from rocelab.kernel import control

    # DCQCN off (the lab's `roce:` settings reach nicd), so PFC alone holds the incast.
    spec, record = bring_up("incast-1x5", nic="emulated", dataplane="switchd", roce={"cc_algorithm": "none"})
    assert control.request(control.socket_path(record.name, "h1"), "ping")["cc_algorithm"] == "none"
    report, _ = run_job(record, JobSpec("incast", size_bytes=1_000_000, iterations=1))
    counters = report["total"]["counters"]
    assert report["ranks"]["h5"]["bytes_received"] == 4_000_000
    assert counters["pfc_pause_frames"] > 0 and counters["pfc_paused_s"]["emulated"] > 0
    assert counters["cnps_sent"] == counters["cnps_received"] > 0  # ECN marks answered, and ignored (cc none)
    # Lossless means every retransmission has a switch drop behind it (headroom_exceeded, when
    # switchd lags behind its input on a busy machine), never a silent loss.
    switch_drops = control.request(control.socket_path(record.name, "leaf1"), "counters")["counters"]["drops"]
    if counters["retransmitted_bytes"]:
        assert sum(d["packets"] for d in switch_drops.values()) > 0, (counters, switch_drops)
