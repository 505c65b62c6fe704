"""Did the emulation keep up? The fidelity line every result carries.

Time dilation is faithful while every agent keeps the emulated schedule. Each agent's loop
measures how late it ran every event that was due (a frame's departure from its shaper, a
pause expiring, a DCQCN or retransmission timer) and counts the frames the kernel dropped
because the loop read them too late (rocelab.kernel.loop). A result is judged on the
difference of two readings, before and after it.

The bound: one MTU frame's time on the lab's fastest emulated link. An event later than that
has left a link idle, or let a queue grow, by a whole frame it would not have in production;
sooner than that, the wire sees the same frames in the same order. The emulation kept up when
at most 1% of every agent's due events ran later than the bound, no agent ran more than the
bound behind for longer than 2% of the result's time, and no frame was dropped in a receive
queue. Otherwise results whose outcome depends on timing are inconclusive, and the line says
by how much the agents fell behind and which TDF would give them room.

Why the time as well as the events: a stall (an agent descheduled, or stopped) is one late
event, or one per port, however long it lasts: what fell due meanwhile is served in the
wake-up that ends it. A nicd stopped for 20 ms every 0.1 s took 18% off `bw`'s bandwidth
while 69 of its 133,000 events ran late. So each loop also counts every wake-up once, at the
latest thing it served (rocelab.kernel.loop.Lateness.wakes), and a wake-up that served
something L late was more than the bound behind for at least L - bound.

One late event is enough to break a lossless class, though: while a switch (or the NIC feeding
it) runs late, its peers keep sending, and what reaches the PG after XOFF is what arrived in
the meantime. A lossless PG whose headroom holds what the emulated cable and peer leave in
flight (`HeadroomDrop`) drops only when an agent ran later than its spare headroom lasts at
line rate. So a window whose headroom drops the agents' late events can account for (a frame
for each line-rate frame time past the spare, for each such event: an upper bound) did not
keep up either, however few its late events. More drops than that are the fabric's own: a
NIC that ignores the pause, a headroom too small for the cable.

Where the late agent is the switch itself, it does not drop what its lateness owes: it takes
each frame at its kernel receive time, and holds past the headroom a frame that its peer sent
only because the switch's XOFF left late (rocelab.switch.pipeline). The line counts them
(`held`). Each is a frame its link carried that a switch on time would not have let in: the
judgement counts it as one more late event of that switch's loop (a stall is one late event
in the loop's histogram however long it lasted; the frames it let in say how long). A switch
that held a few frames at one late XOFF kept up; one that stalled often enough that its held
frames and late events pass 1% of its events fell behind.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Iterable

from rocelab.fabric.finding import cable_m
from rocelab.kernel.loop import LATENESS_BOUNDS_S
from rocelab.engines.state import LabState
from rocelab.model.tdf import round_up
from rocelab.model.topology import SWITCH_ROLES
from rocelab.qos.headroom import headroom, roce_frame_bytes
from rocelab.runtime.readings import AgentReading, read_lab

LATE_SHARE_ALLOWED = 0.01
# Of a result's wall time, how long an agent may run more than the bound behind: about what it
# can take off a rate the result measures (`bw` h1 -> h2 on lab-pfc at TDF 600, 2026-11-28: nicd
# stopped 2 ms every 0.1 s ran 1.7% of the time behind and cost 1.6% of the bandwidth, 5 ms 4.3%
# and 4.6%). Beside a CPU-bound process, every shipped lab's cases lost at most 1.4% to single
# stalls of 8-11 ms in windows under a second, which 2% lets by; 1% made one of them (1.16%,
# nothing else late) fall behind.
LATE_TIME_ALLOWED = 0.02
ADVICE_MAX_FACTOR = 10


@dataclass(frozen=True)
class AgentTiming:
    """One agent's loop over a window: its due events by lateness bucket, its receive drops."""

    node: str  # the node, or the nodes one loop serves ("h1, h2, h3": one nicd for several hosts)
    agent: str
    counts: tuple[int, ...]
    rx_dropped: int
    wakes: tuple[int, ...] = ()  # each wake-up's latest event, by the same buckets (Lateness.wakes)

    @classmethod
    def of(cls, node: str, agent: str, loop: dict) -> AgentTiming:
        """An agent's whole life so far, from the `loop` of its counters reply."""
        return cls(", ".join(loop.get("members") or [node]), agent, tuple(loop["lateness"]["counts"]),
                   loop["rx_dropped"], tuple(loop["lateness"].get("wakes", ())))  # none from an older agent

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(self.node.split(", "))

    def since(self, earlier: AgentTiming) -> AgentTiming:
        """The window between an earlier reading of the same agent and this one."""
        return AgentTiming(self.node, self.agent, tuple(n - e for n, e in zip(self.counts, earlier.counts)),
                           self.rx_dropped - earlier.rx_dropped,
                           tuple(n - e for n, e in zip(self.wakes, earlier.wakes)))

    def behind_s(self, bound_s: float) -> float:
        """How long, at least, the loop ran more than `bound_s` behind: each wake-up that served
        something late by L was behind by more than the bound for L - bound, L taken at its
        bucket's lower end."""
        lows = (0.0, *LATENESS_BOUNDS_S)
        return sum(n * (low - bound_s) for low, n in zip(lows, self.wakes) if low > bound_s)

    @property
    def events(self) -> int:
        return sum(self.counts)

    def quantile_s(self, q: float) -> float:
        """The upper bound of the bucket holding the q-quantile (inf: later than the last bound)."""
        target, seen = q * self.events, 0
        for bound, count in zip((*LATENESS_BOUNDS_S, float("inf")), self.counts):
            seen += count
            if count and seen >= target:
                return bound
        return 0.0

    def estimate_s(self, q: float) -> float:
        """The q-quantile, placed linearly inside its bucket: an estimate, not the judgement's
        upper bound (the calibration's, whose figure should not jump a bucket between runs)."""
        target, seen, low = q * self.events, 0, 0.0
        for high, count in zip(LATENESS_BOUNDS_S, self.counts):
            if count and seen + count >= target:
                return low + (high - low) * (target - seen) / count
            seen += count
            low = high
        return LATENESS_BOUNDS_S[-1] if self.events else 0.0

    def later_than(self, bound_s: float) -> int:
        """Events that may have been later than `bound_s`: those in buckets reaching past it
        (the histogram cannot tell, so the judgement errs on the side of "fell behind")."""
        ends = (*LATENESS_BOUNDS_S, float("inf"))
        return sum(count for end, count in zip(ends, self.counts) if end > bound_s)


