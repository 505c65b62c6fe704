"""Which time-dilation factor a lab can hold on this machine (`up --tdf auto`).

Time dilation keeps bytes and stretches time: at TDF T every link runs at rate / T, and the
agents must move the lab's frames in real time: a switch forwards each frame once per hop, a
NIC sends or receives it once. What that costs depends on the rate, not only on the frames: an
agent sleeps between frames, and on a virtual machine each sleep and wake-up costs tens of
microseconds of CPU, more than the frame's own work. At a high rate an agent wakes once for
several frames, at a low rate once per frame or more. So the calibration
(rocelab.runtime.calibration) measures each kind of agent's CPU at a few frame rates, and the
cost at any rate is read off the line through those points (through zero at zero frames).

What a lab asks of its agents is what its cases ask: each case's jobs (its traffic pattern, a
background job, a training job as a ring AllReduce) as fast as the NICs allow. A pattern's plan
gives the bytes each host sends to each other host; the busiest NIC (most bytes sent or
received) sets the pace at its line rate, every transfer runs at that pace, and each agent
handles the data frames that pass it:

    nicd of host h:   frames h sends + frames h receives
    switchd of s:     frames of every transfer whose path crosses s (a transfer between two
                      racks crosses both leaves and one spine, its load spread over the spines)

Where one nicd serves every host (the netns engine, rocelab.roce.agent), it is one agent, and
the calibration measured just that: one process serving a flow's two NICs, a sent and a received
frame per data frame. Where one switchd serves every switch (the netns engine,
rocelab.switch.agent), it is one agent too, read off the curve of that process: the one-switch
points and the calibration's flow through leaf, spine and leaf, whose hops cost less each (the
process sleeps and wakes once for all of its switches, and reads a hop's frame in the wake-up
that sent it). A case's flows start together and run at the same pace, as a collective's do,
so one wake-up serves several flows' frames: the calibration's paired flow (four of its second
flow at once) measured what a frame costs beside others in a wake-up (`nic_extra_s`,
`switch_extra_s`). Each process is priced as its busiest node's frames alone (the busiest NIC
as one pair of NICs at its rate; the busiest switch on the curve) and every other frame at that
extra cost; never above every frame read off the curve at the nodes' frames together (half the
hosts' frames for nicd, the switches' hops for switchd), which is how they were priced before
the paired flow and still are where the calibration lacks it.

At TDF T those rates are divided by T. The auto TDF is the smallest "round" T (1, 1.25, 1.5, 2,
2.5, 3, 4, 5, 6 or 8 times a power of ten: never more than 25% above what is needed) at which
every case's agents together need at most SAFE_FRACTION of the cores, no one agent (a single
thread) more than SAFE_FRACTION of one core, and one MTU frame's time on the fastest link (the
fidelity bound) is at least LATENESS_MARGIN times how late the agents ran their events in the
calibration (the 99th percentile), times the NICs and switches the case keeps busy over the
calibration's three (counting up to LATENESS_AGENTS_MAX): a machine that wakes its agents late
needs frames that last longer, whatever the CPU they take, and more of them wait longer for
their turn. The fidelity report (rocelab.runtime.fidelity) says when that was not enough.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable

from rocelab.model.scenario import Scenario
from rocelab.model.topology import Fabric
from rocelab.traffic.patterns import Plan, builtin_patterns

# Measured on a 2-core machine: a ring AllReduce over leaf-spine-2x2 through switchd kept
# 97.6% of line rate with its agents at 59% of the cores, and 93.9% at 91% (README, "Time
# dilation"). Two thirds of the cores is where they still kept up, with 0.6 then. Raised to 0.75
# on 2026-12-07, once the loops' sleeps ended early_s before the event (rocelab.kernel.loop):
# lab-placement kept up at TDF 1250 with switchd at 0.80 of a core and nicd at 0.77 (their busiest
# 0.2 s, /proc/PID/schedstat; 78% of the cores), where 0.6 had priced it at 2500; at 0.75
# lab-ecmp, lab-link-failure and lab-loss got 800-1000 (from 1000-1250) and passed there, twice
# idle and once beside `python3 -c 'while 1: pass'`, and the ring AllReduce through switchd kept
# 97.5% of line rate at the 800 it got (bench_allreduce.py).
SAFE_FRACTION = 0.75
# The fidelity bound (one MTU frame on the lab's fastest link, rocelab.runtime.fidelity) must
# be LATENESS_MARGIN times the lateness the agents showed in the calibration, scaled by how many
# agents a case keeps busy against the calibration's: each waits for the others' turns on
# the cores. Measured on a 2-core machine beside a CPU-bound process (2026-11-26), once switchd
# answered the run's counter sampling packed (it had stalled its loop 1-4 ms per request):
# lab-pfc's six agents kept up at TDF 2000 and 3000 (a 0.67 and 1 ms bound; 14-163 late events
# of ~40,000 per case) and fell behind at 1500; before, they fell behind at 3000 in three runs
# of four. With 1.5, every lab at the TDF `up` picked: seven of eight passed, lab-ecn-dcqcn fell
# behind at 5000 (bench_labs.py, the machine shared with three other sessions); 2 keeps a margin.
# The CPU-bound process kept the vCPUs from halting, as rocelab.kernel.awake now does for every
# lab: with it, every shipped lab passed at these TDFs in one suite run (README, "A halted vCPU").
# Tried at 3 (2026-11-27): no fewer labs fell behind (one bench_labs.py pass: two of ten against
# three at 2; a fresh-clone suite run: three against three), while the calibration's p99, from
# which it scales, moved 0.10-0.27 ms between runs and the TDFs with it: noise a margin does not fix.
# Raised to 2.5 on 2026-12-07, when nicd's loop came to wait on a kept epoll set: its wake-ups
# got cheaper, and the calibration's p99 (its fastest flow's, three agents) fell to 29-44 µs from
# 41-45 against the sources before, alternating; the labs' own lateness did not fall with it
# (their worst is switchd's, late behind the host's stalls). At 2 the six-agent labs got TDF 400,
# and in two fresh-clone suite runs, idle, lab-pfc and lab-ecn-dcqcn fell behind there (199-208
# of 21,000-33,000 events late, switchd up to 1.5-7 ms); 2.5 gives them 500 at a p99 of 33 µs or less.
LATENESS_MARGIN = 2.5
CALIBRATION_AGENTS = 3  # busy in each calibration flow: the switch and the flow's two NICs
# How the lateness to expect grows with the agents a case keeps busy, over the calibration's:
# in proportion up to LATENESS_AGENTS_MAX of them, then no more. The agents are two processes
# (one nicd, one switchd) whatever the nodes, so more NICs and switches put more work in the
# same wake-ups rather than more processes waiting for the cores. Measured (2026-11-28, idle,
# calibration p99 0.032-0.042 ms): labs of six (lab-pfc, lab-ecn-dcqcn, lab-headroom: five NICs,
# a leaf) fell behind at TDF 400 in 5 of 10 runs (0.133 ms a frame, p99 0.036 ms) and at 300 in
# every run, and passed at 500 in 8 of 8: they need about 4x the calibration's p99. lab-placement
# (twelve: eight NICs, four switches) passed at 2000 in six runs of seven and fell behind at 1500
# in two of two (0.167 and 0.125 ms a frame): about the same 4x, not twice it. The power 0.75
# fitted before (2026-11-28, earlier: the six passed at 400 then) gave the six 400.
LATENESS_AGENTS_MAX = 6
MAX_TDF = 100_000
ROCE_FRAME_OVERHEAD_BYTES = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC around a payload
_ROUND_STEPS = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)  # the Renard-like steps of a dial: ≤ 25% apart

Curve = tuple[tuple[float, float], ...]  # (data frames per second, cores), by rising rate


def cores_at(curve: Curve, frames_per_s: float) -> float:
    """Cores an agent needs at this frame rate: on the line through (0, 0) and the measured
    points, and past the last point along its last segment (never falling)."""
    points = ((0.0, 0.0), *curve)
    for (f1, c1), (f2, c2) in zip(points, points[1:]):
        if frames_per_s <= f2:
            return c1 + (c2 - c1) * (frames_per_s - f1) / (f2 - f1) if f2 > f1 else c2
    (f1, c1), (f2, c2) = points[-2], points[-1]
    slope = max((c2 - c1) / (f2 - f1), 0.0) if f2 > f1 else 0.0
    return c2 + slope * (frames_per_s - f2)


@dataclass(frozen=True)
class AgentCosts:
    """What the agents cost this machine (rocelab.runtime.calibration): each kind's CPU at a
    few frame rates."""

    switch: Curve  # switchd: data frames forwarded per second → cores
    nic: Curve  # nicd: data frames sent or received per second (their ACKs included) → cores
    cores: int
    late_p99_s: float = 0.0  # how late the agents ran their due events, 99th percentile (wall seconds)
    # One switchd serving every switch: hops forwarded per second → cores; the one-switch points
    # and a path's through several (empty: the one-switch curve)
    shared_switch: Curve = ()
    # CPU seconds a NIC's data frame (sent or received) and a switch's hop cost one shared
    # process beside other flows' frames in its wake-ups (None: not measured, every frame on the curve)
    nic_extra_s: float | None = None
    switch_extra_s: float | None = None
    busy_share: float = 0.0  # of the CPUs, other processes' when measured beside them (0: an idle machine)

    def curve(self, kind: str) -> Curve:
        """"switchd" (one switch a process), "switchd (all switches)" or "nicd"."""
        if kind == "switchd (all switches)":
            return self.shared_switch or self.switch
        return self.switch if kind == "switchd" else self.nic

    def per_frame_us(self, kind: str, frames_per_s: float) -> float:
        return cores_at(self.curve(kind), frames_per_s) / frames_per_s * 1e6 if frames_per_s > 0 else 0.0

    def to_json(self) -> dict:
        return {"switch": [list(p) for p in self.switch], "nic": [list(p) for p in self.nic], "cores": self.cores,
                "late_p99_s": self.late_p99_s, "shared_switch": [list(p) for p in self.shared_switch],
                "nic_extra_s": self.nic_extra_s, "switch_extra_s": self.switch_extra_s, "busy_share": self.busy_share}

    @classmethod
    def from_json(cls, data: dict) -> AgentCosts:
        def curve(points) -> Curve:
            return tuple(sorted((float(f), float(c)) for f, c in points))

        def seconds(key: str) -> float | None:
            return None if data.get(key) is None else float(data[key])

        return cls(curve(data["switch"]), curve(data["nic"]), int(data["cores"]), float(data["late_p99_s"]),
                   curve(data.get("shared_switch", ())), seconds("nic_extra_s"), seconds("switch_extra_s"),
                   float(data.get("busy_share", 0.0)))


@dataclass(frozen=True)
class TdfChoice:
    tdf: int
    how: str  # "auto", "lab" (lab.yml pins it), "option" (--tdf N) or "calibration"
    load: float  # the peak's share of the machine's cores at this TDF
    why: str

    def to_json(self) -> dict:
        return {"tdf": self.tdf, "how": self.how, "load": self.load, "why": self.why}


def frame_bytes(pmtu_bytes: int) -> int:
    return pmtu_bytes + ROCE_FRAME_OVERHEAD_BYTES


@dataclass(frozen=True)
class Demand:
    """What one case asks of the agents at TDF 1: data frames per second through each."""

    case: str
    hosts: dict[str, float]  # nicd: frames sent + received
    switches: dict[str, float]  # switchd: frames forwarded
    # one nicd serves every host and one switchd every switch (their cores are the nodes' together)
    shared_agents: bool = True
    # the hosts' frames go through nicd; without an emulated NIC (lab-training's gloo over TCP)
    # the hosts' own kernels move them, which the calibration does not price
    nicd: bool = True

    @property
    def nic_frames(self) -> dict[str, float]:
        """The hosts' frames that nicd moves: none without emulated NICs."""
        return self.hosts if self.nicd else {}

    def agent_cores(self, costs: AgentCosts, tdf: float) -> dict[str, float]:
        hosts = self.nic_frames
        if not self.shared_agents:
            return {**{h: cores_at(costs.nic, f / tdf) for h, f in hosts.items()},
                    **{s: cores_at(costs.switch, f / tdf) for s, f in self.switches.items()}}
        total = sum(hosts.values()) / tdf
        hops = sum(self.switches.values()) / tdf
        shared = costs.curve("switchd (all switches)")
        # Every frame on the curve at the nodes' frames together (the calibration's nic curve is
        # per NIC of a flow's two in one process: (f, C/2)); less where the paired flow measured
        # what a frame beside another flow's costs (the module's docstring).
        nicd = 2 * cores_at(costs.nic, total / 2)
        if total and costs.nic_extra_s is not None:
            one = max(hosts.values()) / tdf
            nicd = min(nicd, 2 * cores_at(costs.nic, one) + max(total - 2 * one, 0.0) * costs.nic_extra_s)
        switchd = cores_at(shared, hops)
        if hops and costs.switch_extra_s is not None:
            one = max(self.switches.values()) / tdf
            switchd = min(switchd, cores_at(shared, one) + (hops - one) * costs.switch_extra_s)
        return ({"nicd": nicd} if total else {}) | ({"switchd": switchd} if hops else {})

    def cores(self, costs: AgentCosts, tdf: float) -> float:
        return sum(self.agent_cores(costs, tdf).values())

    def fits(self, costs: AgentCosts, tdf: float) -> bool:
        each = self.agent_cores(costs, tdf)
        return sum(each.values()) <= SAFE_FRACTION * costs.cores and max(each.values(), default=0.0) <= SAFE_FRACTION

    @property
    def busy_agents(self) -> int:
        """NICs and switches the case keeps busy. Each one's work stands between another's due
        events whether it has a process of its own or shares nicd's: counted as one process,
        lab-pfc's five NICs got TDF 2500 and fell behind (2026-11-26, `rocelab test`)."""
        return sum(1 for f in (*self.nic_frames.values(), *self.switches.values()) if f > 0)

    def describe(self, costs: AgentCosts, tdf: float) -> str:
        senders = sum(1 for f in self.hosts.values() if f > 0)
        busiest_switch = max(self.switches.items(), key=lambda item: item[1], default=("", 0.0))
        busiest_host = max(self.hosts.items(), key=lambda item: item[1], default=("", 0.0))
        parts = [f"case {self.case}: {senders} hosts moving data"]
        hops = sum(self.switches.values()) / tdf
        each = self.agent_cores(costs, tdf)
        if hops and self.shared_agents:
            parts.append(f"switchd (all switches) {hops:,.0f} frames/s at {each['switchd'] / hops * 1e6:.0f} µs each")
        elif busiest_switch[1]:
            f = busiest_switch[1] / tdf
            parts.append(f"{busiest_switch[0]} forwarding {f:,.0f} frames/s at "
                         f"{costs.per_frame_us('switchd', f):.0f} µs each")
        if busiest_host[1] and not self.nicd:
            parts.append("the hosts' own kernels moving theirs (no emulated NIC: not counted)")
        elif busiest_host[1] and self.shared_agents:
            f = sum(self.hosts.values()) / tdf
            parts.append(f"nicd (all hosts' NICs) {f:,.0f} frames/s at {each['nicd'] / f * 1e6:.0f} µs each")
        elif busiest_host[1]:
            f = busiest_host[1] / tdf
            parts.append(f"{busiest_host[0]}'s NIC {f:,.0f} frames/s at {costs.per_frame_us('nicd', f):.0f} µs each")
        return ", ".join(parts)


