"""A traffic job's report and a bw run's summary as tables (rocelab.traffic.summary builds them)."""

from __future__ import annotations

from typing import Mapping

from rich.table import Table

from rocelab.traffic.calc import seconds_text, si_text  # one formatting of rates and times across the CLI


def _fct_text(fct: Mapping | None, unit: str) -> str:
    if not fct:
        return "—"
    return f"{seconds_text(fct['p50'][unit])}/{seconds_text(fct['p99'][unit])}"


def render_report(report: Mapping) -> Table:
    """One row per iteration and an average row, in production-equivalent units."""
    line = report["line_rate_bps"]
    table = Table(title=(f"{report['pattern']} · {len(report['hosts'])} hosts · {report['size_bytes']:,} B · "
                         f"{report['qps']} QP/peer · verb {report['verb']} · TDF {report['tdf']:g} · "
                         f"line rate {si_text(line['production'], 'b/s')} ({si_text(line['emulated'], 'b/s')} emulated)"),
                  title_justify="left")
    table.caption = f"production-equivalent units: emulated = time × {report['tdf']:g}, rates ÷ {report['tdf']:g}"
    for column in ("iter", "time", "algbw", "busbw", "of line", "FCT p50/p99", "retx B", "CNP tx/rx", "PFC paused"):
        table.add_column(column, justify="right")

    def row(label: str, item: Mapping, end_section: bool = False) -> None:
        c = item["counters"]
        table.add_row(label, seconds_text(item["time_s"]["production"]),
                      si_text(item["algbw_bps"]["production"], "b/s"), si_text(item["busbw_bps"]["production"], "b/s"),
                      f"{item['busbw_bps']['emulated'] / line['emulated']:.1%}",
                      _fct_text(item["fct_s"], "production"), f"{int(c['retransmitted_bytes']):,}",
                      f"{int(c['cnps_sent']):,}/{int(c['cnps_received']):,}",
                      seconds_text(c["pfc_paused_s"]["production"]) if c["pfc_paused_s"]["production"] else "0",
                      end_section=end_section)

    items = report["per_iteration"]
    for n, item in enumerate(items):
        row(str(item["index"]), item, end_section=n == len(items) - 1)
    if report["total"].get("iterations_completed"):
        row("avg", report["total"])
    return table


def render_bw(summary: Mapping) -> Table:
    """perftest's ib_write_bw (ib_read_bw) columns, production units first and emulated beside."""
    table = Table(title=(f"{summary['src']} → {summary['dst']} · RDMA {summary['verb'].upper()} · "
                         f"{summary['qps']} QP · "
                         f"line rate {si_text(summary['line_rate_bps']['production'], 'b/s')} "
                         f"({si_text(summary['line_rate_bps']['emulated'], 'b/s')} emulated)"), title_justify="left")
    for column in ("#bytes", "#messages", "BW peak", "BW average", "MsgRate", "BW peak (emul.)",
                   "BW average (emul.)", "MsgRate (emul.)", "of line rate", "retx bytes"):
        table.add_column(column, justify="right")
    counters = summary.get("counters") or {}
    table.add_row(f"{summary['message_bytes']:,}", f"{summary['messages']:,}",
                  si_text(summary["bw_peak_bps"]["production"], "b/s"), si_text(summary["bw_average_bps"]["production"], "b/s"),
                  si_text(summary["msg_rate_pps"]["production"], "msg/s"), si_text(summary["bw_peak_bps"]["emulated"], "b/s"),
                  si_text(summary["bw_average_bps"]["emulated"], "b/s"), si_text(summary["msg_rate_pps"]["emulated"], "msg/s"),
                  f"{summary['bw_vs_line_rate']:.1%}", f"{int(counters.get('retransmitted_bytes', 0)):,}")
    return table
