"""The dynamic half of fabric regression: a fabric description run as a lab.

Every switch runs switchd with its own device's QoS profile (SONiC files as read; EOS
files with the platform buffer figures the description gives), every host runs nicd with
the description's RoCE DSCP, priority, CNP DSCP and MTU. The checks then drive traffic
and read the switches' own counters, the way sonic-mgmt's QoS tests do on a testbed:

- pfc-threshold[SWITCH:pN]: sonic-mgmt's PFC threshold probe, for every lossless priority N
  of every switch. On a leaf: hold a receiver's queue with a pause, send frames of that
  priority one at a time from a sender on the same leaf: XOFF must fire within one frame of
  the trigger the profile sets, and the PG must then absorb its xoff (headroom) to within
  one frame before the first headroom drop. On a spine: the receiver sits on another
  leaf and the frames' UDP source port is chosen so the sender's leaf hashes them onto
  this spine; the held pause spreads (receiver's leaf → spine), and the spine's PG from the
  sender's leaf must send XOFF within one frame of its trigger. (Its headroom cannot be
  filled this way: the leaf in front of it honours the XOFF.)
- incast-lossless: N:1 incast of RDMA writes on the RoCE class, DCQCN off so PFC alone
  holds it: no switch may drop a packet.
- ecn-before-pfc: the same incast with DCQCN: the first CE mark on the receiver's link
  comes before the first PFC frame the receiver's ToR sends (or no PFC frame at all).
- allreduce-budget: a ring AllReduce over every host finishes its step within the
  description's budget (production-equivalent time).

Each check returns a list of failures (plain sentences naming device, port, priority, the
measured and the expected value); empty means it passed.
"""

from __future__ import annotations

import ipaddress
import multiprocessing
import struct
import time
from dataclasses import dataclass
from pathlib import Path

from rocelab.kernel import control
from rocelab.ethernet import ETH, ETH_P_IPV4, IPPROTO_UDP, IPV4_DONT_FRAGMENT, ROCE_UDP_PORT, ipv4_header, mac_bytes
from rocelab.errors import InputError, Problem
from rocelab.fabric.spec import FabricSpec
from rocelab.routing.design import frr_refusal, on_lab_ports
from rocelab.qos.headroom import pg_trigger_bytes
from rocelab.model.hostnics import nicd_settings
from rocelab.model.lab import Lab
from rocelab.qos.model import PortQos
from rocelab.qos.sonic import dump_config_db
from rocelab.kernel.netns import packet_socket
from rocelab.probes.storm import hold_pfc_pause
from rocelab.runtime.readings import read_counters
from rocelab.runtime.scenario import agent_sockets, start_clean
from rocelab.engines.state import LabState
from rocelab.switch.fib import ecmp_hash
from rocelab.model.topology import Port
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

CNP_PRIORITY = 6
# A production config's headroom margin is a few KB: at TDF 1000 (100G → 100 Mb/s) that is
# under a millisecond of line rate, less than a busy 2-core machine may delay an agent. At
# 4000 the same margin is four times as long, so a drop is the config's, not the scheduler's:
# the least TDF `up` may pick for the description (more where this machine needs more).
FABRIC_TDF = 4000
PROBE_FRAME_BYTES = 4096
PROBE_MAX_FRAMES = 2000
PROBE_SPORT = 49152
INCAST_BYTES = 1_000_000


def lab_from_spec(spec: FabricSpec, name: str, workdir: Path) -> Lab:
    """The description as a Lab: one config_db.json per switch written into `workdir`; nicd on
    every host with the description's RoCE settings, over them what its NIC files say."""
    workdir.mkdir(parents=True, exist_ok=True)
    profiles = {}
    for device in spec.devices.values():
        path = workdir / f"{device.name}.config_db.json"
        path.write_text(dump_config_db(device.profile))
        profiles[device.name] = path
    h = spec.hosts
    roce = {"dscp": h.roce_dscp, "cnp_dscp": h.cnp_dscp, "pmtu_bytes": h.roce_mtu_bytes,
            "dscp_to_priority": {h.roce_dscp: h.roce_priority, h.cnp_dscp: CNP_PRIORITY}, "cc_algorithm": "dcqcn"}
    # Hosts whose NIC files the description names run that NIC (its ToS, maps, DCQCN values).
    host_roce, notes, invalid = nicd_settings(h.nics, roce)
    if invalid:
        raise InputError([Problem(spec.source, "hosts.nics", why) for why in invalid])
    # Where every switch's file gives its BGP, the fabric routes as it would in production: FRR
    # on each, configured from those files (the gate checks the files' routing, not a design's).
    # A SONiC config_db's BGP, an EOS `router bgp` and a Cumulus NVUE `router bgp` read into the
    # same model and render alike; an unnumbered session runs on its port's IPv6 link-local address.
    bgp = {d.name: on_lab_ports(d, spec.fabric.node(d.name)) for d in spec.devices.values()
           if d.bgp is not None and frr_refusal(d, spec.fabric.node(d.name)) is None}
    routing = "bgp" if bgp and len(bgp) == len(spec.devices) else "static"
    return Lab(name, spec.source, spec.fabric, "switchd", None, None, "emulated", roce, None, profiles,
               tdf_floor=FABRIC_TDF, host_roce=host_roce, host_notes=tuple(notes), routing=routing,
               node_bgp=bgp if routing == "bgp" else {})


