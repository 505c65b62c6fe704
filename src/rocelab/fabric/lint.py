"""Static checks of a fabric description: pure functions of a FabricSpec, no root, no lab.

Each check looks at one switch at a time and returns findings; a finding names the device,
port and priority, the configured value, the required value, and the file with its
config_db table/key or running-config line. Checks (REFERENCE.md for the why):

- dscp-maps: along RoCE's paths (host port → leaf uplink → spine downlink → leaf host port),
  each hop's ingress map, whichever map that port uses, puts the RoCE DSCP in a lossless TC,
  the same TC as the hop before; moves the CNP DSCP to another TC only into a strict queue;
  and lets no other DSCP join RoCE's TC that the hop before kept apart. Maps that differ in
  classes RoCE and CNPs do not use (dual-ToR's AZURE on host ports, AZURE_UPLINK on uplinks)
  are not findings. PG numbers are local buffer accounting and are not compared.
- roce-lossless: on every hop of every host-to-host path (ECMP included), the RoCE DSCP's
  TC is in pfc_enable on the ingress port (which sends PFC) and on the egress port (which
  honours it), and on the egress port that priority's pause stops the queue the TC is in
  (MAP_PFC_PRIORITY_TO_QUEUE agrees with TC_TO_QUEUE_MAP); where a host is cabled, that TC
  is the hosts' roce_priority, the one the NIC pauses.
- cnp-strict: on every hop, the CNP DSCP's egress queue is scheduled STRICT, so congestion
  notifications do not queue behind the congestion they report.
- ecn-before-pfc: every lossless queue marks ECN, with Kmin below the PFC trigger of the
  lossless PGs feeding it. Worst case (rocelab.qos.headroom): one PG feeds the queue, so queue
  depth = PG occupancy, while every lossless PG of the switch's cabled ports sits at its
  threshold (T = α·S/(1 + n·α)); the empty-buffer trigger α·S is quoted beside it. Lossy
  traffic buffered in the same pool lowers the trigger further.
- headroom: every lossless PG's xoff ≥ rocelab.qos.headroom.required_headroom_bytes for its
  link's speed and cable length and the hosts' RoCE MTU; and where a SONiC switch sizes
  headroom from CABLE_LENGTH (buffermgrd's pg_profile_lookup.ini row, or the dynamic buffer
  model's computation), that length is at least the topology's cable.
- mtu: every cabled port's MTU (the smaller of the device's and the topology link's) ≥
  RoCE MTU + 60 (IPv4 20 + UDP 8 + BTH 12 + RETH 16 + ICRC 4). MTUs here are IP MTUs, as
  Linux, SONiC and EOS count them: the Ethernet header (14) and FCS (4) are not in them.
- buffer-pool: the reservations of each pool's PGs and queues fit the pool: Σ (size + xoff)
  ≤ pool size (a pool's size holds its reservations, Broadcom's convention). With a shared
  headroom pool (the pool's xoff), PGs' xoff come from it: Σ size + pool xoff ≤ pool size.
- pfc-watchdog: every port with pfc_enable has a PFC watchdog guarding all its lossless
  priorities.

The host checks (nic-trust, nic-pfc, nic-cnp, nic-dcqcn, nic-mtu, nic-headroom) hold each
NIC's own configuration against the switch port it is cabled to: rocelab.fabric.hostlint. The
BGP checks (bgp-multipath, bgp-maximum-paths, bgp-bfd, bgp-asn): rocelab.fabric.bgplint.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterator

from rocelab.fabric.finding import (
    Check,
    Finding,
    Hop,
    bytes_text,
    cabled,
    cable_m,
    device_hops,
    hops,
    link_of,
    peer_label,
    port_number,
    priorities_text,
)
from rocelab.fabric.bgplint import BGP_CHECKS
from rocelab.fabric.hostlint import HOST_CHECKS
from rocelab.fabric.spec import Device, FabricSpec
from rocelab.qos.headroom import ROCE_IP_OVERHEAD_BYTES, headroom, pg_trigger_bytes
from rocelab.qos.model import PortQos
from rocelab.registry import Registry
from rocelab.model.topology import Port


# ---------------------------------------------------------------- dscp-maps


def _upstream(spec: FabricSpec, all_hops: set[Hop], hop: Hop) -> list[tuple[Device, Port]]:
    """The switch before this hop on RoCE's paths, with each of its ingress ports whose traffic
    it sends into this hop's ingress port (none where a host is cabled)."""
    peer = spec.fabric.peer(hop.ingress)
    if peer.node not in spec.devices:
        return []
    ingresses = {h.ingress for h in all_hops if h.node == peer.node and h.egress == peer}
    return [(spec.devices[peer.node], p) for p in sorted(ingresses, key=port_number)]


