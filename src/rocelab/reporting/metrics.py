"""Every switchd and nicd counter in Prometheus text format.

    reading = read_lab(lab_state)              # one counters request per agent
    text = exposition([reading])               # bytes, Prometheus text format 0.0.4
    server, thread = serve(lab_reader(None), 9400)   # http://127.0.0.1:9400/metrics

A custom collector turns the agents' counters replies into metric families at every
scrape, so a served endpoint always shows the labs that are up now. Names follow
Prometheus conventions: counters end in `_total`, units are base units in the name
(`_bytes`, `_seconds`), and `rocelab_qp_rate_bps` keeps the bits per second every
rocelab table uses. Times and rates are emulated: divide seconds by `rocelab_tdf` for
production-equivalent time, multiply bits per second by it for production-equivalent
rate. Byte counts are the same in both.

Labels: lab, node, and where they apply port, priority (0-7), queue (0-7), pg (0-7),
qpn, reason, where (`port`, `pg3`, `queue3`: the place a drop was counted, as in the
switch's counters).
"""

from __future__ import annotations

import itertools
import threading
from typing import Callable, Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily, Metric,
)

from rocelab.kernel.loop import LATENESS_BOUNDS_S
from rocelab.runtime.readings import LabReading

LOCALHOST = "127.0.0.1"  # the endpoint is for this machine's Prometheus, never the network
COUNTER, GAUGE = "counter", "gauge"

# Switch counters, per the layout in the `rocelab.switch` docstring: (key, type, help).
_PORT = (
    ("rx_packets", COUNTER, "Frames received on the port, PFC and dropped frames included."),
    ("rx_bytes", COUNTER, "Bytes received on the port, PFC and dropped frames included."),
    ("tx_packets", COUNTER, "Data frames sent out of the port (PFC frames not included)."),
    ("tx_bytes", COUNTER, "Data bytes sent out of the port (PFC frames not included)."),
    ("pause_rx_frames", COUNTER, "802.3x PAUSE frames received, honoured or not (SAI_PORT_STAT_PAUSE_RX_PKTS)."),
)
_PORT_PER_PRIORITY = (
    ("pfc_rx_frames", "rocelab_port_pfc_rx_frames", "PFC frames received per priority, XON included."),
    ("pfc_tx_frames", "rocelab_port_pfc_tx_frames", "PFC frames sent per priority, XON included."),
    ("paused_time_s", "rocelab_port_pfc_paused_seconds",
     "Emulated seconds the peer's PFC held this port's priority paused (divide by rocelab_tdf)."),
)
_QUEUE = (
    ("tx_packets", COUNTER, "Packets sent from the egress queue."),
    ("tx_bytes", COUNTER, "Bytes sent from the egress queue."),
    ("ecn_marked_packets", COUNTER, "Packets CE-marked by WRED/ECN in the egress queue."),
    ("ecn_marked_bytes", COUNTER, "Bytes of packets CE-marked by WRED/ECN in the egress queue."),
    ("depth_bytes", GAUGE, "Bytes waiting in the egress queue now."),
    ("watermark_bytes", GAUGE, "Highest egress queue depth since the counters were cleared."),
    ("shared_watermark_bytes", GAUGE, "Highest shared-pool occupancy of the egress queue since cleared."),
)
_PG = (
    ("rx_packets", COUNTER, "Packets admitted into the ingress priority group's buffer."),
    ("rx_bytes", COUNTER, "Bytes admitted into the ingress priority group's buffer."),
    ("lossless", GAUGE, "1 if the priority group is lossless (PFC enabled), else 0."),
    ("xoff", GAUGE, "1 while the priority group asserts XOFF towards the peer, else 0."),
    ("reserved_bytes", GAUGE, "Bytes the priority group holds in its reserved buffer now."),
    ("shared_bytes", GAUGE, "Bytes the priority group holds in the shared pool now."),
    ("headroom_bytes", GAUGE, "Bytes the priority group holds in headroom now."),
    ("shared_watermark_bytes", GAUGE, "Highest shared-pool occupancy of the priority group since cleared."),
    ("headroom_watermark_bytes", GAUGE, "Highest headroom occupancy of the priority group since cleared."),
    ("held_packets", COUNTER, "Lossless packets held past the headroom: sent only because this switch's XOFF "
                              "left late (the emulation ran late), not dropped."),
    ("held_bytes", COUNTER, "Bytes of those packets."),
)
_PFCWD = (
    ("stormed", GAUGE, "1 while the PFC watchdog holds the queue as stormed, else 0."),
    ("storms_detected", COUNTER, "PFC storms the watchdog detected on the queue."),
    ("storms_restored", COUNTER, "PFC storms the watchdog restored the queue from."),
)
# nicd's counters differ by NIC backend (the emulated core, pyverbs/rxe), so NIC keys are
# exported by shape: every number at the top and in a QP is a counter, except these.
_NIC_GAUGES = frozenset({"qps_in_error"})
_QP_CONFIG = ("state", "error_status", "priority")  # described by rocelab_qp_info, not counted


