"""The fabric description: the topology with its real cables, each switch's QoS config as
the switch holds it, and what the hosts' NICs do.

A description is a directory holding `fabric.yml`, or a YAML file of that form:

    name: fabric-good
    topology: topology.yml        # a topology file (path relative to this file), or the
                                  # topology inline: {defaults: …, nodes: …, links: …}
    devices:                      # one entry per switch of the topology, by node name
      leaf1: {sonic: leaf1/config_db.json}     # a whole config_db.json saved on the switch
      leaf2:
        sonic: leaf2/config_db.json  # or a template rendering (sonic-cfggen's qos + buffers)
        pg_profile_lookup: leaf2/pg_profile_lookup.ini  # optional: the platform's file; the
                                  #   lossless PGs buffermgrd creates from it are checked too
        default_pfcwd_status: enable  # optional: overrides DEVICE_METADATA's (pfcwd start_default)
        ports: {Ethernet0: eth1, Ethernet4: eth2}  # optional: SONiC port → rocelab interface,
                                  #   every cabled one; default: the PORT table's order
        voq_host: lc1|asic0       # optional: a VOQ chassis line card whose keys are this device's
        constants: leaf2/constants.yml  # optional: the image's /etc/sonic/constants.yml, for
                                  #   BGP's multipath-relax and maximum-paths (default: SONiC's own)
      leaf3:
        cumulus: leaf3.nvue.yml   # NVIDIA Cumulus Linux: `nv config show` (YAML), `nv config show
                                  #   -o commands` lines, or a directory holding the rendered
                                  #   qos_features.conf and qos_infra.conf
        buffer: {…}               # optional, as for EOS: Cumulus derives PFC headroom on the ASIC
      spine1:
        eos: spine1.cfg           # an EOS running-config
        segment_bytes: 208        # bytes per EOS threshold "segment" on this platform: needed
                                  #   when thresholds are in segments and rocelab's table
                                  #   (rocelab.qos.eos) does not know the platform
        buffer:                   # the platform's PFC buffer figures (EOS configs hold none)
          pool_size_bytes: 12MiB  #   ingress pool the lossless PGs draw from
          dynamic_th: -5          #   or static_th_bytes: the PFC threshold
          xoff_bytes: 56KiB       #   headroom per lossless PG
          xon_bytes: 18KiB        #   optional, as are xon_offset_bytes, pg_size_bytes and
                                  #   shared_headroom_bytes (a shared headroom pool)
    hosts:                        # what every host's NIC does
      roce_dscp: 26               #   DSCP of RoCE data
      roce_priority: 3            #   802.1p priority of RoCE data: the one its PFC pauses
      cnp_dscp: 48                #   DSCP of CNPs
      roce_mtu: 4096              #   RDMA path MTU: 256, 512, 1024, 2048 or 4096
      nics:                       #   optional: what the NICs really do, as their tools print
        h1: {mlnx_qos: h1.mlnx_qos.txt, sysfs: h1.sysfs.txt}   # by host name,
        "h[34]": {mlnx_qos: "{host}.mlnx_qos.txt"}             # or a glob ({host}: its name)
    budgets:                      # optional, for the dynamic checks
      allreduce_step_time_s: 20ms

An EOS or Cumulus device's `buffer` becomes the profile's pool and, on every port, the buffer profile
of the PG of each no-drop priority, so the checks and switchd treat EOS and SONiC devices
alike. A SONiC device is what it runs (rocelab.qos.derived): buffermgrd's lossless PGs where
`pg_profile_lookup` is given, pfcwd start_default's watchdogs where default_pfcwd_status is
enable. MTUs: a SONiC port's is PORT.<port>.mtu (default 9100), an EOS interface's its `mtu`
(default `interface defaults` `mtu`, else 1500), a Cumulus swp port's `link mtu` (default
9216); all are IP MTUs. A Cumulus device's PFC cable length is checked against the cables as
a SONiC device's CABLE_LENGTH is. An EOS device's latency
ECN thresholds are converted at each cabled port's link rate where the interface sets no
`speed`; a DSCP the hosts send (RoCE's, CNPs') whose class on a cabled EOS port depends on
what rocelab cannot evaluate (an ACL match, a DSCP rewrite) is an error naming the statement.

`hosts.nics` names, per host or glob of host names, the saved output of `mlnx_qos -i IFACE`
(`mlnx_qos`) and of docs/hosts.md's collection command (`sysfs`), at least one of them;
`{host}` in a path stands for the host's name.

A SONiC device whose config_db sets DEVICE_METADATA.localhost.bgp_asn and has BGP_NEIGHBOR or
BGP_PEER_RANGE entries carries its BGP configuration as sonic-bgpcfgd reads it
(rocelab.routing.bgp), checked by rocelab.fabric.bgplint and run by FRR in the dynamic checks.
An EOS device's `router bgp` (rocelab.routing.eos) and a Cumulus device's NVUE `router bgp`
statements (rocelab.routing.nvue) are read into the same model and checked alike; FRR does not
run them (lab_from_spec). A device without BGP says why (Device.bgp_absent). Each host matches at most one entry (a name
beats a glob); a host no entry matches has no NIC config, and the host checks
(rocelab.fabric.hostlint) do not apply to it.

Steps (STYLE.md 1): load fabric.yml → validate it → load the topology and every device
file → check that devices and switches match. Problems from every file are collected and
raised once as an InputError; each names its file, the path or line, and what was expected.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Mapping, Protocol

from rocelab.errors import InputError, Problem, Problems, read_text
from rocelab.paths import display
from rocelab.qos.derived import (
    PortFacts,
    SwitchFacts,
    default_pfcwd,
    default_pfcwd_ports,
    derive_default_pfcwd,
    derive_lossless_pgs,
    parse_pg_profile_lookup,
)
from rocelab.qos.cumulus import DEFAULT_MTU_BYTES as _CUMULUS_MTU
from rocelab.qos.cumulus import CumulusConfig, lab_to_cumulus, load_cumulus
from rocelab.qos.eos import EosConfig, lab_to_eos, parse_eos_config
from rocelab.qos.nic import IB_MTUS
from rocelab.model.hostnics import HostNic, NicEntry, nic_entries, read_host_nics
from rocelab.qos.model import BufferPool, BufferProfile, PortQos, QosProfile
from rocelab.qos.ports import LAB_PORT, lab_to_sonic, port_number, sonic_to_lab
from rocelab.routing.bgp import BgpConfig, has_bgp, read_bgp, read_constants
from rocelab.routing.eos import has_router_bgp, read_eos_bgp
from rocelab.routing.nvue import has_nvue_bgp, read_nvue_bgp
from rocelab.qos.sonic import profile_from_config_db, read_config_db, switch_facts, voq_hosts
from rocelab.model.topology import SAFE_NAME, SAFE_NAME_HINT, Fabric, Node, load_topology, resolve, validate
from rocelab.units import parse_bytes, parse_delay
from rocelab.yamlfile import YamlDoc, load_yaml
from rocelab.yamlfile import at as _at

FABRIC_FILE = "fabric.yml"
FORMATS = ("sonic", "eos", "cumulus")
Format = Literal["sonic", "eos", "cumulus"]
SONIC_DEFAULT_MTU_BYTES = 9100
PLATFORM_POOL = "platform_ingress_pool"
PLATFORM_PG_PROFILE = "platform_lossless_pg"

_TOP_KEYS = ("name", "description", "topology", "devices", "hosts", "budgets")
_HOST_KEYS = ("roce_dscp", "roce_priority", "cnp_dscp", "roce_mtu", "nics")
_BUDGET_KEYS = ("allreduce_step_time_s", "allreduce_size")
_SONIC_KEYS = ("pg_profile_lookup", "default_pfcwd_status", "ports", "voq_host", "constants")
_BUFFER_KEYS = ("pool_size_bytes", "shared_headroom_bytes", "pg_size_bytes", "dynamic_th",
                "static_th_bytes", "xoff_bytes", "xon_bytes", "xon_offset_bytes")
# BUFFER_PROFILE / BUFFER_POOL field → the `buffer` key that stands for it on an EOS device
_BUFFER_FIELDS = {"size": "pg_size_bytes", "dynamic_th": "dynamic_th",
                  "static_th": "static_th_bytes", "xoff": "xoff_bytes", "xon": "xon_bytes",
                  "xon_offset": "xon_offset_bytes"}
_POOL_FIELDS = {"size": "pool_size_bytes", "xoff": "shared_headroom_bytes"}


# ---------------------------------------------------------------- the resolved description


class Origin(Protocol):
    """Where a device's QoS values come from, as text a user can find: the file and the
    config_db table/key, or the file and line. `port` is the PortQos the value belongs to."""

    def dscp_to_tc(self, port: PortQos, dscp: int) -> str: ...

    def tc_to_queue(self, port: PortQos, tc: int) -> str: ...

    def pfc_enable(self, port: PortQos) -> str: ...

    def pfc_to_queue(self, port: PortQos, priority: int) -> str: ...

    def pg_buffer(self, port: PortQos, pg: int, field: str) -> str: ...

    def wred(self, port: PortQos, queue: int, field: str) -> str: ...

    def scheduler(self, port: PortQos, queue: int) -> str: ...

    def pfc_wd(self, port: PortQos) -> str: ...

    def mtu(self, port: PortQos) -> str: ...

    def pool(self, name: str, field: str) -> str: ...


@dataclass(frozen=True)
class EosOptions:
    """What an EOS device's profile takes beyond its running-config text: the platform's segment
    size and buffer figures (fabric.yml's `segment_bytes:` and `buffer:`), its ports' speeds."""

    segment_bytes: int | None
    buffer: tuple[BufferPool, BufferProfile] | None
    port_speeds_bps: Mapping[str, int]

    def profile(self, text: str, source: str) -> tuple[EosConfig, QosProfile]:
        """The EOS config and the profile switchd runs for a running-config's text (InputError
        naming `source` when it does not read)."""
        config = parse_eos_config(text, source, segment_bytes=self.segment_bytes, port_speeds_bps=self.port_speeds_bps)
        return config, _with_platform_buffers(config.profile, *self.buffer) if self.buffer else config.profile


@dataclass(frozen=True)
class Device:
    """One switch's QoS configuration, as loaded from its file."""

    name: str
    format: Format
    file: str
    profile: QosProfile
    origin: Origin
    configured_mtu_bytes: Mapping[str, int]  # SONiC port name → MTU the file sets
    default_mtu_bytes: int
    unlisted: PortQos  # what a port the file does not mention gets
    port_names: Mapping[str, str] = field(default_factory=dict)  # SONiC name → the file's
    # PORT, CABLE_LENGTH, DEVICE_METADATA… of a SONiC device (empty for EOS)
    facts: SwitchFacts = field(default_factory=SwitchFacts)
    # Why lossless PGs the switch creates at run time are missing from the profile; None: none are.
    unsized_pgs: str | None = None
    eos: EosOptions | None = None  # an EOS device: how its running-config becomes a profile again
    bgp: BgpConfig | None = None  # its BGP configuration, where its file gives one
    bgp_absent: str = ""  # why it has none (bgp None)

    def port(self, lab_port: str) -> PortQos:
        sonic = self.profile.sonic_name(lab_port)
        return self.profile.ports.get(sonic) or replace(self.unlisted, port=sonic)

    def mtu_bytes(self, lab_port: str) -> int:
        return self.configured_mtu_bytes.get(self.profile.sonic_name(lab_port), self.default_mtu_bytes)

    def port_name(self, lab_port: str) -> str:
        """The port as this device's config names it."""
        if self.format == "sonic":
            return self.profile.sonic_name(lab_port)
        fallback = lab_to_cumulus if self.format == "cumulus" else lab_to_eos
        return self.port_names.get(self.profile.sonic_name(lab_port)) or fallback(lab_port)

    def label(self, lab_port: str) -> str:
        return f"{self.port_name(lab_port)} ({lab_port})"


