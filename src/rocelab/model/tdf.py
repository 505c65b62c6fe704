"""Which time-dilation factor a lab can hold on this machine (`up --tdf auto`).

Time dilation keeps bytes and stretches time: at TDF T every link runs at rate / T. The
agents must then move the lab's frames in real time: a switch forwards each frame once per
hop, a NIC sends or receives it once. The peak a lab can ask for is every host of its busiest
case (every host of the fabric, for a lab with no scenario) sending and receiving at its
port's line rate, as a ring AllReduce does, over the longest path of the fabric. At TDF T
that costs

    CPU(T) = (Σ_hosts 2·f_h · nic_frame_s + Σ_hosts f_h · hops · switch_frame_s) / T,

with f_h = line rate / frame bits, and the per-frame costs measured on this machine
(rocelab.engines.calibration). The auto TDF is the smallest "round" T (1, 2, 2.5 or 5
times a power of ten) with CPU(T) at most SAFE_FRACTION of the cores: the rest absorbs what
a per-frame cost leaves out (timers, wake-ups, control requests, the run's own sampling) and
the machine's other work. The fidelity report (rocelab.runtime.fidelity) says when it was
not enough.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocelab.model.scenario import Scenario
from rocelab.model.topology import Fabric

SAFE_FRACTION = 0.5
ROCE_FRAME_OVERHEAD_BYTES = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC around a payload
_ROUND_STEPS = (1, 2, 2.5, 5)


@dataclass(frozen=True)
class AgentCosts:
    """CPU seconds an agent spends per frame on this machine (rocelab.engines.calibration)."""

    switch_frame_s: float  # switchd: receive, the pipeline, send
    nic_frame_s: float  # nicd: one frame sent or received, with its share of ACKs
    cores: int


@dataclass(frozen=True)
class TdfChoice:
    tdf: int
    how: str  # "auto", "lab" (lab.yml pins it) or "option" (--tdf N)
    load: float  # the peak's share of the machine's cores at this TDF (None-free: 0 when unknown)
    why: str

    def to_json(self) -> dict:
        return {"tdf": self.tdf, "how": self.how, "load": self.load, "why": self.why}


def _longest_switch_path(fabric: Fabric) -> int:
    """Switches a frame crosses on the longest host-to-host path (1 under one leaf, 3 leaf-spine-leaf)."""
    hosts = fabric.hosts
    tors = {h.name: fabric.peer(h.ports[0]).node for h in hosts}
    if len(set(tors.values())) <= 1:
        return 1
    spines = [s for s in fabric.switches if s.role == "spine"]
    return 3 if spines else 2


def busiest_hosts(fabric: Fabric, scenario: Scenario | None) -> tuple[str, ...]:
    """The hosts of the case that moves traffic between the most hosts (a background job
    included); every host of the fabric when there is no scenario or a case names none."""
    everyone = tuple(h.name for h in fabric.hosts)
    if scenario is None or not scenario.cases:
        return everyone
    busiest: tuple[str, ...] = ()
    for case in scenario.cases:
        jobs = [job for job in (case.traffic, case.training, case.background) if job is not None]
        hosts = tuple(dict.fromkeys(h for job in jobs for h in (job.hosts or everyone)))
        busiest = max(busiest, hosts, key=len)
    return busiest or everyone


def peak_cpu_s_per_s(fabric: Fabric, hosts: tuple[str, ...], pmtu_bytes: int, costs: AgentCosts) -> float:
    """CPU seconds per second the peak of `hosts` needs at TDF 1 (divide by T for TDF T)."""
    frame_bits = (pmtu_bytes + ROCE_FRAME_OVERHEAD_BYTES) * 8
    hops = _longest_switch_path(fabric)
    total = 0.0
    for host in (fabric.node(h) for h in hosts):
        frames_per_s = fabric.links[host.ports[0].link].rate_bps / frame_bits
        total += 2 * frames_per_s * costs.nic_frame_s + frames_per_s * hops * costs.switch_frame_s
    return total


def round_up(value: float) -> int:
    """The smallest of 1, 2, 2.5, 5 × 10^k (whole numbers) at or above `value`."""
    if value <= 1:
        return 1
    exponent = math.floor(math.log10(value))
    for k in (exponent, exponent + 1):
        for step in _ROUND_STEPS:
            candidate = step * 10 ** k
            if candidate >= value and candidate == int(candidate):
                return int(candidate)
    raise AssertionError(value)  # 10^(exponent+1) ≥ value always qualifies


def _peak(fabric: Fabric, hosts: tuple[str, ...]) -> str:
    return f"{len(hosts)} hosts at line rate both ways over {_longest_switch_path(fabric)} switch hops"


def choose_tdf(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts,
               floor: int = 1) -> TdfChoice:
    """The smallest round TDF (at least `floor`) at which the lab's peak fits in SAFE_FRACTION of the cores."""
    hosts = busiest_hosts(fabric, scenario)
    demand = peak_cpu_s_per_s(fabric, hosts, pmtu_bytes, costs)
    needed = round_up(demand / (SAFE_FRACTION * costs.cores))
    tdf = max(needed, floor)
    floored = f"; {floor} is this lab's least" if floor > needed else ""
    return TdfChoice(tdf, "auto", demand / tdf / costs.cores,
                     f"the smallest round TDF at which the peak ({_peak(fabric, hosts)}) needs at most "
                     f"{SAFE_FRACTION:.0%} of this machine's {costs.cores} cores (switchd "
                     f"{costs.switch_frame_s * 1e6:.1f} µs, nicd {costs.nic_frame_s * 1e6:.1f} µs per frame "
                     f"here){floored}")


def pinned(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts, tdf: int,
           how: str) -> TdfChoice:
    """A TDF the lab or the user chose, with what its peak asks of this machine."""
    hosts = busiest_hosts(fabric, scenario)
    load = peak_cpu_s_per_s(fabric, hosts, pmtu_bytes, costs) / tdf / costs.cores
    auto = round_up(peak_cpu_s_per_s(fabric, hosts, pmtu_bytes, costs) / (SAFE_FRACTION * costs.cores))
    verdict = "within" if load <= SAFE_FRACTION else "beyond"
    return TdfChoice(tdf, how, load, f"set by {'lab.yml' if how == 'lab' else '--tdf'}; the peak "
                     f"({_peak(fabric, hosts)}) needs {load:.0%} of this machine's cores, {verdict} the "
                     f"{SAFE_FRACTION:.0%} kept for the agents (auto would pick {auto})")
