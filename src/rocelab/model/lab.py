"""Labs: `labs/<name>/lab.yml` names a topology, a data plane, a QoS profile and a TDF.

`invoke up` takes a lab name (a folder under labs/) or a topology (a file under
topologies/, or any path to a topology file); a bare topology runs with the defaults below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from rocelab import paths
from rocelab.routing.bgp import BgpConfig, Design, read_design
from rocelab.errors import InputError, Problem, Problems
from rocelab.roce.config import roce_config
from rocelab.model.kinds import NICD, builtin_dataplanes, builtin_nic_backends
from rocelab.model.scenario import Scenario, load_scenario
from rocelab.model.topology import SAFE_NAME, SAFE_NAME_HINT, Fabric, load_topology
from rocelab.units import parse_delay
from rocelab.yamlfile import at as _at
from rocelab.yamlfile import load_yaml
from rocelab.model.hostnics import nic_entries, nicd_settings, read_host_nics
from rocelab.fabric.spec import Device, load_devices
from rocelab.qos.model import QosProfile
from rocelab.qos.sonic import read_config_db
from rocelab.switch.balance import balance_config, balance_from_config_db

DEFAULT_DATAPLANE = "switchd"
DEFAULT_PROFILE = "roce-lossless"  # for a bare topology on switchd: rocelab is about lossless RoCE
# static: rocelab's ECMP routes, computed at `up`; bgp: FRR on every switch (docs/routing.md).
ROUTING_MODES = ("static", "bgp")
# What a lab.yml or a topology without `routing:` runs (default_routing). A lab made in code (the
# calibration lab) keeps Lab's own default, static routes.
DEFAULT_ROUTING = "bgp"
# Why a fabric with a SONiC-VS or cEOS switch runs static routes: the BGP rocelab renders for
# those (rocelab.engines.nos) speaks only to other NOS switches, so FRR on rocelab's would peer with no one there.
NOS_ROUTING = "SONiC-VS and cEOS switches peer only with each other, not with FRR on rocelab's switches"
LAB_KEYS = frozenset({"name", "description", "topology", "dataplane", "tdf", "tdf_floor", "pfc_wd_tdf",
                      "fidelity_bound", "profile", "profiles", "nic", "routing", "bgp", "fib_routes_per_s",
                      "link_down_detect_ms",
                      "roce", "nics", "flow_control_rx", "load_balancing", "scenario", "checks"})
# `roce:` keys: NicConfig's fields (production units; nicd dilates them by the TDF), with
# DCQCN's parameters under `dcqcn:`.


@dataclass(frozen=True)
class Lab:
    name: str
    source: str  # the lab.yml or topology file it came from
    fabric: Fabric
    dataplane: str
    tdf: int | None  # None: `up` picks what this machine can hold (rocelab.model.tdf)
    profile: Path | None
    nic: str = "none"  # emulated: nicd on every host; verbs: pyverbs on the kernel's RDMA device
    roce: Mapping = field(default_factory=dict)  # the lab's `roce:` NIC settings, as written
    scenario: Scenario | None = None  # what `invoke run` does (rocelab.model.scenario)
    node_profiles: Mapping[str, Path] = field(default_factory=dict)  # a switch's own profile, over `profile`
    # A switch's own QoS config from lab.yml's `profiles:` (a SONiC, EOS or Cumulus file, in
    # fabric.yml's device form), over `profile`: the engine writes it out for switchd.
    node_qos: Mapping[str, QosProfile] = field(default_factory=dict)
    node_nos: Mapping[str, Device] = field(default_factory=dict)  # those entries as read: format, file, options
    # The PFC watchdog's own dilation (default: tdf). At TDF 1000 a 200 ms detection time
    # lasts 200 s of wall time; a lab about storms runs the watchdog's timers on a faster clock.
    pfc_wd_tdf: int | None = None
    tdf_how: str = "lab"  # who set tdf: "lab" (lab.yml) or "option" (up --tdf N); unused when auto
    tdf_floor: int = 1  # the least TDF auto may pick (lab.yml's `tdf_floor`, the plugin's headroom margin)
    # How late an agent may run an event, in wall time, before this lab's observations could
    # change (rocelab.runtime.fidelity); None: one MTU frame's time on the fastest link.
    fidelity_bound_s: float | None = None
    # Per host, `roce:` settings over the lab's, from the host's NIC tools (lab.yml `nics:`,
    # rocelab.model.hostnics); and what those files held that nicd cannot carry.
    host_roce: Mapping[str, Mapping] = field(default_factory=dict)
    host_notes: tuple[str, ...] = ()
    # Switch ports ("leaf1:eth2") that honour 802.3x PAUSE (SAI's global flow control, rx);
    # every other port counts it and drops it, as SONiC leaves the setting off.
    flow_control_rx: frozenset[str] = frozenset()
    # Every switch's ECMP load balancing (rocelab.switch.balance), as written; empty: each
    # switch's profile decides (SONiC's ARS tables), else hash.
    load_balancing: Mapping = field(default_factory=dict)
    routing: str = "static"  # one of ROUTING_MODES
    # Who chose it: "lab" (lab.yml, or the code that made the lab), "option" (up --routing) or
    # "default" (DEFAULT_ROUTING: on a machine without FRR, `up` runs static routes and says so).
    routing_how: str = "lab"
    # How fast each switch programs route changes into its forwarding table, in production routes
    # a second (emulated time: switchd dilates it); 0: at once. None: SONiC's figure where FRR
    # routes (rocelab.switch.fib.SONIC_FIB_ROUTES_PER_S), at once on static routes.
    fib_routes_per_s: float | None = None
    # A switch's BGP as its own files give it (a fabric description's config_db and constants.yml),
    # over rocelab.routing.design's choice: what FRR runs there when routing is bgp.
    node_bgp: Mapping[str, BgpConfig] = field(default_factory=dict)
    bgp: Design = Design()  # lab.yml `bgp:`, over every switch's own BGP (rocelab.routing.design.lab_bgp)
    # How long a switch takes to see a link's far end go dark (loss of signal, a linkscan poll),
    # in production seconds: until then its ASIC forwards onto the dead link (rocelab.switch.fib.SignalLoss).
    link_down_detect_s: float = 0.0

    def roce_of(self, host: str) -> dict:
        """The `roce:` settings of one host's NIC."""
        return {**self.roce, **self.host_roce.get(host, {})}

    @property
    def runs_nicd(self) -> bool:
        """Whether nicd moves the hosts' frames (the emulated NIC), not their own kernels."""
        return builtin_nic_backends().get(self.nic).agent == NICD


