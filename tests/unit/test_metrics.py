"""Prometheus text from the counters of a real switch core (a PFC incast) and real NIC
cores (DCQCN with CNPs), both driven in-process."""

from __future__ import annotations

import urllib.request
from dataclasses import asdict

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rocelab.kernel.loop import LoopStats
from rocelab.reporting import metrics
from rocelab.runtime.readings import AgentReading, LabReading
from test_switch_support import LOSSLESS_TC
from test_timeseries import SENDERS, nic_congestion, switch_incast

TDF = 1000
LATENESS = (3e-6, 4e-5, 4e-5, 7e-4, 0.3, 2.0)  # the last later than the histogram's last bound


@pytest.fixture(scope="module")
def reading() -> LabReading:
    _, switch = switch_incast(until_s=0.25)  # mid-incast: a queue stands and PGs assert XOFF
    _, nics = nic_congestion()
    loop = LoopStats(rx_frames=10, tx_frames=9, tx_errors={"ENOBUFS": 1}, scheduling="SCHED_RR 1", rx_dropped=2)
    for late_s in LATENESS:
        loop.lateness.record(late_s)
    leaf = AgentReading("leaf1", "switchd", {**switch[-1][0].reply, "loop": asdict(loop)})
    return LabReading("unit", TDF, (leaf, *nics[-1]))


def samples(text: bytes) -> dict[str, list]:
    """Family name → its samples, every family parsed by prometheus_client's own parser."""
    return {f.name: f.samples for f in text_string_to_metric_families(text.decode())}


def value(families: dict, sample_name: str, **labels: str) -> float:
    (match,) = [s.value for fam in families.values() for s in fam
                if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())]
    return match


def test_switch_counters_parse_into_prometheus_families_with_their_labels(reading):
    text = metrics.exposition([reading])
    families = samples(text)
    counters = reading.agents[0].reply["counters"]
    at = {"lab": "unit", "node": "leaf1"}
    for port in SENDERS:
        assert value(families, "rocelab_port_pfc_tx_frames_total", **at, port=port, priority="3") == \
            counters["ports"][port]["pfc_tx_frames"][LOSSLESS_TC] >= 1
        assert value(families, "rocelab_pg_xoff", **at, port=port, pg="3") == 1
        assert value(families, "rocelab_drops_total", **at, port=port, where="pg3", reason="headroom_exceeded") == \
            counters["ports"][port]["pgs"][3]["drops"]["headroom_exceeded"]["packets"] > 0
    eth2 = counters["ports"]["eth2"]
    assert value(families, "rocelab_queue_depth_bytes", **at, port="eth2", queue="3") == \
        eth2["queues"][3]["depth_bytes"] > 0
    assert value(families, "rocelab_queue_tx_bytes_total", **at, port="eth2", queue="3") == \
        eth2["queues"][3]["tx_bytes"]
    assert value(families, "rocelab_port_pfc_paused_seconds_total", **at, port="eth2", priority="3") == \
        pytest.approx(eth2["paused_time_s"][3]) and eth2["paused_time_s"][3] > 0
    assert value(families, "rocelab_pg_headroom_watermark_bytes", **at, port="eth1", pg="3") == \
        counters["ports"]["eth1"]["pgs"][3]["headroom_watermark_bytes"] > 0
    assert value(families, "rocelab_tdf", lab="unit") == TDF
    assert value(families, "rocelab_agent_up", **at, agent="switchd") == 1
    assert value(families, "rocelab_agent_tx_errors_total", **at, agent="switchd", errno="ENOBUFS") == 1
    assert value(families, "rocelab_agent_rx_dropped_total", **at, agent="switchd") == 2
    # The lateness histogram is Prometheus's own: cumulative buckets, +Inf holding every event.
    assert value(families, "rocelab_agent_lateness_seconds_bucket", **at, agent="switchd", le="1e-05") == 1
    assert value(families, "rocelab_agent_lateness_seconds_bucket", **at, agent="switchd", le="5e-05") == 3
    assert value(families, "rocelab_agent_lateness_seconds_bucket", **at, agent="switchd", le="1.0") == 5
    assert value(families, "rocelab_agent_lateness_seconds_bucket", **at, agent="switchd", le="+Inf") == 6
    assert value(families, "rocelab_agent_lateness_seconds_count", **at, agent="switchd") == 6
    assert value(families, "rocelab_agent_lateness_seconds_sum", **at, agent="switchd") == pytest.approx(sum(LATENESS))
    assert value(families, "rocelab_agent_scheduling", **at, agent="switchd", scheduling="SCHED_RR 1") == 1
    assert b"# TYPE rocelab_port_rx_packets_total counter" in text
    assert b"# TYPE rocelab_queue_depth_bytes gauge" in text