@dataclass(frozen=True)
class HostSide:
    roce_dscp: int
    roce_priority: int
    cnp_dscp: int
    roce_mtu_bytes: int
    nics: Mapping[str, HostNic] = field(default_factory=dict)  # by host name


@dataclass(frozen=True)
class Budgets:
    allreduce_step_time_s: float | None = None
    allreduce_size_bytes: int = 16_000_000  # the nccl-tests size the step-time budget is for


@dataclass(frozen=True)
class FabricSpec:
    name: str
    source: str  # the fabric.yml (or YAML file) as the user would type it
    fabric: Fabric
    devices: Mapping[str, Device]  # by switch name, in topology order
    hosts: HostSide
    budgets: Budgets = field(default_factory=Budgets)


# ---------------------------------------------------------------- where values come from


def _quote(key: object) -> str:
    return f'"{key}"'


@dataclass(frozen=True)
class SonicOrigin:
    file: str
    configured_mtu_bytes: Mapping[str, int]
    derived_pgs: Mapping[str, str] = field(default_factory=dict)  # BUFFER_PROFILE → its source
    unsized_pgs: str | None = None  # Device.unsized_pgs
    default_pfcwd: str | None = None  # what turned pfcwd start_default on; None: off
    default_pfcwd_ports: frozenset[str] = frozenset()

    def _map(self, table: str, name: str | None, port: str, field_name: str, key: int) -> str:
        if name is None:
            return (f"{self.file}: PORT_QOS_MAP.{port} names no {field_name} (SONiC's default "
                    "applies)")
        return f"{self.file}: {table}.{name}.{_quote(key)}"

    def dscp_to_tc(self, port: PortQos, dscp: int) -> str:
        return self._map("DSCP_TO_TC_MAP", port.map_names.dscp_to_tc_map, port.port,
                         "dscp_to_tc_map", dscp)

    def tc_to_queue(self, port: PortQos, tc: int) -> str:
        return self._map("TC_TO_QUEUE_MAP", port.map_names.tc_to_queue_map, port.port,
                         "tc_to_queue_map", tc)

    def pfc_enable(self, port: PortQos) -> str:
        return f"{self.file}: PORT_QOS_MAP.{port.port}.pfc_enable"

    def pfc_to_queue(self, port: PortQos, priority: int) -> str:
        return self._map("MAP_PFC_PRIORITY_TO_QUEUE", port.map_names.pfc_to_queue_map, port.port,
                         "pfc_to_queue_map", priority)

    def pg_buffer(self, port: PortQos, pg: int, field: str) -> str:
        profile = port.pgs.get(pg)
        if profile is None:
            return f"{self.file}: no BUFFER_PG entry for {port.port} PG {pg}" + (
                f" ({self.unsized_pgs})" if self.unsized_pgs else "")
        if profile.name in self.derived_pgs:
            return (f"{self.derived_pgs[profile.name]}: {field} of BUFFER_PROFILE.{profile.name}, which "
                    f"buffermgrd creates for BUFFER_PG {port.port} PG {pg}")
        return f"{self.file}: BUFFER_PROFILE.{profile.name}.{field} (BUFFER_PG {port.port} PG {pg})"

    def wred(self, port: PortQos, queue: int, field: str) -> str:
        qos = port.queues.get(queue)
        if qos is None or qos.wred is None:
            return f"{self.file}: QUEUE {port.port} queue {queue} has no wred_profile"
        return (f"{self.file}: WRED_PROFILE.{qos.wred.name}.{field} (QUEUE {port.port} queue "
                f"{queue})")

    def scheduler(self, port: PortQos, queue: int) -> str:
        qos = port.queues.get(queue)
        if qos is None or qos.scheduler is None:
            return f"{self.file}: QUEUE {port.port} queue {queue} has no scheduler"
        return f"{self.file}: SCHEDULER.{qos.scheduler.name} (QUEUE {port.port} queue {queue})"

    def pfc_wd(self, port: PortQos) -> str:
        if port.port in self.default_pfcwd_ports:
            return (f"pfcwd start_default ({self.default_pfcwd}) guards {port.port}; "
                    f"{self.file}: PORT_QOS_MAP.{port.port}.pfcwd_sw_enable")
        if port.pfc_wd is None:
            return f"{self.file}: PFC_WD has no entry for {port.port}" + (
                f", and pfcwd start_default ({self.default_pfcwd}) guards only DEVICE_NEIGHBOR ports"
                if self.default_pfcwd else "")
        return f"{self.file}: PORT_QOS_MAP.{port.port}.pfcwd_sw_enable"

    def mtu(self, port: PortQos) -> str:
        if port.port in self.configured_mtu_bytes:
            return f"{self.file}: PORT.{port.port}.mtu"
        return (f"{self.file}: PORT.{port.port} sets no mtu (SONiC's default "
                f"{SONIC_DEFAULT_MTU_BYTES})")

    def pool(self, name: str, field: str) -> str:
        return f"{self.file}: BUFFER_POOL.{name}.{field}"


