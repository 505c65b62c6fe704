"""The agents' receive ring (rocelab.kernel.ring) on a real veth: every frame whole and in
order with its receive time, a full ring counted as kernel drops, reading in step with the
kernel after it wraps, the C core's own loop forwarding what `read` hands the Python pipeline,
every loop giving a switch each frame's arrival (a late XOFF holds what it owes), every loop
clearing a downed port's error, a dead transmitter (rocelab.kernel.deadlink) and a
port losing a share of FRR's packets (rocelab.kernel.frrloss)."""

from __future__ import annotations

import contextlib
import os
import random
import select
import socket
import subprocess
import sys
import threading
import time

import pytest
from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether

from rocelab.engines.netns import COMMON_SYSCTLS, write_sysctls
from rocelab.kernel import deadlink, frrloss
from rocelab.kernel.control import ControlServer
from rocelab.kernel.loop import LATENESS_BOUNDS_S, PURE_LOOP_ENV, TPACKET_STATS, Loop, open_port
from rocelab.kernel.netns import PACKET_STATISTICS, SOL_PACKET, in_netns, packet_socket
from rocelab.kernel.ring import RING_BLOCKS, SLOTS_PER_BLOCK
from rocelab.qos.model import BufferPool, BufferProfile, PortQos, QosProfile
from rocelab.switch import Fib, NextHop, PortSpec, Switch, fastpath
from rocelab.switch.frames import build_pfc
from rocelab.switch.agent import UNCONFIGURED, CpuPort

pytestmark = pytest.mark.root
SO_RCVBUFFORCE = 33  # asm-generic/socket.h: SO_RCVBUF past rmem_max, for root
SENDER_MAC, RECEIVER_MAC = "02:52:4c:00:0a:01", "02:52:4c:00:0a:02"
RING_SLOTS = RING_BLOCKS * SLOTS_PER_BLOCK


def sender_ns() -> str:
    return f"tring{os.getpid()}a"


def receiver_ns() -> str:
    return f"tring{os.getpid()}b"


@pytest.fixture
def veth():
    """(sender's socket, receiver's port) on the two ends of a veth with a 9100-byte MTU."""
    made = []
    try:
        for ns in (sender_ns(), receiver_ns()):
            pyroute2_netns.create(ns)
            made.append(ns)
            write_sysctls(ns, COMMON_SYSCTLS)  # IPv6 off: no MLD or RS frames among ours
        with IPRoute(netns=made[0]) as ipr:
            ipr.link("add", ifname="eth1", kind="veth", address=SENDER_MAC, mtu=9100,
                     peer={"ifname": "eth1", "net_ns_fd": made[1], "address": RECEIVER_MAC, "mtu": 9100})
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        with IPRoute(netns=made[1]) as ipr:
            ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="up")
        with in_netns(made[1]):
            port = open_port("eth1")
        sender = packet_socket("eth1", ns=made[0])
        time.sleep(0.2)
        yield sender, port
        sender.close()
        port.sock.close()
    finally:
        for ns in made:
            pyroute2_netns.remove(ns)


def frame(n: int, size: int) -> bytes:
    """A frame to the receiver carrying its sequence number, `size` bytes long."""
    head = bytes.fromhex(RECEIVER_MAC.replace(":", "")) + bytes.fromhex(SENDER_MAC.replace(":", "")) + b"\x88\xb5"
    return head + n.to_bytes(4, "big") + bytes((n + i) & 0xFF for i in range(size - len(head) - 4))


def read_all(port, limit: int = 1000) -> tuple[list[bytes], float]:
    got: list[bytes] = []
    n, first_s, empty = port.ring.read("eth1", lambda _port, f, _now: got.append(bytes(f)), 0.0, limit, 1 << 30)
    assert n == len(got) and (empty or n == limit)
    return got, first_s


def drops(port) -> int:
    return TPACKET_STATS.unpack(port.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, TPACKET_STATS.size))[1]


