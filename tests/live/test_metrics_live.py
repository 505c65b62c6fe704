"""Metrics, time series and run reports against a real switchd lab under a lossless incast."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocelab.kernel import control
from rocelab.reporting.run import write_report
from rocelab.runtime.timeseries import Sampler

from nsutil import blast_together
from test_switchd_live import udp_frame

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
LOSSLESS = ROOT / "profiles" / "roce-lossless.json"
LINE_RATE_BPS = 100e9  # each sender offers its 100G port's full emulated rate
SENDERS = ("h1", "h3", "h4")  # 3:1 into h2 on DSCP 26, the lossless priority 3
PRIORITY = 3
# The incast lasts this long on the emulated time line, whatever TDF `up` picked: 1.9 MB per
# sender at 100G, past the lossless PG's xoff (a wall-clock second carried 40 µs at TDF 25000:
# too few bytes to pause anything).
INCAST_PRODUCTION_S = 150e-6


def switch_counters(lab: str) -> dict:
    return control.request(control.socket_path(lab, "leaf1"), "counters")["counters"]


def settled_counters(lab: str, timeout_s: float = 10.0) -> dict:
    """leaf1's counters once two reads 0.3 s apart agree: queues drained, pauses ended."""
    deadline = time.monotonic() + timeout_s
    before = switch_counters(lab)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = switch_counters(lab)
        if {**now, "time_s": 0} == {**before, "time_s": 0}:
            return now
        before = now
    raise AssertionError(f"leaf1's counters kept changing for {timeout_s} s after the incast")


def incast(spec, record) -> None:
    blast_together([(record.node(h).netns, "eth1", udp_frame(spec, h, "h2", 26, 4096, sport=7000 + i))
                    for i, h in enumerate(SENDERS)], LINE_RATE_BPS / record.tdf, INCAST_PRODUCTION_S * record.tdf)


def parse(text: str) -> dict[tuple, float]:
    """(sample name, sorted labels) → value, via prometheus_client's own parser."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def at(name: str, **labels: str) -> tuple:
    return name, tuple(sorted(labels.items()))


def assert_matches_switchd(parsed: dict, lab: str, counters: dict) -> None:
    for port_name, port in counters["ports"].items():
        where = {"lab": lab, "node": "leaf1", "port": port_name}
        for p in range(8):
            assert parsed[at("rocelab_port_pfc_tx_frames_total", **where, priority=str(p))] == port["pfc_tx_frames"][p]
            assert parsed[at("rocelab_port_pfc_rx_frames_total", **where, priority=str(p))] == port["pfc_rx_frames"][p]
        for q, queue in enumerate(port["queues"]):
            for key, name in (("tx_packets", "rocelab_queue_tx_packets_total"),
                              ("tx_bytes", "rocelab_queue_tx_bytes_total"),
                              ("ecn_marked_packets", "rocelab_queue_ecn_marked_packets_total"),
                              ("depth_bytes", "rocelab_queue_depth_bytes"),
                              ("watermark_bytes", "rocelab_queue_watermark_bytes")):
                assert parsed[at(name, **where, queue=str(q))] == queue[key]
        for g, pg in enumerate(port["pgs"]):
            assert parsed[at("rocelab_pg_headroom_watermark_bytes", **where, pg=str(g))] == \
                pg["headroom_watermark_bytes"]


def run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"no output from {proc.args} in {timeout_s} s")
    return proc.stdout.readline()


def test_metrics_text_and_endpoint_match_switchd_counters(bring_up, tmp_path):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=LOSSLESS)
    incast(spec, record)
    counters = settled_counters(spec.name)
    assert sum(counters["ports"][f"eth{n}"]["pfc_tx_frames"][PRIORITY] for n in (1, 3, 4)) > 0
    assert counters["ports"]["eth2"]["queues"][PRIORITY]["watermark_bytes"] > 0

    cli = [sys.executable, "-m", "rocelab", "metrics", "--lab", spec.name]
    printed = run(cli)
    assert_matches_switchd(parse(printed), spec.name, counters)
    assert parse(printed)[at("rocelab_tdf", lab=spec.name)] == record.tdf
    out = tmp_path / "leaf1.prom"
    run([*cli, "--out", str(out)])
    assert_matches_switchd(parse(out.read_text()), spec.name, counters)

    # Started as a background job of a non-interactive shell starts it (SIGINT ignored, which
    # Python then leaves ignored); PYTHONFAULTHANDLER: if Ctrl-C does not stop it, SIGABRT makes
    # it print every thread's stack.
    server = subprocess.Popen([*cli, "--serve", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONFAULTHANDLER": "1"},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        line = read_line(server, 30)
        url = line.split()[1]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics"), line
        with urllib.request.urlopen(url, timeout=5) as reply:
            assert reply.status == 200
            served = reply.read().decode()
        assert_matches_switchd(parse(served), spec.name, counters)
    finally:
        server.send_signal(signal.SIGINT)  # the documented way to stop it: Ctrl-C
        try:
            rest, errors = server.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGABRT)
            _, stacks = server.communicate(timeout=30)
            raise AssertionError(f"`metrics --serve` still running 15 s after Ctrl-C; its threads:\n{stacks}")
    assert server.returncode == 0, errors
    assert "stopped" in rest


def test_a_sampler_over_live_traffic_gives_series_and_a_report(bring_up, tmp_path):
    # TDF pinned: the incast lasts INCAST_PRODUCTION_S × TDF, and the 50 ms polls must see its queue
    # (at the auto TDF a low calibration gave, a fresh-clone run saw none)
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=LOSSLESS, tdf=1000)
    with Sampler(record, interval_s=0.05) as sampler:
        time.sleep(0.2)
        incast(spec, record)
        counters = settled_counters(spec.name)
    ts = sampler.series
    # How many polls fit depends on how fast the machine is (18 beside a CPU-bound process, in a
    # fresh-clone suite): what must hold is that none was missed and the series saw the queue come.
    assert len(ts.t_s) >= 5 and ts.missed_polls == {}
    (depth,) = ts.of("queue_depth_bytes", node="leaf1", port="eth2", queue=str(PRIORITY))
    assert max(depth.values) > 0 and depth.values[0] == 0
    for n in (1, 3, 4):
        sent = ts.of("pfc_tx_frames", port=f"eth{n}", priority=str(PRIORITY))
        assert sum(v for s in sent for v in s.values) == counters["ports"][f"eth{n}"]["pfc_tx_frames"][PRIORITY]
    assert ts.t_production_s[-1] == pytest.approx(ts.t_s[-1] / record.tdf)

    rows = [[f"eth{n}", PRIORITY, counters["ports"][f"eth{n}"]["pfc_tx_frames"][PRIORITY]] for n in (1, 3, 4)]
    tables = [("PFC frames leaf1 sent", ["port", "priority", "frames"], rows)]
    report = write_report(tmp_path / "run", record, ts, tables,
                          "passed: the incast built a queue and leaf1 paused its senders", f"{spec.name}: 3:1 incast")
    page = report.read_text()
    for png in ("topology.png", "queue_depth.png", "pfc.png"):
        assert (report.parent / png).stat().st_size > 5_000
        assert f'href="{png}"' in page
    assert page.count("data:image/png;base64,") >= 3
    assert "passed: the incast built a queue" in page
