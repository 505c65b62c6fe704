"""Probes for real: two namespaces joined by a veth pair, a probe on each end, scapy sending
from one of them; exact counts, the pcap re-read, and tshark's view of that pcap."""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
from dataclasses import dataclass

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns
from rich.console import Console
from scapy.contrib.mac_control import MACControlClassBasedFlowControl
from scapy.contrib.roce import BTH, cnp
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Dot1Q, Ether
from scapy.packet import Raw
from scapy.sendrecv import sendp
from scapy.utils import rdpcap

from rocelab.engines.netns import COMMON_SYSCTLS, write_sysctls
from rocelab.kernel.netns import call_in
from rocelab.errors import InputError
from rocelab.probes import Flow, Probe, ProbeReport, QpKey, decode_pcap
from rocelab.reporting.probe import live

pytestmark = pytest.mark.root

SENDER_MAC, RECEIVER_MAC, PFC_MAC = "02:00:00:00:01:0a", "02:00:00:00:01:0b", "01:80:c2:00:00:01"
REQUESTER, RESPONDER = "198.18.0.1", "198.18.0.2"
DATA_QP, REQUESTER_QP = 0x11, 0x22
ROCE_SPORT = 49152
DSCP_ROCE = 26
ECT0, CE = 2, 3
WRITE_MIDDLE = 0x07
XOFF_QUANTA = {3: 0xFFFF, 4: 1000}
XOFF_FRAMES = {3: 5, 4: 3}  # per priority
XON_FRAMES_3 = 2
WRITES, CE_WRITES, CNPS = 10, 4, 2
_serial = itertools.count(1)


@dataclass(frozen=True)
class VethPair:
    sender: str  # namespace whose eth1 sends
    receiver: str  # namespace whose eth1 receives


@pytest.fixture(scope="module")
def veth_pair():
    stem = f"tprobe{os.getpid()}-{next(_serial)}"
    pair = VethPair(f"{stem}a", f"{stem}b")
    made = []
    try:
        for ns in (pair.sender, pair.receiver):
            pyroute2_netns.create(ns)
            made.append(ns)
            write_sysctls(ns, COMMON_SYSCTLS)  # IPv6 off: no MLD or RS frames in the counts
        # No addresses: the kernels must not answer the crafted RoCE frames.
        with IPRoute(netns=pair.sender) as ipr:
            ipr.link("add", ifname="eth1", kind="veth", address=SENDER_MAC,
                     peer={"ifname": "eth1", "net_ns_fd": pair.receiver, "address": RECEIVER_MAC})
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        with IPRoute(netns=pair.receiver) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        yield pair
    finally:
        for ns in made:
            pyroute2_netns.remove(ns)


def _sendp(frames: list[bytes]) -> None:
    sendp([Ether(f) for f in frames], iface="eth1", verbose=False)


def send_from(ns: str, frames: list[bytes]) -> None:
    """scapy's sendp inside `ns`, from a child process there (scapy looks the interface up in its own)."""
    call_in(ns, _sendp, frames, timeout_s=30)


def pfc(priority: int, quanta: int) -> bytes:
    return bytes(Ether(src=SENDER_MAC, dst=PFC_MAC) / MACControlClassBasedFlowControl(
        **{f"c{priority}_enabled": 1, f"c{priority}_pause_time": quanta}))


def roce(dst: str, bth, ecn: int = ECT0) -> bytes:
    return bytes(Ether(src=SENDER_MAC, dst=RECEIVER_MAC) / IP(src=REQUESTER, dst=dst, tos=DSCP_ROCE << 2 | ecn)
                 / UDP(sport=ROCE_SPORT, dport=4791) / bth)


def traffic() -> list[bytes]:
    frames = [pfc(p, XOFF_QUANTA[p]) for p, n in XOFF_FRAMES.items() for _ in range(n)]
    frames += [pfc(3, 0)] * XON_FRAMES_3
    frames += [roce(RESPONDER, BTH(opcode=WRITE_MIDDLE, dqpn=DATA_QP, psn=psn) / Raw(bytes(1024)),
                    CE if psn % 3 == 0 else ECT0) for psn in range(WRITES)]  # CE on PSN 0, 3, 6, 9
    frames += [roce(REQUESTER, cnp(REQUESTER_QP))] * CNPS
    return frames


@pytest.fixture(scope="module")
def captured(veth_pair, tmp_path_factory):
    """(receiver's report, sender's report, receiver's pcap, receiver's MAC) of one traffic run."""
    pcap = tmp_path_factory.mktemp("probe") / "receiver-eth1.pcap"
    with Probe(veth_pair.receiver, "eth1", pcap=pcap) as receiver, Probe(veth_pair.sender, "eth1") as sender:
        send_from(veth_pair.sender, traffic())
    return receiver.report, sender.report, pcap, receiver.mac


def test_receiver_counts_pfc_per_priority_exactly(captured):
    report = captured[0]
    for priority, frames in XOFF_FRAMES.items():
        assert report.pfc["rx", priority].xoff_frames == frames
        assert report.pfc["rx", priority].pause_quanta == frames * XOFF_QUANTA[priority]
    assert report.pfc["rx", 3].xon_frames == XON_FRAMES_3
    assert report.pfc["rx", 4].xon_frames == 0
    assert set(report.pfc) == {("rx", 3), ("rx", 4)}