def _platform_buffer(fabric_file: str, device: str, lines: Mapping[str, int], key: str, why: str) -> str:
    """Where a device's platform `buffer` figure is said in fabric.yml."""
    where = f"{fabric_file}: devices.{device}.buffer"
    if not lines:
        return f"{where} is not given ({why}: give the platform's)"
    line = lines.get(key)
    return f"{where}.{key}" + (f" (line {line})" if line else " (not given)")


@dataclass(frozen=True)
class EosOrigin:
    file: str
    config: EosConfig
    device: str
    fabric_file: str
    buffer_lines: Mapping[str, int]  # `buffer` key in fabric.yml → line

    def _line(self, *key: object) -> str | None:
        line = self.config.line(*key)
        return None if line is None else f"{self.file} line {line}"

    def _interface(self, port: PortQos) -> str:
        return self.config.eos_names.get(port.port) or lab_to_eos(sonic_to_lab(port.port))

    def _buffer(self, key: str) -> str:
        return _platform_buffer(self.fabric_file, self.device, self.buffer_lines, key,
                                "EOS configs hold no buffer model")

    def dscp_to_tc(self, port: PortQos, dscp: int) -> str:
        policy = self._line("class", port.port, dscp)
        if policy:
            return f"{policy} (policy-map, {self._line('policy', port.port)})"
        if port.dscp_to_tc != self.config.default_port.dscp_to_tc:
            trust = self._line("trust", port.port)
            if trust:
                return f"{trust} (the port does not trust DSCP)"
        return self._line("dscp", dscp) or f"{self.file}: no `qos map dscp {dscp}` (EOS's default)"

    def tc_to_queue(self, port: PortQos, tc: int) -> str:
        return self._line("tc-queue", tc) or (
            f"{self.file}: no `qos map traffic-class {tc} to tx-queue` (EOS's default: the "
            "tx-queue of the same number)")

    def pfc_enable(self, port: PortQos) -> str:
        return self._line("pfc", port.port) or (
            f"{self.file}: interface {self._interface(port)} has no `priority-flow-control on`")

    def pfc_to_queue(self, port: PortQos, priority: int) -> str:
        # EOS has no such map: a priority's pause stops its traffic class's tx-queue.
        return self.tc_to_queue(port, priority)

    def pg_buffer(self, port: PortQos, pg: int, field: str) -> str:
        return self._buffer(_BUFFER_FIELDS[field])

    def wred(self, port: PortQos, queue: int, field: str) -> str:
        return self._line("ecn", port.port, queue) or (
            f"{self.file}: interface {self._interface(port)} tx-queue {queue} has no "
            "`random-detect ecn`")

    def scheduler(self, port: PortQos, queue: int) -> str:
        return self._line("scheduler", port.port, queue) or (
            f"{self.file}: interface {self._interface(port)} tx-queue {queue} has no "
            "`priority strict`")

    def pfc_wd(self, port: PortQos) -> str:
        return self._line("watchdog", port.port) or (
            f"{self.file}: no `priority-flow-control pause watchdog default timeout`")

    def mtu(self, port: PortQos) -> str:
        default = self._line("default-mtu")
        return self._line("mtu", port.port) or (
            f"{self.file}: interface {self._interface(port)} sets no mtu (the default "
            f"{self.config.default_mtu_bytes}" + (f", {default})" if default else " of EOS)"))

    def pool(self, name: str, field: str) -> str:
        return self._buffer(_POOL_FIELDS[field])