def test_every_switch_counter_has_a_family(reading):
    families = samples(metrics.exposition([reading]))
    port = reading.agents[0].reply["counters"]["ports"]["eth1"]
    names = {
        *(f"rocelab_port_{k}" for k in ("rx_packets", "rx_bytes", "tx_packets", "tx_bytes", "pfc_rx_frames",
                                        "pfc_tx_frames", "pfc_paused_seconds", "pause_rx_frames")),
        *(f"rocelab_queue_{k}" for k, v in port["queues"][0].items() if k not in ("drops", "pfcwd")),
        *(f"rocelab_pg_{k}" for k, v in port["pgs"][0].items() if k != "drops"),
        "rocelab_drops", "rocelab_drops_bytes",
    }
    assert names <= set(families), sorted(names - set(families))


def test_nic_counters_become_nic_and_qp_families(reading):
    families = samples(metrics.exposition([reading]))
    nics = {a.node: a.reply["counters"] for a in reading.agents if a.agent == "nicd"}
    for node in ("h1", "h2"):
        (qpn,) = nics[node]["qps"]
        qp = nics[node]["qps"][qpn]
        at = {"lab": "unit", "node": node, "qpn": qpn}
        assert value(families, "rocelab_qp_rate_bps", **at) == qp["cc"]["rate_bps"] < 10e9
        assert value(families, "rocelab_qp_cnps_received_total", **at) == qp["cnps_received"] > 0
        assert value(families, "rocelab_qp_retransmitted_packets_total", **at) == qp["retransmitted_packets"]
        assert value(families, "rocelab_qp_cc_alpha", **at) == pytest.approx(qp["cc"]["alpha"])
        assert value(families, "rocelab_qp_info", **at, state=qp["state"], cc_algorithm="dcqcn") == 1
        assert value(families, "rocelab_nic_cnps_received_total", lab="unit", node=node) == nics[node]["cnps_received"]
        assert value(families, "rocelab_nic_tx_bytes_total", lab="unit", node=node) == nics[node]["tx_bytes"]
    assert value(families, "rocelab_nic_cnps_sent_total", lab="unit", node="h3") == nics["h3"]["cnps_sent"] > 0
    assert value(families, "rocelab_nic_pfc_paused_seconds_total", lab="unit", node="h1", priority="3") == 0
    assert value(families, "rocelab_nic_qps_in_error", lab="unit", node="h1") == 0


def test_an_agent_that_does_not_answer_reads_as_down_and_nothing_else():
    down = LabReading("unit", TDF, (AgentReading("leaf1", "switchd", None, "no answer"),))
    families = samples(metrics.exposition([down]))
    assert value(families, "rocelab_agent_up", lab="unit", node="leaf1", agent="switchd") == 0
    assert set(families) == {"rocelab_tdf", "rocelab_agent_up"}


def test_the_endpoint_serves_on_localhost_only(reading):
    scrapes = []

    def read():
        scrapes.append(1)
        return [reading]

    server, thread = metrics.serve(read, 0)
    try:
        host, port = server.server_address[:2]
        assert host == "127.0.0.1"
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            body = reply.read()
        assert reply.status == 200
        assert "rocelab_port_pfc_tx_frames" in samples(body)
        assert scrapes == [1]  # read at the scrape, not before
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_adaptive_ecmp_groups_and_reordering_become_families():
    """A packet-mode leaf's group counters (a real Python switch core) and a NIC's reorder distance."""
    import random

    from rocelab.switch import Switch
    from rocelab.switch.balance import Balance
    from test_switch_balance import drive, ecmp_fib, port_specs, qos_profile, to_remote

    switch = Switch("leaf1", port_specs(), qos_profile({}), ecmp_fib(), random.Random(1), balance=Balance("packet"))
    drive(switch, [(0.0, "eth1", to_remote(49152))] * 30, 0.0, 1.0)
    groups = switch.group_counters()
    leaf = AgentReading("leaf1", "switchd", {"counters": switch.counters(1.0), "ecmp_groups": groups})
    nic = AgentReading("h1", "nicd", {"counters": {"reorder_distance": {"max": 7, "p99": 3}, "ooo_received": 12}})
    families = samples(metrics.exposition([LabReading("unit", TDF, (leaf, nic))]))
    at = {"lab": "unit", "node": "leaf1", "group": "eth2,eth3,eth4"}
    assert value(families, "rocelab_ecmp_group_info", **at, mode="packet") == 1
    assert [value(families, "rocelab_ecmp_member_frames_total", **at, member=m) for m in ("eth2", "eth3", "eth4")] \
        == [groups["eth2,eth3,eth4"]["members"][m]["frames"] for m in ("eth2", "eth3", "eth4")] and \
        sum(groups["eth2,eth3,eth4"]["members"][m]["frames"] for m in ("eth2", "eth3", "eth4")) == 30
    assert value(families, "rocelab_ecmp_reassignments_total", **at) == 0
    assert value(families, "rocelab_nic_reorder_distance_max", lab="unit", node="h1") == 7
    assert value(families, "rocelab_nic_reorder_distance_p99", lab="unit", node="h1") == 3
    assert value(families, "rocelab_nic_ooo_received_total", lab="unit", node="h1") == 12