def _is_tdf(value: object) -> bool:
    """A time-dilation factor: a whole number ≥ 1 (YAML's true is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def default_routing(fabric: Fabric) -> str:
    """What a lab that does not say runs: BGP, unless a NOS switch is in the fabric (NOS_ROUTING)."""
    return "static" if any(n.network_os for n in fabric.nodes) else DEFAULT_ROUTING


def _without_bgp(fabric: Fabric) -> tuple[str, str]:
    """Why a lab on this fabric lacks BGP, and the fix to hint: `routing: bgp` where its switches
    can run FRR, none where NOS switches refuse it."""
    if default_routing(fabric) == "bgp":
        return "", "routing: bgp"
    return f" (the topology has NOS switches: {NOS_ROUTING})", ""


def _find_topology(ref: str) -> Path | None:
    for candidate in (Path(ref), paths.topologies_dir() / ref, paths.topologies_dir() / f"{ref}.yml"):
        if candidate.is_file():
            return candidate
    return None


def load_lab(ref: str) -> Lab:
    """A lab by folder name under labs/, or a topology by name or path."""
    lab_file = paths.labs_dir() / ref / "lab.yml"
    if lab_file.is_file():
        return _load_lab_file(lab_file)
    topo = _find_topology(ref)
    if topo is None:
        labs = sorted(p.parent.name for p in paths.labs_dir().glob("*/lab.yml"))
        topos = sorted(p.stem for p in paths.topologies_dir().glob("*.yml"))
        raise InputError([Problem(ref, "", "is neither a lab nor a topology",
                                  f"labs: {', '.join(labs) or 'none'}; topologies: {', '.join(topos) or 'none'}")])
    fabric = load_topology(topo)
    return Lab(fabric.name, fabric.source, fabric, DEFAULT_DATAPLANE, None,
               paths.profiles_dir() / f"{DEFAULT_PROFILE}.json", routing=default_routing(fabric), routing_how="default")


def _load_lab_file(path: Path) -> Lab:
    doc = load_yaml(path)
    problems = Problems(doc.name)
    data = doc.data if isinstance(doc.data, dict) else {}
    if not isinstance(doc.data, dict):
        problems.add("", "is not a lab: expected a mapping with at least `topology`")
        problems.raise_if_any()
    for key in data:
        if key not in LAB_KEYS:
            problems.add(str(key), f"unknown key {key!r}", f"expected one of: {', '.join(sorted(LAB_KEYS))}")
    name = path.parent.name
    if not SAFE_NAME.match(name):
        problems.add("", f"lab folder name {name!r} is not a safe identifier", SAFE_NAME_HINT)
    if data.get("name", name) != name:
        problems.add("name", f"{data['name']!r} differs from the folder name {name!r}", "a lab is named by its folder")
    topo_ref = data.get("topology")
    topo = _find_topology(str(topo_ref)) if topo_ref else None
    if topo_ref is None:
        problems.add("topology", "is missing", "name a file under topologies/, e.g. leaf-spine-2x2")
    elif topo is None:
        problems.add("topology", f"{topo_ref!r} is not a topology file",
                     f"topologies: {', '.join(sorted(p.stem for p in paths.topologies_dir().glob('*.yml')))}")
    dataplane = data.get("dataplane", DEFAULT_DATAPLANE)
    if dataplane not in builtin_dataplanes().names():
        problems.add("dataplane", f"{dataplane!r} is not a data plane",
                     f"expected one of: {', '.join(builtin_dataplanes().names())}")
    tdf = data.get("tdf", "auto")
    if tdf == "auto":
        tdf = None
    elif not _is_tdf(tdf):
        problems.add("tdf", f"{tdf!r} is not a time-dilation factor",
                     "auto (the smallest this machine holds for the lab), or a whole number ≥ 1, e.g. 1000")
    fidelity_bound_s = None
    if "fidelity_bound" in data:
        try:
            fidelity_bound_s = parse_delay(str(data["fidelity_bound"]))
        except ValueError as exc:
            problems.add("fidelity_bound", str(exc), "a wall-clock delay like 10ms: how late an agent may run an "
                         "event before this lab's observations could change")
    tdf_floor = data.get("tdf_floor", 1)
    if not _is_tdf(tdf_floor):
        problems.add("tdf_floor", f"{tdf_floor!r} is not a time-dilation factor",
                     "a whole number ≥ 1: the least TDF `up` picks on its own for this lab, e.g. 800")
        tdf_floor = 1
    elif "tdf_floor" in data and _is_tdf(tdf):
        problems.add("tdf_floor", "is a floor for the TDF `up` picks, and tdf pins one",
                     "drop one of tdf and tdf_floor")
    pfc_wd_tdf = data.get("pfc_wd_tdf")
    if pfc_wd_tdf is not None and not _is_tdf(pfc_wd_tdf):
        problems.add("pfc_wd_tdf", f"{pfc_wd_tdf!r} is not a time-dilation factor",
                     "a whole number ≥ 1: the PFC watchdog's timers run this much slower than production")
    profile = None
    if "profile" in data:
        # A lab may carry its own profiles beside lab.yml (a deliberately broken one, say).
        profile = next((p for p in (path.parent / f"{data['profile']}.json",
                                    paths.profiles_dir() / f"{data['profile']}.json") if p.is_file()), None)
        if profile is None:
            problems.add("profile", f"{data['profile']!r} is not a QoS profile",
                         f"profiles: {', '.join(sorted(p.stem for p in paths.profiles_dir().glob('*.json')))}")
        else:
            try:  # its SONiC ARS tables, which switchd reads for the ECMP load balancing
                balance_from_config_db(read_config_db(profile), str(profile))
            except ValueError as exc:
                problems.add("profile", str(exc), "ARS_OBJECT as sonic-ars.yang has it: assign_mode "
                             "per_flowlet_quality or per_packet_quality, flowlet_idle_time 2..2047")
    routing = data.get("routing", DEFAULT_ROUTING)
    routing_how = "lab" if "routing" in data else "default"
    if routing not in ROUTING_MODES:
        problems.add("routing", f"{routing!r} is not a routing mode",
                     "static (rocelab's ECMP routes) or bgp (FRR on every switch, docs/routing.md)")
    bgp = read_design(data["bgp"], lambda *keys: _at(doc, "bgp", *keys), problems) if "bgp" in data else Design()
    if "bgp" in data and routing != "bgp":
        problems.add(_at(doc, "bgp"), "sets the BGP design of a lab without BGP", "routing: bgp")
    fib_routes_per_s = data.get("fib_routes_per_s")
    if fib_routes_per_s is not None and (isinstance(fib_routes_per_s, bool) or not isinstance(fib_routes_per_s, (int, float))
                                         or fib_routes_per_s < 0):
        problems.add("fib_routes_per_s", f"{fib_routes_per_s!r} is not a rate",
                     "routes a second a switch programs into its forwarding table, e.g. 10500; 0: at once")
        fib_routes_per_s = None
    link_down_detect_ms = data.get("link_down_detect_ms", 0)
    if isinstance(link_down_detect_ms, bool) or not isinstance(link_down_detect_ms, (int, float)) or not (
            0 <= link_down_detect_ms <= 10_000):
        problems.add("link_down_detect_ms", f"{link_down_detect_ms!r} is not a detection time",
                     "milliseconds from 0 (at once) to 10000 a switch takes to see its link's far end go dark, e.g. 1")
        link_down_detect_ms = 0
    nic = data.get("nic", "none")
    if nic not in builtin_nic_backends().names():
        problems.add("nic", f"{nic!r} is not a NIC backend", f"expected one of: {', '.join(builtin_nic_backends().names())}")
    roce = data.get("roce") or {}
    if not isinstance(roce, dict):
        problems.add("roce", f"{roce!r} is not a mapping of NIC settings", "e.g. roce: {pmtu_bytes: 4096, cc_algorithm: dcqcn}")
    else:
        try:
            roce_config(roce)
        except (ValueError, TypeError) as exc:
            problems.add("roce", str(exc))
    load_balancing = data.get("load_balancing") or {}
    try:
        balance_config(load_balancing)
    except ValueError as exc:
        problems.add(_at(doc, "load_balancing"), str(exc), "e.g. load_balancing: {mode: flowlet, flowlet_idle_time_us: 256}")
    if nic == "verbs" and isinstance(roce, dict) and roce.get("receive_order") == "place":
        problems.add(_at(doc, "roce", "receive_order"), "place: the verbs backend runs the kernel's RDMA device, "
                     "whose receiver rocelab does not set", "receive_order: place needs nic: emulated")
    entries = nic_entries(doc, data.get("nics"), ("nics",), problems)
    problems.raise_if_any()
    fabric = load_topology(topo)
    if routing_how == "default":
        routing = default_routing(fabric)
    elif routing == "bgp" and default_routing(fabric) != "bgp":
        problems.add("routing", f"is bgp, and the topology has NOS switches: {NOS_ROUTING}", "routing: static")
    nos, hint = _without_bgp(fabric)
    if "bgp" in data and routing_how == "default" and routing != "bgp":
        problems.add(_at(doc, "bgp"), f"sets the BGP design of a lab without BGP{nos}", hint)
    nics = read_host_nics(doc, entries, [h.name for h in fabric.hosts], path.parent, ("nics",), problems)
    problems.raise_if_any()
    host_roce, host_notes, invalid = nicd_settings(nics, roce)
    for why in invalid:
        problems.add(_at(doc, "nics"), why)
    problems.raise_if_any()
    switch_ports = {(n.name, p.name) for n in fabric.switches for p in n.ports}
    flow_control_rx = data.get("flow_control_rx") or []
    if not isinstance(flow_control_rx, list) or any(
            not isinstance(x, str) or tuple(x.partition(":")[::2]) not in switch_ports for x in flow_control_rx):
        problems.add(_at(doc, "flow_control_rx"), f"{flow_control_rx!r} is not a list of this lab's switch ports",
                     "like [leaf1:eth2]: the ports that act on 802.3x PAUSE")
        problems.raise_if_any()
    scenario = load_scenario(doc, path.parent, {h.name for h in fabric.hosts}, switch_ports,
                             {(n.name, p.name) for n in fabric.nodes for p in n.ports})
    for i, case in enumerate(scenario.cases if scenario else ()):
        if case.bgp is not None and routing != "bgp":
            problems.add(_at(doc, "scenario", i, "bgp"), f"sets the BGP design of a case in a lab without BGP{nos}",
                         hint)
    problems.raise_if_any()
    placing = [i for i, c in enumerate(scenario.cases if scenario else ()) if c.receive_order == "place"]
    if nic == "verbs" and placing:
        problems.add(_at(doc, "scenario", placing[0], "receive_order"), "place: the verbs backend runs the "
                     "kernel's RDMA device, whose receiver rocelab does not set", "receive_order: place needs nic: emulated")
        problems.raise_if_any()
    node_qos, devices = {}, {}
    if "profiles" in data:
        devices = load_devices(doc, data["profiles"], path.parent, fabric, "profiles")
        node_qos = {name: device.profile for name, device in devices.items()}
    return Lab(name, doc.name, fabric, dataplane, tdf, profile, nic, roce, scenario, node_qos=node_qos,
               node_nos=devices,
               pfc_wd_tdf=pfc_wd_tdf, tdf_floor=tdf_floor,
               fidelity_bound_s=fidelity_bound_s, host_roce=host_roce, host_notes=tuple(host_notes),
               flow_control_rx=frozenset(flow_control_rx), load_balancing=load_balancing, routing=routing,
               routing_how=routing_how, fib_routes_per_s=fib_routes_per_s, bgp=bgp, link_down_detect_s=link_down_detect_ms / 1e3)