@dataclass(frozen=True)
class CumulusOrigin:
    """Where a Cumulus device's values come from: the file and the line or YAML path of the
    statement (`nv set …`, or `key = value` of a rendered file), or the Cumulus default that
    applies (with `qos roce`'s, naming the release it follows)."""

    file: str
    config: CumulusConfig
    device: str
    fabric_file: str
    buffer_lines: Mapping[str, int]

    def _at(self, *key: object) -> str:
        return self.config.at(*key) or f"{self.file}: {' '.join(map(str, key))}"

    def dscp_to_tc(self, port: PortQos, dscp: int) -> str:
        sp = port.dscp_to_tc[dscp]
        return (f"{self._at('dscp', port.port, dscp)} (DSCP {dscp} → switch priority {sp}); "
                f"{self._at('trust', port.port)}")

    def tc_to_queue(self, port: PortQos, tc: int) -> str:
        return self._at("sp-tc", port.port, tc)

    def pfc_enable(self, port: PortQos) -> str:
        return self._at("pfc", port.port)

    def pfc_to_queue(self, port: PortQos, priority: int) -> str:
        # Cumulus has no such map: a switch priority's pause stops its traffic class.
        return self.tc_to_queue(port, priority)

    def pg_buffer(self, port: PortQos, pg: int, field: str) -> str:
        given = self.config.at("pfc-buffer", port.port)
        if given and field in ("xoff", "xon", "size"):
            return given
        return _platform_buffer(self.fabric_file, self.device, self.buffer_lines, _BUFFER_FIELDS[field],
                                "Cumulus derives PFC buffers on the ASIC")

    def wred(self, port: PortQos, queue: int, field: str) -> str:
        return self._at("ecn", port.port, queue)

    def scheduler(self, port: PortQos, queue: int) -> str:
        return self._at("scheduler", port.port, queue)

    def pfc_wd(self, port: PortQos) -> str:
        return self._at("watchdog", port.port)

    def mtu(self, port: PortQos) -> str:
        return self._at("mtu", port.port)

    def pool(self, name: str, field: str) -> str:
        return _platform_buffer(self.fabric_file, self.device, self.buffer_lines, _POOL_FIELDS[field],
                                "Cumulus sizes pools as shares of the ASIC's buffer")


# ---------------------------------------------------------------- fabric.yml


@dataclass(frozen=True)
class _DeviceEntry:
    name: str
    format: Format
    path: Path
    segment_bytes: int | None
    buffer: tuple[BufferPool, BufferProfile] | None
    buffer_lines: Mapping[str, int]
    # SONiC only: what the switch derives at run time, and how its ports and line card are named
    pg_profile_lookup: Path | None = None
    default_pfcwd_status: str | None = None  # overrides DEVICE_METADATA's
    ports: Mapping[str, str] | None = None  # SONiC port → rocelab interface; None: PORT's order
    voq_host: str | None = None
    constants: Path | None = None  # the image's constants.yml
    section: str = "devices"  # the key of the YAML file the entry is under (lab.yml: profiles)


class _Reader:
    """Typed getters over fabric.yml that record a problem at the value's path and line."""

    def __init__(self, doc: YamlDoc):
        self.doc = doc
        self.problems = Problems(doc.name)

    def bad(self, path: tuple[str | int, ...], message: str, hint: str = "") -> None:
        self.problems.add(_at(self.doc, *path), message, hint)

    def mapping(self, value: Any, path: tuple[str | int, ...], keys: tuple[str, ...],
                what: str) -> dict:
        if not isinstance(value, dict):
            self.bad(path, f"is {'empty' if value is None else 'not a mapping'} (expected a "
                           f"mapping of {what})")
            return {}
        for key in value:
            if key not in keys:
                self.bad((*path, str(key)), f"unknown key {key!r}",
                         f"expected one of: {', '.join(keys)}")
        return value

    def integer(self, data: dict, path: tuple[str | int, ...], lo: int, hi: int,
                required: bool = True, choices: tuple[int, ...] = ()) -> int | None:
        key = path[-1]
        if key not in data:
            if required:
                self.bad(path[:-1], f"has no `{key}`",
                         f"give a whole number from {lo} to {hi}")
            return None
        value = data[key]
        ok = isinstance(value, int) and not isinstance(value, bool) and lo <= value <= hi
        if not ok or (choices and value not in choices):
            expected = (f"one of {', '.join(map(str, choices))}" if choices
                        else f"a whole number from {lo} to {hi}")
            self.bad(path, f"{value!r} is not valid (expected {expected})")
            return None
        return value

    def size(self, data: dict, path: tuple[str | int, ...], required: bool = False) -> int | None:
        key = path[-1]
        if key not in data:
            if required:
                self.bad(path[:-1], f"has no `{key}`", "give a size like 45056 or 44KiB")
            return None
        try:
            return parse_bytes(data[key])
        except ValueError as e:
            self.bad(path, str(e))
            return None


