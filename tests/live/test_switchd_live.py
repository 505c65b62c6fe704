"""switchd for real: shaping, PFC received and sent, lossy drops, and garbage on the wire."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.packet import Raw, fuzz
from scapy.volatile import RandString

from rocelab.kernel import control

from rocelab.kernel.netns import CallIn, call_in, packet_socket, pids_in, run_in
from rocelab.switch.fastpath import switchd_pipeline
from nsutil import blast, capture

pytestmark = pytest.mark.root
ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
LINE_RATE_BPS = 100e9


def rate_bps(record) -> float:
    """A 100G port's emulated rate at the TDF `up` chose for this machine."""
    return LINE_RATE_BPS / record.tdf


def counters(lab: str, node: str) -> dict:
    return control.request(control.socket_path(lab, node), "counters")["counters"]


def udp_frame(spec, src: str, dst: str, dscp: int, size: int, sport: int = 4791) -> bytes:
    fabric = spec.fabric
    src_port = fabric.node(src).ports[0]
    pkt = (Ether(src=src_port.mac, dst=fabric.peer(src_port).mac)
           / IP(src=str(fabric.host_address(src)), dst=str(fabric.host_address(dst)), tos=dscp << 2 | 2)
           / UDP(sport=sport, dport=4791))
    return bytes(pkt / Raw(b"\x00" * (size - len(pkt))))


@pytest.mark.timing
def test_a_port_is_shaped_to_its_emulated_rate(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "lossy.json")
    # What runs every test here: the C pipeline where it is built, as the engine starts it.
    assert control.request(control.socket_path(spec.name, "leaf1"), "ping")["pipeline"] == switchd_pipeline()
    frame = udp_frame(spec, "h1", "h2", 0, 4096)
    rx = CallIn(record.node("h2").netns, capture, "eth1", 4.0)
    time.sleep(0.3)
    call_in(record.node("h1").netns, blast, "eth1", frame, 1.5 * rate_bps(record), 3.0)
    frames = [(t, f) for t, f in rx.result() if f[12:14] == b"\x08\x00" and f[23] == 17]
    # Skip the first half second: the egress queue fills while the shaper settles.
    start = frames[0][0] + 0.5
    window = [(t, f) for t, f in frames if t >= start]
    span_s = window[-1][0] - window[0][0]
    measured_bps = sum(len(f) for _, f in window[1:]) * 8 / span_s
    assert measured_bps == pytest.approx(rate_bps(record), rel=0.03), (
        f"measured {measured_bps:,.0f} b/s ({measured_bps / rate_bps(record):.2%} of the emulated "
        f"{rate_bps(record):,.0f} b/s) over {len(window)} frames in {span_s:.3f} s of h2's capture")


@pytest.mark.timing
def test_a_pfc_frame_pauses_exactly_its_priority(bring_up):
    # TDF pinned: the test sends its traffic within 0.1 s of the pause, which must outlast that
    # (at the auto TDF 300 a calibration once gave, it lasted 0.101 s)
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json", tdf=1000)
    h2 = spec.fabric.node("h2").ports[0]
    pause = bytes(Ether(src=h2.mac, dst="01:80:c2:00:00:01", type=0x8808)
                  / MACControlClassBasedFlowControl(c3_enabled=1, c3_pause_time=0xFFFF))
    lossless = udp_frame(spec, "h1", "h2", 26, 1024)
    lossy = udp_frame(spec, "h1", "h2", 0, 1024, sport=5000)
    # 65535 quanta × 512 bit times at the emulated rate (0.3355 s at TDF 1000): nothing on priority 3
    # meanwhile. The capture outlasts it.
    hold_s = 0xFFFF * 512 / rate_bps(record)
    ready = multiprocessing.get_context("fork").Event()
    rx = CallIn(record.node("h2").netns, capture, "eth1", hold_s + 1.5, ready)
    assert ready.wait(10)

    def send_pause():
        sock = packet_socket("eth1")
        before = time.monotonic()  # the pause cannot start earlier than this
        sock.send(pause)
        return before

    def send_both():
        sock = packet_socket("eth1")
        for _ in range(20):
            sock.send(lossless)
            sock.send(lossy)
        return time.monotonic()

    paused_at = call_in(record.node("h2").netns, send_pause)
    while counters(spec.name, "leaf1")["ports"]["eth2"]["pfc_rx_frames"][3] == 0:  # switchd has taken it
        waited_s = time.monotonic() - paused_at
        assert waited_s < 0.1, f"switchd had not counted the pause frame {waited_s:.3f} s after it was sent"
        time.sleep(0.002)
    sent_at = call_in(record.node("h1").netns, send_both)
    frames = rx.result()
    assert sent_at < paused_at + hold_s - 0.1, (
        f"the traffic was sent {sent_at - paused_at:.3f} s into a {hold_s:.3f} s pause: too late to test it")
    dscp = [(t, f[15] >> 2) for t, f in frames if f[12:14] == b"\x08\x00"]
    early_lossless = [t for t, d in dscp if d == 26 and t < paused_at + hold_s - 0.005]
    lossy_seen = [t for t, d in dscp if d == 0]
    late_lossless = [t for t, d in dscp if d == 26]
    assert early_lossless == [], (f"{len(early_lossless)} lossless frames left during the {hold_s:.3f} s pause, "
                                  f"the first {early_lossless[0] - paused_at:.4f} s after it was sent")
    assert len(lossy_seen) == 20
    assert len(late_lossless) == 20
    eth2 = counters(spec.name, "leaf1")["ports"]["eth2"]
    assert eth2["pfc_rx_frames"][3] == 1
    # Read after the pause ran out: the time paused is the pause's length, whatever the clock did.
    assert eth2["paused_time_s"][3] == pytest.approx(hold_s, rel=1e-9)