def _class(device: Device, ingress: Port, egress: Port, dscp: int) -> str:
    tc = device.port(ingress.name).dscp_to_tc[dscp]
    return f"DSCP {dscp} → TC {tc} → queue {device.port(egress.name).tc_to_queue[tc]}"


def check_dscp_maps(spec: FabricSpec, device: Device) -> list[Finding]:
    """Along RoCE's paths, each hop's ingress map (whichever the port uses) keeps RoCE in a
    lossless TC, the same TC as the hop before (the one its PFC pauses there), and keeps
    other DSCPs out of RoCE's TC where the hop before kept them out; CNPs change TC only
    into a strict queue. Maps that differ elsewhere (dual-ToR's AZURE and AZURE_UPLINK) are
    not findings."""
    roce, cnp = spec.hosts.roce_dscp, spec.hosts.cnp_dscp
    all_hops = hops(spec)
    found: dict[tuple[int, int], Finding] = {}

    def add(hop: Hop, dscp: int, what: str, required: str, upstream: tuple[Device, Port] | None) -> None:
        qos = device.port(hop.ingress.name)
        tc = qos.dscp_to_tc[dscp]
        source = f"{device.origin.dscp_to_tc(qos, dscp)}; {device.origin.tc_to_queue(device.port(hop.egress.name), tc)}"
        if upstream:
            up_device, up_port = upstream
            source += f"; {up_device.origin.dscp_to_tc(up_device.port(up_port.name), dscp)}"
        found.setdefault((port_number(hop.ingress), dscp), Finding(
            "dscp-maps", device.name, device.label(hop.ingress.name), tc, what,
            _class(device, hop.ingress, hop.egress, dscp), required, source))

    for hop in device_hops(spec, device):
        qos = device.port(hop.ingress.name)
        tc = qos.dscp_to_tc[roce]
        toward = f"hop {peer_label(spec, hop.ingress)} → {device.name} → {peer_label(spec, hop.egress)}"
        if tc not in qos.pfc_enable:
            add(hop, roce, f"this port's map puts RoCE (DSCP {roce}) in TC {tc}, which is lossy here",
                f"DSCP {roce} → a pfc_enable TC ({priorities_text(qos.pfc_enable)}) ({toward})", None)
        for up_device, up_port in _upstream(spec, all_hops, hop):
            up = up_device.port(up_port.name)
            up_tc = up.dscp_to_tc[roce]
            into = spec.fabric.peer(hop.ingress)  # the hop before's egress port
            before = (f"as on {up_device.name} {up_device.label(up_port.name)}, the hop before "
                      f"({peer_label(spec, hop.ingress)})")
            if tc in qos.pfc_enable and up_tc in up.pfc_enable and tc != up_tc:
                add(hop, roce, f"RoCE (DSCP {roce}) is TC {tc} here but TC {up_tc} on {up_device.name}: "
                               f"this port's PFC pauses priority {tc}, which does not hold RoCE back there",
                    f"{_class(up_device, up_port, into, roce)}, {before}", (up_device, up_port))
            cnp_tc, up_cnp_tc = qos.dscp_to_tc[cnp], up.dscp_to_tc[cnp]
            queue = device.port(hop.egress.name).queues.get(device.port(hop.egress.name).tc_to_queue[cnp_tc])
            strict = queue is not None and queue.scheduler is not None and queue.scheduler.type == "STRICT"
            if cnp_tc != up_cnp_tc and not strict:
                add(hop, cnp, f"this port's map moves CNPs (DSCP {cnp}) from TC {up_cnp_tc} to TC {cnp_tc}, "
                              "whose queue is not strict priority here",
                    f"{_class(up_device, up_port, into, cnp)}, {before}", (up_device, up_port))
            if tc not in qos.pfc_enable:
                continue
            for dscp in range(len(qos.dscp_to_tc)):
                if dscp != roce and qos.dscp_to_tc[dscp] == tc and up.dscp_to_tc[dscp] != up_tc:
                    add(hop, dscp, f"DSCP {dscp} joins RoCE's lossless TC {tc} here though {up_device.name} keeps "
                                   "it apart: it shares RoCE's PG and pauses",
                        f"{_class(up_device, up_port, into, dscp)}, {before}", (up_device, up_port))
    return [found[key] for key in sorted(found)]


