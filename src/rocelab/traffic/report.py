"""A finished job's numbers, computed from every host's runner result, and their table.

Definitions (nccl-tests): an iteration lasts from the first rank's start to the last
rank's end; algbw = size / time; busbw = algbw × the pattern's bus factor. The job's
figures average the iterations' times, as nccl-tests does. A flow is one step's transfer
from one host to another; its completion time runs from the sender posting it to its last
byte arriving at the receiver (every nicd reads the same CLOCK_MONOTONIC).

Every time and rate comes in emulated units and production-equivalent ones (emulated
time ÷ TDF, rates × TDF); byte counts are the same in both.
"""

from __future__ import annotations

from statistics import fmean
from typing import Mapping, Sequence

from rich.table import Table

from rocelab.calc import BITS_PER_BYTE, _seconds, _si  # one formatting of rates and times across the CLI
from rocelab.traffic.patterns import Plan
from rocelab.traffic.runner import counter_snapshot


def _time(seconds: float, tdf: float) -> dict[str, float]:
    return {"emulated": seconds, "production": seconds / tdf}


def _rate(bps: float, tdf: float) -> dict[str, float]:
    return {"emulated": bps, "production": bps * tdf}


def _percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def _fct(values: Sequence[float], tdf: float) -> dict | None:
    if not values:
        return None
    return {name: _time(v, tdf) for name, v in (("p50", _percentile(values, 0.5)),
                                                ("p99", _percentile(values, 0.99)), ("max", max(values)))}


def _sum_counters(items: Sequence[Mapping[str, float]]) -> dict[str, float]:
    total = dict.fromkeys(counter_snapshot({}), 0)
    for item in items:
        for key in total:
            total[key] += item.get(key, 0)
    return total


def _counters_view(total: Mapping[str, float], tdf: float) -> dict:
    view = {k: v for k, v in total.items() if k != "pfc_paused_s"}
    view["pfc_paused_s"] = _time(total["pfc_paused_s"], tdf)
    return view


def flow_completion_times(results: Mapping[str, Mapping]) -> dict[int, list[float]]:
    """Per iteration, the completion time of every flow (sender's post → receiver's last byte)."""
    arrived = {(i, s, src, dst): at for dst, r in results.items() for i, s, src, _, at in r["recvs"]}
    fcts: dict[int, list[float]] = {}
    for src, r in results.items():
        for i, s, dst, _, posted_at, _ in r["sends"]:
            at = arrived.get((i, s, src, dst))
            if at is not None:
                fcts.setdefault(i, []).append(at - posted_at)
    return fcts


def build_report(*, lab: str, plan: Plan, results: Mapping[str, Mapping], tdf: float, line_rate_bps: float,
                 iterations: int, qps: int, verb: str, message_bytes: int, compute_gap_s: float) -> dict:
    """The JSON-able report of a job. `results`: host → PlanRunner.result(); `line_rate_bps`
    and `compute_gap_s` in emulated units."""
    size_bits = plan.size_bytes * BITS_PER_BYTE
    fcts = flow_completion_times(results)
    per_iteration = []
    raw_counters = []
    for i in range(iterations):
        rounds = [r["iterations"][i] for r in results.values() if len(r["iterations"]) > i]
        if len(rounds) < len(results):
            break  # a host never finished it (failed job): report what completed
        start, end = min(x["start_s"] for x in rounds), max(x["end_s"] for x in rounds)
        seconds = max(end - start, 1e-12)
        algbw = size_bits / seconds
        raw_counters.append(_sum_counters([x["counters"] for x in rounds]))
        per_iteration.append({
            "index": i, "start_s": start, "time_s": _time(seconds, tdf),
            "algbw_bps": _rate(algbw, tdf), "busbw_bps": _rate(algbw * plan.bus_factor, tdf),
            "fct_s": _fct(fcts.get(i, []), tdf),
            "counters": _counters_view(raw_counters[-1], tdf),
        })
    total: dict = {"iterations_completed": len(per_iteration)}
    if per_iteration:
        mean_s = fmean(it["time_s"]["emulated"] for it in per_iteration)
        algbw = size_bits / mean_s
        first = per_iteration[0]["start_s"]
        last_end = max(r["iterations"][len(per_iteration) - 1]["end_s"] for r in results.values())
        total |= {
            "time_s": _time(mean_s, tdf), "wall_s": _time(last_end - first, tdf),
            "algbw_bps": _rate(algbw, tdf), "busbw_bps": _rate(algbw * plan.bus_factor, tdf),
            "busbw_vs_line_rate": algbw * plan.bus_factor / line_rate_bps,
            "fct_s": _fct([v for i in range(len(per_iteration)) for v in fcts.get(i, [])], tdf),
            "counters": _counters_view(_sum_counters(raw_counters), tdf),
        }
    ranks = {h: {"bytes_sent": r["bytes_sent"], "bytes_received": r["bytes_received"],
                 "plan_bytes_sent": plan.bytes_sent(h) * iterations,
                 "plan_bytes_received": plan.bytes_received(h) * iterations,
                 "steps_per_iteration": len(plan.steps[h])} for h, r in results.items()}
    return {
        "lab": lab, "pattern": plan.pattern, "hosts": list(plan.hosts), "size_bytes": plan.size_bytes,
        "iterations": iterations, "qps": qps, "verb": verb, "message_bytes": message_bytes,
        "compute_gap_s": _time(compute_gap_s, tdf), "tdf": tdf, "bus_factor": plan.bus_factor,
        "line_rate_bps": _rate(line_rate_bps, tdf),
        "per_iteration": per_iteration, "total": total, "ranks": ranks,
    }