class _Families:
    """Metric families by name, created at their first sample."""

    def __init__(self) -> None:
        self._by_name: dict[str, Metric] = {}

    def add(self, kind: str, name: str, doc: str, labels: dict[str, str], value: float) -> None:
        family = self._by_name.get(name)
        if family is None:
            make = CounterMetricFamily if kind == COUNTER else GaugeMetricFamily
            family = self._by_name[name] = make(name, doc, labels=list(labels))
        family.add_metric(list(labels.values()), float(value))

    def histogram(self, name: str, doc: str, labels: dict[str, str], bounds: Iterable[float],
                  counts: Iterable[int], total: float) -> None:
        """A histogram from per-bucket counts (the last for +Inf), made cumulative as Prometheus counts."""
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = HistogramMetricFamily(name, doc, labels=list(labels))
        cumulative = list(itertools.accumulate(counts))
        buckets = [(repr(b), c) for b, c in zip(bounds, cumulative)] + [("+Inf", cumulative[-1])]
        family.add_metric(list(labels.values()), buckets, total)

    def info(self, name: str, doc: str, labels: dict[str, str], value: dict[str, str]) -> None:
        family = self._by_name.get(name)
        if family is None:
            family = self._by_name[name] = InfoMetricFamily(name, doc, labels=list(labels))
        family.add_metric(list(labels.values()), value)

    def metrics(self) -> list[Metric]:
        return list(self._by_name.values())


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _seconds(key: str) -> str:
    """`paused_time_s` → `paused_seconds`: Prometheus spells the base unit out."""
    return key.removesuffix("_time_s").removesuffix("_s") + "_seconds" if key.endswith("_s") else key


def _drops(out: _Families, labels: dict[str, str], drops: dict) -> None:
    for reason, d in drops.items():
        where = {**labels, "reason": reason}
        out.add(COUNTER, "rocelab_drops", "Packets dropped, by where and why (STYLE.md rule 8).", where, d["packets"])
        out.add(COUNTER, "rocelab_drops_bytes", "Bytes dropped, by where and why.", where, d["bytes"])


