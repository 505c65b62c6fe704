"""The embedded engine: one network namespace per node, a veth pair per link.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) and nothing else. Everything goes through
pyroute2's netlink: namespaces, veths created straight into their two namespaces (so no
half-moved interface is ever left in the host's namespace), addresses, permanent
neighbours, ECMP routes. Namespaces are named `<lab>.<node>`: '.' cannot appear in a
lab or node name, so two labs can never claim the same namespace.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from pyroute2 import IPRoute
from pyroute2 import netns as pyroute2_netns
from pyroute2.ethtool import Ethtool

from rocelab.kernel import awake, control
from rocelab import paths
from rocelab.engines import frr
from rocelab.engines import state as lab_state
from rocelab.errors import InputError, Problem
from rocelab.kernel.loop import early_s
from rocelab.kernel.netns import cmdline, exists, in_netns, pids_in, popen_in, run_in, stop
from rocelab.model.lab import Lab
from rocelab.qos.sonic import dump_config_db
from rocelab.engines.state import InterfaceState, LabState, NodeState
from rocelab.model.kinds import Agent, builtin_dataplanes, builtin_nic_backends
from rocelab.model.tdf import TdfChoice, frame_bytes
from rocelab.roce.config import roce_config
from rocelab.fabric.finding import cable_m
from rocelab.model.topology import HOST_POOL, Fabric, Node, refuse_nos_nodes
from rocelab.routing.bgp import BgpConfig
from rocelab.routing.design import lab_bgp
from rocelab.switch.fib import SONIC_FIB_ROUTES_PER_S

NUD_PERMANENT = 0x80

# Written in every namespace before any interface exists. IPv6 off: router solicitations
# and MLD reports would otherwise appear in every capture a learner takes. IPv4 forwarding
# off: a new namespace inherits it from the initial one (net.core.devconf_inherit_init_net
# 0), where container hosts turn it on, and a kernel forwarding beside switchd would deliver
# a second, unshaped copy of every packet.
COMMON_SYSCTLS = {
    "net/ipv6/conf/all/disable_ipv6": "1",
    "net/ipv6/conf/default/disable_ipv6": "1",
    "net/ipv4/ip_forward": "0",
}

# Offloads off on every veth when user-space agents forward: an AF_PACKET socket must see
# the frames the wire would carry (no 64 KB TSO super-frames, no unfinished checksums).
AGENT_OFFLOADS_OFF = ("tx-checksum-ip-generic", "tx-scatter-gather", "tx-generic-segmentation",
                      "tx-tcp-segmentation", "rx-gro")
AGENT_START_TIMEOUT_S = 15.0
CRASHED_UP_SWEEPS = 5
# FRR's first sessions come up in about a second; a session whose first connect met a peer not yet
# listening retries after `timers connect` (10 s).
BGP_CONVERGE_TIMEOUT_S = 45.0
BGP_SETTLE_S = 5.0  # no route change for this long, every session up: BGP has chosen all it will
RTPROT_BGP = 186
SWEEP_INTERVAL_S = 0.2


class AgentFailed(RuntimeError):
    pass


class LabAlreadyUp(InputError):
    pass


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise InputError([Problem(what, "", "needs root: the netns engine creates network namespaces",
                                  "run it as root (sudo), or in a container with CAP_NET_ADMIN and CAP_SYS_ADMIN")])


def netns_name(lab: str, node: str) -> str:
    return f"{lab}.{node}"


def plan(lab: Lab, engine: str = "netns", tdf_choice: TdfChoice | None = None,
         bgp: dict[str, tuple[BgpConfig, str]] | None = None) -> LabState:
    """The state record of everything `up` will make, written before it makes any of it."""
    fabric = lab.fabric
    nodes = [
        NodeState(node.name, node.role, netns_name(lab.name, node.name), [
            InterfaceState(p.name, str(p.address), f"{p.peer_node}:{p.peer_port}", p.mac,
                           fabric.links[p.link].rate_bps, cable_m(fabric.links[p.link])) for p in node.ports
        ])
        for node in fabric.nodes
    ]
    routing = {"mode": "static"} if bgp is None else {
        "mode": "bgp", "daemons": [],
        "switches": {name: {"how": how, "notes": list(config.notes)} for name, (config, how) in bgp.items()}}
    routing["link_down_detect_s"] = lab.link_down_detect_s  # the switches' loss-of-signal detection
    return LabState(lab.name, engine, lab.source, lab.dataplane, lab.tdf, "creating", nodes, nic=lab.nic,
                    tdf_choice=tdf_choice.to_json() if tdf_choice else {}, fidelity_bound_s=fidelity_bound_s(lab),
                    routing=routing)


def fidelity_bound_s(lab: Lab) -> float:
    """One MTU frame's time on the lab's fastest emulated link, or the lab's own bound if longer
    (rocelab.runtime.fidelity)."""
    fastest_bps = max(link.rate_bps for link in lab.fabric.links) / lab.tdf
    return max(frame_bytes(roce_config(lab.roce).pmtu_bytes) * 8 / fastest_bps, lab.fidelity_bound_s or 0.0)


def write_sysctls(ns: str, values: dict[str, str]) -> None:
    # /proc/sys/net is per network namespace of the thread that opens it.
    with in_netns(ns):
        for key, value in values.items():
            Path("/proc/sys", key).write_text(value)


def _offloads_off(ns: str, ifnames: list[str]) -> None:
    with in_netns(ns), Ethtool() as ethtool:
        for ifname in ifnames:
            features = ethtool.get_features(ifname)
            for name in AGENT_OFFLOADS_OFF:
                if name in features.features:
                    features.features[name].enable = False
            ethtool.set_features(ifname, features)


def wait_ready(lab: str, node: str, module: str, proc: subprocess.Popen) -> None:
    """Until the agent's control socket answers; its log tail if it dies or hangs."""
    sock = control.socket_path(lab, node)
    deadline = time.monotonic() + AGENT_START_TIMEOUT_S
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            control.request(sock, "ping", timeout_s=1.0)
            return
        except control.AgentUnreachable:
            time.sleep(0.02)
    tail = control.log_path(lab, node).read_text(errors="replace")[-2000:]
    raise AgentFailed(f"{module} on {node} did not start (exit {proc.poll()}); its log:\n{tail}")


