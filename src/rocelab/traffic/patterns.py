"""Traffic patterns: each turns (hosts, size, options) into one plan of plain data per host.

A host's plan is a list of steps; a step is the transfers it sends and the transfers it
receives, each to or from one peer. A host starts step s+1 only when every send of step s
has completed and every receive of step s has arrived, as NCCL's ring does; the steps are
what make a collective synchronized.

Sizes follow nccl-tests: `size_bytes` is the buffer each rank reduces (AllReduce), the
whole per-rank buffer (all-to-all), or what each sender sends (elephant, incast). The
collectives cut it into n chunks whose sizes differ by at most one byte, so every byte
count is exact even when n does not divide the size. `bus_factor` turns algbw (size /
time) into busbw, the figure comparable with one NIC's line rate.

Patterns live in a Registry (STYLE.md 4); the built-ins are registered in
`builtin_patterns()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from rocelab.registry import Registry


class PatternError(ValueError):
    """Hosts, size or options a pattern cannot use; the message says what it needs."""


@dataclass(frozen=True)
class Transfer:
    peer: str
    size_bytes: int


@dataclass(frozen=True)
class Step:
    sends: tuple[Transfer, ...] = ()
    recvs: tuple[Transfer, ...] = ()

    def to_json(self) -> dict:
        return {"sends": [[t.peer, t.size_bytes] for t in self.sends],
                "recvs": [[t.peer, t.size_bytes] for t in self.recvs]}

    @classmethod
    def from_json(cls, data: Mapping) -> "Step":
        return cls(tuple(Transfer(str(p), int(n)) for p, n in data.get("sends", ())),
                   tuple(Transfer(str(p), int(n)) for p, n in data.get("recvs", ())))


@dataclass(frozen=True)
class Plan:
    """Every host's steps for one iteration of a pattern."""

    pattern: str
    hosts: tuple[str, ...]
    size_bytes: int
    bus_factor: float
    steps: Mapping[str, tuple[Step, ...]]

    def bytes_sent(self, host: str) -> int:
        return sum(t.size_bytes for step in self.steps[host] for t in step.sends)

    def bytes_received(self, host: str) -> int:
        return sum(t.size_bytes for step in self.steps[host] for t in step.recvs)

    def peers(self, host: str) -> list[str]:
        """Hosts this host sends to or receives from, in first-use order."""
        seen: dict[str, None] = {}
        for step in self.steps[host]:
            for t in (*step.sends, *step.recvs):
                seen.setdefault(t.peer, None)
        return list(seen)

    def pairs(self) -> list[tuple[str, str]]:
        """Host pairs that exchange anything, each once, in host order: one set of QPs per
        pair carries both directions."""
        order = {h: n for n, h in enumerate(self.hosts)}
        return sorted({(h, p) for h in self.hosts for p in self.peers(h) if order[h] < order[p]},
                      key=lambda pair: (order[pair[0]], order[pair[1]]))


Builder = Callable[[tuple[str, ...], int, Mapping[str, object]], dict[str, list[Step]]]


@dataclass(frozen=True)
class Pattern:
    name: str
    description: str
    build: Builder
    bus_factor: Callable[[int], float]
    min_hosts: int = 2
    power_of_two: bool = False
    chunked: bool = False  # cuts size_bytes into one chunk per host
    options: Mapping[str, str] = field(default_factory=dict)  # option → what it means

    def plan(self, hosts: list[str] | tuple[str, ...], size_bytes: int,
             options: Mapping[str, object] | None = None) -> Plan:
        hosts = tuple(hosts)
        options = dict(options or {})
        n = len(hosts)
        problems = []
        if len(set(hosts)) != n:
            problems.append(f"hosts {list(hosts)} name a host twice")
        if n < self.min_hosts:
            problems.append(f"needs at least {self.min_hosts} hosts, got {n}")
        if self.power_of_two and n & (n - 1):
            problems.append(f"needs a power-of-two number of hosts (2, 4, 8, …), got {n}")
        lowest = n if self.chunked else 1
        if size_bytes < lowest:
            problems.append(f"size {size_bytes} B is too small: at least {lowest} B "
                            f"({'one byte per host' if self.chunked else 'one byte'})")
        for key in options:
            if key not in self.options:
                known = ", ".join(self.options) or "none"
                problems.append(f"has no option {key!r} (options: {known})")
        if problems:
            raise PatternError(f"{self.name}: " + "; ".join(problems))
        steps = self.build(hosts, size_bytes, options)
        return Plan(self.name, hosts, size_bytes, self.bus_factor(n),
                    {h: tuple(steps[h]) for h in hosts})


def chunk_sizes(size_bytes: int, n: int) -> list[int]:
    """size_bytes cut into n chunks; the first size_bytes % n chunks get one byte more."""
    base, extra = divmod(size_bytes, n)
    return [base + (i < extra) for i in range(n)]