def distinct(timings: Iterable[AgentTiming]) -> dict[tuple[str, str], AgentTiming]:
    """Each loop once, by (nodes, agent): every host one nicd serves reports the same loop."""
    return {(t.node, t.agent): t for t in timings}


def timings(before: Iterable[AgentReading], after: Iterable[AgentReading]) -> list[AgentTiming]:
    """Each agent's window between two readings of a lab (an agent that did not answer is left out)."""
    start = distinct(AgentTiming.of(r.node, r.agent, r.reply["loop"]) for r in before if r.reply)
    end = distinct(AgentTiming.of(r.node, r.agent, r.reply["loop"]) for r in after if r.reply)
    return [timing.since(start[key]) for key, timing in end.items() if key in start]


@dataclass(frozen=True)
class SwitchPipeline:
    node: str
    pipeline: str  # "c" | "python"
    why: str


def switch_pipelines(readings: Iterable[AgentReading]) -> tuple[SwitchPipeline, ...]:
    """Which pipeline each switchd that answered runs, from its counters reply."""
    return tuple(SwitchPipeline(r.node, r.reply["pipeline"], r.reply["pipeline_why"]) for r in readings
                 if r.agent == "switchd" and r.reply and "pipeline" in r.reply)


def pipelines_text(pipelines: tuple[SwitchPipeline, ...]) -> str:
    """"; switchd on C: leaf1, leaf2; on Python: spine1 (why)", or nothing without switches."""
    on_c = [p.node for p in pipelines if p.pipeline == "c"]
    on_python = [f"{p.node} ({p.why})" for p in pipelines if p.pipeline != "c"]
    parts = ([f"on C: {', '.join(on_c)}"] if on_c else []) + ([f"on Python: {'; '.join(on_python)}"]
                                                               if on_python else [])
    return f"; switchd {'; '.join(parts)}" if parts else ""