def test_receiver_counts_ce_cnps_and_psns_exactly(captured):
    report = captured[0]
    flow = report.flows[Flow(REQUESTER, RESPONDER, 17, ROCE_SPORT, 4791)]
    assert (flow.packets, flow.ce_packets) == (WRITES, CE_WRITES)
    assert report.qps[QpKey(REQUESTER, REQUESTER_QP)].cnps == CNPS
    data = report.qps[QpKey(RESPONDER, DATA_QP)]
    assert (data.requests, data.psn_gaps, data.rewinds, data.highest_psn) == (WRITES, 0, 0, WRITES - 1)
    sent = traffic()
    assert report.totals["frames"] == len(sent)
    assert report.totals["bytes"] == sum(len(f) for f in sent)
    assert report.kernel_drops == 0


def test_sender_sees_the_same_pfc_frames_as_tx(captured):
    report = captured[1]
    assert {k: (c.xoff_frames, c.xon_frames) for k, c in report.pfc.items()} == {
        ("tx", 3): (XOFF_FRAMES[3], XON_FRAMES_3), ("tx", 4): (XOFF_FRAMES[4], 0)}
    assert report.totals["ce_packets"] == CE_WRITES


def test_pcap_decodes_to_the_live_counts(captured):
    report, _, pcap, mac = captured
    decoded = decode_pcap(pcap, mac).to_json()
    live_doc = report.to_json()
    assert decoded.pop("capture")["first_frame_s"] == live_doc.pop("capture")["first_frame_s"]
    assert decoded == live_doc


def test_tshark_decodes_pfc_and_roce(captured):
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (apt-get install tshark): the pcap's decoding is not checked")
    pcap = captured[2]

    def tshark(*args: str) -> list[str]:
        done = subprocess.run(["tshark", "-r", str(pcap), *args], capture_output=True, text=True, check=True)
        return done.stdout.splitlines()

    lines = tshark()
    pfc_frames = sum(XOFF_FRAMES.values()) + XON_FRAMES_3
    assert sum("MAC CTRL" in line and "Class Based Flow Control [CBFC] Pause" in line for line in lines) == pfc_frames
    assert sum("RRoCE" in line and "RC RDMA Write Middle QP=0x000011" in line for line in lines) == WRITES
    assert sum("RRoCE" in line for line in lines) == WRITES + CNPS
    assert len(tshark("-Y", "macc.cbfc.enbv.c3 == 1 && macc.cbfc.pause_time.c3 == 65535")) == XOFF_FRAMES[3]
    assert len(tshark("-Y", "macc.cbfc.enbv.c3 == 1 && macc.cbfc.pause_time.c3 == 0")) == XON_FRAMES_3
    assert len(tshark("-Y", "infiniband.bth.opcode == 7 && ip.dsfield.ecn == 3")) == CE_WRITES


def test_snapshot_counts_while_the_capture_goes_on(veth_pair):
    with Probe(veth_pair.receiver, "eth1") as probe:
        send_from(veth_pair.sender, [pfc(3, 10)] * 3)
        during = probe.snapshot()
        send_from(veth_pair.sender, [pfc(3, 10)] * 2)
    assert during.pfc["rx", 3].xoff_frames == 3  # queued before the request: read before the answer
    assert probe.report.pfc["rx", 3].xoff_frames == 5


def test_capture_survives_a_link_flap_and_says_so(veth_pair):
    with Probe(veth_pair.receiver, "eth1") as probe:
        send_from(veth_pair.sender, [pfc(3, 10)] * 2)
        with IPRoute(netns=veth_pair.receiver) as ipr:
            index = ipr.link_lookup(ifname="eth1")[0]
            ipr.link("set", index=index, state="down")
            probe.snapshot()  # the probe has seen the link go down
            ipr.link("set", index=index, state="up")
        send_from(veth_pair.sender, [pfc(3, 10)] * 3)
    assert (probe.report.pfc["rx", 3].xoff_frames, probe.report.link_downs) == (5, 1)


def test_vlan_tag_stripped_by_the_kernel_is_back_in_count_and_pcap(veth_pair, tmp_path):
    tagged = bytes(Ether(src=SENDER_MAC, dst=RECEIVER_MAC) / Dot1Q(prio=3, vlan=100)
                   / IP(src=REQUESTER, dst=RESPONDER, tos=DSCP_ROCE << 2 | CE) / UDP(sport=ROCE_SPORT, dport=4791)
                   / BTH(opcode=WRITE_MIDDLE, dqpn=DATA_QP, psn=0))
    with Probe(veth_pair.receiver, "eth1", pcap=tmp_path / "vlan.pcap") as probe:
        send_from(veth_pair.sender, [tagged] * 2)
    assert probe.report.flows[Flow(REQUESTER, RESPONDER, 17, ROCE_SPORT, 4791)].ce_packets == 2
    assert [bytes(p) for p in rdpcap(str(tmp_path / "vlan.pcap"))] == [tagged] * 2


def test_live_without_a_terminal_returns_the_report(veth_pair):
    screen = io.StringIO()
    report = live(veth_pair.receiver, "eth1", duration_s=0.3, console=Console(file=screen, width=100))
    assert isinstance(report, ProbeReport) and report.kernel_drops == 0
    assert f"probe {veth_pair.receiver}:eth1" in screen.getvalue()  # the last state, written once
    quiet = io.StringIO()
    assert live(veth_pair.receiver, "eth1", duration_s=0.2, json=True, console=Console(file=quiet)).totals
    assert quiet.getvalue() == ""  # --json: stdout is left for the one JSON document


def test_unknown_interface_and_namespace_are_input_errors(veth_pair):
    with pytest.raises(InputError, match=rf"{veth_pair.receiver}:eth9: no interface eth9 .*eth1"):
        Probe(veth_pair.receiver, "eth9").start()
    with pytest.raises(InputError, match="no network namespace tprobe-none"):
        Probe("tprobe-none", "eth1").start()