def node_profile_file(lab: Lab, node: str) -> Path | None:
    """The config_db.json switchd loads: a lab.yml `profiles:` entry written beside the agent's
    configuration as config_db, else the switch's own profile file, else the lab's."""
    if node in lab.node_qos:
        path = paths.STATE_DIR / lab.name / f"{node}.config_db.json"
        path.write_text(dump_config_db(lab.node_qos[node]))
        return path
    return lab.node_profiles.get(node) or lab.profile


def fib_routes_per_s(lab: Lab) -> float | None:
    """The switches' FIB programming rate: the lab's, else SONiC's where FRR routes; None: at once."""
    if lab.fib_routes_per_s is not None:
        return lab.fib_routes_per_s or None
    return SONIC_FIB_ROUTES_PER_S if lab.routing == "bgp" else None


# Nodes one agent process serves at most: its loop watches each node's ports, control socket
# and netlink events in one set (switchd's C loop takes 64 cores and 256 other descriptors).
SHARED_MAX_NODES = 32


def write_agent_config(lab: Lab, node: Node, netns: str | None = None) -> Path:
    """An agent's configuration file, beside its control socket and log (paths.STATE_DIR/<lab>/);
    `netns`: the node's namespace, for an agent that serves it from another one."""
    folder = paths.STATE_DIR / lab.name
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "lab": lab.name, "node": node.name, "role": node.role, "tdf": lab.tdf,
        "early_s": early_s(fidelity_bound_s(lab)),
        "pfc_wd_tdf": lab.pfc_wd_tdf or lab.tdf,
        "socket": str(control.socket_path(lab.name, node.name)),
        "profile": str(node_profile_file(lab, node.name) or "") or None,
        "roce": lab.roce_of(node.name),
        "load_balancing": dict(lab.load_balancing),
        "link_down_detect_s": lab.link_down_detect_s,
        # The NOS whose commands the switch's shell takes (rocelab.nodecli): SONiC's unless its
        # lab.yml `profiles:` entry is another NOS's config.
        "nos": lab.node_nos[node.name].format if node.name in lab.node_nos else "sonic",
        "ports": [{"name": p.name, "mac": p.mac, "address": str(p.address),
                   "peer_mac": lab.fabric.peer(p).mac,
                   "rate_bps": lab.fabric.links[p.link].rate_bps / lab.tdf,
                   "delay_s": lab.fabric.links[p.link].delay_s * lab.tdf,
                   "global_flow_control_rx": f"{node.name}:{p.name}" in lab.flow_control_rx} for p in node.ports],
    }
    if netns:
        config["netns"] = netns
    config_file = folder / f"{node.name}.json"
    config_file.write_text(json.dumps(config, indent=1))
    return config_file


