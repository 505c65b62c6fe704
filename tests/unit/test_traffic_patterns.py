"""Traffic patterns as plans: exact byte counts and step counts (nccl-tests conventions)."""

from __future__ import annotations

import pytest

from rocelab.registry import UnknownName
from rocelab.traffic.patterns import PatternError, Step, Transfer, builtin_patterns, chunk_sizes

PATTERNS = builtin_patterns()


def hosts(n: int) -> list[str]:
    return [f"h{i + 1}" for i in range(n)]


def check_sends_meet_receives(plan) -> None:
    """At every step, what a host sends to a peer is what that peer receives from it."""
    for h in plan.hosts:
        for s, step in enumerate(plan.steps[h]):
            for t in step.sends:
                received = [r.size_bytes for r in plan.steps[t.peer][s].recvs if r.peer == h]
                assert received == [t.size_bytes], (h, s, t)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_ring_moves_2_n_minus_1_over_n_of_s_per_rank_in_2_n_minus_1_steps_of_s_over_n(n):
    size = 840 * 1000  # divisible by 2..8
    plan = PATTERNS.get("ring-allreduce").plan(hosts(n), size)
    for r, h in enumerate(plan.hosts):
        steps = plan.steps[h]
        assert len(steps) == 2 * (n - 1)
        right, left = plan.hosts[(r + 1) % n], plan.hosts[(r - 1) % n]
        assert all(step.sends == (Transfer(right, size // n),) for step in steps)
        assert all(step.recvs == (Transfer(left, size // n),) for step in steps)
        assert plan.bytes_sent(h) == plan.bytes_received(h) == 2 * (n - 1) * size // n
    assert plan.bus_factor == pytest.approx(2 * (n - 1) / n)
    check_sends_meet_receives(plan)


def test_ring_with_an_indivisible_size_moves_every_chunk_exactly():
    size, n = 1_000_003, 4
    plan = PATTERNS.get("ring-allreduce").plan(hosts(n), size)
    check_sends_meet_receives(plan)
    # Each rank sends every chunk but one in each phase: 2(S − one chunk), chunks differ by ≤ 1 B.
    for h in plan.hosts:
        assert 2 * (size - size // n - 1) <= plan.bytes_sent(h) <= 2 * (size - size // n)
    assert sum(chunk_sizes(size, n)) == size


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_halving_doubling_moves_the_same_bytes_as_the_ring_in_2_log2_n_steps(n):
    size = 1 << 20
    plan = PATTERNS.get("halving-doubling").plan(hosts(n), size)
    rounds = n.bit_length() - 1
    for r, h in enumerate(plan.hosts):
        steps = plan.steps[h]
        assert len(steps) == 2 * rounds
        # Reduce-scatter halves: S/2, S/4, …, S/n; allgather doubles back: S/n, …, S/2.
        sizes = [step.sends[0].size_bytes for step in steps]
        assert sizes == [size >> (j + 1) for j in range(rounds)] + [size >> (j + 1) for j in reversed(range(rounds))]
        partners = [step.sends[0].peer for step in steps]
        assert partners[:rounds] == [plan.hosts[r ^ (n >> (j + 1))] for j in range(rounds)]
        assert plan.bytes_sent(h) == plan.bytes_received(h) == 2 * (n - 1) * size // n
    check_sends_meet_receives(plan)


@pytest.mark.parametrize("n", [3, 6])
def test_halving_doubling_needs_a_power_of_two(n):
    with pytest.raises(PatternError, match="power-of-two"):
        PATTERNS.get("halving-doubling").plan(hosts(n), 1 << 20)


def test_alltoall_sends_s_over_n_to_every_other_rank_in_one_step():
    n, size = 4, 4_000_000
    plan = PATTERNS.get("alltoall").plan(hosts(n), size)
    for h in plan.hosts:
        (step,) = plan.steps[h]
        assert sorted(t.peer for t in step.sends) == sorted(set(plan.hosts) - {h})
        assert {t.size_bytes for t in (*step.sends, *step.recvs)} == {size // n}
        assert plan.bytes_sent(h) == (n - 1) * size // n
    assert plan.bus_factor == pytest.approx((n - 1) / n)
    check_sends_meet_receives(plan)


def test_incast_sends_s_from_every_other_host_to_the_root():
    plan = PATTERNS.get("incast").plan(hosts(5), 4_000_000)
    assert plan.steps["h5"] == (Step(recvs=tuple(Transfer(h, 4_000_000) for h in hosts(4))),)
    for h in hosts(4):
        assert plan.steps[h] == (Step(sends=(Transfer("h5", 4_000_000),)),)
    assert plan.bytes_received("h5") == 4 * 4_000_000
    assert plan.bus_factor == 4  # busbw: what the root's link carries
    chosen = PATTERNS.get("incast").plan(hosts(5), 1000, {"root": "h2"})
    assert chosen.bytes_received("h2") == 4000 and chosen.bytes_sent("h5") == 1000


def test_incast_root_must_be_one_of_the_hosts():
    with pytest.raises(PatternError, match="root 'h9' is not one of the hosts"):
        PATTERNS.get("incast").plan(hosts(3), 1000, {"root": "h9"})


def test_elephant_pairs_hosts_and_can_go_both_ways():
    plan = PATTERNS.get("elephant").plan(["h1", "h4", "h2", "h3"], 1000)
    assert plan.steps["h1"] == (Step(sends=(Transfer("h4", 1000),)),)
    assert plan.steps["h3"] == (Step(recvs=(Transfer("h2", 1000),)),)
    assert plan.pairs() == [("h1", "h4"), ("h2", "h3")]
    both = PATTERNS.get("elephant").plan(["h1", "h2"], 1000, {"bidirectional": True})
    assert both.bytes_sent("h2") == both.bytes_received("h2") == 1000
    with pytest.raises(PatternError, match="even number"):
        PATTERNS.get("elephant").plan(hosts(3), 1000)


def test_pattern_problems_are_collected_into_one_message():
    with pytest.raises(PatternError) as exc:
        PATTERNS.get("ring-allreduce").plan(["h1", "h1", "h2"], 2, {"root": "h1"})
    text = str(exc.value)
    assert "name a host twice" in text and "too small" in text and "has no option 'root'" in text


def test_unknown_pattern_lists_the_valid_ones():
    with pytest.raises(UnknownName) as exc:
        PATTERNS.get("butterfly")
    for name in ("alltoall", "elephant", "halving-doubling", "incast", "ring-allreduce"):
        assert name in str(exc.value)


def test_steps_are_plain_data_that_round_trip_through_json():
    plan = PATTERNS.get("alltoall").plan(hosts(3), 3000)
    for steps in plan.steps.values():
        assert tuple(Step.from_json(s.to_json()) for s in steps) == steps