def test_lossy_incast_drops_and_sends_no_pfc(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "lossy.json")
    # 2:1 for as long as it takes to overrun the lossy buffer: 1.5 s at TDF 1000, the same bytes at any TDF.
    duration_s = 1.5 * record.tdf / 1000
    seen_by_h1 = CallIn(record.node("h1").netns, capture, "eth1", duration_s + 1.0)
    time.sleep(0.2)
    senders = [CallIn(record.node(h).netns, blast, "eth1", udp_frame(spec, h, "h5", 26, 4096, sport=6000 + i),
                       rate_bps(record), duration_s) for i, h in enumerate(("h1", "h2"))]
    for s in senders:
        s.result()
    time.sleep(0.5)
    leaf = counters(spec.name, "leaf1")
    assert sum(n["packets"] for n in leaf["drops"].values()) > 0
    assert "tail_drop" in leaf["drops"]
    assert all(sum(p["pfc_tx_frames"]) == 0 for p in leaf["ports"].values())
    pfc_on_wire = [f for _, f in seen_by_h1.result() if f[12:14] == b"\x88\x08"]
    assert pfc_on_wire == []


def test_garbage_on_every_port_is_counted_and_never_stops_switchd(bring_up):
    spec, record = bring_up("leaf-spine-2x2", dataplane="switchd", profile=PROFILES / "roce-lossless.json")
    fabric = spec.fabric
    before = {s.name: counters(spec.name, s.name) for s in fabric.switches}
    good = udp_frame(spec, "h1", "h4", 26, 128)
    garbage = [
        good[:20],                                      # truncated inside the IPv4 header
        good[:14] + b"\x45" + good[15:24] + b"\xde\xad" + good[26:],  # bad IPv4 checksum
        bytes(Ether(type=0x86DD) / Raw(b"\x60" + b"\x00" * 60)),      # not IPv4
        good[:16] + b"\xfd\xe8" + good[18:] + b"\x00" * 8000,  # IPv4 total length 65000 ≠ frame
    ]

    def inject(iface, frames, n_fuzz):
        sock = packet_socket(iface)
        for f in frames:
            sock.send(f)
        for _ in range(n_fuzz):
            sock.send(bytes(fuzz(Ether(dst="02:52:4c:00:00:00") / IP(dst="198.18.0.1") / UDP()))[:1500])
            sock.send(bytes(RandString(64)))
        return len(frames) + 2 * n_fuzz

    sent = {}
    for switch in fabric.switches:
        for port in switch.ports:
            peer = fabric.peer(port)  # inject from the far end of the cable into this port
            sent[(switch.name, port.name)] = call_in(record.node(peer.node).netns, inject, peer.name, garbage, 30)
    time.sleep(0.5)
    for switch in fabric.switches:
        after = counters(spec.name, switch.name)
        for port in switch.ports:
            got = after["ports"][port.name]["rx_packets"] - before[switch.name]["ports"][port.name]["rx_packets"]
            assert got >= sent[(switch.name, port.name)]
        assert sum(d["packets"] for d in after["drops"].values()) > 0
    agents = {p["pid"] for p in record.processes}
    assert agents <= set(pids_in(record.namespaces))
    assert run_in(record.node("h1").netns, ["ping", "-c2", "-W2", "-q", "198.19.4.2"], capture_output=True).returncode == 0


