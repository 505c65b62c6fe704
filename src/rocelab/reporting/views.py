"""Counter views in the shape of SONiC's CLI, so what a learner reads here reads the same
on a production switch (REFERENCE.md, "What SONiC's counter views look like"):

    interfaces   portstat      `show interfaces counters`
    queues       queuestat     `show queue counters`
    pfc          pfcstat       `show pfc counters` (plus pause time and 802.3x PAUSE received,
                               which SONiC keeps in COUNTERS_DB as SAI_PORT_STAT_PAUSE_RX_PKTS
                               but shows in no view)
    wred         queuestat     `show queue wredcounters`
    watermarks   watermarkstat `show priority-group watermark shared|headroom`, `show queue watermark unicast`
    drops        rocelab's drop reasons per port (SONiC splits these across several views)
    pfcwd        pfcwd         `show pfcwd stats` (queues the PFC watchdog has found stormed)

Plain tables, numbers right-aligned with thousands separators, N/A where there is no value.
Rates are emulated (what the dilated link carries) and production-equivalent (× TDF).
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from rocelab.kernel.loop import LATENESS_BOUNDS_S
from rocelab.qos.model import PRIORITIES
from rocelab.runtime.fidelity import AgentTiming
from rocelab.switch.counters import (
    BAD_IPV4_CHECKSUM, BAD_IPV4_HEADER, FLOW_CONTROL_DISABLED, IMPAIRMENT_LOSS, MAC_CONTROL_UNSUPPORTED, NOT_IPV4,
    OVERSIZED, TO_SELF, TRUNCATED,
)
from rocelab.units import format_rate

VIEWS = ("interfaces", "queues", "pfc", "wred", "watermarks", "drops", "pfcwd", "fidelity")
RX_ERRORS = frozenset({TRUNCATED, OVERSIZED, BAD_IPV4_HEADER, BAD_IPV4_CHECKSUM, MAC_CONTROL_UNSUPPORTED})
# What an ASIC traps to the CPU (BGP and BFD to the switch's address, ARP, IPv6 ND) is no discard:
# the emulated one leaves it to the namespace's kernel, which receives it on the same port.
TRAPPED = frozenset({NOT_IPV4, TO_SELF})


def _table(title: str, columns: list[str]) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for i, col in enumerate(columns):
        table.add_column(col, justify="left" if i == 0 else "right")
    return table


def _n(value: float | int | None) -> str:
    return "N/A" if value is None else f"{value:,}"


def _drop_packets(drops: dict, keep=lambda reason: True) -> int:
    return sum(d["packets"] for reason, d in drops.items() if keep(reason))


def rx_drops(port: dict) -> tuple[int, int, int]:
    """A port's RX_ERR, RX_DRP and TX_DRP, in packets, as portstat counts them."""
    drops = port["drops"]
    rx_err = _drop_packets(drops, lambda r: r in RX_ERRORS)
    rx_drp = _drop_packets(drops, lambda r: r not in RX_ERRORS and r not in TRAPPED and r != IMPAIRMENT_LOSS) + \
        sum(_drop_packets(pg["drops"]) for pg in port["pgs"])
    tx_drp = sum(_drop_packets(q["drops"]) for q in port["queues"]) + _drop_packets(drops, lambda r: r == IMPAIRMENT_LOSS)
    return rx_err, rx_drp, tx_drp


def interfaces(node: str, now: dict, before: dict | None, interval_s: float, rates: dict[str, float],
               tdf: int) -> Table:
    table = _table(f"{node}: interface counters (BPS production-equivalent: emulated × TDF {tdf}, "
                   f"over {interval_s:g} s)",
                   ["IFACE", "STATE", "RX_OK", "RX_BPS", "RX_UTIL", "RX_ERR", "RX_DRP", "RX_OVR",
                    "TX_OK", "TX_BPS", "TX_UTIL", "TX_ERR", "TX_DRP", "TX_OVR"])
    for name, port in now["ports"].items():
        rx_err, rx_drp, tx_drp = rx_drops(port)
        rx_bps = tx_bps = None
        if before is not None:
            old = before["ports"][name]
            rx_bps = (port["rx_bytes"] - old["rx_bytes"]) * 8 / interval_s
            tx_bps = (port["tx_bytes"] - old["tx_bytes"]) * 8 / interval_s

        def bps(v):
            return "N/A" if v is None else f"{format_rate(v * tdf)}b/s"

        def util(v):
            return "N/A" if v is None else f"{100 * v / rates[name]:.1f}%"

        table.add_row(name, "U", _n(port["rx_packets"]), bps(rx_bps), util(rx_bps), _n(rx_err), _n(rx_drp), "N/A",
                      _n(port["tx_packets"]), bps(tx_bps), util(tx_bps), "N/A", _n(tx_drp), "N/A")
    return table


