"""Run reports from series of a real switch core's PFC incast and real NIC cores under DCQCN."""

from __future__ import annotations

import base64
import json
import re
from datetime import datetime
from pathlib import Path

import pytest

from rocelab.reporting import run as runreport
from rocelab.engines.state import LabState
from rocelab.runtime.timeseries import TimeSeries, build, observe
from test_timeseries import SAMPLE_S, TDF, nic_congestion, switch_incast

ROOT = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def lab_state(source: str = str(ROOT / "topologies" / "incast-1x5.yml")) -> LabState:
    return LabState("unit-incast", "netns", source, "switchd", TDF, "up")


@pytest.fixture(scope="module")
def switch_series() -> TimeSeries:
    times, readings = switch_incast()
    return build("unit-incast", TDF, SAMPLE_S, times, [observe(r) for r in readings])


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_a_report_has_plots_topology_tables_and_verdict(tmp_path, switch_series):
    tables = [("PFC frames sent", ["port", "priority", "frames"], [["eth1", 3, 3], ["eth3", 3, 3]])]
    report = runreport.write_report(tmp_path / "run", lab_state(), switch_series, tables,
                                    "passed: no packet lost <on> the lossless priority", "incast: 3:1 PFC")
    assert report == tmp_path / "run" / "report.html"
    page = report.read_text()
    for png in ("topology.png", "queue_depth.png", "pfc.png", "cnps_drops.png"):
        path = report.parent / png
        assert path.read_bytes().startswith(PNG_MAGIC) and path.stat().st_size > 5_000
        assert f'href="{png}"' in page  # a relative link beside the embedded copy
    assert not (report.parent / "flow_rates.png").exists()  # no NIC in this run, and the page says so
    assert "No flow_rates plot" in page
    embedded = embedded_pngs(page)
    assert len(embedded) == 4 and all(p.startswith(PNG_MAGIC) for p in embedded)
    assert (report.parent / "queue_depth.png").read_bytes() in embedded
    assert 'class="verdict pass"' in page and "no packet lost &lt;on&gt; the lossless priority" in page
    assert "<th>frames</th>" in page and "<td>eth3</td>" in page
    assert "TDF 1000" in page and "production-equivalent" in page
    assert TimeSeries.from_json(json.loads((report.parent / "series.json").read_text())) == switch_series


def test_flow_rates_are_plotted_when_nics_report_queue_pairs(tmp_path):
    times, readings = nic_congestion()
    series = build("unit-nics", 1, 1e-3, times, [observe(r) for r in readings])
    report = runreport.write_report(tmp_path, lab_state(), series, [], None, "DCQCN: two flows into one port")
    png = report.parent / "flow_rates.png"
    assert png.read_bytes().startswith(PNG_MAGIC) and png.stat().st_size > 5_000
    page = report.read_text()
    assert 'href="flow_rates.png"' in page and "Verdict" not in page


def test_a_missing_topology_file_is_said_not_fatal(tmp_path, switch_series):
    report = runreport.write_report(tmp_path, lab_state("topologies/gone.yml"), switch_series, [], "failed", "t")
    page = report.read_text()
    assert "No topology picture" in page and "gone.yml" in page
    assert 'class="verdict fail"' in page


def test_a_runs_cases_each_get_their_report_with_the_topology_drawn_once(tmp_path, switch_series):
    times, readings = nic_congestion()
    nics = build("unit-nics", 1, 1e-3, times, [observe(r) for r in readings])
    reports = runreport.write_reports(tmp_path, lab_state(), [("pfc", switch_series, "passed (case pfc)", "t: pfc"),
                                                              ("dcqcn", nics, "failed (case dcqcn)", "t: dcqcn")],
                                      [("Checks", ["result"], [["pass"]])])
    assert reports == [tmp_path / "pfc" / "report.html", tmp_path / "dcqcn" / "report.html"]
    pfc, dcqcn = (r.read_text() for r in reports)
    assert "passed (case pfc)" in pfc and "<h1>t: pfc</h1>" in pfc and 'class="verdict pass"' in pfc
    assert "failed (case dcqcn)" in dcqcn and "<h1>t: dcqcn</h1>" in dcqcn and "<td>pass</td>" in dcqcn
    assert (tmp_path / "dcqcn" / "flow_rates.png").exists() and not (tmp_path / "pfc" / "flow_rates.png").exists()
    picture = (tmp_path / "topology.png").read_bytes()
    assert picture.startswith(PNG_MAGIC)
    assert all((r.parent / "topology.png").read_bytes() == picture and picture in embedded_pngs(r.read_text())
               for r in reports)
    gone = runreport.write_reports(tmp_path / "gone", lab_state("topologies/gone.yml"),
                                   [("a", switch_series, "failed", "t")], [])
    assert "No topology picture" in gone[0].read_text() and not (tmp_path / "gone" / "topology.png").exists()


def test_the_default_run_folder_is_runs_lab_and_time_and_never_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("ROCELAB_HOME", str(tmp_path))
    at = datetime(2026, 5, 9, 7, 35, 25)
    first = runreport.default_run_dir("lab-pfc", at)
    assert first == tmp_path / "runs" / "lab-pfc-20260509-073525"
    first.mkdir(parents=True)
    assert runreport.default_run_dir("lab-pfc", at) == tmp_path / "runs" / "lab-pfc-20260509-073525-2"


def test_uplink_share_is_each_leafs_busiest_uplink_over_its_mean_per_interval():
    from rocelab.runtime.timeseries import Series

    def rate(port: str, values: list[float], node: str = "leaf1") -> Series:
        return Series("port_tx_bps", {"node": node, "port": port}, values)

    ts = TimeSeries("t", 1, 1.0, [0.0, 1.0, 2.0], [
        rate("eth5", [0.0, 30.0, 10.0]), rate("eth6", [0.0, 10.0, 10.0]), rate("eth1", [0.0, 99.0, 99.0]),
        rate("eth5", [0.0, 5.0, 5.0], node="leaf2")])
    (leaf1, leaf2) = runreport.uplink_share(ts, {"leaf1": ["eth5", "eth6"], "leaf2": ["eth5", "eth6"]})
    assert (leaf1.labels, leaf1.values) == ({"node": "leaf1"}, [0.0, 1.5, 1.0])  # the host port eth1 is no uplink
    assert leaf2.values == [0.0, 2.0, 2.0]  # a silent uplink counts in the mean


def test_a_leaf_spine_run_plots_uplink_share_and_reordering(tmp_path):
    from rocelab.runtime.timeseries import Series

    ts = TimeSeries("t", 1000, 0.05, [0.0, 0.05, 0.1], [
        Series("port_tx_bps", {"node": "leaf1", "port": p}, [0.0, v, v]) for p, v in (("eth5", 3e6), ("eth6", 1e6))]
        + [Series("ooo_received", {"node": "h5", "qpn": "17"}, [0.0, 4.0, 2.0]),
           Series("reorder_distance_max", {"node": "h5"}, [0.0, 3.0, 3.0])])
    report = runreport.write_report(tmp_path, lab_state(str(ROOT / "topologies" / "leaf-spine-4x2.yml")), ts, [],
                                    None, "load balance")
    assert (report.parent / "load_balance.png").read_bytes().startswith(PNG_MAGIC)
    assert 'href="load_balance.png"' in report.read_text()