def test_show_counters_gives_sonic_views_and_json(bring_up):
    import json
    import subprocess
    import sys

    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json")
    call_in(record.node("h1").netns, blast, "eth1", udp_frame(spec, "h1", "h2", 26, 1000), rate_bps(record) / 10, 0.3)
    cli = [sys.executable, "-m", "rocelab", "show", "counters", "leaf1", "--lab", spec.name]
    doc = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True).stdout)
    ports = doc["nodes"]["leaf1"]["counters"]["ports"]
    assert ports["eth2"]["queues"][3]["tx_packets"] == ports["eth1"]["rx_packets"] > 0
    text = subprocess.run([*cli, "--interval", "0.2"], capture_output=True, text=True, check=True).stdout
    for heading in ("RX_OK", "TX_DRP", "Counter/pkts", "Port Rx", "PFC3", "EcnMarked/pkts",
                    "Ingress headroom per PG", "drops by reason"):
        assert heading in text
    bad = subprocess.run([*cli, "--view", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "interfaces" in bad.stderr


@pytest.mark.parametrize("profile,lossless", [("roce-lossless.json", True), ("lossy.json", False)])
def test_two_to_one_incast_of_roce_writes(bring_up, profile, lossless):
    """2:1 incast of DSCP-26 RoCE traffic from two NICs that honour PFC: lossless gives PFC
    frames (decoded by scapy on a sender's link) and no drop; lossy gives drops and no PFC."""
    from rocelab.traffic.job import run_job
    from rocelab.traffic.spec import JobSpec

    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / profile, nic="emulated",
                            roce={"cc_algorithm": "none"})
    ready = multiprocessing.get_context("fork").Event()
    seen = CallIn(record.node("h1").netns, capture, "eth1", 8.0, ready)
    assert ready.wait(10)
    # lossy: 2:1 grows the queue by half the burst; past 7.4 MB the 8 MiB egress pool tail-drops
    size = 2_000_000 if lossless else 9_000_000
    report, _ = run_job(record, JobSpec(pattern="incast", hosts=("h1", "h2", "h3"), size_bytes=size, iterations=1,
                                        verb="write", options={"root": "h3"}))
    leaf = counters(spec.name, "leaf1")
    pfc = [MACControlClassBasedFlowControl(f[14:]) for _, f in seen.result() if f[12:14] == b"\x88\x08"]
    dropped = sum(d["packets"] for d in leaf["drops"].values())
    assert report["ranks"]["h3"]["bytes_received"] == report["ranks"]["h3"]["plan_bytes_received"]
    if lossless:
        assert dropped == 0
        assert pfc and all(p.c3_enabled for p in pfc)
        assert any(p.c3_pause_time > 0 for p in pfc)
        assert leaf["ports"]["eth1"]["pfc_tx_frames"][3] >= len(pfc)
    else:
        assert pfc == []
        assert leaf["drops"]["tail_drop"]["packets"] > 0
        assert report["total"]["counters"]["retransmitted_packets"] > 0


def test_switchd_follows_kernel_route_changes(bring_up):
    from pyroute2 import IPRoute

    # Static routes: with BGP, zebra puts back the route this test takes from the kernel
    spec, record = bring_up("leaf-spine-2x2", dataplane="switchd", profile=PROFILES / "roce-lossless.json",
                            routing="static")
    h4_net = "198.19.4.0/24"
    leaf1 = control.socket_path(spec.name, "leaf1")
    assert len(control.request(leaf1, "fib")["routes"][h4_net]) == 2  # ECMP over both spines
    with IPRoute(netns=record.node("leaf1").netns) as ipr:
        ipr.route("del", dst=h4_net)
        deadline = time.monotonic() + 5
        while h4_net in control.request(leaf1, "fib")["routes"]:
            assert time.monotonic() < deadline, "switchd kept a route the kernel deleted"
            time.sleep(0.05)
        ping = ["ping", "-c1", "-W1", "-q", "198.19.4.2"]
        assert run_in(record.node("h1").netns, ping, capture_output=True).returncode != 0
        assert counters(spec.name, "leaf1")["drops"]["no_route"]["packets"] >= 1
        spine1 = spec.fabric.port("spine1", "eth1")
        ipr.route("add", dst=h4_net, gateway=str(spine1.address.ip),
                  oif=ipr.link_lookup(ifname="eth3")[0])
    deadline = time.monotonic() + 5
    while control.request(leaf1, "fib")["routes"].get(h4_net) != [["eth3", spine1.mac]]:
        assert time.monotonic() < deadline, "switchd did not pick up the new route"
        time.sleep(0.05)
    assert run_in(record.node("h1").netns, ping, capture_output=True).returncode == 0