@dataclass(frozen=True)
class Fidelity:
    kept_up: bool
    tdf: int
    bound_s: float  # emulated seconds: one MTU frame at the fastest emulated link
    events: int
    late_events: int  # later than the bound, over every agent
    p99_s: float  # the worst agent's 99th percentile (bucket upper bound), emulated
    worst_s: float  # the latest bucket any agent reached, emulated
    worst_agent: str
    rx_dropped: int
    advice_tdf: int | None
    pipelines: tuple[SwitchPipeline, ...] = ()  # which pipeline each switchd ran, and why
    machine: CpuShare | None = None  # what this machine's CPUs did over the same window (wall clock)
    overrun: str = ""  # lossless drops the agents' lateness accounts for (module docstring)
    held: int = 0  # lossless frames switches held past headroom, owed to their own late XOFF
    behind_s: float = 0.0  # the longest an agent ran more than the bound behind (at least), emulated
    window_s: float = 0.0  # the window judged, emulated (wall) seconds; 0: not known

    def line(self) -> str:
        if self.kept_up:
            return (f"fidelity: the emulation kept up at TDF {self.tdf}: 99% of {self.events:,} due events within "
                    f"{_ms(self.p99_s)} ({_us(self.p99_s / self.tdf)} production-equivalent), under one frame on the "
                    f"fastest link ({_ms(self.bound_s)}); no frame dropped unread{self._held_text()}"
                    f"{pipelines_text(self.pipelines)}")
        dropped = f", {self.rx_dropped:,} frames dropped unread" if self.rx_dropped else ""
        overrun = f"; {self.overrun}" if self.overrun else ""
        return (f"fidelity: the emulation FELL BEHIND at TDF {self.tdf}: {self.late_events:,} of {self.events:,} due "
                f"events ran later than one frame on the fastest link ({_ms(self.bound_s)}), the worst "
                f"({self.worst_agent}) up to {_ms(self.worst_s)} ({_us(self.worst_s / self.tdf)} "
                f"production-equivalent){dropped}{overrun}{self._held_text()}"
                f"{self.machine.clause() if self.machine else ''}{pipelines_text(self.pipelines)}. "
                f"Results that depend on timing are inconclusive: run again on "
                f"a quieter machine, or `up` with --tdf {self.advice_tdf}")

    def to_json(self) -> dict:
        return {"kept_up": self.kept_up, "tdf": self.tdf, "bound_s": {"emulated": self.bound_s,
                "production": self.bound_s / self.tdf}, "events": self.events, "late_events": self.late_events,
                "p99_s": {"emulated": self.p99_s, "production": self.p99_s / self.tdf},
                "worst_s": {"emulated": self.worst_s, "production": self.worst_s / self.tdf},
                "worst_agent": self.worst_agent, "rx_dropped": self.rx_dropped, "advice_tdf": self.advice_tdf,
                "machine": asdict(self.machine) if self.machine else None,
                "pipelines": [{"node": p.node, "pipeline": p.pipeline, "why": p.why} for p in self.pipelines],
                "overrun": self.overrun, "held": self.held,
                "behind_s": {"emulated": self.behind_s, "production": self.behind_s / self.tdf},
                "window_s": {"emulated": self.window_s, "production": self.window_s / self.tdf}, "line": self.line()}

    def judge_stalls(self, windows: list[AgentTiming], window_s: float) -> Fidelity:
        """This judgement, and fell behind if an agent ran more than the bound behind for longer
        than LATE_TIME_ALLOWED of the `window_s` its windows span (module docstring)."""
        if window_s <= 0 or not windows:
            return self
        behind = {(w.node, w.agent): w.behind_s(self.bound_s) for w in windows}
        judged = replace(self, behind_s=max(behind.values()), window_s=window_s)
        over = [(w, behind[w.node, w.agent]) for w in windows if behind[w.node, w.agent] > LATE_TIME_ALLOWED * window_s]
        if not over:
            return judged
        where = ", ".join(f"{w.agent} on {w.node} {_ms(s)}" for w, s in over)
        overrun = (f"an agent ran more than one frame behind for longer than {LATE_TIME_ALLOWED:.0%} of the "
                   f"{window_s:.3g} s this result took ({where}, at least): it stalled, and a stall counts as one "
                   f"late event however long it lasts")
        return judged._fell_behind(overrun, round_up(self.tdf * 2))

    def _fell_behind(self, why: str, advice_tdf: int, **changes) -> Fidelity:
        """This judgement, fallen behind for `why` as well as any reason it had, advising the larger TDF."""
        return replace(self, kept_up=False, overrun="; ".join(filter(None, (self.overrun, why))),
                       advice_tdf=max(self.advice_tdf or 0, advice_tdf), **changes)

    def judge_held(self, held: dict[str, int], windows: list[AgentTiming]) -> Fidelity:
        """This judgement with the frames each switch held past a PG's headroom (`held`, by node)
        counted as late events of its own loop (module docstring)."""
        total = sum(held.values())
        if not total:
            return self
        # A loop that serves several switches (one switchd for all) holds what they all held.
        owed = {w.node: sum(held.get(node, 0) for node in w.nodes) for w in windows if w.agent == "switchd"}
        over = [(w, owed[w.node]) for w in windows if owed.get(w.node)
                and w.later_than(self.bound_s) + owed[w.node] > LATE_SHARE_ALLOWED * (w.events + owed[w.node])]
        if not over or not self.kept_up:
            return replace(self, held=total)
        where = ", ".join(f"{w.node}: {n:,} held, {w.later_than(self.bound_s):,} late of {w.events:,} events"
                          for w, n in over)
        overrun = (f"switches held more frames past a lossless PG's headroom, each owed to their own late XOFF, "
                   f"than their late share allows ({where})")
        return self._fell_behind(overrun, round_up(self.tdf * 2), held=total)

    def _held_text(self) -> str:
        if not self.held:
            return ""
        return (f"; {self.held:,} lossless frame{'s' if self.held > 1 else ''} held past a PG's headroom, not "
                f"dropped: {'they' if self.held > 1 else 'it'} reached a switch only because its XOFF left late")

    def judge_headroom(self, drops: list[HeadroomDrop], windows: list[AgentTiming]) -> Fidelity:
        """This judgement, and fell behind if the lossless PGs' headroom drops are no more than the
        agents' late events in `windows` can account for (module docstring)."""
        lost = sum(d.drops for d in drops)
        spares = [d for d in drops if d.spare_bytes > 0]
        if not lost or not spares or lost > sum(d.explained(windows, self.tdf) for d in spares):
            return self
        tight = min(spares, key=lambda d: d.spare_s)
        where = ", ".join(f"{d.where}: {d.drops:,}" for d in drops)
        overrun = (f"{lost:,} frame{'s' if lost > 1 else ''} dropped for headroom on lossless PGs ({where}) whose "
                   f"headroom holds what the emulated cable and peer leave in flight ({tight.where}: "
                   f"{tight.need_bytes:,} B of {tight.headroom_bytes:,} B): an agent ran later than the "
                   f"{tight.spare_bytes:,} B to spare last at line rate ({_ms(tight.spare_s * self.tdf)})")
        advice = round_up(self.tdf * min(max(2.0, self.worst_s / (tight.spare_s * self.tdf)), ADVICE_MAX_FACTOR))
        return self._fell_behind(overrun, advice)