def _fib_widths(ns: str) -> dict[str, int]:
    """prefix → how many next hops the namespace's kernel FIB holds for it, of FRR's routes."""
    with IPRoute(netns=ns) as ipr:
        return {f"{r.get_attr('RTA_DST')}/{r['dst_len']}": len(r.get_attr("RTA_MULTIPATH") or [r])
                for r in ipr.get_routes(family=2, table=254) if r["proto"] == RTPROT_BGP}


def converged(fabric: Fabric, record: LabState) -> list[str]:
    """What FRR has not made forwarding yet: for every switch, each host subnet with as many
    next hops as rocelab's own ECMP plan gives it, in the table its switchd has programmed (the
    kernel's FIB where no switchd runs). Empty when the fabric has converged."""
    missing = []
    switchd = {p["node"] for p in record.processes if p["what"] == "switchd"}
    for node in fabric.switches:
        if node.name not in record.routing.get("switches", {}):
            continue
        if node.name in switchd:
            fib = control.request(control.socket_path(record.name, node.name), "fib")
            widths = {prefix: len(hops) for prefix, hops in fib["routes"].items()}
            if fib["pending"]:  # FRR has changed more than the emulated ASIC has programmed yet
                missing.append(f"{node.name} programming {fib['pending']} route changes")
        else:
            widths = _fib_widths(record.node(node.name).netns)
        for route in node.routes:
            if route.dst.subnet_of(HOST_POOL) and widths.get(str(route.dst), 0) < len(route.nexthops):
                missing.append(f"{node.name} {route.dst} ({widths.get(str(route.dst), 0)} of "
                               f"{len(route.nexthops)} next hops)")
    return missing


def sessions_down(record: LabState) -> list[str]:
    """Every BGP session of the lab's FRR switches that is not Established."""
    return [s for n in record.routing["switches"] for s in frr.sessions_not_established(record.name, n)]


def wait_converged(fabric: Fabric, record: LabState, established: bool = False) -> list[str]:
    """Until every switch forwards to every host over all its equal-cost paths, as the static
    routes would (and, with `established`, every BGP session is Established: after bgpd restarted,
    the routes of the one before could pass for converged); FRR's logs if it does not within
    BGP_CONVERGE_TIMEOUT_S. A fabric whose own BGP keeps fewer paths (no multipath-relax, a small
    maximum-paths) settles narrower: once every host is reachable from every switch, every session
    is Established and nothing has changed for BGP_SETTLE_S, that is its converged state, returned
    (the plugin's ecmp-width check reports it)."""
    deadline = time.monotonic() + BGP_CONVERGE_TIMEOUT_S
    last, since = None, time.monotonic()
    while missing := converged(fabric, record) + (sessions_down(record) if established else []):
        now = time.monotonic()
        if missing != last:
            last, since = missing, now
        elif (now - since >= BGP_SETTLE_S and not any(" (0 of " in m or " programming " in m for m in missing)
              and not sessions_down(record)):
            return missing
        if now > deadline:
            first = missing[0].split()[0].rstrip(":")
            raise frr.FrrFailed(f"BGP did not converge in {BGP_CONVERGE_TIMEOUT_S:.0f} s; missing: "
                                f"{', '.join(missing[:6])}; FRR's logs on {first}:\n"
                                f"{frr.log_tail(frr.folder(record.name, first))}")
        time.sleep(0.05)
    return []


