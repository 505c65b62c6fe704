"""The dashboard's pure parts: frames from a real switch core through a lossless incast
(the same readings the run report's series come from), thresholds from a profile, the
layout, drop totals, the snapshot page; and the command's bad input (exit 2)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from rocelab import paths
from rocelab.dashboard import model, serving
from rocelab.dashboard.sampler import DashboardSampler
from rocelab.dashboard.server import page_html, plotly_js, port_text
from rocelab.qos.headroom import pg_trigger_bytes
from rocelab.runtime.readings import AgentReading
from rocelab.qos.model import BufferProfile, QosProfile, WredProfile, port_qos
from rocelab.engines.state import InterfaceState, LabState, NodeState
from test_switch_support import LOSSLESS_TC, PORTS, RATE_BPS, lossless_profile
from test_timeseries import SENDERS, TDF, switch_incast

RECEIVER = "eth2"


def incast_lab() -> LabState:
    """leaf1 (the switch core's ports) with a host on each port."""
    leaf = NodeState("leaf1", "leaf", "unit.leaf1",
                     [InterfaceState(p, "", f"h{p[-1]}:eth1", "") for p in PORTS])
    hosts = [NodeState(f"h{p[-1]}", "host", f"unit.h{p[-1]}", [InterfaceState("eth1", "", f"leaf1:{p}", "")])
             for p in PORTS]
    return LabState("unit", "netns", "", "switchd", TDF, "up", [leaf, *hosts],
                    [{"node": "leaf1", "pid": 1, "what": "switchd"}])


def frames_of(times, readings, marks=None) -> list[dict]:
    record, totals = incast_lab(), {}
    rates = {f"leaf1:{p}": RATE_BPS for p in PORTS}
    out = []
    for i in range(1, len(times)):
        f = model.frame(record, model.Reading(times[i - 1], tuple(readings[i - 1])),
                        model.Reading(times[i], tuple(readings[i])), rates, marks or {}, totals, times[i])
        model.add_drops(totals, f)
        out.append(f)
    return out


@pytest.fixture(scope="module")
def incast():
    return switch_incast()


def test_the_incast_shows_pauses_on_the_senders_ports_and_the_receivers_queue_rising(incast):
    times, readings = incast
    frames = frames_of(times, readings)
    depths = [next((q["depth"] for q in f["queues"]
                    if q["port"] == f"leaf1:{RECEIVER}" and q["queue"] == LOSSLESS_TC), 0) for f in frames]
    assert max(depths) > 0
    paused = {(p["port"], p["priority"]) for f in frames for p in f["pauses"] if p["dir"] == "tx"}
    assert {(f"leaf1:{s}", LOSSLESS_TC) for s in SENDERS} <= paused
    assert all(p["quanta"] == 0xFFFF for f in frames for p in f["pauses"] if p["dir"] == "tx")
    # The receiver's peer paused eth2 (PAUSE_AT_S): an rx pause with a share of the interval.
    held = [p for f in frames for p in f["pauses"] if p["dir"] == "rx" and p["port"] == f"leaf1:{RECEIVER}"]
    assert held and all(0 < p["share"] <= 1 for p in held)
    # The canned senders ignore XOFF: past headroom their PG drops, counted where it happened.
    places = {(d["port"], d["where"], d["reason"]) for f in frames for d in f["drops"]}
    assert places == {(f"leaf1:{s}", f"pg{LOSSLESS_TC}", "headroom_exceeded") for s in SENDERS}


def test_link_load_is_read_at_the_switch_end_per_direction(incast):
    times, readings = incast
    frames = frames_of(times, readings)
    busy = next(f for f in frames if f["t_s"] >= 0.1)  # the incast runs, the receiver not yet paused
    into_receiver = next(link for link in busy["links"] if f"leaf1:{RECEIVER}" in (link["a"], link["b"]))
    towards_host = into_receiver["ab_util"] if into_receiver["a"] == f"leaf1:{RECEIVER}" else into_receiver["ba_util"]
    assert 0 < towards_host <= 1
    for f in frames:
        for link in f["links"]:
            for u in (link["ab_util"], link["ba_util"]):
                assert u is None or 0 <= u <= 1
            if link["ab_bps"] is not None:  # production-equivalent bps over the production line rate
                assert link["ab_util"] == pytest.approx(min(1.0, link["ab_bps"] / (RATE_BPS * TDF)))


def test_drops_flash_in_their_interval_and_stay_counted():
    def counters(queue_drops: int) -> dict:
        queue = {"depth_bytes": 0, "ecn_marked_packets": 0,
                 "drops": {"egress_buffer_full": {"packets": queue_drops, "bytes": queue_drops * 1000}}}
        port = {"rx_bytes": 0, "tx_bytes": 0, "pfc_tx_frames": [0] * 8, "pfc_rx_frames": [0] * 8,
                "paused_time_s": [0.0] * 8, "drops": {}, "queues": [queue], "pgs": []}
        return {"counters": {"ports": {"eth1": port}}}

    readings = [[AgentReading("leaf1", "switchd", counters(n))] for n in (0, 5, 5, 12)]
    frames = frames_of([0.0, 0.2, 0.4, 0.6], readings)
    drops = [[(d["reason"], d["packets"], d["total"]) for d in f["drops"]] for f in frames]
    assert drops == [[("egress_buffer_full", 5, 5)], [("egress_buffer_full", 0, 5)], [("egress_buffer_full", 7, 12)]]
    assert frames[0]["drops"][0]["where"] == "queue0"


def test_a_paused_nic_shows_its_badge_on_the_hosts_port():
    """nicd's counters name no port: the pause it took belongs to its host's NIC port, the
    link end the page draws badges on."""
    def nic(paused_s: float, frames: int) -> AgentReading:
        pfc = {"rx_pause_frames": [0, 0, 0, frames, 0, 0, 0, 0], "rx_xon_frames": [0] * 8,
               "paused_time_s": [0.0, 0.0, 0.0, paused_s, 0.0, 0.0, 0.0, 0.0]}
        return AgentReading("h1", "nicd", {"counters": {"pfc": pfc, "drops": {}, "qps": {}}})

    frames = frames_of([0.0, 0.2], [[nic(0.0, 0)], [nic(0.1, 4)]])
    assert frames[0]["pauses"] == [{"port": "h1:eth1", "priority": 3, "dir": "rx", "share": pytest.approx(0.5),
                                    "frames": 4, "quanta": None}]
    peers = {link["a"] for link in frames[0]["links"]} | {link["b"] for link in frames[0]["links"]}
    assert "h1:eth1" in peers  # a link end, so the page can place the badge


def test_thresholds_come_from_the_profile():
    wred = WredProfile("ecn", False, "ecn_all", 50_000, 200_000, 5)
    profile = lossless_profile(wred=wred)
    marks = model.thresholds(profile, "eth2")
    qos = port_qos(profile, "eth2")
    assert marks[LOSSLESS_TC] == {"kmin": 50_000, "kmax": 200_000, "xoff": pg_trigger_bytes(profile, qos, LOSSLESS_TC)}
    assert marks[0] == {"kmin": None, "kmax": None, "xoff": None}  # lossy, no WRED
    lossy = QosProfile("lossy", {}, {})
    assert model.thresholds(lossy, "eth2")[LOSSLESS_TC]["xoff"] is None
    assert isinstance(profile.ports[next(iter(profile.ports))].pgs[LOSSLESS_TC], BufferProfile)


def test_frames_carry_the_thresholds_of_their_queue(incast):
    times, readings = incast
    wred = WredProfile("ecn", False, "ecn_all", 50_000, 200_000, 5)
    marks = {f"leaf1:{RECEIVER}": model.thresholds(lossless_profile(wred=wred), RECEIVER)}
    queue = next(q for f in frames_of(times[:3], readings[:3], marks) for q in f["queues"]
                 if q["port"] == f"leaf1:{RECEIVER}" and q["queue"] == LOSSLESS_TC)
    assert (queue["kmin"], queue["kmax"]) == (50_000, 200_000) and queue["xoff"] > 0


def test_a_clicked_port_shows_its_own_counters_as_show_counters_does(incast):
    times, readings = incast
    before, now = (model.Reading(times[i], tuple(readings[i])) for i in (10, 11))
    text = port_text(incast_lab(), now, before, "leaf1", RECEIVER, RATE_BPS)
    assert "interface counters" in text and "PFC counters" in text and "WRED and ECN counters" in text
    rows = [line.split()[0] for line in text.splitlines() if line.strip().startswith("eth")]
    assert rows and set(rows) == {RECEIVER}  # that port only
    without_rate = port_text(incast_lab(), now, None, "leaf1", RECEIVER, None)
    assert "interface counters" not in without_rate and "PFC counters" in without_rate
    assert port_text(incast_lab(), now, before, "leaf1", "eth9", RATE_BPS) is None


def test_layout_rows_by_role_and_each_link_once():
    record = incast_lab()
    nodes, links = model.layout(record)
    assert {n["name"]: n["y"] for n in nodes}["leaf1"] > {n["name"]: n["y"] for n in nodes}["h1"]
    assert len(links) == len(PORTS)
    assert len({frozenset((link["a"], link["b"])) for link in links}) == len(links)
    hosts = sorted(n["x"] for n in nodes if n["role"] == "host")
    assert all(0 < x < 1 for x in hosts) and len(set(hosts)) == len(hosts)


def test_the_sampler_says_no_lab_up(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    frame = DashboardSampler(None).sample()
    assert frame["message"] == model.NO_LAB and frame["nodes"] == []
    assert "not up" in DashboardSampler("lab-pfc").sample()["message"]


def test_the_snapshot_is_one_file_with_its_frames_and_plotly():
    frames = [model.empty(0.0), {**model.empty(0.2, "x</script><b>"), "lab": "lab-pfc"}]
    page = page_html(snapshot=frames, inline_js="/* plotly */")
    assert "<script>/* plotly */</script>" in page and 'src="plotly.min.js"' not in page
    embedded = page.split("const SNAPSHOT = ", 1)[1].split(";\n", 1)[0]
    assert "</script>" not in embedded and json.loads(embedded.replace("<\\/", "</")) == frames
    live = page_html()
    assert 'src="plotly.min.js"' in live and "const SNAPSHOT = null;" in live
    assert plotly_js().is_file() and plotly_js().stat().st_size > 1_000_000  # the wheel's, not a stub


def test_run_and_traffic_find_a_serving_dashboard_only_while_it_serves(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "STATE_DIR", tmp_path)
    assert serving.url() is None
    serving.publish_job("lab-pfc", case="pfc")
    assert serving.read_job("lab-pfc") is None  # nobody watches: nothing written
    serving.announce("http://127.0.0.1:8080/")
    assert serving.url() == "http://127.0.0.1:8080/"
    serving.publish_job("lab-pfc", case="pfc")
    serving.publish_job("lab-pfc", iterations_done=1)
    assert serving.read_job("lab-pfc")["case"] == "pfc" and serving.read_job("lab-pfc")["iterations_done"] == 1
    serving.end_job("lab-pfc")
    serving.withdraw()
    assert serving.url() is None and serving.read_job("lab-pfc") is None
    (tmp_path / "dashboard.serving").write_text(json.dumps({"url": "http://x/", "pid": 2**22 + 12345}))
    assert serving.url() is None  # its server is gone


def dashboard_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rocelab", "dashboard", *args], capture_output=True, text=True,
                          timeout=60)


def test_a_port_in_use_is_exit_2_naming_the_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = dashboard_cli("--port", str(port))
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args, words", [(("no-such-lab",), "no-such-lab"), (("--port", "99999"), "--port"),
                                          (("--bind", "example"), "--bind")])