def _buffer(reader: _Reader, raw: Any, path: tuple[str | int, ...]
            ) -> tuple[tuple[BufferPool, BufferProfile] | None, dict[str, int]]:
    data = reader.mapping(raw, path, _BUFFER_KEYS, "platform buffer figures")
    if not data:
        return None, {}
    lines = {key: line for key in data if (line := reader.doc.line(*path, key))}
    pool_size = reader.size(data, (*path, "pool_size_bytes"), required=True)
    xoff = reader.size(data, (*path, "xoff_bytes"), required=True)
    dynamic_th = reader.integer(data, (*path, "dynamic_th"), -8, 7, required=False)
    static_th = reader.size(data, (*path, "static_th_bytes"))
    if (dynamic_th is None) == (static_th is None):
        reader.bad(path, "needs exactly one of `dynamic_th` and `static_th_bytes`",
                   "the PFC threshold: dynamic_th like -5, or a fixed static_th_bytes")
    if pool_size is None or xoff is None or (dynamic_th is None) == (static_th is None):
        return None, lines
    pool = BufferPool(PLATFORM_POOL, "ingress", "dynamic" if dynamic_th is not None else "static",
                      pool_size, reader.size(data, (*path, "shared_headroom_bytes")) or 0)
    profile = BufferProfile(PLATFORM_PG_PROFILE, PLATFORM_POOL,
                            reader.size(data, (*path, "pg_size_bytes")) or 0,
                            dynamic_th=dynamic_th, static_th_bytes=static_th,
                            xon_bytes=reader.size(data, (*path, "xon_bytes")),
                            xoff_bytes=xoff,
                            xon_offset_bytes=reader.size(data, (*path, "xon_offset_bytes")))
    return (pool, profile), lines


def _port_map(reader: _Reader, raw: Any, path: tuple[str | int, ...]) -> dict[str, str] | None:
    """`ports: {Ethernet0: eth1, …}`: SONiC port → rocelab interface, one interface each."""
    if not isinstance(raw, dict) or not raw:
        reader.bad(path, "is not a mapping of SONiC ports to rocelab interfaces",
                   "like {Ethernet0: eth1, Ethernet4: eth2}")
        return None
    mapping: dict[str, str] = {}
    taken: dict[str, str] = {}
    for port, iface in raw.items():
        if not isinstance(iface, str) or not LAB_PORT.fullmatch(iface):
            reader.bad((*path, str(port)), f"{iface!r} is not a rocelab interface",
                       "eth1, eth2, … as the topology names them")
        elif iface in taken:
            reader.bad((*path, str(port)), f"{iface} is already {taken[iface]}'s",
                       "each interface is one port")
        else:
            taken[iface] = str(port)
            mapping[str(port)] = iface
    return mapping


def _device_entries(reader: _Reader, raw: Any, base: Path, section: str = "devices") -> list[_DeviceEntry]:
    if not isinstance(raw, dict):
        reader.bad((section,), "is not a mapping of switch names to their QoS config")
        return []
    entries = []
    for name, spec in raw.items():
        path = (section, str(name))
        keys = (*FORMATS, "segment_bytes", "buffer", *_SONIC_KEYS)
        if not reader.mapping(spec, path, keys, "`sonic: FILE`, `eos: FILE` or `cumulus: FILE`"):
            continue
        formats = [f for f in FORMATS if f in spec]
        if len(formats) != 1:
            reader.bad(path, "needs exactly one of `sonic: FILE` (a config_db.json), "
                             "`eos: FILE` (a running-config) and `cumulus: FILE` (NVUE's config, "
                             "or a directory of the rendered qos_features.conf and qos_infra.conf)")
            continue
        fmt = formats[0]
        file = spec[fmt]
        if not isinstance(file, str) or not ((base / file).is_file()
                                             or (fmt == "cumulus" and (base / file).is_dir())):
            reader.bad((*path, fmt), f"{file!r} is not a file",
                       f"paths are relative to {display(base)}/")
            continue
        if fmt == "sonic" and ({"segment_bytes", "buffer"} & set(spec)):
            reader.bad(path, "`segment_bytes` and `buffer` are for EOS devices",
                       "a config_db.json holds its own buffer model")
        if fmt != "sonic" and (set(_SONIC_KEYS) & set(spec)):
            reader.bad(path, f"sets `{'`, `'.join(k for k in _SONIC_KEYS if k in spec)}`, which SONiC devices take",
                       f"{'an EOS' if fmt == 'eos' else 'a Cumulus'} device's platform buffers are its `buffer`")
        if fmt == "cumulus" and "segment_bytes" in spec:
            reader.bad((*path, "segment_bytes"), "is for EOS devices",
                       "Cumulus thresholds are in bytes")
        segment_bytes = reader.integer(spec, (*path, "segment_bytes"), 1, 65536, required=False)
        buffer, lines = _buffer(reader, spec["buffer"], (*path, "buffer")) \
            if "buffer" in spec else (None, {})
        lookup = spec.get("pg_profile_lookup")
        if lookup is not None and (not isinstance(lookup, str) or not (base / lookup).is_file()):
            reader.bad((*path, "pg_profile_lookup"), f"{lookup!r} is not a file",
                       f"paths are relative to {display(base)}/")
            lookup = None
        pfcwd = spec.get("default_pfcwd_status")
        if pfcwd is not None and pfcwd not in ("enable", "disable"):
            reader.bad((*path, "default_pfcwd_status"), f"{pfcwd!r} is not valid (expected enable or disable)")
            pfcwd = None
        voq_host = spec.get("voq_host")
        if voq_host is not None and not (isinstance(voq_host, str) and voq_host.count("|") == 1):
            reader.bad((*path, "voq_host"), f"{voq_host!r} is not a line card",
                       'the "<host>|<asic>" its VOQ keys start with, like "lc1|asic0"')
            voq_host = None
        ports = _port_map(reader, spec["ports"], (*path, "ports")) if "ports" in spec else None
        constants = spec.get("constants")
        if constants is not None and (not isinstance(constants, str) or not (base / constants).is_file()):
            reader.bad((*path, "constants"), f"{constants!r} is not a file", f"paths are relative to {display(base)}/")
            constants = None
        entries.append(_DeviceEntry(str(name), fmt, base / file,
                                    segment_bytes, buffer, lines,
                                    base / lookup if lookup else None, pfcwd, ports, voq_host,
                                    base / constants if constants else None, section))
    return entries


