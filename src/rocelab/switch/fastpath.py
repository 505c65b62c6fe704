"""switchd's fast path: the pipeline of rocelab.switch.pipeline in C (`fastpath_core.c`, plain C,
and `_fastpath.c`, its CPython binding), built by `pip install` where a C compiler is found,
with the same interface as `Switch`.

The Python `Switch` stays the reference. A `FastSwitch` builds one from the same arguments
and keeps it as its configuration and its counters' format: the C core reads the reference's
objects once, runs every frame itself, routes a flow it has not seen through the reference's
`_route`, writes its state back into the reference's objects when a control call changes the
switch, and hands its counters out packed, straight from its state (`counter_values`, in
rocelab.switch.counters' order: one function builds the nested view for both pipelines).
tests/unit/test_switch_traces.py holds the two to the same frames out and the same counters
over generated traces, and every switch test runs on both. The C core also runs switchd's loop
(`serve`, rocelab.kernel.loop): the rings, the pipeline and the sends, with no Python per
wake-up.

The C core declares what it implements (FEATURES, in rocelab.switch.features' names) and names
its drop reasons, schedulers, wire constants and the attributes it reads (REASONS, SCHEDULERS,
WIRE, FIELDS: one table per kind of object, all read when the switch is built, so a missing
attribute fails then with its name); tests match them with the Python side's by name.

    choose_pipeline(profile, ports, fib, balance)          which pipeline a switch runs, and why
    make_switch(name, ports, profile, fib, rng, balance)   (FastSwitch or Switch, the PipelineChoice)
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Sequence

from rocelab.switch import counters, features
from rocelab.switch.balance import Balance
from rocelab.switch.fib import Fib
from rocelab.switch.frames import MAX_FRAME_BYTES
from rocelab.switch.pipeline import FLOW_CACHE_MAX, TRAP_QUEUE_MAX, PortSpec, Switch, _Steer

try:
    from rocelab.switch._fastpath import FEATURES, Asic
except ImportError:  # no C compiler at install time: the pure pipeline runs
    Asic = None
    FEATURES = frozenset()
PURE_ENV = "ROCELAB_PURE_SWITCH"  # set to 1: switchd runs the Python pipeline even where C is built


if Asic is not None:
    class FastSwitch(Asic):
        """`Switch`'s interface over the C core; see the module docstring."""

        implementation = "c"
        takes_arrival_time = Switch.takes_arrival_time

        def __init__(self, name: str, ports: Sequence[PortSpec], profile, fib: Fib, rng: random.Random,
                     balance: Balance | None = None):
            self.reference = Switch(name, ports, profile, fib, rng, balance=balance)
            self.name = name
            self.trapped = self.reference.trapped
            self._ports = self.reference._ports
            super().__init__(self.reference, rng, MAX_FRAME_BYTES, FLOW_CACHE_MAX, TRAP_QUEUE_MAX)

        def _resolve(self, port_index: int, tos: int, proto: int, src: int, dst: int, sport: int,
                     dport: int) -> tuple:
            """A flow the C cache has not seen, routed by the reference: (egress port, queue,
            PG indices, MACs, lossless), (-1, drop reason), or through an adaptive ECMP group
            (-1, the group's index in the reference's, the flow's ECMP hash, its TC, PG, lossless):
            C picks the member per frame."""
            egress, queue, pg, macs, lossless = self.reference._route(self._ports[port_index],
                                                                       (tos, proto, src, dst, sport, dport))
            if egress is None:
                return (-1, queue)
            if isinstance(egress, _Steer):
                group = list(self.reference._groups.values()).index(egress.group)
                return (-1, group, egress.flow_hash, egress.tc, pg.index, lossless)
            return (self._ports.index(egress), queue.index, pg.index, macs, lossless)

        def set_fib(self, fib: Fib) -> None:
            """The reference's set_fib, with the groups' state C holds: a group whose next hops
            stay keeps its flowset table and counters, as in the reference."""
            self._store()
            self.reference.set_fib(fib)
            self._flush_flows()
            self._load()

        def group_counters(self) -> dict:
            self._store_group_counters()
            return self.reference.group_counters()

        def set_impairment(self, port_name: str, delay_s: float, jitter_s: float, loss_pct: float,
                           rate_bps: float | None = None) -> None:
            self._store()
            self.reference.set_impairment(port_name, delay_s, jitter_s, loss_pct, rate_bps)
            self._load()

        def packed_counters(self, now: float) -> dict:
            return counters.pack(self.name, now, [p.name for p in self._ports], *self.counter_values(now))

        def counters(self, now: float) -> dict:
            return counters.expand(self.packed_counters(now))

        def clear_counters(self, now: float) -> None:
            self._store()
            self.reference.clear_counters(now)
            self._load()
else:
    FastSwitch = None  # type: ignore[assignment,misc]


def switchd_pipeline() -> str:
    """Which pipeline switchd runs here for what the C core covers: "c" where the fast path is
    built and not switched off (ROCELAB_PURE_SWITCH=1), else "python"."""
    return "python" if Asic is None or os.environ.get(PURE_ENV) == "1" else "c"


@dataclass(frozen=True)
class PipelineChoice:
    pipeline: str  # "c" | "python"
    why: str


def choose_pipeline(profile, ports: Sequence[PortSpec], fib: Fib, balance: Balance | None = None) -> PipelineChoice:
    """C where it is built, not switched off, and declares every feature the switch needs
    (rocelab.switch.features.needed); else Python, saying what kept it off C."""
    if Asic is None:
        return PipelineChoice("python", "the C core is not built here (no C compiler at install time)")
    if os.environ.get(PURE_ENV) == "1":
        return PipelineChoice("python", f"{PURE_ENV}=1")
    lacking = {f: where for f, where in features.needed(profile, ports, fib, balance).items() if f not in FEATURES}
    if lacking:
        return PipelineChoice("python", "the C core lacks " + ", ".join(
            f"{f} ({where})" for f, where in sorted(lacking.items())))
    return PipelineChoice("c", "the C core implements every feature this switch needs")


def make_switch(name: str, ports: Sequence[PortSpec], profile, fib: Fib, rng: random.Random,
                balance: Balance | None = None):
    """The switch switchd runs, and why: a FastSwitch or the Python Switch, per `choose_pipeline`."""
    choice = choose_pipeline(profile, ports, fib, balance)
    if choice.pipeline == "c":
        return FastSwitch(name, ports, profile, fib, rng, balance), choice
    return Switch(name, ports, profile, fib, rng, balance=balance), choice