def test_bad_input_is_exit_2_with_a_message(args, words):
    result = dashboard_cli(*args)
    assert result.returncode == 2 and words in result.stderr and "Traceback" not in result.stderr


def test_a_change_typed_on_a_node_lands_on_the_dashboards_clock():
    from rocelab.dashboard.model import changes

    events = [{"time": 1000.0, "who": "ana", "node": "leaf1", "command": "config interface shutdown Ethernet4",
               "changed": ["PORT/Ethernet4"]}]
    (change,) = changes(events, t_s=50.0, now_wall_s=1002.5)
    assert change == {"t_s": 47.5, "node": "leaf1", "who": "ana", "command": "config interface shutdown Ethernet4",
                      "changed": ["PORT/Ethernet4"]}


def test_a_leafs_uplinks_carry_their_share_of_its_mean_uplink_and_nothing_else_does():
    """The members of a leaf's ECMP groups, coloured by share: busiest ÷ mean, per direction."""
    links = [{"a": "leaf1:eth5", "b": "spine1:eth1", "ab_bps": 3e9, "ba_bps": 1e9},
             {"a": "spine2:eth1", "b": "leaf1:eth6", "ab_bps": 2e9, "ba_bps": 1e9},
             {"a": "h1:eth1", "b": "leaf1:eth1", "ab_bps": 4e9, "ba_bps": 4e9},
             {"a": "leaf2:eth5", "b": "spine1:eth2", "ab_bps": None, "ba_bps": None}]
    roles = {"leaf1": "leaf", "leaf2": "leaf", "spine1": "spine", "spine2": "spine", "h1": "host"}
    shares = [(l["ab_share"], l["ba_share"]) for l in model.uplink_shares(links, roles)]
    assert shares == [(1.5, None), (None, 0.5), (None, None), (None, None)]  # leaf2 sent nothing: no share
