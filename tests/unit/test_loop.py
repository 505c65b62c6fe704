"""The agents' loop serves an event due within `early_s` in the wake-up it already has, its
clock running ahead to that event's time and never back; it sleeps for anything later."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from rocelab.kernel.control import ControlServer
from rocelab.kernel.loop import EARLY_MAX_S, EARLY_SHARE, Loop, LoopStats, early_s


class OneEvent:
    """A core with one event `after_s` past the first clock reading, which it records."""

    def __init__(self, after_s: float):
        self.after_s = after_s
        self.due: float | None = None
        self.served_at: list[float] = []

    def receive(self, port, frame, now):  # no ports in these tests
        raise AssertionError("no frame expected")

    def next_event(self, now):
        if self.due is None and not self.served_at:
            self.due = now + self.after_s
        return self.due

    def poll(self, now):
        if self.due is not None and now >= self.due:
            self.served_at.append(now)
            self.due = None
        return []


@pytest.fixture
def control(tmp_path):
    server = ControlServer(tmp_path / "agent.sock", lambda req: {})
    yield server
    server.close()


def test_an_event_due_within_early_s_runs_at_once_at_its_own_time(control):
    core = OneEvent(after_s=0.02)
    loop = Loop(core, {}, [control], early_s=0.05)
    loop._wait_and_serve({}, [])
    assert core.served_at == [pytest.approx(core.served_at[0])] and loop.stats.wakeups == 0
    assert loop.now() >= core.served_at[0]  # the loop's clock stays at or past what it served
    assert loop.stats.lateness.counts[0] == 1  # served at its time: not late


def test_an_event_further_off_is_slept_for(control):
    core = OneEvent(after_s=0.02)
    loop = Loop(core, {}, [control], early_s=0.0)
    loop._wait_and_serve({}, [])  # sleeps until the event, then serves it
    assert len(core.served_at) == 1 and loop.stats.wakeups == 1


def test_early_s_is_a_share_of_the_fidelity_bound_and_never_more_than_a_wake_up():
    assert early_s(100e-6) == pytest.approx(EARLY_SHARE * 100e-6)
    assert early_s(1.0) == EARLY_MAX_S


def test_the_stats_a_counters_reply_carries_are_the_dataclass_whole():
    stats = LoopStats(rx_frames=3, tx_frames=2, wakeups=5, members=["h1", "h2"], tx_errors={"ENOBUFS": 1},
                      scheduling="SCHED_RR 1", rx_dropped=4)
    stats.lateness.record(2e-4)
    assert stats.to_json() == asdict(stats)
