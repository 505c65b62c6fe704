"""Which time-dilation factor a lab can hold on this machine (`up --tdf auto`).

Time dilation keeps bytes and stretches time: at TDF T every link runs at rate / T, and the
agents must move the lab's frames in real time: a switch forwards each frame once per hop, a
NIC sends or receives it once. The peak a lab can ask for is every host of its busiest case
(every host, for a lab with no scenario) sending and receiving at its port's line rate, as a
ring AllReduce does, over the longest path of the fabric. With f_h = line rate / frame bits,
that costs the agents

    CPU(T) = Σ_hosts f_h · (2 · nic_frame_s + hops · switch_frame_s) / T
             + hosts · nic_busy + switches · switch_busy

cores, where the per-frame costs and the costs of being busy at all (wake-ups, timers) are
measured on this machine (rocelab.runtime.calibration). The auto TDF is the smallest "round"
T (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten: never more than 25% above what
is needed) with CPU(T) at most SAFE_FRACTION of the cores: the
rest is the machine's, and the run's own sampling and control. The fidelity report
(rocelab.runtime.fidelity) says when it was not enough.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rocelab.model.scenario import Scenario
from rocelab.model.topology import Fabric

# Measured on a 2-core machine: a ring AllReduce over leaf-spine-2x2 through switchd kept
# 97.6% of line rate with its agents at 59% of the cores, and 93.9% at 91% (README, "Time
# dilation"). Two thirds of the cores is where they still kept up.
SAFE_FRACTION = 0.6
MAX_TDF = 100_000
ROCE_FRAME_OVERHEAD_BYTES = 14 + 20 + 8 + 12 + 4  # Ethernet, IPv4, UDP, BTH, ICRC around a payload
_ROUND_STEPS = (1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8)  # the Renard-like steps of a dial: ≤ 25% apart


@dataclass(frozen=True)
class AgentCosts:
    """What the agents cost this machine (rocelab.runtime.calibration)."""

    switch_frame_s: float  # switchd: CPU seconds per frame forwarded
    nic_frame_s: float  # nicd: CPU seconds per data frame sent or received, its ACKs included
    cores: int
    switch_busy_cores: float = 0.0  # what a switchd with traffic costs whatever the rate
    nic_busy_cores: float = 0.0


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


def _longest_switch_path(fabric: Fabric) -> int:
    """Switches a frame crosses on the longest host-to-host path (1 under one leaf, 3 leaf-spine-leaf)."""
    tors = {fabric.peer(h.ports[0]).node for h in fabric.hosts}
    if len(tors) <= 1:
        return 1
    return 3 if any(s.role == "spine" for s in fabric.switches) else 2


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


def _demand(fabric: Fabric, hosts: tuple[str, ...], pmtu_bytes: int, costs: AgentCosts) -> tuple[float, float]:
    """(CPU seconds per second at TDF 1 that shrink as 1/T, cores that do not)."""
    frame_bits = frame_bytes(pmtu_bytes) * 8
    hops = _longest_switch_path(fabric)
    scaled = sum(fabric.links[fabric.node(h).ports[0].link].rate_bps / frame_bits
                 * (2 * costs.nic_frame_s + hops * costs.switch_frame_s) for h in hosts)
    fixed = len(hosts) * costs.nic_busy_cores + len(fabric.switches) * costs.switch_busy_cores
    return scaled, fixed


def peak_cores(fabric: Fabric, hosts: tuple[str, ...], pmtu_bytes: int, costs: AgentCosts, tdf: float) -> float:
    """Cores the peak of `hosts` needs at TDF `tdf`."""
    scaled, fixed = _demand(fabric, hosts, pmtu_bytes, costs)
    return scaled / tdf + fixed


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


def _needed(fabric: Fabric, hosts: tuple[str, ...], pmtu_bytes: int, costs: AgentCosts) -> int | None:
    """The smallest round TDF within SAFE_FRACTION of the cores; None when none is."""
    scaled, fixed = _demand(fabric, hosts, pmtu_bytes, costs)
    room = SAFE_FRACTION * costs.cores - fixed
    if room <= 0 or scaled / room > MAX_TDF:
        return None
    return round_up(scaled / room)


def _peak(fabric: Fabric, hosts: tuple[str, ...]) -> str:
    return f"{len(hosts)} hosts at line rate both ways over {_longest_switch_path(fabric)} switch hops"


def _costs(costs: AgentCosts) -> str:
    return (f"switchd {costs.switch_frame_s * 1e6:.0f} µs per frame + {costs.switch_busy_cores:.2f} cores busy, "
            f"nicd {costs.nic_frame_s * 1e6:.0f} µs + {costs.nic_busy_cores:.2f}, measured here")


def choose_tdf(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts,
               floor: int = 1) -> TdfChoice:
    """The smallest round TDF (at least `floor`) at which the lab's peak fits in SAFE_FRACTION of the cores."""
    hosts = busiest_hosts(fabric, scenario)
    needed = _needed(fabric, hosts, pmtu_bytes, costs)
    if needed is None:
        load = peak_cores(fabric, hosts, pmtu_bytes, costs, MAX_TDF) / costs.cores
        return TdfChoice(MAX_TDF, "auto", load, f"no TDF keeps the peak ({_peak(fabric, hosts)}) within "
                         f"{SAFE_FRACTION:.0%} of this machine's {costs.cores} cores ({_costs(costs)}): "
                         f"the agents alone need more; expect the fidelity report to say they fell behind")
    tdf = max(needed, floor)
    floored = f"; {floor} is this lab's least" if floor > needed else ""
    return TdfChoice(tdf, "auto", peak_cores(fabric, hosts, pmtu_bytes, costs, tdf) / costs.cores,
                     f"the smallest round TDF at which the peak ({_peak(fabric, hosts)}) needs at most "
                     f"{SAFE_FRACTION:.0%} of this machine's {costs.cores} cores ({_costs(costs)}){floored}")


def pinned(fabric: Fabric, scenario: Scenario | None, pmtu_bytes: int, costs: AgentCosts, tdf: int,
           how: str) -> TdfChoice:
    """A TDF the lab or the user chose, with what its peak asks of this machine."""
    hosts = busiest_hosts(fabric, scenario)
    load = peak_cores(fabric, hosts, pmtu_bytes, costs, tdf) / costs.cores
    auto = _needed(fabric, hosts, pmtu_bytes, costs)
    verdict = "within" if load <= SAFE_FRACTION else "beyond"
    return TdfChoice(tdf, how, load, f"set by {'lab.yml' if how == 'lab' else '--tdf'}; the peak "
                     f"({_peak(fabric, hosts)}) needs {load:.0%} of this machine's cores, {verdict} the "
                     f"{SAFE_FRACTION:.0%} kept for the agents (auto would pick {auto or 'none'})")