def without_bgp(spec: FabricSpec) -> str | None:
    """Why the description cannot run on FRR (lab_from_spec routes it statically); None: it does."""
    why = []
    for d in spec.devices.values():
        if d.bgp is None:
            why.append(d.bgp_absent)
        elif (refusal := frr_refusal(d, spec.fabric.node(d.name))) is not None:
            why.append(f"{refusal}; its BGP is checked statically")
    return "; ".join(why) or None


def ecmp_width(spec: FabricSpec, record: LabState) -> list[str]:
    """Every leaf forwards to every host subnet of another leaf over as many next hops as it has
    spines, in the table its switchd has programmed from what FRR chose."""
    failures = []
    for leaf in (n for n in spec.fabric.switches if n.role == "leaf"):
        spines = sorted({spec.fabric.peer(p).node for p in leaf.ports
                         if spec.fabric.node(spec.fabric.peer(p).node).role == "spine"})
        routes = control.request(control.socket_path(record.name, leaf.name), "fib")["routes"]
        for other in (n for n in spec.fabric.switches if n.role == "leaf" and n is not leaf):
            for port in other.ports:
                if spec.fabric.node(port.peer_node).role != "host":
                    continue
                prefix = str(port.address.network)
                hops = routes.get(prefix, [])
                if len(hops) < len(spines):
                    failures.append(f"{leaf.name}: {prefix} ({other.name}'s rack) over {len(hops)} next hop"
                                    f"{'s' if len(hops) != 1 else ''}, expected {len(spines)} (one per spine: "
                                    f"{', '.join(spines)})")
    return failures


def _switch_counters(record: LabState) -> dict[str, dict]:
    return {n: read_counters(s)["counters"] for n, s in agent_sockets(record, "switchd").items()}


def _drops(counters: dict[str, dict]) -> list[str]:
    lines = []
    for node, c in counters.items():
        for port, p in c["ports"].items():
            places = [("port", p["drops"])] + [(f"PG{i}", pg["drops"]) for i, pg in enumerate(p["pgs"])] \
                + [(f"queue {i}", q["drops"]) for i, q in enumerate(p["queues"])]
            for where, drops in places:
                for reason, d in drops.items():
                    if reason not in ("not_ipv4", "to_self", "not_for_us"):
                        lines.append(f"{node} {port} {where}: {d['packets']} packets dropped as {reason}")
    return lines


class Inconclusive(Exception):
    """A dynamic check that failed while the emulation fell behind: its outcome hangs on timing the
    agents did not keep (rocelab.runtime.fidelity), so it is neither passed nor failed. The
    message is the fidelity line."""


def _judged(failures: list[str], fidelity: dict) -> list[str]:
    """The failures, unless the agents fell behind meanwhile (a fidelity line's JSON)."""
    if failures and not fidelity["kept_up"]:
        raise Inconclusive(fidelity["line"])
    return failures


def _incast(spec: FabricSpec) -> JobSpec:
    hosts = tuple(h.name for h in spec.fabric.hosts)
    return JobSpec(pattern="incast", hosts=hosts, size_bytes=INCAST_BYTES, iterations=1, verb="write",
                   options={"root": hosts[-1]})