def _job_rates(fabric: Fabric, plan: Plan) -> dict[tuple[str, str], float]:
    """Bytes per second (at TDF 1) of each (sender, receiver) of one iteration of `plan`, when
    the host with the most bytes to send or receive does so at its line rate."""
    pairs: dict[tuple[str, str], int] = defaultdict(int)
    for host, steps in plan.steps.items():
        for step in steps:
            for transfer in step.sends:
                pairs[(host, transfer.peer)] += transfer.size_bytes
    seconds = max((max(plan.bytes_sent(h), plan.bytes_received(h)) * 8
                   / fabric.links[fabric.node(h).ports[0].link].rate_bps for h in plan.hosts), default=0.0)
    return {pair: n / seconds for pair, n in pairs.items()} if seconds > 0 else {}


def _plans(fabric: Fabric, scenario: Scenario | None) -> Iterable[tuple[str, list[Plan]]]:
    """Each case's jobs as plans; with no scenario, a ring AllReduce over every host."""
    patterns = builtin_patterns()
    everyone = tuple(h.name for h in fabric.hosts)
    ring = patterns.get("ring-allreduce")
    if scenario is None or not scenario.cases:
        yield "every host", [ring.plan(everyone, len(everyone))]
        return
    for case in scenario.cases:
        plans = [patterns.get(job.pattern).plan(job.hosts or everyone, job.size_bytes, job.options)
                 for job in (case.traffic, case.background) if job is not None]
        if case.training is not None:
            workers = case.training.hosts or everyone
            plans.append(ring.plan(workers, len(workers)))
        yield case.name, plans