def test_frames_arrive_whole_in_order_with_their_receive_time(veth):
    sender, port = veth
    sent = [frame(i, size) for i, size in enumerate([60, 61, 1514, 4096, 9000, 9114, 128])]
    before = time.time()
    for f in sent:
        sender.send(f)
    time.sleep(0.1)
    got, first_s = read_all(port)
    after = time.time()
    assert got == sent
    assert before <= first_s <= after  # the first frame's time, as the kernel stamped it on receipt
    assert read_all(port) == ([], 0.0)


def test_a_full_ring_drops_what_it_cannot_hold_and_reading_stays_in_step_after_it_wraps(veth):
    sender, port = veth
    drops(port)  # reading resets the count
    for i in range(RING_SLOTS + 50):
        sender.send(frame(i, 1000))
    time.sleep(0.2)
    got, _ = read_all(port, limit=RING_SLOTS + 50)
    assert got == [frame(i, 1000) for i in range(RING_SLOTS)]  # the oldest stay, the rest are dropped
    assert drops(port) == 50
    for round_ in range(3):  # round the ring a few more times, some frames at a time
        batch = [frame(10_000 + round_ * 100 + i, 4096) for i in range(100)]
        for f in batch:
            sender.send(f)
        time.sleep(0.1)
        got, _ = read_all(port, limit=30)
        rest, _ = read_all(port)
        assert got + rest == batch


def received(sock) -> list[bytes]:
    """Every frame a non-blocking packet socket holds."""
    out = []
    while True:
        try:
            out.append(sock.recv(9300))
        except BlockingIOError:
            return out


def serve_in_batches(core, ports, sender, traffic, also=()) -> None:
    """`traffic` into the first port 100 frames at a time (what its receive ring holds), each
    batch served by the C loop of `core` (and `also`) until it has been idle 50 ms."""
    for start in range(0, len(traffic), 100):
        for f in traffic[start:start + 100]:
            sender.send(f)
        time.sleep(0.1)
        # Returns once nothing is due and nothing arrived for idle_s (no other descriptor here).
        _, heads = core.serve([(p.sock.fileno(), p.ring.map, p.ring.head) for p in ports], [], ports[0].ring.geometry,
                              0.0, 0.05, LATENESS_BOUNDS_S, 7, 1 << 30, 16, also)
        for p, head in zip(ports, heads):
            p.ring.head = head