def _switch(out: _Families, base: dict[str, str], counters: dict) -> None:
    # The switch-wide "drops" are sums of the per-place ones below: not exported twice.
    for port_name, port in counters["ports"].items():
        at_port = {**base, "port": port_name}
        for key, kind, doc in _PORT:
            out.add(kind, f"rocelab_port_{key}", doc, at_port, port[key])
        for key, name, doc in _PORT_PER_PRIORITY:
            for priority, value in enumerate(port[key]):
                out.add(COUNTER, name, doc, {**at_port, "priority": str(priority)}, value)
        _drops(out, {**at_port, "where": "port"}, port["drops"])
        for q, queue in enumerate(port["queues"]):
            at_queue = {**at_port, "queue": str(q)}
            for key, kind, doc in _QUEUE:
                out.add(kind, f"rocelab_queue_{key}", doc, at_queue, queue[key])
            if queue["pfcwd"] is not None:
                for key, kind, doc in _PFCWD:
                    out.add(kind, f"rocelab_queue_pfcwd_{key}", doc, at_queue, queue["pfcwd"][key])
            _drops(out, {**at_port, "where": f"queue{q}"}, queue["drops"])
        for p, pg in enumerate(port["pgs"]):
            at_pg = {**at_port, "pg": str(p)}
            for key, kind, doc in _PG:
                out.add(kind, f"rocelab_pg_{key}", doc, at_pg, pg[key])
            _drops(out, {**at_port, "where": f"pg{p}"}, pg["drops"])


def _nic(out: _Families, base: dict[str, str], counters: dict) -> None:
    for key, value in counters.items():
        if _is_number(value):
            kind = GAUGE if key in _NIC_GAUGES else COUNTER
            out.add(kind, f"rocelab_nic_{_seconds(key)}", f"nicd counter {key}: the port's frames, or a QP counter "
                                                           "summed over every QP the NIC had.", base, value)
    for reason, n in (counters.get("drops") or {}).items():
        out.add(COUNTER, "rocelab_nic_drops", "Frames the NIC dropped before they reached a QP, by reason.",
                {**base, "reason": reason}, n)
    for key, value in (counters.get("reorder_distance") or {}).items():
        out.add(GAUGE, f"rocelab_nic_reorder_distance_{key}", f"The {key} of how far ahead of the expected PSN "
                "request packets arrived, in PSNs, over every QP since the counters were cleared.", base, value)
    for key, values in (counters.get("pfc") or {}).items():
        for priority, value in enumerate(values):
            out.add(COUNTER, f"rocelab_nic_pfc_{_seconds(key)}", f"nicd PFC counter {key} per priority "
                                                                 "(seconds are emulated).",
                    {**base, "priority": str(priority)}, value)
    for qpn, qp in (counters.get("qps") or {}).items():
        at_qp = {**base, "qpn": qpn}
        cc = qp.get("cc") or {}
        out.info("rocelab_qp", "A queue pair's state, priority and congestion-control algorithm.", at_qp,
                 {key: "" if qp.get(key) is None else str(qp[key]) for key in _QP_CONFIG}
                 | {"cc_algorithm": str(cc.get("algorithm", ""))})
        for key, value in qp.items():
            if _is_number(value) and key not in _QP_CONFIG:
                out.add(COUNTER, f"rocelab_qp_{_seconds(key)}", f"Queue pair counter {key}.", at_qp, value)
        for key, value in cc.items():
            if _is_number(value):
                # Rates are common to every algorithm; the rest is the algorithm's own state.
                name = f"rocelab_qp_{key}" if key.endswith("_bps") else f"rocelab_qp_cc_{key}"
                out.add(GAUGE, name, f"Congestion control {key} (emulated bits per second for rates; "
                                     "multiply by rocelab_tdf for production-equivalent).", at_qp, value)
        for reason, n in (qp.get("drops") or {}).items():
            out.add(COUNTER, "rocelab_qp_drops", "Packets a queue pair dropped, by reason.",
                    {**at_qp, "reason": reason}, n)