@dataclass(frozen=True)
class HeadroomDrop:
    """A lossless PG that dropped packets for headroom in a window, and what the emulated physics
    leaves in its headroom after XOFF: the cable both ways, a frame on each side, the PFC frame
    (rocelab.qos.headroom's terms without the peer's response time: an emulated NIC or switch
    stops the moment it reads the pause)."""

    where: str  # "leaf1 eth2 PG 3"
    drops: int
    headroom_bytes: int  # its highest headroom use: within a frame of its xoff, since it dropped
    frame_bytes: float  # its packets' mean size
    rate_bps: float
    need_bytes: int

    @classmethod
    def of(cls, where: str, pg: dict, rate_bps: float, cable_m: float) -> HeadroomDrop:
        """From a PG's counters (rocelab.switch's nested view) and its link."""
        frame = pg["rx_bytes"] / max(pg["rx_packets"], 1)
        mtu = max(round(frame) - roce_frame_bytes(0), 0)
        return cls(where, pg["drops"]["headroom_exceeded"]["packets"], pg["headroom_watermark_bytes"], frame,
                   rate_bps, headroom(rate_bps, cable_m, mtu, response_quanta=0).total_bytes)

    @property
    def spare_bytes(self) -> int:
        return self.headroom_bytes - self.need_bytes

    @property
    def spare_s(self) -> float:
        """How long the spare headroom lasts at line rate, production time."""
        return self.spare_bytes * 8 / self.rate_bps

    def explained(self, windows: list[AgentTiming], tdf: int) -> float:
        """The most drops the late events in `windows` can cause here: for each event later than the
        spare lasts, the frames that arrive at line rate past the spare (a bucket's upper bound; any
        event past the last bound explains every drop)."""
        frames = 0.0
        for w in windows:
            for bound, count in zip((*LATENESS_BOUNDS_S, math.inf), w.counts):
                over = bound / tdf * self.rate_bps / 8 - self.spare_bytes
                if count and over == math.inf:
                    return math.inf
                if count and over > 0:
                    frames += count * math.ceil(over / self.frame_bytes)
        return frames