def incast_lossless(spec: FabricSpec, record: LabState) -> list[str]:
    start_clean(record, "none")
    job = _incast(spec)
    report, _ = run_job(record, job)  # its fidelity judges the lossless PGs' headroom drops
    counters = _switch_counters(record)
    failures = [f"incast into {job.options['root']} with PFC alone: {line}" for line in _drops(counters)]
    retransmitted = report["total"]["counters"]["retransmitted_packets"]
    if retransmitted:
        failures.append(f"incast into {job.options['root']}: the NICs retransmitted {retransmitted} packets "
                        "(expected 0 on a lossless class)")
    return _judged(failures, report["fidelity"])


def ecn_before_pfc(spec: FabricSpec, record: LabState) -> list[str]:
    from rocelab.probes import Probe

    start_clean(record, "dcqcn")
    job = _incast(spec)
    root = spec.fabric.node(job.options["root"]).ports[0]
    tor = spec.fabric.peer(root)
    netns = record.node(tor.node).netns
    probes = {p.name: Probe(netns, p.name).start() for p in spec.fabric.node(tor.node).ports}
    try:
        report, _ = run_job(record, job)
        time.sleep(0.2)
    finally:
        reports = {name: p.stop().to_json() for name, p in probes.items()}
    first_ce = min((f["first_s"]["ce"] for f in reports[tor.name]["flows"] if "ce" in f.get("first_s", {})),
                   default=None)
    first_pfc = min(((r["first_s"]["xoff"], name) for name, rep in reports.items() for r in rep["pfc"]
                     if r["direction"] == "tx" and "xoff" in r.get("first_s", {})), default=None)
    if first_pfc is None:
        return []  # DCQCN held the incast without any pause: ECN did the work
    if first_ce is None:
        return _judged([f"{tor.node}: sent PFC on {first_pfc[1]} but never CE-marked a packet toward {root.node} "
                        f"({tor.name}): ECN is not configured to fire before PFC"], report["fidelity"])
    if first_pfc[0] < first_ce:
        return _judged([f"{tor.node}: first PFC frame (on {first_pfc[1]}) came "
                        f"{1e6 * (first_ce - first_pfc[0]) / record.tdf:.1f} µs (production-equivalent) before the "
                        f"first CE mark on {tor.name}: Kmin is above the PFC trigger"], report["fidelity"])
    return []


def allreduce_budget(spec: FabricSpec, record: LabState) -> list[str]:
    budget = spec.budgets.allreduce_step_time_s
    start_clean(record, "dcqcn")
    report, _ = run_job(record, JobSpec(pattern="ring-allreduce", size_bytes=spec.budgets.allreduce_size_bytes,
                                        iterations=2))
    step_s = report["total"]["time_s"]["production"]
    if step_s > budget:
        return _judged([f"ring AllReduce of {spec.budgets.allreduce_size_bytes:,} B over {len(spec.fabric.hosts)} "
                        f"hosts took {step_s * 1e3:.3f} ms per step (production-equivalent); the budget is "
                        f"{budget * 1e3:.3f} ms"], report["fidelity"])
    return []


def _probe_frame(spec: FabricSpec, src, dst, size: int, dscp: int, sport: int) -> bytes:
    """A RoCEv2-looking UDP frame on `dscp` (ECT(0)) from host port `src` to host port `dst`."""
    ip_bytes = size - 14
    header = ipv4_header(tos=dscp << 2 | 2, total_bytes=ip_bytes, ttl=64, protocol=IPPROTO_UDP,
                         src=src.address.ip.packed, dst=dst.address.ip.packed, flags_fragment=IPV4_DONT_FRAGMENT)
    udp = struct.pack("!HHHH", sport, ROCE_UDP_PORT, ip_bytes - 20, 0)
    return ETH.pack(mac_bytes(spec.fabric.peer(src).mac), mac_bytes(src.mac), ETH_P_IPV4) + header + udp + \
        bytes(ip_bytes - 28)


@dataclass(frozen=True)
class ThresholdProbe:
    """One PFC threshold probe: `switch`'s ingress PG behind `port`, for lossless `priority`,
    driven by frames on `dscp` from host port `sender` to host port `receiver` (whose queue
    a held pause stops)."""

    switch: str
    priority: int
    dscp: int
    port: Port
    sender: Port
    receiver: Port

    @property
    def name(self) -> str:
        return f"pfc-threshold[{self.switch}:p{self.priority}]"


def _dscp_for(qos: PortQos, priority: int, preferred: int) -> int | None:
    """The DSCP a probe of `priority` sends: the hosts' RoCE DSCP for their own priority (a
    map that sends it elsewhere is the defect to find), else the lowest DSCP of that TC."""
    if qos.dscp_to_tc[preferred] == priority:
        return preferred
    return next((d for d, tc in enumerate(qos.dscp_to_tc) if tc == priority), None)