def _fct_text(fct: Mapping | None, unit: str) -> str:
    if not fct:
        return "—"
    return f"{_seconds(fct['p50'][unit])}/{_seconds(fct['p99'][unit])}"


def render_report(report: Mapping) -> Table:
    """One row per iteration and an average row, in production-equivalent units."""
    line = report["line_rate_bps"]
    table = Table(title=(f"{report['pattern']} · {len(report['hosts'])} hosts · {report['size_bytes']:,} B · "
                         f"{report['qps']} QP/peer · verb {report['verb']} · TDF {report['tdf']:g} · "
                         f"line rate {_si(line['production'], 'b/s')} ({_si(line['emulated'], 'b/s')} emulated)"),
                  title_justify="left")
    table.caption = f"production-equivalent units: emulated = time × {report['tdf']:g}, rates ÷ {report['tdf']:g}"
    for column in ("iter", "time", "algbw", "busbw", "of line", "FCT p50/p99", "retx B", "CNP tx/rx", "PFC paused"):
        table.add_column(column, justify="right")

    def row(label: str, item: Mapping, end_section: bool = False) -> None:
        c = item["counters"]
        table.add_row(label, _seconds(item["time_s"]["production"]),
                      _si(item["algbw_bps"]["production"], "b/s"), _si(item["busbw_bps"]["production"], "b/s"),
                      f"{item['busbw_bps']['emulated'] / line['emulated']:.1%}",
                      _fct_text(item["fct_s"], "production"), f"{int(c['retransmitted_bytes']):,}",
                      f"{int(c['cnps_sent']):,}/{int(c['cnps_received']):,}",
                      _seconds(c["pfc_paused_s"]["production"]) if c["pfc_paused_s"]["production"] else "0",
                      end_section=end_section)

    items = report["per_iteration"]
    for n, item in enumerate(items):
        row(str(item["index"]), item, end_section=n == len(items) - 1)
    if report["total"].get("iterations_completed"):
        row("avg", report["total"])
    return table


def render_bw(summary: Mapping) -> Table:
    """perftest's ib_write_bw columns, production units first and emulated beside."""
    table = Table(title=(f"{summary['src']} → {summary['dst']} · {summary['qps']} QP · "
                         f"line rate {_si(summary['line_rate_bps']['production'], 'b/s')} "
                         f"({_si(summary['line_rate_bps']['emulated'], 'b/s')} emulated)"), title_justify="left")
    for column in ("#bytes", "#messages", "BW peak", "BW average", "MsgRate", "BW peak (emul.)",
                   "BW average (emul.)", "MsgRate (emul.)", "of line rate", "retx bytes"):
        table.add_column(column, justify="right")
    counters = summary.get("counters") or {}
    table.add_row(f"{summary['message_bytes']:,}", f"{summary['messages']:,}",
                  _si(summary["bw_peak_bps"]["production"], "b/s"), _si(summary["bw_average_bps"]["production"], "b/s"),
                  _si(summary["msg_rate_pps"]["production"], "msg/s"), _si(summary["bw_peak_bps"]["emulated"], "b/s"),
                  _si(summary["bw_average_bps"]["emulated"], "b/s"), _si(summary["msg_rate_pps"]["emulated"], "msg/s"),
                  f"{summary['bw_vs_line_rate']:.1%}", f"{int(counters.get('retransmitted_bytes', 0)):,}")
    return table