# ---------------------------------------------------------------- roce-lossless, cnp-strict


def check_roce_lossless(spec: FabricSpec, device: Device) -> list[Finding]:
    dscp, priority = spec.hosts.roce_dscp, spec.hosts.roce_priority
    found: dict[tuple[int, str], Finding] = {}
    for hop in device_hops(spec, device):
        qos_in = device.port(hop.ingress.name)
        tc = qos_in.dscp_to_tc[dscp]
        for port, role in ((hop.ingress, "sends PFC for it"), (hop.egress, "honours its PFC")):
            qos = device.port(port.name)
            if tc not in qos.pfc_enable:
                found.setdefault((port_number(port), "lossy"), Finding(
                    "roce-lossless", device.name, device.label(port.name), tc,
                    f"RoCE (DSCP {dscp}, TC {tc}) is lossy here: this port {role} only on its "
                    "pfc_enable priorities",
                    f"pfc_enable {priorities_text(qos.pfc_enable)}, DSCP {dscp} → TC {tc}",
                    f"TC {tc} in pfc_enable (hop {peer_label(spec, hop.ingress)} → {device.name} → "
                    f"{peer_label(spec, hop.egress)})",
                    f"{device.origin.pfc_enable(qos)}; {device.origin.dscp_to_tc(qos_in, dscp)}"))
        qos_out = device.port(hop.egress.name)
        if tc in qos_out.pfc_enable and qos_out.pfc_priority_to_queue[tc] != qos_out.tc_to_queue[tc]:
            found.setdefault((port_number(hop.egress), "queue"), Finding(
                "roce-lossless", device.name, device.label(hop.egress.name), tc,
                f"a PFC pause for priority {tc} stops queue {qos_out.pfc_priority_to_queue[tc]}, but RoCE "
                f"(DSCP {dscp}, TC {tc}) waits in queue {qos_out.tc_to_queue[tc]}: the pause holds nothing back",
                f"priority {tc} → queue {qos_out.pfc_priority_to_queue[tc]}, TC {tc} → queue {qos_out.tc_to_queue[tc]}",
                f"priority {tc} → queue {qos_out.tc_to_queue[tc]} (toward {peer_label(spec, hop.egress)})",
                f"{device.origin.pfc_to_queue(qos_out, tc)}; {device.origin.tc_to_queue(qos_out, tc)}"))
        from_host = spec.fabric.node(hop.ingress.peer_node).role == "host"
        if from_host and tc in qos_in.pfc_enable and tc != priority:
            found.setdefault((port_number(hop.ingress), "priority"), Finding(
                "roce-lossless", device.name, device.label(hop.ingress.name), tc,
                f"RoCE from host {hop.ingress.peer_node} is paused on priority {tc}, but the "
                f"NIC sends and pauses it on priority {priority}",
                f"DSCP {dscp} → TC {tc}", f"TC {priority} (hosts.roce_priority)",
                device.origin.dscp_to_tc(qos_in, dscp)))
    return [found[key] for key in sorted(found)]


def check_cnp_strict(spec: FabricSpec, device: Device) -> list[Finding]:
    dscp = spec.hosts.cnp_dscp
    found: dict[int, Finding] = {}
    for hop in device_hops(spec, device):
        tc = device.port(hop.ingress.name).dscp_to_tc[dscp]
        qos = device.port(hop.egress.name)
        queue = qos.tc_to_queue[tc]
        queue_qos = qos.queues.get(queue)
        scheduler = queue_qos.scheduler if queue_qos else None
        if scheduler is not None and scheduler.type == "STRICT":
            continue
        lossy = "lossy " if tc not in qos.pfc_enable else ""
        configured = (f"queue {queue} {scheduler.type} weight {scheduler.weight}" if scheduler
                      else f"queue {queue} with no scheduler")
        found.setdefault(port_number(hop.egress), Finding(
            "cnp-strict", device.name, device.label(hop.egress.name), tc,
            f"CNPs (DSCP {dscp}, TC {tc}) leave through a {lossy}queue that is not strict "
            "priority, behind the congestion they report",
            configured, f"queue {queue} STRICT (toward {peer_label(spec, hop.egress)})",
            device.origin.scheduler(qos, queue)))
    return [found[key] for key in sorted(found)]


