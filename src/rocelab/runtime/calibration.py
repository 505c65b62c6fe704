"""What the lab's agents cost this machine, measured once and kept; `up` with the TDF that
this machine can hold (`up --tdf auto`, rocelab.model.tdf).

The measurement is of the agents themselves, in a small lab of their own at TDF 250: twelve
nicd hosts on one leaf, h1 and h2 on 100G ports, h3, h4 and h8-h13 on 20G, h5 and h6 on 4G, and
behind a spine a second leaf with h7 on 100G. An elephant flow h1 → h2, then h3 → h4, then h5 → h6,
each alone: switchd forwards, and two NICs send and receive, at three frame rates five times
apart (about 12,000, 2,400 and 500 frames a second where the agents keep up). Then h1 → h7 at
the first flow's rate, through leaf1, spine1 and leaf2: three hops a frame, which one switchd
serving every switch forwards in fewer wake-ups a hop than one switch does (a hop's frame is in
the next switch's ring when its send returns). Then four 20G pairs at once (h3 → h4, h8 → h9,
h10 → h11, h12 → h13), started together as a collective's flows are: one wake-up serves several
flows' frames, and what they cost beyond one pair alone is what a frame beside another flow's
costs (rocelab.model.tdf prices a case's other flows at that). For each kind of agent the CPU
time it spent (/proc/PID/schedstat, nanoseconds) over the flow's time gives its cores at that rate: the
points of the curves rocelab.model.tdf reads costs off; and how late the agents ran their due
events (their loops' lateness, 99th percentile, in the fastest one-switch flow), which sets the
shortest frame time a lab can hold on this machine. CPU time is counted, not wall time, so
what else the machine runs changes the figures little; the fidelity report
(rocelab.runtime.fidelity) says when the machine could not give the agents that time.

The result is kept under paths.cache_dir() per rocelab version and sources, CPU model, core
count, the agents' settings and whether other processes keep the CPUs busy when `up` looks
(the newest few of those keys): changed agents are measured again, and a machine busy with
other work is measured as it is. Calibrating takes about ten seconds, once for each.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import rocelab
from rocelab import paths
from rocelab.engines import Engine, builtin_engines
from rocelab.engines.state import LabState
from rocelab.kernel import awake
from rocelab.kernel.loop import loop_shell
from rocelab.model.lab import Lab
from rocelab.model.tdf import AgentCosts, TdfChoice, choose_tdf, cores_at, pinned
from rocelab.model.topology import load_topology
from rocelab.roce.config import roce_config
from rocelab.runtime.fidelity import cpu_ns, cpu_share, cpu_times, timings
from rocelab.runtime.readings import AgentReading, read_lab
from rocelab.switch.fastpath import switchd_pipeline
from rocelab.traffic.job import run_job
from rocelab.traffic.spec import JobSpec

CALIBRATION_TDF = 250
# A machine whose other processes keep this share of its CPUs busy, over BUSY_LOOK_S when `up`
# looks, is measured (and its figures kept) apart from the same machine idle. Its agents run
# their events later there: woken on a CPU that runs something else instead of polling in its
# idle task, an agent waits for an inter-processor interrupt (README, "A halted vCPU"). Measured
# (2026-12-07, one `python3 -c 'while 1: pass'` on 2 cores): calibrations idle put the six-agent
# labs at TDF 400, where they kept up idle (6 runs of 6) and fell behind beside the process in
# 4 of 6; calibrations beside it, 500-1000, where they kept up. A share of half a core's worth
# on 2 cores tells the two apart; between, either measurement holds for what it saw.
BUSY_SHARE = 0.25
BUSY_LOOK_S = 0.25
# Settings whose figures the cache keeps, newest first: a setting changed (ROCELAB_KEEP_AWAKE,
# the pure switch or loop) and changed back is not measured again.
KEPT_CALIBRATIONS = 8
# Three host pairs on ports of three rates, 5× apart: the same flow at three frame rates; and a
# host behind a spine, for a flow of three hops.
TOPOLOGY = """\
name: calibration
topology:
  defaults: {rate: 100G, cable: 5}
  nodes:
    leaf1: {role: leaf}
    leaf2: {role: leaf}
    spine1: {role: spine}
    h1: {role: host}
    h2: {role: host}
    h3: {role: host}
    h4: {role: host}
    h5: {role: host}
    h6: {role: host}
    h7: {role: host}
    h8: {role: host}
    h9: {role: host}
    h10: {role: host}
    h11: {role: host}
    h12: {role: host}
    h13: {role: host}
  links:
    - {endpoints: ["h1:eth1", "leaf1:eth1"]}
    - {endpoints: ["h2:eth1", "leaf1:eth2"]}
    - {endpoints: ["h3:eth1", "leaf1:eth3"], rate: 20G}
    - {endpoints: ["h4:eth1", "leaf1:eth4"], rate: 20G}
    - {endpoints: ["h5:eth1", "leaf1:eth5"], rate: 4G}
    - {endpoints: ["h6:eth1", "leaf1:eth6"], rate: 4G}
    - {endpoints: ["leaf1:eth7", "spine1:eth1"]}
    - {endpoints: ["leaf2:eth1", "spine1:eth2"]}
    - {endpoints: ["h7:eth1", "leaf2:eth2"]}
    - {endpoints: ["h8:eth1", "leaf1:eth8"], rate: 20G}
    - {endpoints: ["h9:eth1", "leaf1:eth9"], rate: 20G}
    - {endpoints: ["h10:eth1", "leaf1:eth10"], rate: 20G}
    - {endpoints: ["h11:eth1", "leaf1:eth11"], rate: 20G}
    - {endpoints: ["h12:eth1", "leaf1:eth12"], rate: 20G}
    - {endpoints: ["h13:eth1", "leaf1:eth13"], rate: 20G}