def demands(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, shared_agents: bool = True,
            nicd: bool = True) -> list[Demand]:
    """What each case asks of the agents (rocelab.model.tdf's docstring says how)."""
    tor = {h.name: fabric.peer(h.ports[0]).node for h in fabric.hosts}
    spines = [s.name for s in fabric.switches if s.role == "spine"]
    out = []
    for case, plans in _plans(fabric, scenario):
        hosts: dict[str, float] = defaultdict(float)
        switches: dict[str, float] = defaultdict(float)
        for plan in plans:
            for (src, dst), rate in _job_rates(fabric, plan).items():
                frames = rate / pmtu_bytes
                hosts[src] += frames
                hosts[dst] += frames
                switches[tor[src]] += frames
                if tor[dst] != tor[src]:
                    switches[tor[dst]] += frames
                    for spine in spines:
                        switches[spine] += frames / len(spines)
        out.append(Demand(case, dict(hosts), dict(switches), shared_agents, nicd))
    return out


def round_up(value: float) -> int:
    """The smallest of _ROUND_STEPS × 10^k (whole numbers) at or above `value`."""
    if value <= 1:
        return 1
    exponent = math.floor(math.log10(value))
    for k in (exponent, exponent + 1):
        for step in _ROUND_STEPS:
            candidate = step * 10 ** k
            if candidate >= value and candidate == int(candidate):
                return int(candidate)
    raise AssertionError(value)  # 10^(exponent+1) ≥ value always qualifies


