"""Counters across a profile change (switchd's reload) and since a `sonic-clear` snapshot."""

import random

from rocelab.qos.sonic import load_config_db
from rocelab.switch.counters import carry_counters, counters_since
from rocelab.switch.fib import Fib
from rocelab.switch.pipeline import PortSpec, Switch
from tests.unit.test_nodecli import PROFILE


def counters(rx: int, tx_pfc3: int, watermark: int, depth: int) -> dict:
    switch = Switch("leaf1", [PortSpec("eth1", "02:00:00:00:00:01", 1e8)], load_config_db(PROFILE),
                    Fib({}, frozenset()), random.Random(0))
    port = switch._ports[0]
    port.rx_packets, port.pfc_tx_frames[3] = rx, tx_pfc3
    port.queues[3].watermark_bytes = watermark
    port.queues[3].depth_bytes = depth
    port.drops["tail_drop"] = [2, 3000]
    return switch.counters(1.0)


def test_counts_add_watermarks_keep_the_higher_gauges_are_the_new_pipelines():
    carried = carry_counters(counters(10, 4, 9000, 500), counters(1, 1, 3000, 0))
    port = carried["ports"]["eth1"]
    assert (port["rx_packets"], port["pfc_tx_frames"][3]) == (11, 5)
    assert port["queues"][3]["watermark_bytes"] == 9000 and port["queues"][3]["depth_bytes"] == 0
    assert port["drops"]["tail_drop"] == {"packets": 4, "bytes": 6000}
    assert carried["drops"]["tail_drop"]["packets"] == 4
    assert carry_counters(None, counters(1, 1, 1, 1)) == counters(1, 1, 1, 1)


def test_since_a_snapshot_counts_subtract_and_a_cleared_agent_starts_afresh():
    since = counters_since(counters(10, 4, 9000, 500), counters(15, 6, 100, 7))
    port = since["ports"]["eth1"]
    assert (port["rx_packets"], port["pfc_tx_frames"][3], port["queues"][3]["depth_bytes"]) == (5, 2, 7)
    assert port["queues"][3]["watermark_bytes"] == 100
    assert counters_since(counters(10, 4, 0, 0), counters(3, 0, 0, 0))["ports"]["eth1"]["rx_packets"] == 3