# ---------------------------------------------------------------- ecn-before-pfc, headroom


def _lossless(device: Device, ports: list[Port]) -> Iterator[tuple[Port, PortQos, int, int]]:
    """(port, qos, priority, PG) of every pfc_enable priority of these ports."""
    for port in ports:
        qos = device.port(port.name)
        for priority in sorted(qos.pfc_enable):
            yield port, qos, priority, qos.tc_to_pg[priority]


def check_ecn_before_pfc(spec: FabricSpec, device: Device) -> list[Finding]:
    ports = cabled(spec, device)
    profile = device.profile
    # The lossless PGs of the cabled ports: all of them may be congested at once, and those
    # of a priority feed that priority's queues.
    feeding = [(port, qos, priority, pg) for port, qos, priority, pg in _lossless(device, ports)
               if _sized(profile, qos, pg)]
    n = len(feeding)

    findings = []
    for port, qos, priority, _ in _lossless(device, ports):
        queue = qos.tc_to_queue[priority]
        queue_qos = qos.queues.get(queue)
        wred = queue_qos.wred if queue_qos else None
        if wred is None or not wred.marks_green:
            findings.append(Finding(
                "ecn-before-pfc", device.name, device.label(port.name), priority,
                f"lossless queue {queue} marks no ECN, so PFC does the congestion control",
                f"ECN {wred.ecn if wred else 'off'}", "a WRED profile marking ECN (ecn_all)",
                device.origin.wred(qos, queue, "ecn")))
            continue
        sources = [(p, q, pg) for p, q, prio, pg in feeding if prio == priority]
        if not sources:
            continue  # no lossless PG, so no trigger: the headroom check reports it
        src_port, src_qos, src_pg = min(sources, key=lambda s: pg_trigger_bytes(profile, s[1], s[2], n))
        kmin = wred.green_min_threshold_bytes
        trigger = pg_trigger_bytes(profile, src_qos, src_pg, n)
        if kmin < trigger:
            continue
        buffer = src_qos.pgs[src_pg]
        pool = profile.pools[buffer.pool]
        dynamic = buffer.dynamic_th is not None
        threshold = (f"dynamic_th {buffer.dynamic_th} on {pool.name} of {bytes_text(pool.size_bytes)}"
                     if dynamic else f"static_th {bytes_text(buffer.static_th_bytes or 0)}")
        findings.append(Finding(
            "ecn-before-pfc", device.name, device.label(port.name), priority,
            f"queue {queue} starts marking ECN only after PFC has fired",
            f"Kmin {bytes_text(kmin)}",
            f"Kmin < {bytes_text(trigger)}, the PFC trigger of PG {src_pg} on "
            f"{device.label(src_port.name)} ({threshold}, {n} lossless PGs congested at once; "
            f"{bytes_text(pg_trigger_bytes(profile, src_qos, src_pg, 0))} on an empty buffer)",
            f"{device.origin.wred(qos, queue, 'green_min_threshold')}; "
            f"{device.origin.pg_buffer(src_qos, src_pg, 'dynamic_th' if dynamic else 'static_th')}"))
    return findings


def _sized(profile, qos: PortQos, pg: int) -> bool:
    """A lossless PG whose profile and pool the file sizes (not SONiC's dynamic buffer model)."""
    buffer = qos.pgs.get(pg)
    return (buffer is not None and buffer.lossless and buffer.pool in profile.pools
            and profile.pools[buffer.pool].size_bytes is not None)


def _no_lossless(spec: FabricSpec, device: Device) -> str | None:
    if not any(True for _ in _lossless(device, cabled(spec, device))):
        return f"{device.name} has no pfc_enable priority on a cabled port: nothing is lossless here"
    return None