def _round_tdfs(floor: int) -> Iterable[int]:
    """Every round TDF from `floor` (itself first) up to MAX_TDF, rising."""
    yield floor
    for k in range(int(math.log10(MAX_TDF)) + 1):
        for step in _ROUND_STEPS:
            candidate = step * 10 ** k
            if floor < candidate <= MAX_TDF and candidate == int(candidate):
                yield int(candidate)


def _smallest(cases: list[Demand], costs: AgentCosts, floor: int) -> int | None:
    return next((t for t in _round_tdfs(floor) if all(d.fits(costs, t) for d in cases)), None)


def latency_floor(fabric: Fabric, pmtu_bytes: int, costs: AgentCosts, cases: list[Demand],
                  bound_s: float = 0.0) -> int:
    """The smallest round TDF whose fidelity bound (one MTU frame on the fastest link, or the
    lab's own `bound_s` where longer) is the lateness every case's busy agents can expect:
    LATENESS_MARGIN × the calibration's p99 × min(busy agents, LATENESS_AGENTS_MAX) / CALIBRATION_AGENTS."""
    frame_s = frame_bytes(pmtu_bytes) * 8 / max(link.rate_bps for link in fabric.links)
    agents = max((d.busy_agents for d in cases), default=CALIBRATION_AGENTS)
    need_s = LATENESS_MARGIN * costs.late_p99_s * _more_agents(agents)
    return next((t for t in _round_tdfs(1) if max(frame_s * t, bound_s) >= need_s), MAX_TDF)


