"""Static checks of the hosts' side of the lossless contract: each NIC's own configuration
(`hosts.nics`, rocelab.qos.nic) against the switch port it is cabled to.

The checks run per switch, on the hosts cabled to it: a switch no host with a NIC config is
cabled to has nothing to check (not applicable). A finding's device is the host, its port the
host's interface; it names the NIC's file and line, the configured and the required value,
and the switch port it disagrees with. Where the NIC agrees with `hosts:` in fabric.yml, the
switch checks (rocelab.fabric.lint) have already followed that value through the fabric;
these checks add what only the NIC's own files show.

- nic-trust: RoCE leaves the NIC with the DSCP of its ToS (`default_roce_tos`; 0 when
  cma_roce_tos never set one), which must be hosts.roce_dscp; the NIC trusts DSCP (the frames
  a routed switch port sends it are untagged, so under trust pcp all of them land on the
  NIC's priority 0); and its dscp2prio puts that DSCP on the priority the switch port puts it
  on, so each side's PFC pauses the other's RoCE queue.
- nic-pfc: the NIC's PFC priorities are the switch port's pfc_enable.
- nic-cnp: CNPs leave with hosts.cnp_dscp (`cnp_dscp`), which the switch classifies into a
  TC whose queue is strict on every way out toward the other hosts, and with `cnp_802p_prio`
  the priority of that TC.
- nic-dcqcn: DCQCN's reaction point (roce_rp, which slows the sender on a CNP) and
  notification point (roce_np, which sends CNPs for CE-marked packets) are enabled on the
  NIC's RoCE priority.
- nic-mtu: the netdev MTU gives RoCE at least hosts.roce_mtu (the kernel's iboe_get_mtu
  takes 96 B of headers off it) and is no larger than the switch port's MTU.
- nic-headroom: the NIC sizes its PFC headroom for a cable at least as long as the real one
  (`Cable len`), and the receive buffer of its RoCE priority holds the headroom
  (rocelab.qos.headroom) for the link's speed and cable.
"""

from __future__ import annotations

from typing import Callable, Iterator

from rocelab.fabric.finding import (
    Check,
    Finding,
    cable_m,
    device_hops,
    link_of,
    peer_label,
    priorities_text,
)
from rocelab.fabric.spec import Device, FabricSpec
from rocelab.model.hostnics import HostNic
from rocelab.model.topology import Port
from rocelab.qos.headroom import required_headroom_bytes
from rocelab.qos.model import PortQos, Scheduler
from rocelab.qos.nic import IBOE_HEADER_BYTES, roce_mtu_for

MLX5_DEFAULT_DSCP_SHIFT = 3  # without a dscp2prio map, mlx5 puts DSCP d on priority d >> 3


def _facing(spec: FabricSpec, device: Device) -> Iterator[tuple[Port, HostNic]]:
    """The device's ports cabled to a host with a NIC config, with that host's NIC."""
    for port in spec.fabric.node(device.name).ports:
        nic = spec.hosts.nics.get(port.peer_node)
        if nic is not None:
            yield port, nic


def _where(nic: HostNic, key: str, what: str) -> str:
    """Where a NIC value came from, or which file does not give it."""
    if key in nic.config.where:
        return nic.config.where[key]
    files = " or ".join(f for f in (nic.mlnx_qos, nic.sysfs) if f)
    return f"{files}: no {what} line"


def _declared(spec: FabricSpec, key: str) -> str:
    return f"{spec.source}: hosts.{key}"


def _roce_dscp(spec: FabricSpec, nic: HostNic) -> tuple[int, str]:
    """The DSCP the NIC gives RoCE, and where that comes from."""
    if nic.config.roce_dscp is None:
        return spec.hosts.roce_dscp, _declared(spec, "roce_dscp")
    return nic.config.roce_dscp, _where(nic, "roce_tos", "default_roce_tos")


def _roce_priority(spec: FabricSpec, nic: HostNic) -> tuple[int, str]:
    """The NIC's priority for RoCE: dscp2prio's under trust dscp, else the declared one."""
    dscp, _ = _roce_dscp(spec, nic)
    config = nic.config
    if config.trust != "dscp":
        return spec.hosts.roce_priority, _declared(spec, "roce_priority")
    if config.dscp_to_priority is None:
        return dscp >> MLX5_DEFAULT_DSCP_SHIFT, (
            f"{nic.mlnx_qos}: no dscp2prio mapping (mlx5's default: DSCP / 8)")
    return config.dscp_to_priority[dscp], _where(nic, f"dscp_to_priority.{dscp}", "dscp2prio")


def _host_port(spec: FabricSpec, port: Port) -> str:
    return spec.fabric.peer(port).name


