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


from rocelab.traffic.calc import BITS_PER_BYTE
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


def jain_index(values: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all are equal, 1/N when one takes everything."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else 1.0


def _flow_jain(fcts: Mapping[int, Sequence[float]], iterations: int) -> float | None:
    """Jain's index over the flows' rates within each iteration (a flow's rate: its message over
    its completion time, the messages of one step being equal), averaged over iterations."""
    per = [jain_index([1 / t for t in fcts[i]]) for i in range(iterations) if len(fcts.get(i, ())) > 1
           and all(t > 0 for t in fcts[i])]
    return sum(per) / len(per) if per else None


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
    """Per iteration, the completion time of every flow (sender's post → receiver's last byte;
    with verb read, the receiver's first READ posted → its last byte)."""
    arrived = {(i, s, src, dst): at for dst, r in results.items() for i, s, src, _, at in r["recvs"]}
    posted = [((i, s, src, dst), at) for src, r in results.items() for i, s, dst, _, at, _ in r["sends"]]
    posted += [((i, s, src, dst), at) for dst, r in results.items() for i, s, src, _, at in r.get("pulls", ())]
    fcts: dict[int, list[float]] = {}
    for flow, posted_at in posted:
        at = arrived.get(flow)
        if at is not None:
            fcts.setdefault(flow[0], []).append(at - posted_at)
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
        # A read job's data sources take no part (their NICs answer): the readers' rounds time it.
        timed = [x for x in rounds if not x.get("passive")] or rounds
        start, end = min(x["start_s"] for x in timed), max(x["end_s"] for x in timed)
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
            "flow_jain": _flow_jain(fcts, len(per_iteration)),
            "counters": _counters_view(_sum_counters(raw_counters), tdf),
        }
    served: dict[str, int] = {}  # read: a host's sends are what its peers read from it
    for r in results.values():
        for _, _, src, size, _ in r["recvs"]:
            served[src] = served.get(src, 0) + size
    ranks = {h: {"bytes_sent": served.get(h, 0) if verb == "read" else r["bytes_sent"],
                 "bytes_received": r["bytes_received"],
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