def _ring_allreduce(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    # Reduce-scatter then allgather around the ring: at each step rank r passes one chunk
    # to its right neighbour and takes one from its left (chunk indices as in NCCL's ring).
    n = len(hosts)
    chunk = chunk_sizes(size_bytes, n)
    plans = {}
    for r, host in enumerate(hosts):
        right, left = hosts[(r + 1) % n], hosts[(r - 1) % n]
        steps = [Step((Transfer(right, chunk[(r - s) % n]),), (Transfer(left, chunk[(r - s - 1) % n]),))
                 for s in range(n - 1)]
        steps += [Step((Transfer(right, chunk[(r + 1 - s) % n]),), (Transfer(left, chunk[(r - s) % n]),))
                  for s in range(n - 1)]
        plans[host] = steps
    return plans


def _halving_doubling(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    # Recursive halving reduce-scatter: at distance n/2, n/4, …, 1 a rank swaps half of the
    # chunk range it still owns with its partner (rank XOR distance). Recursive doubling
    # allgather retraces the ranges at distance 1, 2, …, n/2.
    n = len(hosts)
    chunk = chunk_sizes(size_bytes, n)
    rounds = n.bit_length() - 1
    plans = {}
    for r, host in enumerate(hosts):
        lo, hi = 0, n
        ranges = []
        steps = []
        for j in range(rounds):
            distance = n >> (j + 1)
            partner = hosts[r ^ distance]
            mid = (lo + hi) // 2
            keep, give = ((mid, hi), (lo, mid)) if r & distance else ((lo, mid), (mid, hi))
            steps.append(Step((Transfer(partner, sum(chunk[give[0]:give[1]])),),
                              (Transfer(partner, sum(chunk[keep[0]:keep[1]])),)))
            ranges.append((lo, hi))
            lo, hi = keep
        for j in reversed(range(rounds)):
            partner = hosts[r ^ (n >> (j + 1))]
            parent_lo, parent_hi = ranges[j]
            mine = sum(chunk[lo:hi])
            steps.append(Step((Transfer(partner, mine),),
                              (Transfer(partner, sum(chunk[parent_lo:parent_hi]) - mine),)))
            lo, hi = parent_lo, parent_hi
        plans[host] = steps
    return plans


def _all_to_all(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    # One step: rank r sends chunk p of its buffer to rank p and receives chunk r from
    # every rank; its own chunk stays local.
    chunk = chunk_sizes(size_bytes, len(hosts))
    plans = {}
    for r, host in enumerate(hosts):
        others = [(p, peer) for p, peer in enumerate(hosts) if peer != host]
        plans[host] = [Step(tuple(Transfer(peer, chunk[p]) for p, peer in others),
                            tuple(Transfer(peer, chunk[r]) for _, peer in others))]
    return plans


def _incast(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    root = str(options.get("root", hosts[-1]))
    if root not in hosts:
        raise PatternError(f"incast: root {root!r} is not one of the hosts {list(hosts)}")
    senders = [h for h in hosts if h != root]
    plans = {h: [Step(sends=(Transfer(root, size_bytes),))] for h in senders}
    plans[root] = [Step(recvs=tuple(Transfer(h, size_bytes) for h in senders))]
    return plans


def _elephant(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    if len(hosts) % 2:
        raise PatternError(f"elephant: pairs hosts as sender, receiver: needs an even number, got {len(hosts)}")
    both_ways = bool(options.get("bidirectional", False))
    plans = {}
    for src, dst in zip(hosts[::2], hosts[1::2]):
        plans[src] = [Step((Transfer(dst, size_bytes),), (Transfer(dst, size_bytes),) if both_ways else ())]
        plans[dst] = [Step((Transfer(src, size_bytes),) if both_ways else (), (Transfer(src, size_bytes),))]
    return plans


def _ping_pong(hosts: tuple[str, ...], size_bytes: int, options: Mapping) -> dict[str, list[Step]]:
    # perftest's latency tests: the first host sends, the second answers once it has it; one
    # round trip per iteration.
    if len(hosts) != 2:
        raise PatternError(f"pingpong: two hosts send back and forth, got {len(hosts)}")
    first, second = hosts
    return {first: [Step(sends=(Transfer(second, size_bytes),)), Step(recvs=(Transfer(second, size_bytes),))],
            second: [Step(recvs=(Transfer(first, size_bytes),)), Step(sends=(Transfer(first, size_bytes),))]}


def builtin_patterns() -> Registry[Pattern]:
    registry: Registry[Pattern] = Registry("traffic pattern")
    allreduce = lambda n: 2 * (n - 1) / n  # noqa: E731  nccl-tests' AllReduce bus factor
    registry.register("ring-allreduce", Pattern(
        "ring-allreduce", "ring AllReduce: 2(N−1) steps of S/N between ring neighbours",
        _ring_allreduce, allreduce, chunked=True))
    registry.register("halving-doubling", Pattern(
        "halving-doubling", "AllReduce by recursive halving reduce-scatter and recursive doubling allgather",
        _halving_doubling, allreduce, power_of_two=True, chunked=True))
    registry.register("alltoall", Pattern(
        "alltoall", "all-to-all: every rank sends S/N to every other rank at once",
        _all_to_all, lambda n: (n - 1) / n, chunked=True))
    registry.register("incast", Pattern(
        "incast", "N:1 incast: every other host sends S to the root at once",
        _incast, lambda n: n - 1, options={"root": "the receiving host (default: the last host)"}))
    registry.register("elephant", Pattern(
        "elephant", "point-to-point elephant flows: hosts paired as sender, receiver",
        _elephant, lambda n: 1.0, options={"bidirectional": "each pair also sends the other way"}))
    registry.register("pingpong", Pattern(
        "pingpong", "latency: two hosts send S back and forth, one round trip per iteration",
        _ping_pong, lambda n: 1.0))
    return registry