def _ecmp(out: _Families, base: dict[str, str], groups: dict) -> None:
    """switchd's adaptive ECMP groups (load_balancing other than hash), by their members."""
    for name, group in groups.items():
        at_group = {**base, "group": name}
        out.info("rocelab_ecmp_group", "An adaptive ECMP group's load-balancing mode.", at_group,
                 {"mode": group["mode"]})
        out.add(COUNTER, "rocelab_ecmp_reassignments", "Flowlets the group moved to another member.", at_group,
                group["reassignments"])
        out.add(COUNTER, "rocelab_ecmp_collisions", "Frames that found their flowset entry active for another flow.",
                at_group, group["collisions"])
        for member, sent in group["members"].items():
            at_member = {**at_group, "member": member}
            out.add(COUNTER, "rocelab_ecmp_member_frames", "Frames the group steered to this member.", at_member,
                    sent["frames"])
            out.add(COUNTER, "rocelab_ecmp_member_bytes", "Bytes the group steered to this member.", at_member,
                    sent["bytes"])


def _loop(out: _Families, base: dict[str, str], loop: dict) -> None:
    out.add(COUNTER, "rocelab_agent_rx_frames", "Frames the agent's loop read from its ports.", base,
            loop["rx_frames"])
    out.add(COUNTER, "rocelab_agent_tx_frames", "Frames the agent's loop wrote to its ports.", base,
            loop["tx_frames"])
    out.add(GAUGE, "rocelab_agent_scheduling", "1, labelled with the CPU scheduling the agent got.",
            {**base, "scheduling": loop.get("scheduling", "ordinary")}, 1)
    for errno_name, n in loop["tx_errors"].items():
        out.add(COUNTER, "rocelab_agent_tx_errors", "Frames the agent could not write, by errno.",
                {**base, "errno": errno_name}, n)
    out.add(COUNTER, "rocelab_agent_rx_dropped", "Frames the kernel dropped from a full receive queue before the "
            "agent read them (PACKET_STATISTICS).", base, loop["rx_dropped"])
    lateness = loop["lateness"]
    out.histogram("rocelab_agent_lateness_seconds", "How late the agent ran events that were due (frame departures, "
                  "pause expiry, DCQCN and retransmission timers), emulated seconds: divide by rocelab_tdf for "
                  "production-equivalent time.", base, LATENESS_BOUNDS_S, lateness["counts"], lateness["total_s"])


def families(readings: Iterable[LabReading]) -> list[Metric]:
    """Metric families of the readings' counters (a pure function: no I/O)."""
    out = _Families()
    for reading in readings:
        out.add(GAUGE, "rocelab_tdf", "Time-dilation factor: production-equivalent time = emulated / TDF.",
                {"lab": reading.lab}, reading.tdf)
        for agent in reading.agents:
            base = {"lab": reading.lab, "node": agent.node}
            out.add(GAUGE, "rocelab_agent_up", "1 if the agent answered its counters request, else 0.",
                    {**base, "agent": agent.agent}, 0 if agent.reply is None else 1)
            if agent.reply is None:
                continue
            if "loop" in agent.reply:
                _loop(out, {**base, "agent": agent.agent}, agent.reply["loop"])
            if agent.agent == "switchd":
                _switch(out, base, agent.reply["counters"])
                _ecmp(out, base, agent.reply.get("ecmp_groups") or {})
            else:
                _nic(out, base, agent.reply["counters"])
    return out.metrics()


class LabCollector:
    """A prometheus_client collector that reads the agents at every collect()."""

    def __init__(self, read: Callable[[], Iterable[LabReading]]):
        self._read = read

    def collect(self) -> list[Metric]:
        return families(self._read())


def registry(read: Callable[[], Iterable[LabReading]]) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(LabCollector(read))
    return reg


def exposition(readings: Iterable[LabReading]) -> bytes:
    """The readings in Prometheus text format."""
    fixed = list(readings)
    return generate_latest(registry(lambda: fixed))


def serve(read: Callable[[], Iterable[LabReading]], port: int) -> tuple[WSGIServer, threading.Thread]:
    """Serve /metrics on 127.0.0.1:`port` (0: any free port) from a daemon thread.

    Returns (server, thread): `server.server_port` is the port bound; stop with
    `server.shutdown(); server.server_close()`.
    """
    return start_http_server(port, addr=LOCALHOST, registry=registry(read))