def _no_sized_lossless(spec: FabricSpec, device: Device) -> str | None:
    none = _no_lossless(spec, device)
    if none:
        return none
    lossless = list(_lossless(device, cabled(spec, device)))
    if device.unsized_pgs and not any(qos.lossless_pg(pg) for _, qos, _, pg in lossless):
        return f"{device.name} has no lossless PG in its file: {device.unsized_pgs}"
    if any(device.facts.cable_m(qos.port) is not None for _, qos, _, _ in lossless):
        return None  # CABLE_LENGTH against the cables is checkable whatever sizes the PGs
    if not any(_sized(device.profile, qos, pg) or pg not in qos.dynamic_pgs
               for _, qos, _, pg in _lossless(device, cabled(spec, device))):
        return (f"every lossless PG of {device.name} is sized by SONiC's buffer manager at run time "
                "(BUFFER_PG profile NULL, the dynamic buffer model): the file holds no bytes to check")
    return None


def _no_sized_pool(spec: FabricSpec, device: Device) -> str | None:
    if not any(pool.size_bytes is not None for pool in device.profile.pools.values()):
        return (f"{device.name}'s file sizes no buffer pool" + (
            " (SONiC's dynamic buffer model sizes them at run time)" if device.profile.pools else ""))
    return None


def _cable_lengths(spec: FabricSpec, device: Device) -> list[Finding]:
    """CABLE_LENGTH shorter than the cable: the switch sized the port's headroom for less."""
    findings = []
    for port in cabled(spec, device):
        qos = device.port(port.name)
        configured = device.facts.cable_m(qos.port)
        if not qos.pfc_enable or configured is None:
            continue
        link = link_of(spec, port)
        real = cable_m(link)
        if real <= configured:
            continue  # sized for a longer cable than there is: more than enough
        findings.append(Finding(
            "headroom", device.name, device.label(port.name), None,
            f"headroom is sized for a {configured} m cable, but the link to {peer_label(spec, port)} is "
            f"{real:g} m: more is in flight after XOFF than the switch reserved for",
            f"CABLE_LENGTH {configured}m", f"CABLE_LENGTH ≥ {math.ceil(real)}m (the cable's length)",
            f"{device.file}: {device.facts.ports[qos.port].cable_where}; {spec.fabric.source}: "
            f"topology.links[{link.index}]"))
    return findings