def _hosts(reader: _Reader, raw: Any) -> tuple[HostSide | None, list[NicEntry]]:
    data = reader.mapping(raw, ("hosts",), _HOST_KEYS, "the hosts' RoCE settings")
    values = (
        reader.integer(data, ("hosts", "roce_dscp"), 0, 63),
        reader.integer(data, ("hosts", "roce_priority"), 0, 7),
        reader.integer(data, ("hosts", "cnp_dscp"), 0, 63),
        reader.integer(data, ("hosts", "roce_mtu"), 256, 4096, choices=IB_MTUS),
    )
    entries = nic_entries(reader.doc, data.get("nics"), ("hosts", "nics"), reader.problems)
    return (None if None in values else HostSide(*values)), entries


def _budgets(reader: _Reader, raw: Any) -> Budgets:
    if raw is None:
        return Budgets()
    data = reader.mapping(raw, ("budgets",), _BUDGET_KEYS, "budget names to values")
    values: dict = {}
    if data.get("allreduce_step_time_s") is not None:
        try:
            values["allreduce_step_time_s"] = parse_delay(data["allreduce_step_time_s"])
        except ValueError as e:
            reader.bad(("budgets", "allreduce_step_time_s"), str(e))
    if data.get("allreduce_size") is not None:
        try:
            values["allreduce_size_bytes"] = parse_bytes(data["allreduce_size"])
        except ValueError as e:
            reader.bad(("budgets", "allreduce_size"), str(e))
    return Budgets(**values)


# ---------------------------------------------------------------- device files


def _with_platform_buffers(profile: QosProfile, pool: BufferPool, pg: BufferProfile
                           ) -> QosProfile:
    """Give each port's no-drop priorities' PGs the platform's lossless buffer profile."""
    ports = {name: _with_platform_pg(qos, pg) for name, qos in profile.ports.items()}
    return replace(profile, pools={pool.name: pool}, ports=ports)


def _with_platform_pg(qos: PortQos, pg: BufferProfile) -> PortQos:
    return replace(qos, pgs={qos.tc_to_pg[p]: pg for p in sorted(qos.pfc_enable)})


def _load_sonic(entry: _DeviceEntry, reader: _Reader, cabled: list[str] | None) -> Device:
    """A SONiC device as it runs: its config_db, the port map and line card fabric.yml names,
    and what buffermgrd and pfcwd start_default derive (rocelab.qos.derived)."""
    source = display(entry.path)
    path = (entry.section, entry.name)
    doc = read_config_db(source)
    if entry.voq_host is not None and entry.voq_host not in (hosts := voq_hosts(doc)):
        reader.bad((*path, "voq_host"), f"{entry.voq_host!r} is not a line card of {source}'s VOQ keys",
                   f"its QUEUE and BUFFER_QUEUE keys name: {', '.join(hosts) or 'none'}")
    profile = profile_from_config_db(doc, source, entry.voq_host)
    facts = switch_facts(doc, source)
    if entry.ports is not None:
        named = set(profile.ports) | {p for p, f in facts.ports.items() if f.speed or f.mtu_bytes}
        for port in entry.ports:
            if port not in named:
                reader.bad((*path, "ports", port), f"{port!r} is not a port of {source}",
                           f"its PORT and QoS tables name: {', '.join(sorted(named, key=port_number))}")
        profile = replace(profile, lab_ports={iface: port for port, iface in entry.ports.items()})
    mtus = {name: port.mtu_bytes for name, port in facts.ports.items() if port.mtu_bytes is not None}

    origins: dict[str, str] = {}
    unsized = None
    if entry.pg_profile_lookup is not None:
        if facts.buffer_model == "dynamic":
            reader.bad((*path, "pg_profile_lookup"), f"{source} uses the dynamic buffer model "
                       "(DEVICE_METADATA.localhost.buffer_model), which sizes PGs without pg_profile_lookup.ini")
        else:
            lookup_source = display(entry.pg_profile_lookup)
            lookup = parse_pg_profile_lookup(entry.pg_profile_lookup.read_text(encoding="utf-8"), lookup_source)
            derived = derive_lossless_pgs(profile, facts, lookup, lookup_source, source)
            profile, origins = derived.profile, dict(derived.origins)
    elif facts.buffer_model == "traditional" and any(
            not qos.lossless_pg(pg) and facts.cable_m(name) for name, qos in profile.ports.items()
            for pg in qos.pfc_enable):
        unsized = (f"buffermgrd creates the lossless PGs at run time from the platform's pg_profile_lookup.ini "
                   f"and CABLE_LENGTH: name it in {entry.section}.{entry.name}.pg_profile_lookup")

    status = entry.default_pfcwd_status or facts.default_pfcwd_status
    why, guarded = None, frozenset[str]()
    if status == "enable":
        why = (f"{entry.section}.{entry.name}.default_pfcwd_status enable" if entry.default_pfcwd_status
               else f"{source}: DEVICE_METADATA.localhost.default_pfcwd_status enable")
        watchdog = default_pfcwd(facts.port_entries)
        why += (f": action {watchdog.action}, detection {watchdog.detection_time_ms} ms, "
                f"restoration {watchdog.restoration_time_ms} ms")
        neighbours = facts.neighbours
        if neighbours is None:  # a hand-written config_db: the topology's cables are its neighbours
            neighbours = frozenset(profile.sonic_name(p) for p in cabled or ())
            why += "; no DEVICE_NEIGHBOR table, so the topology's cabled ports"
        profile = derive_default_pfcwd(profile, facts, neighbours)
        guarded = default_pfcwd_ports(facts, neighbours) & set(profile.ports)
    origin = SonicOrigin(source, mtus, origins, unsized, why, guarded)
    bgp, absent = _sonic_bgp(entry, doc, source)
    return Device(entry.name, "sonic", source, profile, origin, mtus, SONIC_DEFAULT_MTU_BYTES,
                  PortQos(port=""), facts=facts, unsized_pgs=unsized, bgp=bgp, bgp_absent=absent)