class NetnsEngine:
    name = "netns"
    runs_nos = False  # SONiC-VS and cEOS are container images: only the clab engine runs them
    # One agent process for every node its kind can serve (nicd: all the hosts): the nodes share
    # this machine's namespaces, and fewer processes wait less for the cores (rocelab.roce.agent).
    shares_agents = True
    frr_daemons: frr.Daemons = frr.HostDaemons()  # this machine's frr package, in each switch's namespace

    def up(self, lab: Lab, tdf_choice: TdfChoice | None = None) -> LabState:
        """Build the lab. Its TDF is chosen before (rocelab.runtime.calibration.up picks one
        where the lab leaves it to this machine); `tdf_choice` says how, for the record."""
        if lab.tdf is None:
            raise ValueError(f"{lab.name}: choose a TDF before up (rocelab.runtime.calibration.up does)")
        if not self.runs_nos:
            refuse_nos_nodes(lab.fabric, self.name)
        require_root("invoke up")
        existing = lab_state.load(lab.name)
        if existing is not None:
            raise LabAlreadyUp([Problem(lab.name, "", f"is already up (engine {existing.engine}, status {existing.status})",
                                        f"run `invoke down {lab.name}` first")])
        bgp, fallback = None, None
        if lab.routing == "bgp":
            lacks = frr.missing(self.frr_daemons.on_this_machine)
            if lacks and lab.routing_how == "default":  # nobody asked for BGP: run what this machine can
                lab = replace(lab, routing="static")
                fallback = f"BGP, the default, needs FRR, and this machine lacks {', '.join(lacks)}: {frr.FRR_PACKAGE}"
            else:
                frr.require_frr(lab.source, lacks)
                bgp = lab_bgp(lab)  # a profile's bad BGP fields stop here, before anything is made
        record = plan(lab, self.name, tdf_choice, bgp)
        if fallback:
            record.routing["fallback"] = fallback
        # Namespaces by this lab's names with no record here: a lab of that name up under another
        # state folder (ROCELAB_STATE_DIR), or left by a crash. A failed up takes down what its
        # record names, so going on would tear down the other lab's.
        taken = [n.netns for n in record.nodes if exists(n.netns)]
        if taken:
            raise LabAlreadyUp([Problem(lab.name, "", f"is already up: its network namespace{'s' if len(taken) > 1 else ''} "
                                        f"{', '.join(taken)} exist{'' if len(taken) > 1 else 's'}, with no record of the "
                                        f"lab in {paths.STATE_DIR} (up under another ROCELAB_STATE_DIR, or left behind)",
                                        f"`invoke down {lab.name}` with the state folder it was brought up with, or "
                                        f"`ip netns delete NAME` for each")])
        lab_state.save(record)
        try:
            self._apply(lab, record, bgp)
        except BaseException:
            self.down(record)
            raise
        record.status = "up"
        lab_state.save(record)
        return record

    def _apply(self, lab: Lab, record: LabState, bgp: dict[str, tuple[BgpConfig, str]] | None = None) -> None:
        fabric, dataplane, nic = lab.fabric, builtin_dataplanes().get(lab.dataplane), builtin_nic_backends().get(lab.nic)
        ns_of = {n.name: n.netns for n in record.nodes}
        self._make_nodes(lab, record)
        if awake.wanted():
            record.awake = [popen_in(record.nodes[0].netns, argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, close_fds=True).pid for argv in awake.commands()]
            lab_state.save(record)
        # A network OS container (clab engine) configures itself from its startup configuration.
        ours = [n for n in fabric.nodes if not n.network_os]
        for node in ours:
            write_sysctls(ns_of[node.name], COMMON_SYSCTLS | (dataplane.switch_sysctls if node.is_switch else {}))
        handles = {n.name: IPRoute(netns=ns_of[n.name]) for n in fabric.nodes}
        try:
            self._make_links(fabric, handles, ns_of)
            for node in ours:
                # IPv6 on the ports of unnumbered sessions alone: their link-local addresses are
                # what bgpd peers over; everywhere else it stays off (COMMON_SYSCTLS).
                unnumbered = [n.address for n in bgp[node.name][0].neighbors if n.unnumbered] \
                    if bgp and node.name in bgp else []
                if unnumbered:
                    write_sysctls(ns_of[node.name], {f"net/ipv6/conf/{port}/disable_ipv6": "0" for port in unnumbered})
            for node in ours:
                config = bgp[node.name][0] if bgp and node.name in bgp else None
                self._configure(handles[node.name], node, fabric, config)
        finally:
            for ipr in handles.values():
                ipr.close()
        if bgp:
            for node in ours:
                if node.name in bgp:
                    record.routing["daemons"] += [
                        {"node": node.name, "pid": proc.pid, "what": daemon}
                        for daemon, proc in frr.start(lab.name, node.name, ns_of[node.name], bgp[node.name][0],
                                                  self.frr_daemons)]
            lab_state.save(record)
        agents: list[tuple[list[Node], Agent]] = []
        if dataplane.agent is not None:
            for node in ours:
                _offloads_off(ns_of[node.name], [p.name for p in node.ports])
            agents += self._agents([node for node in ours if node.is_switch], dataplane.agent)
        if nic.agent is not None and not nic.per_job:
            agents += self._agents(list(fabric.hosts), nic.agent)
        # Start every agent first, then wait for all: their Python start-ups overlap.
        started = [self.spawn_agent(lab, nodes[0], ns_of[nodes[0].name], agent.module) if len(nodes) == 1
                   else self.spawn_shared(lab, nodes, ns_of, agent.module) for nodes, agent in agents]
        record.processes += [{"node": node.name, "pid": proc.pid, "what": agent.name}
                             for (nodes, agent), proc in zip(agents, started) for node in nodes]
        lab_state.save(record)
        for (nodes, agent), proc in zip(agents, started):
            for node in nodes:
                wait_ready(lab.name, node.name, agent.module, proc)
        if bgp:
            start = time.monotonic()
            narrower = wait_converged(lab.fabric, record)
            frr.finish_config(lab.name, {n.name: bgp[n.name][0] for n in ours if n.name in bgp})
            if narrower:
                record.routing["narrower"] = narrower  # than the fabric's equal-cost paths: status says so
            record.routing["converged_s"] = round(time.monotonic() - start, 2)  # after every agent was ready
        rate = fib_routes_per_s(lab)
        record.routing["fib_routes_per_s"] = rate  # None: FIB changes reach the forwarding table at once
        for nodes, agent in agents:
            for node in nodes if rate and agent.name == "switchd" else ():
                control.request(control.socket_path(lab.name, node.name), "fib_programming", routes_per_s=rate)

    def _agents(self, nodes: list[Node], agent: Agent) -> list[tuple[list[Node], Agent]]:
        """One process of `agent` for every SHARED_MAX_NODES of `nodes` where it serves many,
        else one each."""
        if self.shares_agents and agent.serves_many and len(nodes) > 1:
            return [(nodes[i:i + SHARED_MAX_NODES], agent) for i in range(0, len(nodes), SHARED_MAX_NODES)]
        return [([node], agent) for node in nodes]

    def _make_nodes(self, lab: Lab, record: LabState) -> None:
        """A network namespace per node."""
        for node in record.nodes:
            pyroute2_netns.create(node.netns)

    def _make_links(self, fabric: Fabric, handles: dict[str, IPRoute], ns_of: dict[str, str]) -> None:
        """A veth pair per link, created straight into its two namespaces."""
        for link in fabric.links:
            a, b = link.a, link.b
            handles[a.node].link("add", ifname=a.name, kind="veth", address=a.mac, mtu=link.mtu,
                                 peer={"ifname": b.name, "net_ns_fd": ns_of[b.node], "address": b.mac, "mtu": link.mtu})

    def spawn_agent(self, lab: Lab, node: Node, ns: str, module: str) -> subprocess.Popen:
        """Start an agent inside the node's namespace with its configuration file."""
        config_file = write_agent_config(lab, node)
        with control.log_path(lab.name, node.name).open("wb") as log:
            return popen_in(ns, [sys.executable, "-m", module, str(config_file)], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, close_fds=True)

    def spawn_shared(self, lab: Lab, nodes: list[Node], ns_of: dict[str, str], module: str) -> subprocess.Popen:
        """Start one agent serving several nodes, in the first node's namespace; it opens each
        node's ports in that node's. Every node's log is the one log (a link to it)."""
        configs = [str(write_agent_config(lab, node, ns_of[node.name])) for node in nodes]
        log_file = control.log_path(lab.name, nodes[0].name)
        for node in nodes[1:]:
            control.log_path(lab.name, node.name).symlink_to(log_file.name)
        with log_file.open("wb") as log:
            return popen_in(ns_of[nodes[0].name], [sys.executable, "-m", module, *configs], stdin=subprocess.DEVNULL,
                            stdout=log, stderr=subprocess.STDOUT, close_fds=True)

    def _configure(self, ipr: IPRoute, node: Node, fabric: Fabric, bgp: BgpConfig | None = None) -> None:
        """Addresses, static neighbours, and rocelab's ECMP routes unless FRR routes the switch
        (`bgp`: then Loopback0 on `lo` instead)."""
        index = {}
        for port in node.ports:
            idx = ipr.link_lookup(ifname=port.name)[0]
            index[port.name] = idx
            ipr.addr("add", index=idx, address=str(port.address.ip), prefixlen=port.address.network.prefixlen)
            ipr.link("set", index=idx, state="up")
            peer = fabric.peer(port)
            # Static neighbours: no ARP on the wire, and switchd need not answer it.
            ipr.neigh("add", dst=str(peer.address.ip), lladdr=peer.mac, ifindex=idx, state=NUD_PERMANENT)
        lo = ipr.link_lookup(ifname="lo")[0]
        ipr.link("set", index=lo, state="up")
        if bgp is not None:
            if bgp.loopback:
                address = ipaddress.IPv4Interface(bgp.loopback)
                ipr.addr("add", index=lo, address=str(address.ip), prefixlen=address.network.prefixlen)
            return
        for route in node.routes:
            hops = route.nexthops
            if len(hops) == 1:
                ipr.route("add", dst=str(route.dst), gateway=str(hops[0].gateway), oif=index[hops[0].port])
            else:
                ipr.route("add", dst=str(route.dst),
                          multipath=[{"gateway": str(h.gateway), "oif": index[h.port]} for h in hops])

    def down(self, record: LabState) -> None:
        """Stop every process inside the lab's namespaces, then delete the namespaces (which
        deletes their veths), then the record. Safe to repeat; safe on a half-built lab."""
        # An `up` killed while creating a namespace leaves pyroute2's helper process to finish
        # the job a moment later: for a half-built lab, sweep again until nothing reappears.
        # The keep-awake spinners by pid: a container engine has removed its namespaces by now,
        # so the sweep below would not find them there.
        stop([pid for pid in record.awake if awake.__name__.encode() in cmdline(pid)])
        sweeps = 1 if record.status == "up" else CRASHED_UP_SWEEPS
        for sweep in range(sweeps):
            namespaces = [ns for ns in record.namespaces if exists(ns)]
            if not namespaces and sweep:
                break
            stop(pids_in(namespaces))
            for ns in namespaces:
                try:
                    pyroute2_netns.remove(ns)
                except OSError:
                    if exists(ns):
                        raise
            if sweep + 1 < sweeps:
                time.sleep(SWEEP_INTERVAL_S)
        shutil.rmtree(paths.STATE_DIR / record.name, ignore_errors=True)
        lab_state.remove(record.name)

    def exec(self, record: LabState, node: str, argv: list[str]) -> int:
        return run_in(record.node(node).netns, argv).returncode

    @staticmethod
    def alive(record: LabState) -> dict[str, bool]:
        return {n.name: exists(n.netns) for n in record.nodes}