def queues(node: str, now: dict) -> Table:
    table = _table(f"{node}: queue counters", ["Port", "TxQ", "Counter/pkts", "Counter/bytes", "Drop/pkts", "Drop/bytes"])
    for name, port in now["ports"].items():
        for q, queue in enumerate(port["queues"]):
            drops = queue["drops"]
            table.add_row(name, f"UC{q}", _n(queue["tx_packets"]), _n(queue["tx_bytes"]),
                          _n(_drop_packets(drops)), _n(sum(d["bytes"] for d in drops.values())),
                          end_section=q == PRIORITIES - 1)
    return table


def pfc(node: str, now: dict, tdf: int) -> Group:
    prio = [f"PFC{p}" for p in range(PRIORITIES)]
    rx, tx = _table(f"{node}: PFC counters", ["Port Rx", *prio]), _table("", ["Port Tx", *prio])
    paused = _table(f"{node}: time paused by received PFC, µs (emulated / production-equivalent)",
                    ["Port", *prio])
    pause = _table(f"{node}: 802.3x PAUSE received (SAI_PORT_STAT_PAUSE_RX_PKTS)",
                   ["Port", "PAUSE_RX", "DROPPED (flow control off)"])
    for name, port in now["ports"].items():
        rx.add_row(name, *(_n(v) for v in port["pfc_rx_frames"]))
        tx.add_row(name, *(_n(v) for v in port["pfc_tx_frames"]))
        paused.add_row(name, *(f"{s * 1e6:,.0f} / {s * 1e6 / tdf:,.1f}" if s else "0"
                               for s in port["paused_time_s"]))
        pause.add_row(name, _n(port["pause_rx_frames"]),
                      _n(port["drops"].get(FLOW_CONTROL_DISABLED, {"packets": 0})["packets"]))
    return Group(rx, tx, paused, pause)


def wred(node: str, now: dict) -> Table:
    table = _table(f"{node}: WRED and ECN counters",
                   ["Port", "TxQ", "WredDrp/pkts", "WredDrp/bytes", "EcnMarked/pkts", "EcnMarked/bytes"])
    for name, port in now["ports"].items():
        for q, queue in enumerate(port["queues"]):
            wred_drop = queue["drops"].get("wred_drop", {"packets": 0, "bytes": 0})
            table.add_row(name, f"UC{q}", _n(wred_drop["packets"]), _n(wred_drop["bytes"]),
                          _n(queue["ecn_marked_packets"]), _n(queue["ecn_marked_bytes"]),
                          end_section=q == PRIORITIES - 1)
    return table


def watermarks(node: str, now: dict) -> Group:
    pgs = [f"PG{p}" for p in range(PRIORITIES)]
    ucs = [f"UC{q}" for q in range(PRIORITIES)]
    shared = _table(f"{node}: Ingress shared pool occupancy per PG (bytes):", ["Port", *pgs])
    headroom = _table(f"{node}: Ingress headroom per PG (bytes):", ["Port", *pgs])
    egress = _table(f"{node}: Egress shared pool occupancy per unicast queue (bytes):", ["Port", *ucs])
    for name, port in now["ports"].items():
        shared.add_row(name, *(_n(pg["shared_watermark_bytes"]) for pg in port["pgs"]))
        headroom.add_row(name, *(_n(pg["headroom_watermark_bytes"]) for pg in port["pgs"]))
        egress.add_row(name, *(_n(q["shared_watermark_bytes"]) for q in port["queues"]))
    return Group(shared, headroom, egress)


def drops(node: str, now: dict) -> Table:
    table = _table(f"{node}: drops by reason", ["Port", "Where", "Reason", "Packets", "Bytes"])
    for name, port in now["ports"].items():
        places = [("port", port["drops"])]
        places += [(f"PG{i}", pg["drops"]) for i, pg in enumerate(port["pgs"])]
        places += [(f"UC{i}", q["drops"]) for i, q in enumerate(port["queues"])]
        for where, reasons in places:
            for reason, d in sorted(reasons.items()):
                table.add_row(name, where, reason, _n(d["packets"]), _n(d["bytes"]))
    if not table.row_count:
        table.add_row("all", "", "no drops", "0", "0")
    return table


