"""A QosProfile as EOS statements: what EOS can express of it (rocelab.qos.eos says what not)."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Literal, Mapping, Sequence

from rocelab.qos.eos.names import lab_to_eos
from rocelab.qos.eos.parse import _IDENTITY, EOS_DEFAULT_DSCP_TO_TC, UNTRUSTED_TC
from rocelab.qos.model import DSCP_VALUES, PRIORITIES, PfcWatchdog, PortQos, QosProfile, QueueQos
from rocelab.qos.ports import sonic_to_lab

def _seconds(ms: int) -> str:
    return format((Decimal(ms) / 1000).normalize(), "f")


def _one(values: list[tuple[int, ...]], what: str, default: tuple[int, ...]) -> tuple[int, ...]:
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        raise ValueError(f"EOS has one {what} per switch; the profile's ports differ")
    return distinct[0] if distinct else default


def _watchdog_lines(wd: PfcWatchdog, prefix: str) -> list[str]:
    if wd.action not in ("drop", "forward"):
        raise ValueError(f"EOS's PFC watchdog has no {wd.action!r} action (drop or no-drop)")
    action = "drop" if wd.action == "drop" else "no-drop"
    if prefix:  # one port's own watchdog
        return [f"{prefix}priority-flow-control pause watchdog port action {action}",
                f"{prefix}priority-flow-control pause watchdog port timer timeout "
                f"{_seconds(wd.detection_time_ms)} polling-interval auto recovery-time "
                f"{_seconds(wd.restoration_time_ms)}"]
    lines = [f"priority-flow-control pause watchdog default timeout "
             f"{_seconds(wd.detection_time_ms)}"]
    if wd.restoration_time_ms:
        lines.append(f"priority-flow-control pause watchdog default recovery-time "
                     f"{_seconds(wd.restoration_time_ms)}")
    lines.append(f"priority-flow-control pause watchdog action {action}")
    return lines


def _queue_lines(q: int, queue: QueueQos, keyword: str) -> list[str]:
    body = []
    scheduler = queue.scheduler
    if scheduler is not None:
        body.append("priority strict" if scheduler.type == "STRICT" else "no priority")
        if scheduler.type != "STRICT" or scheduler.weight != 1:
            body.append(f"bandwidth percent {scheduler.weight}")
    wred = queue.wred
    if wred is not None and wred.ecn == "ecn_all":
        body.append(f"random-detect ecn minimum-threshold {wred.green_min_threshold_bytes} bytes "
                    f"maximum-threshold {wred.green_max_threshold_bytes} bytes "
                    f"max-mark-probability {wred.green_drop_probability_pct}")
    return ["   !", f"   {keyword} {q}", *(f"      {line}" for line in body)] if body else []


def render_eos(profile: QosProfile, *, mtu_bytes: Mapping[str, int] | None = None,
               queue_keyword: Literal["tx-queue", "uc-tx-queue"] = "tx-queue",
               interface_lines: Mapping[str, Sequence[str]] | None = None) -> str:
    """The EOS statements for `profile` (what EOS can express: module docstring), one
    interface block per port; `mtu_bytes` (SONiC port name → MTU) adds `mtu` lines, and
    `interface_lines` (SONiC port name → statements) other statements to a port's block, so
    a whole startup-config keeps one block per interface.

    Raises ValueError where EOS cannot say what the profile says: ports with different DSCP
    (other than untrusted) or TC → queue maps, or a PFC watchdog action of alert.
    """
    mtu_bytes, interface_lines = mtu_bytes or {}, interface_lines or {}
    names = sorted(set(profile.ports) | set(mtu_bytes) | set(interface_lines), key=lambda p: int(p[8:]))
    ports = [profile.ports.get(name, PortQos(port=name)) for name in names]
    untrusted = (UNTRUSTED_TC,) * DSCP_VALUES
    dscp_to_tc = _one([p.dscp_to_tc for p in ports if p.dscp_to_tc != untrusted],
                      "DSCP map", EOS_DEFAULT_DSCP_TO_TC)
    tc_to_queue = _one([p.tc_to_queue[:PRIORITIES] for p in ports], "traffic-class to tx-queue map",
                       _IDENTITY)
    watchdogs = Counter(p.pfc_wd for p in ports if p.pfc_enable and p.pfc_wd)
    default_wd = watchdogs.most_common(1)[0][0] if watchdogs else None

    out = [f"! QoS statements rendered by rocelab from {profile.source}"]
    for tc in range(PRIORITIES):
        changed = [str(d) for d in range(DSCP_VALUES)
                   if dscp_to_tc[d] == tc and dscp_to_tc[d] != EOS_DEFAULT_DSCP_TO_TC[d]]
        if changed:
            out.append(f"qos map dscp {' '.join(changed)} to traffic-class {tc}")
    out += [f"qos map traffic-class {tc} to tx-queue {q}"
            for tc, q in enumerate(tc_to_queue) if q != tc]
    if default_wd:
        out += ["!", *_watchdog_lines(default_wd, "")]
    for name, port in zip(names, ports):
        out += ["!", f"interface {lab_to_eos(sonic_to_lab(name))}"]
        out += [f"   {line}" for line in interface_lines.get(name, ())]
        if name in mtu_bytes:
            out.append(f"   mtu {mtu_bytes[name]}")
        if port.dscp_to_tc != dscp_to_tc:
            out.append("   qos trust cos" if port.dot1p_to_tc is not None else "   no qos trust")
        if port.pfc_enable:
            out.append("   priority-flow-control on")
            out += [f"   priority-flow-control priority {p} no-drop"
                    for p in sorted(port.pfc_enable)]
            if port.pfc_wd is None and default_wd:
                out.append("   no priority-flow-control pause watchdog")
            elif port.pfc_wd != default_wd:
                out += _watchdog_lines(port.pfc_wd, "   ")
        for q, queue in sorted(port.queues.items()):
            out += _queue_lines(q, queue, queue_keyword)
    return "\n".join(out + ["!", ""])
