"""Egress schedulers, chosen by SCHEDULER type name (STYLE.md rules 4 and 7).

A port's queues are grouped by their scheduler's type; each group is served by one
discipline, and groups are served in precedence order: every STRICT queue before any
DWRR/WRR queue. A queue without a SCHEDULER is DWRR with weight 1.

Disciplines see queues through a few attributes: `items` (a deque whose entries hold the
packet size at index 1), `paused_until_s` (PFC), `index` and, for DWRR, `weight`,
`quantum_bytes` and `deficit_bytes`; each queue gets a `discipline`, which the caller
tells when the queue goes from empty to holding a packet (`activate`). A queue is eligible
when it holds packets and its pause has run out; paused queues are skipped, never waited
for.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Protocol, Sequence

from rocelab.registry import Registry
from rocelab.switch.frames import MAX_FRAME_BYTES


class Discipline(Protocol):
    precedence: int  # lower is served first

    def activate(self, queue) -> None:  # the queue was empty and now holds a packet
        ...

    def pick(self, now: float):  # -> the queue to send from, or None
        ...


class StrictPriority:
    """The highest-numbered eligible queue goes first (SAI's strict-priority order)."""

    precedence = 0

    def __init__(self, queues: Sequence):
        self.queues = sorted(queues, key=lambda q: q.index, reverse=True)

    def activate(self, queue) -> None:
        """Strict priority looks at every queue anyway."""

    def pick(self, now: float):
        for q in self.queues:
            if q.items and q.paused_until_s <= now:
                return q
        return None


class DeficitRoundRobin:
    """Deficit round robin (Shreedhar & Varghese) over the queues that hold packets.

    Each visit credits a queue with weight / least weight × MAX_FRAME_BYTES, so any frame
    fits one visit's credit and bytes are shared in proportion to the weights whatever
    the packet sizes. WRR is served the same way (byte-fair, not packet-fair).
    """

    precedence = 1

    def __init__(self, queues: Sequence):
        least = min(q.weight for q in queues)
        for q in queues:
            q.quantum_bytes = q.weight * MAX_FRAME_BYTES // least
            q.deficit_bytes = 0
        self.active: deque = deque()  # queues holding packets, in round-robin order
        self.credited = False  # has active[0] had this visit's quantum?

    def activate(self, queue) -> None:
        """`queue` was empty and has just been given a packet."""
        if queue not in self.active:  # a watchdog flush can leave an empty queue listed
            queue.deficit_bytes = 0
            self.active.append(queue)

    def pick(self, now: float):
        active = self.active
        # One more visit than there are queues: the rest of the head's visit, then each
        # queue once with fresh credit.
        for _ in range(len(active) + 1):
            if not active:
                return None
            q = active[0]
            items = q.items
            if not items:  # emptied behind the scheduler's back (watchdog drop)
                active.popleft()
                self.credited = False
                continue
            if q.paused_until_s <= now:
                if not self.credited:
                    q.deficit_bytes += q.quantum_bytes
                    self.credited = True
                size = items[0][1]
                if size <= q.deficit_bytes:
                    if len(items) == 1:  # the queue empties: it leaves the round, credit too
                        active.popleft()
                        self.credited = False
                    else:
                        q.deficit_bytes -= size
                    return q
            active.rotate(-1)
            self.credited = False
        return None


def register_builtin_schedulers(registry: Registry) -> None:
    registry.register("STRICT", StrictPriority)
    registry.register("DWRR", DeficitRoundRobin)
    registry.register("WRR", DeficitRoundRobin)


def scheduler_registry() -> Registry:
    registry: Registry = Registry("scheduler type")
    register_builtin_schedulers(registry)
    return registry


class PortScheduler:
    """All of one port's disciplines, served in precedence order: `pick(now)`."""

    def __init__(self, queues: Sequence, registry: Registry):
        groups: dict[type, list] = {}
        for q in queues:
            groups.setdefault(registry.get(q.scheduler_type), []).append(q)
        self.disciplines: list[Discipline] = []
        for cls, members in groups.items():
            discipline = cls(members)
            for q in members:
                q.discipline = discipline
            self.disciplines.append(discipline)
        self.disciplines.sort(key=lambda d: d.precedence)
        # An attribute, not a method: the common case, one discipline, skips a level of calls.
        self.pick: Callable = self.disciplines[0].pick if len(self.disciplines) == 1 else self._pick_in_order

    def _pick_in_order(self, now: float):
        for discipline in self.disciplines:
            q = discipline.pick(now)
            if q is not None:
                return q
        return None
