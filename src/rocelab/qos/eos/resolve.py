"""What an EOS running-config's settings mean for each port: the QosProfile and the line each
value came from (EosConfig), and the entry points that read and resolve a file."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Mapping

from rocelab.errors import read_text
from rocelab.ethernet import ETH  # the Ethernet header an L2 MTU counts
from rocelab.qos.eos.names import eos_lab_names
from rocelab.qos.eos.parse import (
    _IDENTITY, _LATENCY_UNITS, _UNITS, _Interface, _PolicyClass, _Queue, _Reader, _Settings, _statements, _Threshold,
)
from rocelab.qos.model import DSCP_VALUES, PRIORITIES, PfcWatchdog, PortQos, QosProfile, QueueQos, WredProfile
from rocelab.qos.ports import lab_to_sonic
from rocelab.units import format_rate

# Bytes per buffer segment (cell) of EOS thresholds, by the model in the `! device:` line
# `show running-config` begins with. Only figures Arista has published; a platform not
# listed needs `segment_bytes` in the fabric description.
EOS_SEGMENT_BYTES_BY_PLATFORM = {
    # Arista 7160 Series architecture white paper: the 24 MB packet buffer is "96K pages of
    # 256 byte cells".
    "DCS-7160": 256,
}
EOS_DEFAULT_MTU_BYTES = 1500
_DEVICE_LINE = re.compile(r"^! device: \S+ \(([^,)]+)", re.MULTILINE)


@dataclass(frozen=True)
class EosConfig:
    """What a running-config says, with the line each value came from.

    `lines` keys: ("dscp", d), ("cos", c), ("tc-queue", tc), ("default-mtu",); per SONiC port
    name: ("interface", port), ("mtu", port), ("trust", port), ("pfc", port) (on/off),
    ("pfc", port, priority) (no-drop), ("watchdog", port), ("scheduler", port, queue),
    ("ecn", port, queue), ("policy", port), ("class", port, dscp) (the policy-map statement
    that gives the DSCP its class).
    """

    profile: QosProfile
    mtu_bytes: Mapping[str, int]  # SONiC port name → MTU of interfaces that set one
    default_port: PortQos  # what an Ethernet interface the file does not list gets
    lines: Mapping[tuple[object, ...], int]
    default_mtu_bytes: int = EOS_DEFAULT_MTU_BYTES
    eos_names: Mapping[str, str] = field(default_factory=dict)  # SONiC port name → EOS name
    warnings: tuple[str, ...] = ()
    # SONiC port name → DSCP → why its class there is not what the profile says for sure
    uncertain: Mapping[str, Mapping[int, str]] = field(default_factory=dict)
    admin_up: Mapping[str, bool] = field(default_factory=dict)  # SONiC port name → `[no] shutdown`

    def line(self, *key: object) -> int | None:
        return self.lines.get(key)


class _Resolver:
    """A reader's settings resolved port by port into an EosConfig: thresholds into bytes (the
    port's speed, the platform's segment), policy-maps into classes, qos profiles and
    port-channels merged under their interfaces."""

    def __init__(self, read: _Reader, segment_bytes: int | None, port_speeds_bps: Mapping[str, int]):
        self.source, self.problems, self.warn = read.source, read.problems, read.warn
        self.warnings, self.notes = read.warnings, read.notes  # shared: one list of each
        self.glob, self.profiles = read.glob, read.profiles
        self.interfaces, self.channels = read.interfaces, read.channels
        self.segment_bytes = segment_bytes
        self.port_speeds_bps = port_speeds_bps

    def platform_segment(self, platform: str | None) -> int | None:
        if self.segment_bytes:
            return self.segment_bytes
        for prefix, size in EOS_SEGMENT_BYTES_BY_PLATFORM.items():
            if platform and platform.startswith(prefix):
                return size
        return None

    def to_bytes(self, t: _Threshold, line: int, speed: tuple[int, str] | None,
                 platform: str | None, where: str) -> int | None:
        """A threshold in bytes on this port; `where` names statement and port for problems."""
        if t.unit in _UNITS:
            return t.value * _UNITS[t.unit]
        if t.unit == "segments":
            size = self.platform_segment(platform)
            if size is None:
                known = (f"platform {platform} is not in rocelab's table" if platform
                         else "no `! device:` line names the platform")
                self.problems.add(f"line {line}", f"{where}: thresholds in segments need the "
                                  f"platform's segment size ({known})",
                                  "give `segment_bytes:` for this device in fabric.yml")
            return None if size is None else t.value * size
        if speed is None:  # a port off the fabric (no link rate) that sets no `speed`
            self.warnings[f"{self.source} line {line}: {where}: a latency threshold needs the "
                          "port's speed, and the interface has no `speed` and the fabric no link "
                          "for it: no ECN recorded"] = None
            return None
        rate, said = speed
        size = int(Decimal(t.value) * _LATENCY_UNITS[t.unit] * rate / 8)
        self.notes[f"{self.source} line {line}: {where}: {t.value} {t.unit} at "
                   f"{format_rate(rate)}b/s ({said}) = {size:,} B"] = None
        return size

    def wred_profile(self, queue: _Queue, speed: tuple[int, str] | None, platform: str | None,
                     where: str) -> WredProfile | None:
        marks = queue.ecn or queue.drop
        if marks is None:
            return None
        line = queue.ecn_line if queue.ecn else queue.drop_line
        place, where = where, f"{marks.statement}: {where}"
        kmin = self.to_bytes(marks.kmin, line, speed, platform, where)
        if kmin is None:
            return None  # one problem per statement: Kmax is usually written like Kmin
        kmax = self.to_bytes(marks.kmax, line, speed, platform, where)
        if kmax is None:
            return None
        if kmax < kmin:
            self.problems.add(f"line {line}", f"{where}: maximum-threshold ({kmax:,} B) is below "
                              f"minimum-threshold ({kmin:,} B)")
            return None
        if queue.ecn and queue.drop and queue.drop != queue.ecn:
            self.notes[f"{self.source} line {queue.drop_line}: {queue.drop.statement}: {place}: "
                       "drop thresholds differ "
                       "from the ECN ones; the profile holds the ECN ones"] = None
        tag = "ecn" if queue.ecn else "drop"
        return WredProfile(name=f"eos_{tag}_{kmin}_{kmax}_{marks.probability}",
                           wred_green_enable=queue.drop is not None,
                           ecn="ecn_all" if queue.ecn else "ecn_none",
                           green_min_threshold_bytes=kmin, green_max_threshold_bytes=kmax,
                           green_drop_probability_pct=marks.probability)

    def classes(self, settings: _Settings, lines: dict[tuple[object, ...], int]
                ) -> tuple[tuple[int, ...], tuple[int, ...] | None, dict[int, str]]:
        """(dscp_to_tc, dot1p_to_tc, uncertain DSCPs) of an untagged IP packet on a port."""
        g = self.glob
        trust = settings.trust or "dscp"
        if trust == "dscp":
            base = list(g.dscp_to_tc)
        else:
            base = [g.cos_to_tc[settings.cos or 0]] * DSCP_VALUES
        uncertain: dict[int, str] = {}
        tcs = base
        if settings.policy is not None:
            tcs = self.policy_classes(settings, base, lines, uncertain)
        if g.rewrite_dscp is not None:
            for d, tc in enumerate(tcs):
                if g.tc_to_dscp.get(tc, d) != d:
                    uncertain.setdefault(d, (
                        f"{self.source} line {g.lines[('tc-dscp', tc)]}: `qos rewrite dscp` sends "
                        f"DSCP {d} (TC {tc}) on as DSCP {g.tc_to_dscp[tc]}: the next hop "
                        "classifies that"))
        return tuple(tcs), (tuple(g.cos_to_tc) if trust == "cos" else None), uncertain

    def policy_classes(self, settings: _Settings, base: list[int],
                       lines: dict[tuple[object, ...], int], uncertain: dict[int, str]
                       ) -> list[int]:
        name, line = settings.policy, settings.lines[("policy",)]
        policy = self.glob.policies.get(name)
        if policy is None:
            self.warnings[f"{self.source} line {line}: `service-policy type qos input {name}`: "
                          "names no policy-map type quality-of-service: applies nothing"] = None
            return base
        certain: list[set[int]] = []
        possible: list[set[int]] = []
        for entry in policy:
            cmap = self.glob.class_maps.get(entry.name)
            if entry.name == "class-default":
                certain.append(set(range(DSCP_VALUES)))
                possible.append(set())
            elif cmap is None:
                self.warnings[f"{self.source} line {entry.line}: `class {entry.name}`: names no "
                              "class-map type qos: matches nothing"] = None
                certain.append(set())
                possible.append(set())
            elif cmap.unevaluable:
                for s in cmap.unevaluable:
                    self.warn(s, f"rocelab cannot tell which packets this matches (policy-map "
                                 f"{name}): DSCPs whose class it may change are refused if the "
                                 "hosts send them")
                sure = set() if cmap.match_all else set(cmap.dscps)
                certain.append(sure)
                possible.append((set(cmap.dscps) if cmap.match_all and cmap.dscps
                                 else set(range(DSCP_VALUES))) - sure)
            else:
                certain.append(set(cmap.dscps))
                possible.append(set())

        def evaluate(widen: int | None) -> tuple[list[int], dict[int, _PolicyClass]]:
            tcs, by, left = list(base), {}, set(range(DSCP_VALUES))
            for i, entry in enumerate(policy):
                hit = (certain[i] | (possible[i] if i == widen else set())) & left
                left -= hit
                for d in hit:
                    by[d] = entry
                    if entry.tc is not None:
                        tcs[d] = entry.tc
            return tcs, by

        tcs, by = evaluate(None)
        for i, entry in enumerate(policy):
            if possible[i]:
                wide, _ = evaluate(i)
                for d in range(DSCP_VALUES):
                    if wide[d] != tcs[d]:
                        uncertain.setdefault(d, (
                            f"{self.source} line {entry.line}: `class {entry.name}` of policy-map "
                            f"{name} may give DSCP {d} TC {wide[d]} instead of TC {tcs[d]}: its "
                            "class-map matches on what rocelab cannot evaluate"))
        for d, entry in by.items():
            if entry.tc is not None:
                lines[("class", d)] = entry.tc_line
            if entry.dscp is not None and entry.dscp != d:
                uncertain.setdefault(d, (
                    f"{self.source} line {entry.line}: `class {entry.name}` of policy-map {name} "
                    f"rewrites DSCP {d} to {entry.dscp}: the next hop classifies that"))
        return tcs

    def port(self, port: str, settings: _Settings, speed: tuple[int, str] | None,
             platform: str | None, label: str) -> tuple[PortQos, dict[int, str]]:
        g = self.glob
        pfc_enable = frozenset()
        if settings.pfc_on and not g.pfc_all_off:
            pfc_enable = frozenset(p for p, no_drop in settings.no_drop.items() if no_drop)
        queues = {}
        for q, queue in sorted(settings.queues.items()):
            scheduler = queue.scheduler()
            wred = self.wred_profile(queue, speed, platform, f"{label} tx-queue {q}")
            if scheduler or wred or queue.shape_bps:
                queues[q] = QueueQos(scheduler=scheduler, wred=wred, shape_bps=queue.shape_bps)
        watchdog = None
        timeout_ms = g.timeout_ms if settings.timeout_ms is None else settings.timeout_ms
        if pfc_enable and settings.watchdog is not False and timeout_ms:
            recovery_ms = settings.recovery_ms if settings.recovery_ms is not None \
                else g.recovery_ms
            watchdog = PfcWatchdog(action=settings.action or g.action or "drop",
                                   detection_time_ms=timeout_ms,
                                   restoration_time_ms=recovery_ms or 0)
        dscp_to_tc, dot1p_to_tc, uncertain = self.classes(settings, settings.lines)
        return PortQos(port=port,
                       dscp_to_tc=dscp_to_tc,
                       tc_to_queue=tuple(g.tc_to_queue),
                       tc_to_pg=_IDENTITY,
                       pfc_priority_to_queue=tuple(g.tc_to_queue),
                       pfc_enable=pfc_enable,
                       queues=queues,
                       pfc_wd=watchdog,
                       dot1p_to_tc=dot1p_to_tc,
                       shape_bps=settings.shape_bps), uncertain

    def with_profile(self, interface: _Interface) -> _Settings:
        settings = interface.settings
        if interface.service_profile:
            name, line = interface.service_profile
            if name in self.profiles:
                settings = settings.merged_over(self.profiles[name])
            else:
                self.warnings[f"{self.source} line {line}: `service-profile {name}`: names no qos "
                              "profile (EOS accepts it and applies nothing until one exists; "
                              "defined: "
                              f"{', '.join(sorted(self.profiles)) or 'none'})"] = None
        return settings

    def mtu(self, settings: _Settings) -> int | None:
        if settings.routed is False:
            l2 = settings.l2_mtu or self.glob.l2_mtu
            return None if l2 is None else l2 - ETH.size
        return settings.mtu

    def config(self, source: str, platform: str | None) -> EosConfig:
        lines: dict[tuple[object, ...], int] = dict(self.glob.lines)
        ports, mtus, names, uncertain, admin = {}, {}, {}, {}, {}
        lab_names = eos_lab_names([i.name for i in self.interfaces])
        for interface in self.interfaces:
            lab = lab_names[interface.name]
            port = lab_to_sonic(lab)
            settings = self.with_profile(interface)
            channel = self.channels.get(interface.channel_group)
            if channel is not None:
                settings = settings.merged_over(self.with_profile(channel))
            speed = None
            if settings.speed_bps:
                speed = (settings.speed_bps, "the interface's `speed`")
            elif lab in self.port_speeds_bps:
                speed = (self.port_speeds_bps[lab], "the fabric's link rate; no `speed` here")
            ports[port], doubt = self.port(port, settings, speed, platform, interface.name)
            if doubt:
                uncertain[port] = doubt
            names[port] = interface.name
            if (mtu := self.mtu(settings)) is not None:
                mtus[port] = mtu
            if settings.admin_up is not None:
                admin[port] = settings.admin_up
            lines[("interface", port)] = interface.line
            for key, line in settings.lines.items():
                lines[(key[0], port, *key[1:])] = line
            if ("watchdog", port) not in lines and self.glob.watchdog_line:
                lines[("watchdog", port)] = self.glob.watchdog_line
            for q, queue in settings.queues.items():
                for kind, line in (("scheduler", queue.scheduler_line),
                                   ("ecn", queue.ecn_line or queue.drop_line)):
                    if line is not None:
                        lines[(kind, port, q)] = line
        unmapped = [str(tc) for tc in range(PRIORITIES) if tc not in self.glob.tc_to_dscp]
        if self.glob.rewrite_dscp is not None and unmapped:
            self.warnings[f"{self.source} line {self.glob.rewrite_dscp}: `qos rewrite dscp`: "
                          f"packets of TC {', '.join(unmapped)} leave with the DSCP EOS's default "
                          "TC → DSCP map gives, which rocelab does not know: it assumes they "
                          "keep theirs"] = None
        self.problems.raise_if_any()
        warnings = tuple(self.warnings)
        default_port, _ = self.port("", _Settings(), None, platform, "")
        return EosConfig(profile=QosProfile(source=source, pools={}, ports=ports,
                                            notes=warnings + tuple(self.notes)),
                         mtu_bytes=mtus, default_port=default_port, lines=lines,
                         default_mtu_bytes=self.glob.default_mtu or EOS_DEFAULT_MTU_BYTES,
                         eos_names=names, warnings=warnings, uncertain=uncertain, admin_up=admin)


def parse_eos_config(text: str, source: str, *, segment_bytes: int | None = None,
                     port_speeds_bps: Mapping[str, int] | None = None) -> EosConfig:
    """The QoS statements of a running-config and where each came from. `segment_bytes`:
    the platform's buffer segment, if not in EOS_SEGMENT_BYTES_BY_PLATFORM; `port_speeds_bps`:
    rocelab port (eth1) → link rate, for latency thresholds of interfaces without `speed`.
    Raises InputError naming `source` and the line of every malformed statement."""
    read = _Reader(source)
    read.run(_statements(text))
    device = _DEVICE_LINE.search(text)
    return _Resolver(read, segment_bytes, port_speeds_bps or {}).config(source, device.group(1) if device else None)


def parse_eos(text: str, source: str, *, segment_bytes: int | None = None,
              port_speeds_bps: Mapping[str, int] | None = None) -> QosProfile:
    """The QoS profile a running-config describes (module docstring). Raises InputError."""
    return parse_eos_config(text, source, segment_bytes=segment_bytes,
                            port_speeds_bps=port_speeds_bps).profile


def load_eos(path: str | os.PathLike[str], *, segment_bytes: int | None = None,
             port_speeds_bps: Mapping[str, int] | None = None) -> EosConfig:
    """Read a running-config file. Raises InputError naming the file."""
    source = os.fspath(path)
    return parse_eos_config(read_text(source), source, segment_bytes=segment_bytes,
                            port_speeds_bps=port_speeds_bps)