def check_headroom(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = _cable_lengths(spec, device)
    seen = set()
    for port, qos, priority, pg in _lossless(device, cabled(spec, device)):
        if (port.name, pg) in seen:
            continue  # priorities sharing a PG share its headroom
        seen.add((port.name, pg))
        if pg in qos.dynamic_pgs or (device.unsized_pgs and not qos.lossless_pg(pg)):
            continue  # buffermgrd sizes it from this port's speed and cable at run time
        link = link_of(spec, port)
        try:
            need = headroom(link.rate_bps, cable_m(link), spec.hosts.roce_mtu_bytes)
        except ValueError as e:
            findings.append(Finding("headroom", device.name, device.label(port.name), priority,
                                    "headroom cannot be computed", "-", str(e),
                                    f"{spec.fabric.source}: topology.links[{link.index}]"))
            continue
        buffer = qos.pgs.get(pg)
        xoff = buffer.xoff_bytes if buffer is not None and buffer.lossless else 0
        if xoff >= need.total_bytes:
            continue
        what = (f"PG {pg} has too little headroom for what arrives after XOFF"
                if xoff else f"PG {pg} has no lossless buffer profile, so no headroom")
        findings.append(Finding(
            "headroom", device.name, device.label(port.name), priority, what,
            f"xoff {bytes_text(xoff)}",
            f"xoff ≥ {bytes_text(need.total_bytes)} for the link to {peer_label(spec, port)} "
            f"({need.explain()})",
            f"{device.origin.pg_buffer(qos, pg, 'xoff')}; {spec.fabric.source}: "
            f"topology.links[{link.index}]"))
    return findings


# ---------------------------------------------------------------- mtu, buffer-pool, pfc-watchdog


def check_mtu(spec: FabricSpec, device: Device) -> list[Finding]:
    required = spec.hosts.roce_mtu_bytes + ROCE_IP_OVERHEAD_BYTES
    findings = []
    for port in cabled(spec, device):
        link = link_of(spec, port)
        configured = device.mtu_bytes(port.name)
        if configured < required:
            source = device.origin.mtu(device.port(port.name))
        elif link.mtu < required:
            configured, source = link.mtu, f"{spec.fabric.source}: topology.links[{link.index}].mtu"
        else:
            continue
        findings.append(Finding(
            "mtu", device.name, device.label(port.name), None,
            f"RoCE packets of MTU {spec.hosts.roce_mtu_bytes} do not fit the link to "
            f"{peer_label(spec, port)}",
            f"IP MTU {configured}",
            f"IP MTU ≥ {required} (RoCE MTU {spec.hosts.roce_mtu_bytes} + IPv4 20 + UDP 8 + "
            "BTH 12 + RETH 16 + ICRC 4)",
            source))
    return findings


def check_buffer_pool(spec: FabricSpec, device: Device) -> list[Finding]:
    profile = device.profile
    reserved: dict[str, Counter[tuple[str, str, int]]] = {name: Counter()
                                                          for name in profile.pools}
    for qos in profile.ports.values():
        buffers = [*qos.pgs.values(), *(q.buffer for q in qos.queues.values() if q.buffer)]
        for buffer in buffers:
            if buffer.pool in reserved:
                reserved[buffer.pool][(buffer.name, "size", buffer.size_bytes)] += 1
                if buffer.xoff_bytes:
                    reserved[buffer.pool][(buffer.name, "xoff", buffer.xoff_bytes)] += 1
    findings = []
    for name, pool in profile.pools.items():
        if pool.size_bytes is None:
            continue  # sized at run time (the dynamic buffer model): nothing to add up against
        parts = reserved[name]
        if pool.xoff_bytes:  # xoff comes from the shared headroom pool, counted once
            parts = Counter({k: n for k, n in parts.items() if k[1] == "size"})
            parts[("shared headroom pool", "xoff", pool.xoff_bytes)] = 1
        total = sum(n * size for (_, _, size), n in parts.items())
        if total <= pool.size_bytes:
            continue
        terms = " + ".join(f"{n} × {buffer} {what} {size:,}"
                           for (buffer, what, size), n in sorted(parts.items()) if size)
        findings.append(Finding(
            "buffer-pool", device.name, None, None,
            f"{pool.type} pool {name} is oversubscribed by the reservations drawing from it",
            f"size {bytes_text(pool.size_bytes)}",
            f"size ≥ {bytes_text(total)} reserved: {terms}",
            device.origin.pool(name, "size")))
    return findings


def check_pfc_watchdog(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    for port in cabled(spec, device):
        qos = device.port(port.name)
        if not qos.pfc_enable:
            continue
        unguarded = qos.pfc_enable - qos.pfcwd_priorities if qos.pfc_wd else qos.pfc_enable
        if not unguarded:
            continue
        configured = (f"watchdog on priorities {priorities_text(qos.pfcwd_priorities)}"
                      if qos.pfc_wd else "no PFC watchdog")
        findings.append(Finding(
            "pfc-watchdog", device.name, device.label(port.name), min(unguarded),
            "a PFC storm on this port would stop its lossless traffic indefinitely",
            configured, f"a watchdog on every pfc_enable priority {priorities_text(qos.pfc_enable)}",
            device.origin.pfc_wd(qos)))
    return findings


def builtin_checks() -> Registry[Check]:
    checks: Registry[Check] = Registry("static check")
    for check in (
        Check("dscp-maps", "each hop's DSCP map keeps RoCE's and CNPs' class along their paths",
              check_dscp_maps),
        Check("roce-lossless", "RoCE's DSCP is in a pfc_enable priority on every path",
              check_roce_lossless),
        Check("cnp-strict", "CNPs leave through a strict-priority queue on every path",
              check_cnp_strict),
        Check("ecn-before-pfc", "ECN Kmin is below the PFC trigger on every lossless queue",
              check_ecn_before_pfc, _no_lossless),
        Check("headroom", "xoff covers speed, cable, MTU and the peer's response time",
              check_headroom, _no_sized_lossless),
        Check("mtu", "RoCE MTU + headers fit every link's MTU", check_mtu),
        Check("buffer-pool", "each buffer pool holds its PGs' and queues' reservations",
              check_buffer_pool, _no_sized_pool),
        Check("pfc-watchdog", "a PFC watchdog guards every lossless priority", check_pfc_watchdog,
              _no_lossless),
        *HOST_CHECKS,
        *BGP_CHECKS,
    ):
        checks.register(check.name, check)
    return checks


def lint(spec: FabricSpec) -> list[Finding]:
    """Every finding of every check on every switch."""
    checks = builtin_checks()
    return [finding for name in checks for device in spec.devices.values()
            for finding in checks.get(name).run(spec, device)]