def _sonic_bgp(entry: _DeviceEntry, doc: Mapping, source: str) -> tuple[BgpConfig | None, str]:
    """The switch's BGP as bgpcfgd renders it (with the image's constants.yml where the entry
    names one), or None and why."""
    if not (has_bgp(doc) and (doc.get("BGP_NEIGHBOR") or doc.get("BGP_PEER_RANGE"))):
        return None, f"{source} gives no BGP (DEVICE_METADATA.localhost.bgp_asn with BGP_NEIGHBOR or BGP_PEER_RANGE)"
    if entry.constants is None:
        return read_bgp(doc, source, entry.name), ""
    constants_source = display(entry.constants)
    constants = read_constants(load_yaml(entry.constants).data, constants_source)
    return read_bgp(doc, source, entry.name, constants, constants_source), ""


def _switch(fabric: Fabric | None, name: str) -> Node | None:
    """The topology's switch of that name; None without a topology or such a switch."""
    return fabric.node(name) if fabric is not None and name in {n.name for n in fabric.switches} else None


def _with_given_pfc_sizes(profile: QosProfile, config: CumulusConfig) -> QosProfile:
    """Over the platform's lossless PG, the sizes a Cumulus PFC profile gives: XOFF after
    xoff-threshold of the port buffer, the rest of it headroom, XON xon-threshold below XOFF."""
    ports = dict(profile.ports)
    for name, sizes in config.pfc_sizes.items():
        qos = ports[name]
        pgs = {}
        for pg, buffer in qos.pgs.items():
            xoff = sizes.xoff_bytes if sizes.xoff_bytes is not None else buffer.size_bytes
            changes: dict = {"size_bytes": xoff, "dynamic_th": None, "static_th_bytes": 0}
            if sizes.port_buffer_bytes is not None:
                changes["xoff_bytes"] = max(sizes.port_buffer_bytes - xoff, 0)
            if sizes.xon_bytes is not None:
                changes["xon_bytes"], changes["xon_offset_bytes"] = max(xoff - sizes.xon_bytes, 0), None
            pgs[pg] = replace(buffer, name=f"{buffer.name}_{name}", **changes)
        ports[name] = replace(qos, pgs=pgs)
    return replace(profile, ports=ports)


def _load_cumulus(entry: _DeviceEntry, reader: _Reader, cabled: list[str]) -> Device:
    source = display(entry.path)
    config = load_cumulus(source)
    profile, unlisted = config.profile, config.default_port
    unsized = None
    if entry.buffer:
        profile = _with_given_pfc_sizes(_with_platform_buffers(profile, *entry.buffer), config)
        unlisted = _with_platform_pg(unlisted, entry.buffer[1])
    elif unlisted.pfc_enable or any(qos.pfc_enable for qos in profile.ports.values()):
        unsized = (f"Cumulus Linux derives the lossless PGs' headroom and thresholds on the ASIC from "
                   f"the cable length and port speed: give the platform's figures as "
                   f"{entry.section}.{entry.name}.buffer")
    # Cabled ports the file does not list run the global profiles (switchd too: it gets them).
    profile = replace(profile, ports={**{port: replace(unlisted, port=port)
                                         for port in map(profile.sonic_name, cabled)},
                                      **profile.ports})
    file = config.profile.source
    cables = {name: (metres, name) for name, metres in config.cable_m.items() if name}
    if "" in config.cable_m:  # cabled ports the file does not list have the global PFC profile's
        cables.update({port: (config.cable_m[""], "") for port in map(profile.sonic_name, cabled)
                       if port not in cables})
    facts = SwitchFacts(ports={name: PortFacts(cable=f"{metres}m", cable_where=(
        config.at("cable", key) or "").removeprefix(f"{file}: ")) for name, (metres, key) in cables.items()})
    origin = CumulusOrigin(file, config, entry.name, reader.doc.name, entry.buffer_lines)
    text = read_text(source) if entry.path.is_file() else ""
    bgp = read_nvue_bgp(text, source, entry.name) if has_nvue_bgp(text, source) else None
    return Device(entry.name, "cumulus", file, profile, origin, config.mtu_bytes, _CUMULUS_MTU,
                  unlisted, config.cumulus_names, facts=facts, unsized_pgs=unsized, bgp=bgp,
                  bgp_absent=f"{file} gives no BGP (no `router bgp` statements)")


def _load_device(entry: _DeviceEntry, reader: _Reader, fabric: Fabric | None) -> Device:
    node = _switch(fabric, entry.name)
    if entry.format == "sonic":
        return _load_sonic(entry, reader, [p.name for p in node.ports] if node else None)
    if entry.format == "cumulus":
        return _load_cumulus(entry, reader, [p.name for p in node.ports] if node else [])
    source = display(entry.path)
    speeds = {p.name: int(fabric.links[p.link].rate_bps) for p in node.ports} if node else {}
    options = EosOptions(entry.segment_bytes, entry.buffer, speeds)
    text = read_text(source)
    config, profile = options.profile(text, source)
    origin = EosOrigin(source, config, entry.name, reader.doc.name, entry.buffer_lines)
    return Device(entry.name, "eos", source, profile, origin, config.mtu_bytes,
                  config.default_mtu_bytes, config.default_port, config.eos_names, eos=options,
                  bgp=read_eos_bgp(text, source, entry.name) if has_router_bgp(text) else None,
                  bgp_absent=f"{source} gives no BGP (no `router bgp`)")