def _ingress(qos: PortQos, dscp: int) -> tuple[int, int, bool]:
    """TC and PG of `dscp` frames arriving on a port, and whether that PG sends XOFF for them."""
    tc = qos.dscp_to_tc[dscp]
    pg = qos.tc_to_pg[tc]
    return tc, pg, qos.lossless_pg(pg) and tc in qos.pfc_enable


def _pauses(spec: FabricSpec, port: Port, dscp: int, priority: int) -> bool:
    """Whether a switch sends XOFF on `priority` for `dscp` frames queued behind `port`'s PG."""
    tc, _pg, lossless = _ingress(spec.devices[port.node].port(port.name), dscp)
    return lossless and tc == priority


def threshold_probes(spec: FabricSpec) -> list[ThresholdProbe]:
    """Every switch a probe can reach, for every lossless priority of the port it probes: a
    leaf with two hosts through its first host port; a spine through its port to a leaf with
    a host, the receiver on another such leaf that pauses the spine for that priority (a leaf
    whose maps do not is the static checks' finding, and would hide the spine's behaviour)."""
    fabric = spec.fabric
    host_ports = {s.name: [p for p in s.ports if fabric.node(p.peer_node).role == "host"] for s in fabric.switches}
    probes = []
    for switch in fabric.switches:
        to_leaf = {p.peer_node: p for p in switch.ports if host_ports.get(p.peer_node)}
        if len(host_ports[switch.name]) >= 2:
            port, out = host_ports[switch.name][0], host_ports[switch.name][1]
            pairs = [(port, fabric.peer(port), fabric.peer(out))]
        elif not host_ports[switch.name]:
            pairs = [(to_leaf[a], fabric.peer(host_ports[a][0]), fabric.peer(host_ports[b][0]))
                     for a in to_leaf for b in to_leaf if a != b]
        else:
            continue
        if not pairs:
            continue
        qos = spec.devices[switch.name].port(pairs[0][0].name)
        for priority in sorted(qos.pfc_enable):
            dscp = spec.hosts.roce_dscp if priority == spec.hosts.roce_priority else \
                _dscp_for(qos, priority, spec.hosts.roce_dscp)
            if dscp is None:
                continue
            usable = pairs if host_ports[switch.name] else \
                [pair for pair in pairs if _pauses(spec, fabric.peer(to_leaf[pair[2].peer_node]), dscp, priority)]
            if usable:
                probes.append(ThresholdProbe(switch.name, priority, dscp, *usable[0]))
    return probes


def _sport_via(record: LabState, spec: FabricSpec, probe: ThresholdProbe) -> int | None:
    """A UDP source port that the sender's leaf hashes onto the probed switch (any, for a
    leaf): its ECMP group as switchd holds it, and switchd's own hash. None: the leaf's
    routes to the receiver do not use that switch."""
    leaf = probe.sender.peer_node
    if leaf == probe.switch:
        return PROBE_SPORT
    routes = control.request(control.socket_path(record.name, leaf), "fib")["routes"]
    dst = ipaddress.IPv4Address(probe.receiver.address.ip)
    prefix = max((ipaddress.IPv4Network(p) for p in routes if dst in ipaddress.IPv4Network(p)),
                 key=lambda n: n.prefixlen)
    hops = [port for port, _mac in routes[str(prefix)]]
    want = next(p.name for p in spec.fabric.node(leaf).ports if p.peer_node == probe.switch)
    src = int(ipaddress.IPv4Address(probe.sender.address.ip))
    return next((sport for sport in range(PROBE_SPORT, 65536)
                 if hops[ecmp_hash(src, int(dst), IPPROTO_UDP, sport, ROCE_UDP_PORT) % len(hops)] == want), None)