def port_links(fabric) -> dict[tuple[str, str], tuple[float, float]]:
    """Every switch port of a lab's fabric (rocelab.model.topology) → its link's rate (b/s) and cable (m)."""
    return {(s.name, p.name): (fabric.links[p.link].rate_bps, cable_m(fabric.links[p.link]))
            for s in fabric.switches for p in s.ports}


def record_links(record: LabState) -> dict[tuple[str, str], tuple[float, float]]:
    """port_links from a running lab's state (its interfaces keep their links' rate and cable)."""
    return {(n.name, i.name): (i.rate_bps, i.cable_m) for n in record.nodes if n.role in SWITCH_ROLES
            for i in n.interfaces if i.rate_bps}


def headroom_drops(counters: dict[str, dict], links: dict[tuple[str, str], tuple[float, float]],
                   since: dict[str, dict] | None = None) -> list[HeadroomDrop]:
    """Every lossless PG that dropped for headroom, from each switch's counters: since they were
    cleared, or since the counters `since` (read from the same switches before the window);
    `links`: port_links of the lab's fabric."""
    found = []
    for node, c in counters.items():
        for name, port in c["ports"].items():
            for i, pg in enumerate(port["pgs"]):
                if not pg["lossless"] or not pg["drops"].get("headroom_exceeded") or (node, name) not in links:
                    continue
                if since is not None and node in since:
                    pg = _pg_since(pg, since[node]["ports"][name]["pgs"][i])
                    if pg is None:
                        continue
                found.append(HeadroomDrop.of(f"{node} {name} PG {i}", pg, *links[node, name]))
    return found


def held_frames(counters: dict[str, dict], since: dict[str, dict]) -> dict[str, int]:
    """Per switch, the lossless frames it held past a PG's headroom (owed to its own late XOFF)
    since the counters `since` (a PG cleared meanwhile, as _pg_since tells, counts from its clear)."""
    held = {}
    for node, c in counters.items():
        old, total = since.get(node), 0
        for name, port in c["ports"].items():
            for i, pg in enumerate(port["pgs"]):
                before = old["ports"][name]["pgs"][i] if old and name in old["ports"] else None
                cleared = before is None or pg["held_packets"] < before["held_packets"] \
                    or pg["rx_packets"] < before["rx_packets"]
                total += pg["held_packets"] - (0 if cleared else before["held_packets"])
        held[node] = total
    return held


def _pg_since(pg: dict, before: dict) -> dict | None:
    """A PG's counters in a window (its watermark as it is: a PG that dropped for headroom filled
    its headroom); None if it dropped nothing for headroom in it. Counters cleared meanwhile count
    from their clear."""
    now = pg["drops"]["headroom_exceeded"]
    earlier = before["drops"].get("headroom_exceeded") or {"packets": 0, "bytes": 0}
    if now["packets"] < earlier["packets"] or before["rx_packets"] > pg["rx_packets"]:
        return pg
    if now["packets"] == earlier["packets"]:
        return None
    window = {k: now[k] - earlier[k] for k in ("packets", "bytes")}
    return {**pg, "drops": {**pg["drops"], "headroom_exceeded": window},
            "rx_bytes": pg["rx_bytes"] - before["rx_bytes"], "rx_packets": pg["rx_packets"] - before["rx_packets"]}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.3g} µs"