def _unevaluable_classes(hosts: HostSide, fabric: Fabric, device: Device) -> list[Problem]:
    """The hosts' DSCPs whose class on a cabled port of an EOS device rocelab cannot tell."""
    config = device.origin.config if isinstance(device.origin, EosOrigin) else None
    if config is None:
        return []
    problems = []
    for port in fabric.node(device.name).ports:
        doubts = config.uncertain.get(lab_to_sonic(port.name), {})
        for what, dscp in (("RoCE", hosts.roce_dscp), ("CNPs", hosts.cnp_dscp)):
            if dscp in doubts:
                problems.append(Problem(device.file, device.label(port.name),
                                        f"the class of {what} (DSCP {dscp}) is not known: "
                                        f"{doubts[dscp]}",
                                        "match RoCE by `match dscp` in the class-map, or keep "
                                        "its DSCP"))
    return problems


# ---------------------------------------------------------------- load


def fabric_file(path: Path) -> Path:
    """The fabric.yml of a description given as a directory or a file."""
    return path / FABRIC_FILE if path.is_dir() else path


def load_fabric_spec(path: Path) -> FabricSpec:
    """Load a fabric description (module docstring). Raises InputError listing every
    problem in fabric.yml, the topology and the device files."""
    file = fabric_file(path)
    if path.is_dir() and not file.is_file():
        raise InputError([Problem(display(path), "", f"holds no {FABRIC_FILE}",
                                  f"a fabric description is a directory with {FABRIC_FILE}, "
                                  "or a YAML file of that form")])
    doc = load_yaml(file)
    reader = _Reader(doc)
    data = reader.mapping(doc.data, (), _TOP_KEYS, "name, topology, devices, hosts, budgets")
    if not isinstance(doc.data, dict):
        reader.problems.raise_if_any()  # nothing below makes sense without it
    name = data.get("name")
    if not isinstance(name, str) or not SAFE_NAME.match(name):
        reader.bad(("name",), f"{name!r} is not a safe fabric name", SAFE_NAME_HINT)
    for key in ("topology", "devices", "hosts"):
        if key not in data:
            reader.bad((), f"has no `{key}`",
                       f"a fabric description needs {', '.join(_TOP_KEYS[2:5])}")
    base = file.parent
    entries = _device_entries(reader, data.get("devices", {}), base)
    hosts, host_nic_entries = _hosts(reader, data.get("hosts", {})) if "hosts" in data else (None, [])
    budgets = _budgets(reader, data.get("budgets"))

    problems: list[Problem] = []
    fabric = None
    topology = data.get("topology")
    try:
        if isinstance(topology, str):
            if (base / topology).is_file():
                fabric = load_topology(base / topology)
            else:
                reader.bad(("topology",), f"{topology!r} is not a file",
                           f"paths are relative to {display(base)}/")
        elif isinstance(topology, dict):
            # Inline: validate it as a topology whose paths and lines are those of fabric.yml.
            fabric = resolve(validate(YamlDoc(doc.name, {"name": name, "topology": topology},
                                              doc.root)))
        elif topology is not None:
            reader.bad(("topology",), "is neither a file name nor a mapping",
                       "name a topology file, or give {defaults, nodes, links} inline")
    except InputError as e:
        problems += e.problems

    devices: dict[str, Device] = {}
    for entry in entries:
        node = _switch(fabric, entry.name)
        cabled = [p.name for p in node.ports] if node else None
        try:
            devices[entry.name] = _load_device(entry, reader, fabric)
        except InputError as e:
            problems += e.problems
        if entry.ports is not None and cabled is not None:
            unmapped = [p for p in cabled if p not in entry.ports.values()]
            if unmapped:
                reader.bad(("devices", entry.name, "ports"), f"maps no port to {', '.join(unmapped)}, "
                           f"which the topology cables to {entry.name}", "every cabled interface needs its port")
    if fabric is not None and isinstance(data.get("devices"), dict):
        _match_devices(reader, fabric, [str(n) for n in data["devices"]])
        if hosts is not None:
            switches = {n.name for n in fabric.switches}
            for device in devices.values():
                if device.name in switches:
                    problems += _unevaluable_classes(hosts, fabric, device)
    if fabric is not None and hosts is not None:
        hosts = replace(hosts, nics=read_host_nics(reader.doc, host_nic_entries, [n.name for n in fabric.hosts], base,
                                                   ("hosts", "nics"), reader.problems))
    problems = reader.problems.items + problems
    if problems:
        raise InputError(problems)
    ordered = {n.name: devices[n.name] for n in fabric.switches}
    return FabricSpec(name, doc.name, fabric, ordered, hosts, budgets)


def load_devices(doc: YamlDoc, raw: Any, base: Path, fabric: Fabric, section: str) -> dict[str, Device]:
    """Switches' QoS configs in fabric.yml's device form under another file's `section` (a
    lab's `profiles:`), some switches or all. Raises InputError listing every problem."""
    reader = _Reader(doc)
    problems: list[Problem] = []
    devices = {}
    for entry in _device_entries(reader, raw, base, section):
        try:
            devices[entry.name] = _load_device(entry, reader, fabric)
        except InputError as e:
            problems += e.problems
    if isinstance(raw, dict):
        _match_devices(reader, fabric, [str(n) for n in raw], section)
    problems = reader.problems.items + problems
    if problems:
        raise InputError(problems)
    return devices


def _match_devices(reader: _Reader, fabric: Fabric, names: list[str], section: str = "devices") -> None:
    """Every name a switch; in fabric.yml (`devices`), every switch named."""
    switches = [n.name for n in fabric.switches]
    for name in names:
        if name not in switches:
            reader.bad((section, name), f"{name!r} is not a switch of the topology",
                       f"switches: {', '.join(switches)}")
    missing = [s for s in switches if s not in names]
    if missing and section == "devices":
        reader.bad(("devices",), f"has no QoS config for {', '.join(missing)}",
                   "every switch needs one: `sonic: FILE`, `eos: FILE` or `cumulus: FILE`")