def _more_agents(agents: int) -> float:
    """How much later than the calibration's a case with this many busy agents runs its events."""
    return min(max(agents, CALIBRATION_AGENTS), LATENESS_AGENTS_MAX) / CALIBRATION_AGENTS


def _busiest(cases: list[Demand], costs: AgentCosts, tdf: int) -> Demand:
    return max(cases, key=lambda d: d.cores(costs, tdf))


def _costs(costs: AgentCosts) -> str:
    path = " and through three switches" if len(costs.shared_switch) > len(costs.switch) else ""
    paired = ", and beside other flows' frames" if costs.nic_extra_s is not None or costs.switch_extra_s is not None else ""
    busy = f", with other processes keeping {costs.busy_share:.0%} of the CPUs busy" if costs.busy_share else ""
    return f"switchd and nicd CPU per frame measured here at {len(costs.switch)} rates{path}{paired}{busy}"


def choose_tdf(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts,
               floor: int = 1, bound_s: float = 0.0, shared_agents: bool = True, nicd: bool = True) -> TdfChoice:
    """The smallest round TDF (at least `floor`, and at least the latency floor for a lab
    whose own fidelity bound is `bound_s`) at which every case fits (Demand.fits); `shared_agents`:
    the engine runs one nicd for every host and one switchd for every switch; `nicd`: the hosts
    have emulated NICs."""
    cases = demands(fabric, scenario, pmtu_bytes, shared_agents, nicd)
    late = latency_floor(fabric, pmtu_bytes, costs, cases, bound_s)
    tdf = _smallest(cases, costs, max(floor, late))
    if tdf is None:
        worst = _busiest(cases, costs, MAX_TDF)
        return TdfChoice(MAX_TDF, "auto", worst.cores(costs, MAX_TDF) / costs.cores,
                         f"no TDF keeps the peak ({worst.describe(costs, MAX_TDF)}) within {SAFE_FRACTION:.0%} of "
                         f"this machine's {costs.cores} cores ({_costs(costs)}): the agents alone need more; expect "
                         f"the fidelity report to say they fell behind")
    worst = _busiest(cases, costs, tdf)
    cpu = _smallest(cases, costs, 1)
    if cpu is not None and cpu < tdf and tdf == late:
        agents = max(d.busy_agents for d in cases)
        bounded = (f"; not below {late}: this machine ran its agents' events up to {costs.late_p99_s * 1e3:.2g} ms "
                   f"late (p99, {CALIBRATION_AGENTS} agents), and with {agents} agents busy a frame must last "
                   f"{LATENESS_MARGIN * _more_agents(agents):.2g}× that")
    elif cpu is not None and cpu < tdf:
        bounded = f"; {floor} is this lab's least"
    else:
        bounded = ""
    return TdfChoice(tdf, "auto", worst.cores(costs, tdf) / costs.cores,
                     f"the smallest round TDF at which the peak ({worst.describe(costs, tdf)}) needs at most "
                     f"{SAFE_FRACTION:.0%} of this machine's {costs.cores} cores and of one core per agent "
                     f"({_costs(costs)}){bounded}")