def judge(windows: list[AgentTiming], tdf: int, bound_s: float,
          pipelines: tuple[SwitchPipeline, ...] = ()) -> Fidelity:
    """The fidelity of one result, from its agents' windows and the lab's bound (LabState.fidelity_bound_s)."""
    events = sum(w.events for w in windows)
    late = {w.node: w.later_than(bound_s) for w in windows}
    behind = [w for w in windows if late[w.node] > LATE_SHARE_ALLOWED * max(w.events, 1) or w.rx_dropped]
    worst = max(windows, key=lambda w: (w.quantile_s(1.0), w.rx_dropped), default=None)
    p99 = max((w.quantile_s(0.99) for w in windows), default=0.0)
    worst_s = min(worst.quantile_s(1.0) if worst else 0.0, LATENESS_BOUNDS_S[-1])
    kept_up = not behind
    advice = None if kept_up else round_up(tdf * min(max(2.0, p99 / bound_s), ADVICE_MAX_FACTOR))
    return Fidelity(kept_up, tdf, bound_s, events, sum(late.values()), min(p99, LATENESS_BOUNDS_S[-1]), worst_s,
                    f"{worst.agent} on {worst.node}" if worst else "", sum(w.rx_dropped for w in windows), advice,
                    pipelines)


@dataclass(frozen=True)
class CpuShare:
    """How busy this machine's CPUs were over a window, wall clock: a late agent on a machine
    whose CPUs were all busy, or whose host took them (steal, on a VM), says why it was late."""

    cpus: int
    busy: float  # share of all CPUs' time not idle, steal included
    steal: float  # share a hypervisor ran something else on them

    def clause(self) -> str:
        stolen = f", {self.steal:.0%} of it taken by the VM's host (steal)" if self.steal >= 0.005 else ""
        return f"; this machine's {self.cpus} CPUs were {self.busy:.0%} busy meanwhile{stolen}"


def cpu_times() -> list[int]:
    """The `cpu` line of /proc/stat: user nice system idle iowait irq softirq steal, in ticks."""
    with open("/proc/stat") as stat:
        return [int(v) for v in stat.readline().split()[1:9]]


def cpu_ns(pid: int) -> int:
    """CPU time a process has run so far, nanoseconds (/proc/PID/schedstat; 0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError):
        return 0


def cpu_share(before: list[int], after: list[int], cpus: int, spun_s: float = 0.0) -> CpuShare:
    """`spun_s`: CPU seconds the lab's keep-awake spinners (rocelab.kernel.awake) took meanwhile,
    counted idle: they only ran where nothing else wanted to."""
    spent = [b - a for a, b in zip(before, after)]
    total = sum(spent) or 1
    idle = spent[3] + spent[4] + spun_s * os.sysconf("SC_CLK_TCK")
    return CpuShare(cpus, max(total - idle, 0) / total, spent[7] / total)


class Watch:
    """Every agent's loop read now; `.result()` reads again and judges the window between."""

    def __init__(self, record: LabState):
        self.record = record
        self.windows: list[AgentTiming] = []
        self.before = read_lab(record).agents
        self.start_s = time.monotonic()  # between the two readings: the window the agents' replies span, at most
        self.cpu_before = cpu_times()
        self.spun_before = sum(cpu_ns(p) for p in record.awake)

    def result(self, links: dict[tuple[str, str], tuple[float, float]] | None = None) -> Fidelity:
        """The judgement; the agents' windows stay in `windows`. With `links` (port_links of the
        lab's fabric), the lossless PGs' headroom drops in the window are judged too
        (Fidelity.judge_headroom)."""
        window_s = time.monotonic() - self.start_s
        after = read_lab(self.record).agents
        spun_s = (sum(cpu_ns(p) for p in self.record.awake) - self.spun_before) / 1e9
        machine = cpu_share(self.cpu_before, cpu_times(), os.cpu_count() or 1, spun_s)
        self.windows = timings(self.before, after)
        fidelity = replace(judge(self.windows, self.record.tdf, self.record.fidelity_bound_s, switch_pipelines(after)),
                           machine=machine)
        counters, before = _switch_counters(after), _switch_counters(self.before)
        fidelity = fidelity.judge_held(held_frames(counters, before), self.windows).judge_stalls(self.windows, window_s)
        if not links:
            return fidelity
        drops = headroom_drops(counters, links, since=before)
        return fidelity.judge_headroom(drops, self.windows)


def _switch_counters(readings: tuple[AgentReading, ...]) -> dict[str, dict]:
    return {r.node: r.reply["counters"] for r in readings if r.agent == "switchd" and r.reply}