def pfcwd(node: str, now: dict) -> Table:
    """Like `show pfcwd stats`: every queue that has had a storm since the counters were
    cleared. RX OK/DROP is N/A: switchd's watchdog acts on the egress queue only."""
    table = _table(f"{node}: PFC watchdog", ["QUEUE", "STATUS", "STORM DETECTED/RESTORED", "TX OK/DROP", "RX OK/DROP"])
    for name, port in now["ports"].items():
        for q, queue in enumerate(port["queues"]):
            wd = queue.get("pfcwd")
            if wd and (wd["stormed"] or wd["storms_detected"]):
                dropped = queue["drops"].get("pfcwd_drop", {"packets": 0})["packets"]
                table.add_row(f"{name}:{q}", "stormed" if wd["stormed"] else "operational",
                              f"{wd['storms_detected']:,}/{wd['storms_restored']:,}",
                              f"{queue['tx_packets']:,}/{dropped:,}", "N/A")
    if not table.row_count:
        table.add_row("all", "no storm", "0/0", "", "")
    return table


def switch_views(node: str, now: dict, before: dict | None, interval_s: float, rates: dict[str, float],
                 tdf: int, chosen: tuple[str, ...] = VIEWS) -> Group:
    parts = {
        "interfaces": lambda: interfaces(node, now, before, interval_s, rates, tdf),
        "queues": lambda: queues(node, now),
        "pfc": lambda: pfc(node, now, tdf),
        "wred": lambda: wred(node, now),
        "watermarks": lambda: watermarks(node, now),
        "drops": lambda: drops(node, now),
        "pfcwd": lambda: pfcwd(node, now),
    }
    return Group(*(parts[v]() for v in chosen if v in parts))


def fidelity(timings: list[AgentTiming], bound_s: float, tdf: int) -> Table:
    """Every agent's lateness since it started (rocelab.kernel.loop): how late it ran what was
    due, against the bound one frame on the fastest link sets (rocelab.runtime.fidelity)."""
    table = _table(f"Emulation timing (TDF {tdf}; bound {bound_s * 1e3:.3g} ms = one frame on the fastest link; "
                   "production-equivalent in brackets)",
                   ["Node", "Agent", "Due events", "p50", "p99", "Max", "Later than bound",
                    "Behind the bound (at least)", "Dropped unread"])
    for timing in timings:
        def at(q: float) -> str:
            s = timing.quantile_s(q)
            return "—" if not timing.events else (f"≤{s * 1e3:.3g} ms [{s / tdf * 1e6:.3g} µs]" if s != float("inf")
                                                  else f">{LATENESS_BOUNDS_S[-1] * 1e3:.3g} ms")
        table.add_row(timing.node, timing.agent, f"{timing.events:,}", at(0.5), at(0.99), at(1.0),
                      f"{timing.later_than(bound_s):,}", f"{timing.behind_s(bound_s) * 1e3:.3g} ms",
                      f"{timing.rx_dropped:,}")
    return table


def nic_view(node: str, counters: dict, tdf: int) -> Group:
    """A host's emulated NIC: port totals, PFC it honoured, and one row per QP."""
    totals = _table(f"{node}: NIC counters", ["Counter", "Value"])
    for key, value in counters.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            totals.add_row(key, _n(round(value, 6) if isinstance(value, float) else value))
    for reason, d in sorted(counters.get("drops", {}).items()):
        totals.add_row(f"drop: {reason}", _n(d if isinstance(d, int) else d.get("packets")))
    parts = [totals]
    pfc_counters = counters.get("pfc")
    if pfc_counters:
        prio = [f"PFC{p}" for p in range(PRIORITIES)]
        table = _table(f"{node}: PFC received", ["", *prio])
        for key, values in pfc_counters.items():
            table.add_row(key, *(_n(round(v, 6) if isinstance(v, float) else v) for v in values))
        parts.append(table)
    qps = counters.get("qps") or {}
    if qps:
        table = _table(f"{node}: queue pairs", ["QPN", "state", "rate (emulated / production)", "alpha",
                                                "tx pkts", "retransmitted", "CNPs rx", "NAKs rx"])
        for qpn, qp in qps.items():
            cc = qp.get("cc") or {}
            rate = cc.get("rate_bps")
            table.add_row(str(qpn), str(qp.get("state", "")),
                          "N/A" if rate is None else f"{format_rate(rate)}b/s / {format_rate(rate * tdf)}b/s",
                          "N/A" if cc.get("alpha") is None else f"{cc['alpha']:.3f}",
                          _n(qp.get("tx_packets")), _n(qp.get("retransmitted_packets")),
                          _n(qp.get("cnps_received")), _n(qp.get("naks_received")))
        parts.append(table)
    return Group(*parts)


def title(text: str) -> Text:
    return Text(text, style="bold")
