"""sonic-mgmt's PFC storm generator against switchd: the short frames pfc_gen.py writes to a
raw socket pause the priority they enable; its 802.3x PAUSE (`-g`) is counted and dropped on
a port without global flow control, as on SONiC."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from pfc_gen_frames import TIME_FIELDS_BEFORE_7420, pfc_gen_pause, pfc_gen_pfc
from rocelab.kernel.netns import packet_socket
from test_switchd_live import counters, rate_bps, udp_frame

# Each test looks at a pause while it lasts (0.34 s at TDF 1000): switchd must count the frame
# within 0.1 s and the test look before the pause runs out, which a busy machine can miss.
pytestmark = [pytest.mark.root, pytest.mark.timing]
PROFILES = Path(__file__).resolve().parents[2] / "profiles"
TDF = 1000  # 100G emulated at 100 Mb/s: one 65,535-quanta pause lasts 0.34 s, time to look
PRIORITY = 3  # lossless in roce-lossless.json (DSCP 26 → TC 3 → queue 3)
LOSSLESS_DSCP, LOSSY_DSCP = 26, 0
FRAMES = 20


def wait_for(condition, timeout_s: float, what: str) -> float:
    """Poll until condition() holds; the time it did."""
    started = time.monotonic()
    while not condition():
        waited_s = time.monotonic() - started
        assert waited_s < timeout_s, f"{what} within {timeout_s} s: not after {waited_s:.3f} s"
        time.sleep(0.002)
    return time.monotonic()


def send(ns: str, frames: list[bytes]) -> float:
    """Write `frames` from h-side eth1 as pfc_gen does (a raw socket, no padding); the time
    just before the first."""
    with packet_socket("eth1", ns, protocol=0) as sock:
        before = time.monotonic()
        for frame in frames:
            sock.send(frame)
    return before


def test_pfc_gen_frame_pauses_priority_3_toward_its_sender(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json", tdf=TDF)
    h1, h2 = record.node("h1").netns, record.node("h2").netns
    # `pfc_gen.py -p 8 -t 65535` as sonic-mgmt's PFC watchdog tests run it, from the copy
    # that writes 7 time fields: 32 bytes, class 7's time missing.
    storm = pfc_gen_pfc(1 << PRIORITY, 0xFFFF, TIME_FIELDS_BEFORE_7420)
    assert len(storm) == 32
    hold_s = 0xFFFF * 512 / rate_bps(record)

    paused_at = send(h2, [storm])
    wait_for(lambda: counters(spec.name, "leaf1")["ports"]["eth2"]["pfc_rx_frames"][PRIORITY] == 1, 0.1,
             "switchd counted the pause")
    lossless = udp_frame(spec, "h1", "h2", LOSSLESS_DSCP, 1024)
    lossy = udp_frame(spec, "h1", "h2", LOSSY_DSCP, 1024, sport=5000)
    send(h1, [lossless, lossy] * FRAMES)

    def eth2() -> dict:
        return counters(spec.name, "leaf1")["ports"]["eth2"]

    # The lossy queue drains at once; the paused one holds every frame meanwhile.
    wait_for(lambda: eth2()["queues"][0]["tx_packets"] == FRAMES, 0.2, "the lossy frames went through")
    during = eth2()
    looked_s = time.monotonic() - paused_at
    assert looked_s < hold_s - 0.05, f"looked {looked_s:.3f} s into a {hold_s:.3f} s pause: too late to see it"
    held = during["queues"][PRIORITY]
    assert held["tx_packets"] == 0
    assert held["depth_bytes"] == FRAMES * len(lossless)
    assert during["paused_time_s"][PRIORITY] > 0

    # The pause runs out by itself (no XON): the queue drains, and the time paused is the pause.
    wait_for(lambda: eth2()["queues"][PRIORITY]["tx_packets"] == FRAMES, hold_s + 0.5, "the held frames left")
    after = eth2()
    assert after["queues"][PRIORITY]["depth_bytes"] == 0
    assert after["paused_time_s"][PRIORITY] == pytest.approx(hold_s, rel=1e-9)  # its length, whatever the clock did
    assert after["pfc_rx_frames"] == [0, 0, 0, 1, 0, 0, 0, 0]
    assert after["drops"] == {}


def test_pfc_gen_global_pause_is_counted_and_dropped(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json", tdf=TDF)
    h1, h2 = record.node("h1").netns, record.node("h2").netns
    pause = pfc_gen_pause(0xFFFF)  # `pfc_gen.py -g -t 65535`: 18 bytes
    send(h2, [pause])

    def eth2() -> dict:
        return counters(spec.name, "leaf1")["ports"]["eth2"]

    wait_for(lambda: eth2()["pause_rx_frames"] == 1, 0.1, "switchd counted the 802.3x PAUSE")
    send(h1, [udp_frame(spec, "h1", "h2", LOSSLESS_DSCP, 1024)] * FRAMES)
    # Global flow control is off on the port (SONiC's only setting): nothing is held.
    wait_for(lambda: eth2()["queues"][PRIORITY]["tx_packets"] == FRAMES, 0.1, "the frames went through unpaused")
    port = eth2()
    assert port["drops"] == {"flow_control_disabled": {"packets": 1, "bytes": len(pause)}}
    assert port["pfc_rx_frames"] == [0] * 8 and port["paused_time_s"] == [0.0] * 8


def test_a_port_configured_for_flow_control_holds_every_queue_for_the_pause(bring_up):
    spec, record = bring_up("incast-1x5", dataplane="switchd", profile=PROFILES / "roce-lossless.json", tdf=TDF,
                            flow_control_rx=frozenset({"leaf1:eth2"}))
    h1, h2 = record.node("h1").netns, record.node("h2").netns
    hold_s = 0xFFFF * 512 / rate_bps(record)

    def eth2() -> dict:
        return counters(spec.name, "leaf1")["ports"]["eth2"]

    paused_at = send(h2, [pfc_gen_pause(0xFFFF)])
    wait_for(lambda: eth2()["pause_rx_frames"] == 1, 0.1, "switchd counted the 802.3x PAUSE")
    send(h1, [udp_frame(spec, "h1", "h2", dscp, 1024, sport=5000 + dscp) for dscp in (LOSSLESS_DSCP, LOSSY_DSCP)]
         * FRAMES)
    time.sleep(0.1)
    during = eth2()
    looked_s = time.monotonic() - paused_at
    assert looked_s < hold_s - 0.05, f"looked {looked_s:.3f} s into a {hold_s:.3f} s pause: too late to see it"
    # The whole link pauses: lossy queue 0 as well as lossless queue 3, nothing dropped.
    assert [during["queues"][q]["tx_packets"] for q in (0, PRIORITY)] == [0, 0]
    assert during["drops"] == {}
    wait_for(lambda: all(eth2()["queues"][q]["tx_packets"] == FRAMES for q in (0, PRIORITY)), hold_s + 0.5,
             "the held frames left when the pause ran out")