"""
# A flow: the hosts its elephants pair as sender, receiver (traffic.patterns), and each one's bytes.
FLOWS = ((("h1", "h2"), 20_000_000), (("h3", "h4"), 4_000_000), (("h5", "h6"), 800_000))  # ~0.4 s each at TDF 250
PATH_FLOW = (("h1", "h7"), 20_000_000)  # the first flow's rate, through leaf1, spine1 and leaf2
# The second flow four times at once, started together as a collective's are: what a frame costs
# an agent when it shares its wake-up with other flows' (rocelab.model.tdf prices a lab's extra
# flows at that).
PAIRED_FLOW = (("h3", "h4", "h8", "h9", "h10", "h11", "h12", "h13"), 4_000_000)
SWITCHES = {("h1", "h7"): ("leaf1", "spine1", "leaf2")}  # a flow's switches, where not leaf1 alone

# The fastest flow runs this many times, and its agents' lateness is the median of the runs'.
# On this project's VM (2 cores, ~8% of the CPU stolen by the host in stalls of 1-10 ms, seen in
# /proc/stat's steal column) one run's p99 is set by whether a stall or two fell in its second:
# 0.10-1.73 ms in nine runs on one idle afternoon, and the TDF it gives follows it 6:1.
LATENESS_RUNS = 3


def switches_of(src: str, dst: str) -> tuple[str, ...]:
    """The switches a calibration flow crosses."""
    return SWITCHES.get((src, dst), ("leaf1",))


@dataclass(frozen=True)
class FlowCost:
    """One calibration flow: its data frames per second, and what each agent of the lab spent
    on it (cores over the flow's time) and how often it slept and woke."""

    hosts: tuple[str, ...]  # sender, receiver, and so on for each pair
    seconds: float  # emulated (wall-clock) seconds the flow took
    frames_per_s: float  # each pair's
    cores: dict[str, float]  # by node: its agent's process (one nicd serving several hosts: the same for each)
    wakeups: dict[str, int]
    late_p99_s: float  # the 99th percentile of the flow's agents' lateness, the worst agent's (wall)
    pids: dict[str, int]  # each node's agent process

    @property
    def src(self) -> str:
        return self.hosts[0]

    @property
    def dst(self) -> str:
        return self.hosts[1]

    @property
    def pairs(self) -> int:
        return len(self.hosts) // 2

    @property
    def switches(self) -> tuple[str, ...]:
        return switches_of(self.src, self.dst)

    def switch_cores(self) -> float:
        """What the flow's switches spent: their processes' cores (one switchd serving all: once)."""
        return sum(self.cores[node] for node in {self.pids[s]: s for s in self.switches}.values())

    def nic_cores(self) -> float:
        """What one NIC spent: the mean of the senders' and receivers' processes, or its share of
        the process that serves them all."""
        processes = {self.pids[h]: h for h in self.hosts}
        return sum(self.cores[h] for h in processes.values()) / len(self.hosts)

    def per_frame(self, node: str) -> tuple[float, float]:
        """(CPU µs, wake-ups) an agent spent per data frame of this flow (its pairs' together)."""
        frames_per_s = self.frames_per_s * self.pairs
        return (self.cores[node] / frames_per_s * 1e6, self.wakeups.get(node, 0) / (frames_per_s * self.seconds))


def calibration_lab(name: str, tdf: int = CALIBRATION_TDF) -> Lab:
    with tempfile.TemporaryDirectory(prefix="rocelab-calibration-") as folder:
        topology = Path(folder) / "calibration.yml"
        topology.write_text(TOPOLOGY)
        fabric = load_topology(topology)
    return Lab(name, "calibration", fabric, "switchd", tdf, paths.profiles_dir() / "roce-lossless.json", "emulated")


def measure(name: str) -> AgentCosts:
    """This machine's agent costs, from the calibration lab brought up as `name`."""
    return costs_of(measure_flows(name))


def measure_flows(name: str, tdf: int = CALIBRATION_TDF, shared_agents: bool = True) -> list[FlowCost]:
    """Bring up the calibration lab as `name` at `tdf` (netns engine: the agents' cost is what is
    measured, and containers run the same agents), run its flows, each as many seconds as at
    CALIBRATION_TDF, and take it down. `shared_agents` False: one nicd per host (and one switchd per
    switch), as a container engine runs them (a benchmark's reference)."""
    engine = builtin_engines().get("netns")
    engine.shares_agents = shared_agents
    lab = calibration_lab(name, tdf)
    record = engine.up(lab, TdfChoice(tdf, "calibration", 0.0, "measuring this machine's agents"))
    try:
        flows = (*FLOWS, PATH_FLOW, PAIRED_FLOW, *[FLOWS[0]] * (LATENESS_RUNS - 1))
        return run_flows(record, lab, [(hosts, size * CALIBRATION_TDF // tdf) for hosts, size in flows])
    finally:
        engine.down(record)


def _late_p99_s(before: list[AgentReading], after: list[AgentReading], nodes: tuple[str, ...]) -> float:
    return max((w.estimate_s(0.99) for w in timings(before, after) if set(w.nodes) & set(nodes) and w.events),
               default=0.0)


def run_flows(record: LabState, lab: Lab, flows=FLOWS) -> list[FlowCost]:
    """Each of `flows` (hosts, bytes) alone, as elephants, on a lab that is up."""
    pid = {p["node"]: p["pid"] for p in record.processes}
    pmtu = roce_config(lab.roce).pmtu_bytes
    out = []
    for hosts, size in flows:
        readings = read_lab(record).agents
        before = {p: cpu_ns(p) for p in set(pid.values())}
        report, _ = run_job(record, JobSpec("elephant", hosts=hosts, size_bytes=size, iterations=1))
        spent = {node: (cpu_ns(p) - before[p]) / 1e9 for node, p in pid.items()}
        after = read_lab(record).agents
        wall_s = report["total"]["time_s"]["emulated"]
        woke = {r.node: r.reply["loop"]["wakeups"] for r in readings if r.reply}
        out.append(FlowCost(hosts, wall_s, size / pmtu / wall_s, {node: s / wall_s for node, s in spent.items()},
                            {r.node: r.reply["loop"]["wakeups"] - woke.get(r.node, 0) for r in after if r.reply},
                            _late_p99_s(readings, after, (*switches_of(*hosts[:2]), *hosts)), pid))
    return out


def costs_of(flows: list[FlowCost]) -> AgentCosts:
    """The curves: switchd's cores at each one-switch flow's frame rate (and, for one switchd
    serving every switch, at the path flow's hops a second too), and nicd's (the mean of its
    sender and receiver: a data frame sent or received, its ACKs included; half the process's
    cores where one nicd serves both), from each pair's first run; and from the paired flow,
    what a frame beside another flow's costs each."""
    first = list({f.hosts: f for f in reversed(flows)}.values())
    one_switch = [f for f in first if len(f.switches) == 1 and f.pairs == 1]
    switch_points = sorted((f.frames_per_s, f.switch_cores()) for f in one_switch)
    path_points = sorted((f.frames_per_s * len(f.switches), f.switch_cores()) for f in first if len(f.switches) > 1)
    nic_points = sorted((f.frames_per_s, f.nic_cores()) for f in one_switch)
    # Lateness from the fastest one-switch flow: the most events (a slow flow's 1% is a handful,
    # set by its start-up's control requests) and the busiest agents, as a lab's are; the median of its runs.
    busiest = max(one_switch, key=lambda f: f.frames_per_s)
    late = statistics.median(f.late_p99_s for f in flows if f.hosts == busiest.hosts)
    costs = AgentCosts(tuple(switch_points), tuple(nic_points), os.cpu_count() or 1, late,
                       tuple(sorted({*switch_points, *path_points})))
    paired = next((f for f in first if f.pairs > 1), None)
    if paired is None:
        return costs
    # What the paired flow cost beyond one of its pairs alone (read off the curves at its
    # rate), per frame of the other pairs: a NIC's (each pair's two), a switch's (one a pair).
    # Nothing beyond is not a free frame but a measurement the machine disturbed: none is kept.
    rate, others = paired.frames_per_s, paired.pairs - 1
    nic_extra = (paired.nic_cores() * 2 * paired.pairs - 2 * cores_at(costs.nic, rate)) / (2 * others * rate)
    switch_extra = (paired.switch_cores() - cores_at(costs.switch, rate)) / (others * rate)
    return replace(costs, nic_extra_s=nic_extra if nic_extra > 0 else None,
                   switch_extra_s=switch_extra if switch_extra > 0 else None)


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def others_busy() -> float:
    """The share of this machine's CPUs busy over BUSY_LOOK_S, now: before a lab's agents start,
    what other processes (another lab's agents too) keep them busy with."""
    before = cpu_times()
    time.sleep(BUSY_LOOK_S)
    return cpu_share(before, cpu_times(), os.cpu_count() or 1).busy


def cache_key(busy: bool = False) -> str:
    """rocelab's version and sources, which pipeline switchd runs (its C fast path or the Python
    one), which loop nicd runs (rocelab.kernel.loop.loop_shell), how the CPUs are kept awake
    (rocelab.kernel.awake), whether other processes keep them busy, the CPU and the core count:
    what the figures depend on."""
    digest = hashlib.sha256(f"{switchd_pipeline()} {loop_shell()} {awake.how()}{' busy' if busy else ''}".encode())
    for path in sorted(p for p in Path(rocelab.__file__).parent.rglob("*") if p.suffix in (".py", ".c")):
        digest.update(path.read_bytes())
    cpu = hashlib.sha256(_cpu_model().encode()).hexdigest()[:8]
    return f"{rocelab.__version__}-{digest.hexdigest()[:12]}-{cpu}-{os.cpu_count()}"


def _kept() -> list[dict]:
    """The cache's entries, newest first: [] where there is none or it cannot be read."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        entries = json.loads((paths.cache_dir() / "calibration.json").read_text())["entries"]
        return [e for e in entries if isinstance(e, dict) and "key" in e]
    return []


def keep(key: str, costs: AgentCosts) -> None:
    """These costs kept under `key`, as the newest entry: the oldest beyond KEPT_CALIBRATIONS go."""
    cache = paths.cache_dir() / "calibration.json"
    entries = [{"key": key, "cpu": _cpu_model(), "costs": costs.to_json()},
               *(e for e in _kept() if e["key"] != key)][:KEPT_CALIBRATIONS]
    with contextlib.suppress(OSError):  # a read-only cache only costs the next `up` a measurement
        cache.parent.mkdir(parents=True, exist_ok=True)
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps({"entries": entries}, indent=1))
        os.replace(tmp, cache)


def costs(lab_name: str) -> AgentCosts:
    """This machine's agent costs: from the cache when it holds them for these sources and CPU,
    and for a machine as busy (BUSY_SHARE) as it is now, else measured now in a calibration lab
    named after the lab being brought up. The cache keeps the newest few keys' figures, so a
    setting changed and changed back finds its figures kept."""
    busy = others_busy()
    key = cache_key(busy >= BUSY_SHARE)
    for entry in _kept():
        if entry["key"] == key:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                return AgentCosts.from_json(entry["costs"])
    measured = measure(f"{lab_name[:19]}-calibration")
    if busy >= BUSY_SHARE:
        measured = replace(measured, busy_share=busy)
    keep(key, measured)
    return measured


def resolve_tdf(lab: Lab, shared_agents: bool = True) -> tuple[Lab, TdfChoice]:
    """The lab with a TDF, and why that one: the lab's or the user's, or the one this machine
    holds for the lab's peak (lab.tdf None); `shared_agents`: the engine runs one nicd for all hosts and one switchd for all switches."""
    here = costs(lab.name)
    pmtu = roce_config(lab.roce).pmtu_bytes
    if lab.tdf is None:
        choice = choose_tdf(lab.fabric, lab.scenario, pmtu, here, floor=lab.tdf_floor,
                            bound_s=lab.fidelity_bound_s or 0.0, shared_agents=shared_agents, nicd=lab.runs_nicd)
        return replace(lab, tdf=choice.tdf), choice
    return lab, pinned(lab.fabric, lab.scenario, pmtu, here, lab.tdf, lab.tdf_how,
                       bound_s=lab.fidelity_bound_s or 0.0, shared_agents=shared_agents, nicd=lab.runs_nicd)


def up(engine: Engine, lab: Lab) -> LabState:
    """`up` as users mean it: the TDF chosen (rocelab.model.tdf), then the engine builds."""
    lab, choice = resolve_tdf(lab, shared_agents=engine.shares_agents)
    return engine.up(lab, choice)