@pytest.mark.skipif(fastpath.Asic is None, reason="the C fast path is not built here (no C compiler)")
def test_the_c_loop_forwards_what_the_python_loop_hands_the_python_pipeline(veth):
    """Asic.serve (the C core runs the agents' loop: it walks the ring, runs the pipeline and
    sends) against RxRing.read handing each frame to the Python pipeline: the same frames, read
    in rounds that stop at a frame limit and wrap the ring, give the same frames out of eth2 and
    the same counters."""
    sender, port = veth
    ns = receiver_ns()
    with IPRoute(netns=ns) as ipr:
        ipr.link("add", ifname="eth2", kind="veth", address="02:52:4c:00:0a:03", mtu=9100,
                 peer={"ifname": "eth2p", "mtu": 9100})
        for name in ("eth2", "eth2p"):
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    with in_netns(ns):
        eth2 = open_port("eth2")
    tap = packet_socket("eth2p", ns=ns)
    tap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)  # everything eth2 sends, read at the end
    tap.setblocking(False)
    specs = [PortSpec("eth1", RECEIVER_MAC, 1e9), PortSpec("eth2", "02:52:4c:00:0a:03", 1e9)]
    routes = Fib(routes={"198.18.2.0/24": [NextHop("eth2", "02:52:4c:00:0b:02")]}, local=frozenset())
    traffic = [bytes(Ether(dst=RECEIVER_MAC, src=SENDER_MAC) / IP(src="198.18.1.2", dst=f"198.18.2.{2 + i % 7}")
                     / UDP(sport=1000 + i, dport=4791) / bytes(i * 37 % 8000)) if i % 5 else frame(i, 200)
               for i in range(RING_SLOTS * 3 // 2)]
    time.sleep(0.2)
    received(tap)  # what eth2 sent before the test (none of ours)

    python = Switch("leaf1", specs, UNCONFIGURED, routes, random.Random(1))
    for start in range(0, len(traffic), 100):
        for f in traffic[start:start + 100]:
            sender.send(f)
        time.sleep(0.1)
        while not port.ring.read("eth1", python.receive, 0.0, 7, 1 << 30)[2]:
            pass
    python_out, now, due = [], 1.0, 1.0
    while due is not None:  # the shaper releases a burst at a time: run its clock until nothing is due
        now = due
        python_out += [bytes(f) for _, f in python.poll(now)]
        due = python.next_event(now)

    c = fastpath.FastSwitch("leaf1", specs, UNCONFIGURED, routes, random.Random(1))
    serve_in_batches(c, [port, eth2], sender, traffic)
    rx, tx, *_ = c.take_loop_counts()
    c_out = received(tap)
    tap.close()
    eth2.sock.close()
    assert rx == len(traffic) and tx == len(c_out) == len(python_out)
    assert c_out == python_out
    for name in ("eth1", "eth2"):
        got, want = c.counters(time.monotonic())["ports"][name], python.counters(now)["ports"][name]
        assert {k: got[k] for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops")} == \
               {k: want[k] for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "drops")}
    assert python.counters(now)["ports"]["eth1"]["rx_packets"] == len(traffic)


@pytest.mark.skipif(fastpath.Asic is None, reason="the C fast path is not built here (no C compiler)")
def test_one_c_loop_serves_two_switches_and_reads_what_one_sends_the_other_in_the_same_wake_up(veth):
    """Asic.serve with `also` (switchd serving every switch of a lab in one process): a leaf
    (eth1, eth2) and a spine (eth3, eth4) joined by the veth eth2–eth3, both served by one loop.
    Every frame crosses both and leaves eth4 as two chained Python pipelines send it; each core
    counts its own ports, the loop counts both reads and both sends of every frame, and a frame
    the leaf sent the spine is read in the wake-up that sent it: no more wake-ups than frames."""
    sender, port = veth
    ns = receiver_ns()
    macs = {"eth2": "02:52:4c:00:0a:03", "eth3": "02:52:4c:00:0a:05", "eth4": "02:52:4c:00:0a:06"}
    with IPRoute(netns=ns) as ipr:
        ipr.link("add", ifname="eth2", kind="veth", address=macs["eth2"], mtu=9100,
                 peer={"ifname": "eth3", "address": macs["eth3"], "mtu": 9100})
        ipr.link("add", ifname="eth4", kind="veth", address=macs["eth4"], mtu=9100,
                 peer={"ifname": "eth4p", "address": "02:52:4c:00:0b:04", "mtu": 9100})
        for name in ("eth2", "eth3", "eth4", "eth4p"):
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    with in_netns(ns):
        eth2, eth3, eth4 = (open_port(name) for name in ("eth2", "eth3", "eth4"))
    tap = packet_socket("eth4p", ns=ns)
    tap.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 << 20)
    tap.setblocking(False)

    def switches(kind):
        leaf = kind("leaf1", [PortSpec("eth1", RECEIVER_MAC, 1e9), PortSpec("eth2", macs["eth2"], 1e9)], UNCONFIGURED,
                    Fib(routes={"198.18.2.0/24": [NextHop("eth2", macs["eth3"])]}, local=frozenset()),
                    random.Random(1))
        spine = kind("spine1", [PortSpec("eth3", macs["eth3"], 1e9), PortSpec("eth4", macs["eth4"], 1e9)],
                     UNCONFIGURED, Fib(routes={"198.18.2.0/24": [NextHop("eth4", "02:52:4c:00:0b:04")]},
                                       local=frozenset()), random.Random(2))
        return leaf, spine

    traffic = [bytes(Ether(dst=RECEIVER_MAC, src=SENDER_MAC) / IP(src="198.18.1.2", dst=f"198.18.2.{2 + i % 7}")
                     / UDP(sport=1000 + i, dport=4791) / bytes(i * 37 % 4000)) for i in range(300)]
    time.sleep(0.2)
    received(tap)  # what the veths sent before the test (none of ours)
    for p in (eth2, eth3, eth4):
        while not p.ring.read("x", lambda *_: None, 0.0, 1000, 1 << 30)[2]:
            pass

    leaf_py, spine_py = switches(Switch)
    for f in traffic:
        leaf_py.receive("eth1", f, 0.0)
    python_out, now, due = [], 0.0, 0.0
    while due is not None:  # the leaf's sends reach the spine at once, as the veth delivers them
        now = due
        for egress, f in leaf_py.poll(now):
            spine_py.receive("eth3", bytes(f), now)
        python_out += [bytes(f) for _, f in spine_py.poll(now)]
        due = min((t for t in (leaf_py.next_event(now), spine_py.next_event(now)) if t is not None), default=None)

    leaf, spine = switches(fastpath.FastSwitch)
    serve_in_batches(leaf, [port, eth2, eth3, eth4], sender, traffic, also=(spine,))
    rx, tx, wakeups, *_ = leaf.take_loop_counts()
    assert spine.take_loop_counts()[:3] == (0, 0, 0)  # the loop counts in the first core
    c_out = received(tap)
    tap.close()
    for p in (eth2, eth3, eth4):
        p.sock.close()
    assert c_out == python_out and len(c_out) == len(traffic)
    assert rx == tx == 2 * len(traffic)
    # The leaf's shaper sends a burst per wake-up and the spine reads it in that wake-up: 25 wake-ups
    # here (2026-11-28); 61 where the spine's read waited for a wake-up of its own.
    assert wakeups <= len(traffic) // 6
    now = time.monotonic()
    assert leaf.counters(now)["ports"]["eth1"]["rx_packets"] == leaf.counters(now)["ports"]["eth2"]["tx_packets"] \
        == spine.counters(now)["ports"]["eth3"]["rx_packets"] == spine.counters(now)["ports"]["eth4"]["tx_packets"] \
        == len(traffic)


@pytest.mark.skipif(fastpath.Asic is None, reason="the C fast path is not built here (no C compiler)")
def test_a_stall_that_ends_in_a_timer_wake_up_counts_as_that_wake_ups_lateness(veth):
    """The C loop sleeps until a frame leaves eth2's link (its delay: 200 ms) while a real-time
    process takes the loop's only CPU for 300 ms, as a host that does not run a vCPU would:
    nothing else arrives, and the loop wakes on its timer ~180 ms late. Its wake-up histogram
    (what the time-behind judgement reads) holds that wake-up that late: a first pass at the
    clock of before the sleep once made it count as ~0."""
    sender, port = veth
    ns = receiver_ns()
    with IPRoute(netns=ns) as ipr:
        ipr.link("add", ifname="eth2", kind="veth", address=ETH2_MAC, mtu=9100, peer={"ifname": "eth2p", "mtu": 9100})
        for name in ("eth2", "eth2p"):
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    with in_netns(ns):
        eth2 = open_port("eth2")
    specs = [PortSpec("eth1", RECEIVER_MAC, 1e9), PortSpec("eth2", ETH2_MAC, 1e9, delay_s=0.2)]
    core = fastpath.FastSwitch("leaf1", specs, UNCONFIGURED,
                               Fib(routes={"198.18.2.0/24": [NextHop("eth2", ETH2_PEER_MAC)]}, local=frozenset()),
                               random.Random(1))
    cpus = os.sched_getaffinity(0)
    time.sleep(0.1)
    os.sched_setaffinity(0, {0})
    hog = subprocess.Popen(["chrt", "-f", "50", "taskset", "-c", "0", sys.executable, "-c",
                            "import time\ntime.sleep(0.05)\nend = time.monotonic() + 0.3\n"
                            "while time.monotonic() < end: pass"])
    try:
        # read at once: the only late event is the delivery the taken CPU holds up
        sender.send(bytes(Ether(dst=RECEIVER_MAC, src=SENDER_MAC) / IP(src="198.18.1.2", dst="198.18.2.2")
                          / UDP(sport=1000, dport=4791) / bytes(958)))
        core.serve([(p.sock.fileno(), p.ring.map, p.ring.head) for p in (port, eth2)], [], port.ring.geometry,
                   0.0, 0.5, LATENESS_BOUNDS_S, 7, 1 << 30, 16)
    finally:
        os.sched_setaffinity(0, cpus)
        hog.wait()
        eth2.sock.close()
    rx, tx, _, _, _, max_s, _, wakes = core.take_loop_counts()
    assert (rx, tx) == (1, 1) and max_s >= 0.1
    latest = max(i for i, n in enumerate(wakes) if n)
    assert LATENESS_BOUNDS_S[latest - 1] >= 0.1  # the wake-up's lateness is in a bucket above 100 ms


LOSSLESS_TC = 3
ETH2_MAC, ETH2_PEER_MAC = "02:52:4c:00:0a:03", "02:52:4c:00:0a:04"


def lossless_switch(kind):
    """eth1 → eth2 at 1 Mb/s, TC 3 lossless: 20 kB under the PG's threshold, 10 kB of headroom.
    At this rate an XOFF's reach (a jumbo frame, the PFC frame) is 74 ms."""
    pg = BufferProfile(name="pg_lossless", pool="ingress_lossless_pool", size_bytes=0, static_th_bytes=20_000,
                       xoff_bytes=10_000, xon_bytes=0, xon_offset_bytes=0)
    qos = {name: PortQos(port=name, dscp_to_tc=tuple(d if d < 8 else 0 for d in range(64)),
                         tc_to_pg=tuple(range(8)) + (0,) * 8, pfc_enable=frozenset({LOSSLESS_TC}),
                         pgs={LOSSLESS_TC: pg}) for name in ("Ethernet0", "Ethernet4")}
    profile = QosProfile(source="test", ports=qos, pools={
        "ingress_lossless_pool": BufferPool("ingress_lossless_pool", "ingress", "dynamic", 10**7, 0)})
    specs = [PortSpec("eth1", RECEIVER_MAC, 1e6), PortSpec("eth2", ETH2_MAC, 1e6)]
    routes = Fib(routes={"198.18.2.0/24": [NextHop("eth2", ETH2_PEER_MAC)]}, local=frozenset())
    return kind("leaf1", specs, profile, routes, random.Random(1))


@pytest.mark.parametrize("shell", ["python", "c", "switchd"])
def test_a_switch_read_late_takes_each_frame_at_its_arrival_and_holds_what_its_late_xoff_owes(
        veth, shell, monkeypatch, tmp_path):
    """The switch's loop stalls (here: it does not run) while frames arrive; each loop (the
    Python one, the C shell around the Python pipeline, switchd's C core) then reads them with
    their kernel receive times (the Python pipeline behind switchd's CpuPort, as switchd runs
    it). 30 frames fill the PG to its threshold and its headroom: the
    XOFF was due when the 21st arrived and leaves only when the loop runs, 0.4 s later. 5 frames
    sent 0.15 s after the first 30 (twice the XOFF's reach: a timely XOFF had stopped them; the
    sender here is a raw socket that ignores pauses) are held past the headroom, not dropped; 5
    more sent 0.15 s after the late XOFF left (it had time to reach the sender) are dropped. The
    headroom watermark leaves the held frames out: it shows what the link's own traffic needed."""
    sender, port = veth
    ns = receiver_ns()
    with IPRoute(netns=ns) as ipr:
        ipr.link("add", ifname="eth2", kind="veth", address=ETH2_MAC, mtu=9100,
                 peer={"ifname": "eth2p", "address": ETH2_PEER_MAC, "mtu": 9100})
        for name in ("eth2", "eth2p"):
            ipr.link("set", index=ipr.link_lookup(ifname=name)[0], state="up")
    with in_netns(ns):
        eth2 = open_port("eth2")
    peer = packet_socket("eth2p", ns=ns)
    wake_r, wake_w = os.pipe()  # kept readable: each loop serves its ports once and hands back
    os.write(wake_w, b"x")
    if shell == "python":
        monkeypatch.setenv(PURE_LOOP_ENV, "1")
    control = ControlServer(tmp_path / "agent.sock", lambda req: {})
    if shell == "switchd":
        core = lossless_switch(fastpath.FastSwitch)
        ports = [port, eth2]

        def serve():
            _, heads = core.serve([(p.sock.fileno(), p.ring.map, p.ring.head) for p in ports], [wake_r],
                                  port.ring.geometry, 0.0, 0.05, LATENESS_BOUNDS_S, 7, 1 << 30, 16)
            for p, head in zip(ports, heads):
                p.ring.head = head
    else:  # the Python pipeline as switchd runs it: behind the CPU's port
        core = lossless_switch(Switch)
        loop = Loop(CpuPort(core, [{"name": "eth1", "mac": RECEIVER_MAC, "address": "198.18.1.1/24"},
                                   {"name": "eth2", "mac": ETH2_MAC, "address": "198.18.2.1/24"}]),
                    {"eth1": port, "eth2": eth2}, [control])
        assert loop.shell == shell
        fds = {port.sock.fileno(): "eth1", eth2.sock.fileno(): "eth2"}
        serve = (lambda: loop._wait_and_serve(dict(fds), [*fds, wake_r])) if shell == "python" \
            else (lambda: loop._serve_in_c({wake_r: wake_r}))
    data = bytes(Ether(dst=RECEIVER_MAC, src=SENDER_MAC) / IP(src="198.18.1.2", dst="198.18.2.2", tos=LOSSLESS_TC << 2)
                 / UDP(sport=49152, dport=4791) / bytes(958))
    assert len(data) == 1000
    try:
        peer.send(build_pfc(bytes.fromhex(ETH2_PEER_MAC.replace(":", "")), {LOSSLESS_TC: 0xFFFF}))  # eth2 held
        time.sleep(0.1)
        serve()
        for _ in range(30):
            sender.send(data)
        time.sleep(0.15)
        for _ in range(5):
            sender.send(data)
        time.sleep(0.25)
        serve()  # the stall ends: the XOFF leaves now
        time.sleep(0.15)
        for _ in range(5):
            sender.send(data)
        time.sleep(0.2)
        serve()
        pg = core.counters(time.monotonic())["ports"]["eth1"]["pgs"][LOSSLESS_TC]
    finally:
        os.close(wake_r)
        os.close(wake_w)
        control.close()
        peer.close()
        eth2.sock.close()
    assert pg["xoff"] and pg["rx_packets"] == 35, pg
    assert (pg["held_packets"], pg["held_bytes"]) == (5, 5000)
    assert pg["drops"] == {"headroom_exceeded": {"packets": 5, "bytes": 5000}}
    assert pg["headroom_bytes"] == 15_000 and pg["headroom_watermark_bytes"] == 10_000  # held: not in it


class Idle:
    """A core with nothing to do: no event, no frame expected."""

    def receive(self, port, frame, now):
        raise AssertionError("no frame expected")

    def next_event(self, now):
        return None

    def poll(self, now):
        return []


@pytest.mark.parametrize("shell", ["python", "c", "switchd"])
def test_a_port_taken_down_does_not_keep_the_loop_awake(veth, shell, monkeypatch, tmp_path):
    """Taking a port's link down (`config interface shutdown`, `ip link set down`) leaves ENETDOWN
    on its packet socket, which poll reports until it is read: a loop that does not read it wakes
    at once for ever (switchd spun a core this way after every shutdown). After one wake-up of
    each loop (the Python one, nicd's in C, switchd's C core's own), the port is quiet again, and
    an idle loop returns to its caller instead of spinning inside (given 10 s here)."""
    _, port = veth
    with IPRoute(netns=receiver_ns()) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth1")[0], state="down")
    fd = port.sock.fileno()
    assert select.select([fd], [], [], 0)[0] == [fd]  # the error the loop must clear
    if shell == "python":
        monkeypatch.setenv(PURE_LOOP_ENV, "1")
    control = ControlServer(tmp_path / "agent.sock", lambda req: {})
    if shell == "switchd":
        core = fastpath.FastSwitch("leaf1", [PortSpec("eth1", RECEIVER_MAC, 1e9)], UNCONFIGURED,
                                   Fib(routes={}, local=frozenset()), random.Random(1))
        serve = lambda: core.serve([(fd, port.ring.map, port.ring.head)], [], port.ring.geometry,  # noqa: E731
                                   0.0, 0.05, LATENESS_BOUNDS_S, 7, 1 << 30, 16)
    else:
        loop = Loop(Idle(), {"eth1": port}, [control])
        assert loop.shell == shell
        serve = (lambda: loop._wait_and_serve({fd: "eth1"}, [fd])) if shell == "python" \
            else (lambda: loop._serve_in_c({}))
    served = threading.Thread(target=serve, daemon=True)
    served.start()
    served.join(10)
    control.close()
    assert not served.is_alive(), "the loop did not come back: it spins on the port's error"
    assert select.select([fd], [], [], 0)[0] == []


def test_a_dead_transmitter_loses_every_frame_with_its_link_up_until_revived(veth):
    """rocelab.kernel.deadlink on a real veth: what the port sends is lost and counted, its
    carrier stays up, the far end still reaches it; revived, its frames arrive again."""
    sender, port = veth
    ns = sender_ns()
    deadlink.kill(ns, "eth1")
    for i in range(5):
        with contextlib.suppress(OSError):  # the qdisc's drop is ENOBUFS to a packet socket
            sender.send(frame(i, 200))
    time.sleep(0.1)
    assert read_all(port)[0] == [] and deadlink.dead(ns) == {"eth1": 5}
    with IPRoute(netns=ns) as ipr:
        assert ipr.get_links(ifname="eth1")[0].get_attr("IFLA_OPERSTATE") == "UP"
    assert deadlink.dead(receiver_ns()) == {}
    assert deadlink.revive(ns) == ["eth1"] and deadlink.dead(ns) == {} and deadlink.revive(ns) == []
    sender.send(frame(9, 200))
    time.sleep(0.1)
    assert read_all(port)[0] == [frame(9, 200)]


FRR_PACKETS = {"BGP to the peer": TCP(sport=40001, dport=179), "BGP from the peer's port": TCP(sport=179, dport=40001),
               "BFD control": UDP(sport=49152, dport=3784), "BFD echo": UDP(sport=49152, dport=3785),
               "BFD multihop": UDP(sport=49152, dport=4784)}
OTHER_PACKETS = {"RoCEv2": UDP(sport=50000, dport=4791), "ICMP": ICMP(), "TCP to another port": TCP(dport=80)}


def ip_frame(l4, n: int) -> bytes:
    return bytes(Ether(src=SENDER_MAC, dst=RECEIVER_MAC) / IP(src="198.18.0.0", dst="198.18.0.1", id=n) / l4
                 / n.to_bytes(4, "big"))


@pytest.mark.parametrize("loss_pct", [10, 50])
def test_a_lossy_port_drops_its_share_of_frrs_packets_and_nothing_else_until_cleared(veth, loss_pct):
    """rocelab.kernel.frrloss's BPF program in a real kernel: of 600 packets of each kind BGP and
    BFD lose about `loss_pct` % (binomial: within 6 standard deviations), RoCEv2, ICMP and other TCP
    none; the drops are counted; cleared, every packet arrives."""
    sender, port = veth
    ns, n = sender_ns(), 600
    frrloss.set_loss(ns, "eth1", loss_pct)

    def arrived(kinds: dict) -> dict[str, int]:
        got = {}
        for name, l4 in kinds.items():
            got[name] = 0
            for i in range(n):
                with contextlib.suppress(OSError):  # the filter's drop is ENOBUFS to a packet socket
                    sender.send(ip_frame(l4, i))
                if i % 100 == 99:  # read before the ring fills
                    time.sleep(0.02)
                    got[name] += len(read_all(port, limit=n)[0])
        return got

    frr, other = arrived(FRR_PACKETS), arrived(OTHER_PACKETS)
    share, sd = loss_pct / 100, (n * loss_pct / 100 * (1 - loss_pct / 100)) ** 0.5
    assert all(abs((n - got) - n * share) <= 6 * sd for got in frr.values()), frr
    assert other == dict.fromkeys(OTHER_PACKETS, n)
    assert frrloss.lost(ns) == {"eth1": sum(n - got for got in frr.values())}
    assert frrloss.lost(receiver_ns()) == {}
    assert frrloss.clear(ns) == ["eth1"] and frrloss.lost(ns) == {} and frrloss.clear(ns) == []
    assert arrived(FRR_PACKETS) == dict.fromkeys(FRR_PACKETS, n)