def pfc_threshold(spec: FabricSpec, record: LabState, probe: ThresholdProbe) -> list[str]:
    """sonic-mgmt's PFC threshold probe on one switch and priority, one frame at a time."""
    device = spec.devices[probe.switch]
    qos = device.port(probe.port.name)
    where = f"{probe.switch} {device.label(probe.port.name)} priority {probe.priority}"
    _tc, pg, lossless = _ingress(qos, probe.dscp)
    if not lossless:
        return [f"{probe.switch} {probe.port.name}: DSCP {probe.dscp} lands in PG{pg}, which is not lossless"]
    profile = qos.pgs[pg]
    where += f" (PG{pg}, BUFFER_PROFILE {profile.name})"
    expected_trigger = pg_trigger_bytes(device.profile, qos, pg, congested_pgs=1)
    on_leaf = probe.sender.peer_node == probe.switch
    max_frames = PROBE_MAX_FRAMES
    if not on_leaf:
        # Enough for the receiver's leaf to fill its PG and pause the spine, then for the
        # spine's own PG to fill, twice over.
        leaf_port = spec.fabric.peer(next(p for p in spec.fabric.node(probe.switch).ports
                                          if p.peer_node == probe.receiver.peer_node))
        leaf = spec.devices[leaf_port.node]
        leaf_qos = leaf.port(leaf_port.name)
        leaf_trigger = pg_trigger_bytes(leaf.profile, leaf_qos, _ingress(leaf_qos, probe.dscp)[1], congested_pgs=1)
        max_frames = min(PROBE_MAX_FRAMES, 2 * (expected_trigger + leaf_trigger) // PROBE_FRAME_BYTES)
    sport = _sport_via(record, spec, probe)
    if sport is None:
        return [f"{where}: {probe.sender.peer_node}'s routes to {probe.receiver.node} do not use {probe.switch}, "
                "so no frame can be steered through it"]
    switch = control.socket_path(record.name, probe.switch)
    _wait_drained(record)  # what an earlier probe left queued would lower this one's trigger
    start_clean(record, "none")
    fork = multiprocessing.get_context("fork")
    stop = fork.Event()
    holder = fork.Process(target=hold_pfc_pause, daemon=True,
                          args=(record.node(probe.receiver.node).netns, probe.receiver.name, probe.receiver.mac,
                                probe.priority, stop))
    frame = _probe_frame(spec, probe.sender, probe.receiver, PROBE_FRAME_BYTES, probe.dscp, sport)
    sender = packet_socket(probe.sender.name, record.node(probe.sender.node).netns, protocol=0)
    holder.start()
    trigger = headroom = None
    sent = 0
    try:
        time.sleep(0.2)  # the receiver's pause is in force before the first frame
        while sent < max_frames:
            sender.send(frame)
            sent += 1
            port = _wait_taken(switch, probe.port.name, sent)
            state = port["pgs"][pg]
            if trigger is None and port["pfc_tx_frames"][probe.priority]:
                # On a leaf every frame sent is held in the PG; on a spine only those that
                # came after the receiver's leaf paused it: its watermark says how many.
                trigger = sent * PROBE_FRAME_BYTES if on_leaf else state["shared_watermark_bytes"]
                if not on_leaf:
                    break
            if state["drops"].get("headroom_exceeded"):
                headroom = state["headroom_watermark_bytes"]
                break
    finally:
        sender.close()
        stop.set()
        holder.join(5)
    failures = []
    if trigger is None:
        failures.append(f"{where}: no PFC after {sent * PROBE_FRAME_BYTES:,} B; expected XOFF at {expected_trigger:,} B")
    elif abs(trigger - expected_trigger) > PROBE_FRAME_BYTES:
        failures.append(f"{where}: XOFF at {trigger:,} B; expected {expected_trigger:,} B ± one {PROBE_FRAME_BYTES} B frame")
    if not on_leaf:
        return failures
    if headroom is None:
        failures.append(f"{where}: no headroom drop after {sent * PROBE_FRAME_BYTES:,} B; the PG absorbed more than "
                        f"its xoff {profile.xoff_bytes:,} B")
    elif abs(headroom - profile.xoff_bytes) > PROBE_FRAME_BYTES:
        failures.append(f"{where}: the PG absorbed {headroom:,} B of headroom before dropping; "
                        f"xoff is {profile.xoff_bytes:,} B")
    return failures


def _wait_drained(record: LabState, timeout_s: float = 10.0) -> None:
    """Until no queue of any switch holds a byte (or timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(q["depth_bytes"] for c in _switch_counters(record).values() for port in c["ports"].values()
                   for q in port["queues"]):
            return
        time.sleep(0.05)


def _wait_taken(switch: Path, port: str, sent: int, timeout_s: float = 2.0) -> dict:
    """The port's counters once switchd has taken the frame just sent (counters were cleared)."""
    deadline = time.monotonic() + timeout_s
    while True:
        counters = read_counters(switch)["counters"]["ports"][port]
        if counters["rx_packets"] >= sent or time.monotonic() > deadline:
            return counters
        time.sleep(0.002)