def _needs(*fields: str, what: str) -> Callable[[FabricSpec, Device], str | None]:
    """not_applicable for a check that needs one of these HostNicConfig fields from a facing NIC."""

    def reason(spec: FabricSpec, device: Device) -> str | None:
        facing = list(_facing(spec, device))
        hosts = [p.peer_node for p in spec.fabric.node(device.name).ports
                 if spec.fabric.node(p.peer_node).role == "host"]
        if not hosts:
            return f"no host is cabled to {device.name}"
        if not facing:
            return (f"no host cabled to {device.name} ({', '.join(hosts)}) has a NIC config "
                    "(hosts.nics in the description)")
        if not any(getattr(nic.config, f) is not None for _, nic in facing for f in fields):
            return f"no NIC config of {', '.join(n.host for _, n in facing)} gives {what}"
        return None

    return reason


# ---------------------------------------------------------------- nic-trust


def check_nic_trust(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    for port, nic in _facing(spec, device):
        config, host, iface = nic.config, nic.host, _host_port(spec, port)
        qos = device.port(port.name)
        label = f"{device.name} {device.label(port.name)}"

        def finding(priority: int | None, what: str, configured: str, required: str,
                    source: str) -> None:
            findings.append(Finding("nic-trust", host, iface, priority, what, configured,
                                    required, source))

        want = spec.hosts.roce_dscp
        dscp, dscp_source = _roce_dscp(spec, nic)
        tc = qos.dscp_to_tc[dscp]
        if config.roce_tos == 0:
            finding(None, f"RoCE leaves with ToS 0 (DSCP 0, which {label} puts in TC "
                          f"{qos.dscp_to_tc[0]}): cma_roce_tos never set RoCE's DSCP",
                    "default_roce_tos 0",
                    f"default_roce_tos {want << 2 | 2} (DSCP {want} with ECT(0); hosts.roce_dscp)",
                    f"{_where(nic, 'roce_tos', 'default_roce_tos')}; "
                    f"{device.origin.dscp_to_tc(qos, 0)}")
        elif dscp != want:
            lossless = "lossless" if tc in qos.pfc_enable else "lossy"
            finding(None, f"RoCE leaves with DSCP {dscp}, which {label} puts in {lossless} TC "
                          f"{tc}; the fabric's checks follow hosts.roce_dscp {want}",
                    f"default_roce_tos {config.roce_tos} (DSCP {dscp})",
                    f"a ToS with DSCP {want}, like {want << 2 | 2}",
                    f"{dscp_source}; {device.origin.dscp_to_tc(qos, dscp)}")
        if config.trust == "pcp":
            finding(0, f"the NIC trusts PCP, but {label} classifies RoCE by DSCP and sends it "
                       "routed, untagged: the NIC puts every frame it receives on priority 0, "
                       "so its PFC for RoCE pauses priority 0",
                    f"Priority trust state pcp; {label}: DSCP {dscp} → TC {tc}",
                    f"Priority trust state dscp, with DSCP {dscp} on priority {tc} as on {label}",
                    f"{_where(nic, 'trust', 'Priority trust state')}; "
                    f"{device.origin.dscp_to_tc(qos, dscp)}")
            continue
        if config.trust is None:
            continue
        priority, priority_source = _roce_priority(spec, nic)
        if priority != tc:
            finding(priority, f"the NIC puts RoCE (DSCP {dscp}) on priority {priority}, "
                              f"{label} on priority {tc}: each side's PFC pauses the other's "
                              "wrong queue",
                    f"dscp2prio DSCP {dscp} → priority {priority}",
                    f"one priority on both sides: {label} puts DSCP {dscp} on priority {tc}",
                    f"{priority_source}; {device.origin.dscp_to_tc(qos, dscp)}")
    return findings


# ---------------------------------------------------------------- nic-pfc


def check_nic_pfc(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    for port, nic in _facing(spec, device):
        nic_pfc = nic.config.pfc_priorities
        qos = device.port(port.name)
        if nic_pfc is None or nic_pfc == qos.pfc_enable:
            continue
        label = f"{device.name} {device.label(port.name)}"
        differ = sorted(nic_pfc ^ qos.pfc_enable)
        findings.append(Finding(
            "nic-pfc", nic.host, _host_port(spec, port), differ[0],
            f"the NIC's PFC priorities differ from {label}'s pfc_enable: a priority PFC-enabled "
            "on one side only is paused one way and dropped the other",
            f"PFC enabled on {priorities_text(nic_pfc)}",
            f"PFC enabled on {priorities_text(qos.pfc_enable)}, as {label}",
            f"{_where(nic, 'pfc_priorities', 'PFC configuration enabled')}; "
            f"{device.origin.pfc_enable(qos)}"))
    return findings


# ---------------------------------------------------------------- nic-cnp


def _scheduler(qos: PortQos, queue: int) -> Scheduler | None:
    return qos.queues[queue].scheduler if queue in qos.queues else None


def check_nic_cnp(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    hops = device_hops(spec, device)
    for port, nic in _facing(spec, device):
        np = nic.config.dcqcn_np or {}
        if "cnp_dscp" not in np:
            continue
        dscp, want = np["cnp_dscp"], spec.hosts.cnp_dscp
        qos = device.port(port.name)
        tc = qos.dscp_to_tc[dscp]
        label = f"{device.name} {device.label(port.name)}"
        host, iface = nic.host, _host_port(spec, port)
        dscp_source = _where(nic, "roce_np.cnp_dscp", "roce_np/cnp_dscp")
        if dscp != want:
            findings.append(Finding(
                "nic-cnp", host, iface, tc,
                f"CNPs leave with DSCP {dscp} ({label} puts it in TC {tc}); the fabric's checks "
                f"follow hosts.cnp_dscp {want}",
                f"cnp_dscp {dscp}", f"cnp_dscp {want} (hosts.cnp_dscp)",
                f"{dscp_source}; {device.origin.dscp_to_tc(qos, dscp)}"))
            # The switch checks followed the declared DSCP: follow the NIC's own here.
            for hop in (h for h in hops if h.ingress == port):
                out = device.port(hop.egress.name)
                queue = out.tc_to_queue[tc]
                scheduler = _scheduler(out, queue)
                if scheduler is not None and scheduler.type == "STRICT":
                    continue
                findings.append(Finding(
                    "nic-cnp", host, iface, tc,
                    f"CNPs (DSCP {dscp}, TC {tc}) leave {device.name} "
                    f"{device.label(hop.egress.name)} through a queue that is not strict "
                    "priority, behind the congestion they report",
                    f"queue {queue} {scheduler.type} weight {scheduler.weight}" if scheduler
                    else f"queue {queue} with no scheduler",
                    f"queue {queue} STRICT (toward {peer_label(spec, hop.egress)})",
                    f"{dscp_source}; {device.origin.scheduler(out, queue)}"))
        prio = np.get("cnp_802p_prio")
        if prio is not None and prio != tc:
            findings.append(Finding(
                "nic-cnp", host, iface, prio,
                f"CNPs leave on priority {prio}, but {label} puts their DSCP {dscp} in TC {tc}: "
                "a tagged CNP or a PCP-trusting port would queue them in another class",
                f"cnp_802p_prio {prio}", f"cnp_802p_prio {tc}, the TC of DSCP {dscp} on {label}",
                f"{_where(nic, 'roce_np.cnp_802p_prio', 'roce_np/cnp_802p_prio')}; "
                f"{device.origin.dscp_to_tc(qos, dscp)}"))
    return findings


# ---------------------------------------------------------------- nic-dcqcn


def check_nic_dcqcn(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    for port, nic in _facing(spec, device):
        priority, priority_source = _roce_priority(spec, nic)
        qos = device.port(port.name)
        queue = qos.tc_to_queue[qos.dscp_to_tc[_roce_dscp(spec, nic)[0]]]
        wred = qos.queues[queue].wred if queue in qos.queues else None
        marks = (f"; {device.name} {device.label(port.name)} marks ECN on RoCE's queue {queue}"
                 if wred is not None and wred.marks_green else "")
        for point, enabled, role in (
                ("roce_rp", nic.config.rp_enabled, "the reaction point: the NIC does not slow "
                                                   "down when CNPs arrive"),
                ("roce_np", nic.config.np_enabled, "the notification point: the NIC sends no "
                                                   "CNP for CE-marked RoCE it receives")):
            if enabled is None or priority in enabled:
                continue
            findings.append(Finding(
                "nic-dcqcn", nic.host, _host_port(spec, port), priority,
                f"DCQCN's {point} is off on RoCE's priority {priority}, {role}",
                f"{point}/enable/{priority} 0 (enabled on {priorities_text(enabled)})",
                f"{point}/enable/{priority} 1{marks}",
                f"{_where(nic, f'{point}.enable.{priority}', f'{point}/enable/{priority}')}; "
                f"RoCE's priority from {priority_source}"))
    return findings


# ---------------------------------------------------------------- nic-mtu


def check_nic_mtu(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    want = spec.hosts.roce_mtu_bytes
    for port, nic in _facing(spec, device):
        mtu = nic.config.mtu_bytes
        if mtu is None:
            continue
        source = _where(nic, "mtu_bytes", "ip link mtu")
        host, iface = nic.host, _host_port(spec, port)
        label = f"{device.name} {device.label(port.name)}"
        roce_mtu = roce_mtu_for(mtu)
        if roce_mtu is None or roce_mtu < want:
            findings.append(Finding(
                "nic-mtu", host, iface, None,
                f"the netdev MTU gives RoCE an MTU of {roce_mtu or 'none'}, below hosts.roce_mtu "
                f"{want}: the kernel takes {IBOE_HEADER_BYTES} B of headers off it",
                f"MTU {mtu}", f"MTU ≥ {want + IBOE_HEADER_BYTES}", source))
        link = link_of(spec, port)
        switch_mtu = min(device.mtu_bytes(port.name), link.mtu)
        if mtu > switch_mtu:
            switch_source = (device.origin.mtu(device.port(port.name))
                             if device.mtu_bytes(port.name) <= link.mtu
                             else f"{spec.fabric.source}: topology.links[{link.index}].mtu")
            findings.append(Finding(
                "nic-mtu", host, iface, None,
                f"the NIC sends packets up to MTU {mtu}, more than {label} takes: it drops them",
                f"MTU {mtu}", f"MTU ≤ {switch_mtu}, as {label}", f"{source}; {switch_source}"))
    return findings


# ---------------------------------------------------------------- nic-headroom


def check_nic_headroom(spec: FabricSpec, device: Device) -> list[Finding]:
    findings = []
    for port, nic in _facing(spec, device):
        config = nic.config
        link = link_of(spec, port)
        cable = cable_m(link)
        host, iface = nic.host, _host_port(spec, port)
        where = f"the link to {device.name} {device.label(port.name)}"
        link_source = f"{spec.fabric.source}: topology.links[{link.index}]"
        if config.cable_len_m is not None and config.cable_len_m < cable:
            findings.append(Finding(
                "nic-headroom", host, iface, None,
                f"the NIC sizes its PFC headroom for a {config.cable_len_m} m cable, shorter "
                f"than {where}",
                f"Cable len {config.cable_len_m}", f"Cable len ≥ {cable:g} ({where})",
                f"{_where(nic, 'cable_len_m', 'Cable len')}; {link_source}"))
        if config.buffer_sizes_bytes is None or config.priority_to_buffer is None:
            continue
        priority, priority_source = _roce_priority(spec, nic)
        buffer = config.priority_to_buffer[priority]
        size = (config.buffer_sizes_bytes[buffer]
                if buffer < len(config.buffer_sizes_bytes) else 0)
        try:
            need = required_headroom_bytes(link.rate_bps, cable, spec.hosts.roce_mtu_bytes)
        except ValueError as e:
            findings.append(Finding("nic-headroom", host, iface, priority,
                                    "headroom cannot be computed", "-", str(e), link_source))
            continue
        if size >= need:
            continue
        findings.append(Finding(
            "nic-headroom", host, iface, priority,
            f"receive buffer {buffer} of RoCE's priority {priority} cannot hold what arrives "
            f"after the NIC sends PFC on {where}",
            f"buffer {buffer} {size:,} B",
            f"buffer ≥ {need:,} B, the headroom for {link.rate_bps / 1e9:g} Gb/s, {cable:g} m, "
            f"RoCE MTU {spec.hosts.roce_mtu_bytes}",
            f"{_where(nic, 'buffer_sizes_bytes', 'Receive buffer size')}; "
            f"{_where(nic, 'priority_to_buffer', 'PFC configuration buffer')}; "
            f"RoCE's priority from {priority_source}"))
    return findings


HOST_CHECKS = (
    Check("nic-trust", "the NIC marks RoCE's DSCP, trusts DSCP and maps it to the switch's priority",
          check_nic_trust, _needs("trust", "roce_tos", what="a trust state or RoCE ToS")),
    Check("nic-pfc", "the NIC's PFC priorities are the switch port's pfc_enable", check_nic_pfc,
          _needs("pfc_priorities", what="a PFC configuration")),
    Check("nic-cnp", "the NIC's CNPs carry the fabric's CNP DSCP into a strict queue",
          check_nic_cnp, _needs("dcqcn_np", what="roce_np values")),
    Check("nic-dcqcn", "DCQCN's reaction and notification points are on for RoCE's priority",
          check_nic_dcqcn, _needs("rp_enabled", "np_enabled", what="roce_rp or roce_np enable values")),
    Check("nic-mtu", "the NIC's MTU carries the RoCE MTU and fits the switch port",
          check_nic_mtu, _needs("mtu_bytes", what="an ip link MTU")),
    Check("nic-headroom", "the NIC's headroom covers its cable", check_nic_headroom,
          _needs("cable_len_m", "buffer_sizes_bytes", what="a Cable len or receive buffer sizes")),
)