def pinned(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts, tdf: int,
           how: str, bound_s: float = 0.0, shared_agents: bool = True, nicd: bool = True) -> TdfChoice:
    """A TDF the lab or the user chose, with what its peak asks of this machine."""
    cases = demands(fabric, scenario, pmtu_bytes, shared_agents, nicd)
    worst = _busiest(cases, costs, tdf)
    load = worst.cores(costs, tdf) / costs.cores
    auto = choose_tdf(fabric, scenario, pmtu_bytes, costs, bound_s=bound_s, shared_agents=shared_agents, nicd=nicd)
    agent, one = max(((a, c) for d in cases for a, c in d.agent_cores(costs, tdf).items()),
                     key=lambda item: item[1], default=("", 0.0))
    if load > SAFE_FRACTION:
        verdict = f"beyond the {SAFE_FRACTION:.0%} kept for the agents"
    elif one > SAFE_FRACTION:  # the cores are enough, one agent's single thread is not
        verdict = f"and {agent} alone {one:.0%} of one core, beyond the {SAFE_FRACTION:.0%} kept for one agent"
    else:
        verdict = f"within the {SAFE_FRACTION:.0%} kept for the agents"
    return TdfChoice(tdf, how, load, f"set by {'lab.yml' if how == 'lab' else '--tdf'}; the peak "
                     f"({worst.describe(costs, tdf)}) needs {load:.0%} of this machine's cores, {verdict} "
                     f"(auto would pick {auto.tdf})")
