"""SONiC config_db.json QoS tables ⇄ QosProfile: what loads, what round-trips, what a user
is told when a file is wrong."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rocelab.errors import InputError
from rocelab.qos import (
    dump_config_db,
    load_config_db,
    port_qos,
    profile_from_config_db,
    render_config_db,
)
from rocelab.qos import derived
from rocelab.qos.model import BufferPool, BufferProfile, PfcWatchdog, PortQos, QosProfile, QueueQos, Scheduler
from rocelab.qos.sonic import switch_facts, voq_hosts
from rocelab.units import cable_delay_s

ROOT = Path(__file__).resolve().parents[2]
FULL = ROOT / "tests" / "data" / "sonic" / "config_db_full.json"
PROFILES = sorted((ROOT / "profiles").glob("*.json"))
SHIPPED_PORTS = [f"Ethernet{4 * i}" for i in range(32)]


def _load_profile(name: str) -> QosProfile:
    return load_config_db(ROOT / "profiles" / f"{name}.json")


# --- a whole config_db.json, old style


@pytest.fixture(scope="module")
def full() -> QosProfile:
    return load_config_db(FULL)


def test_full_config_db_loads_every_qos_port(full: QosProfile) -> None:
    assert list(full.ports) == [f"Ethernet{4 * i}" for i in range(8)]
    assert full.source == str(FULL)


def test_full_config_db_maps_azure_dscp_per_port(full: QosProfile) -> None:
    for port in full.ports.values():
        assert port.dscp_to_tc[3] == 3 and port.dscp_to_tc[4] == 4
        assert port.dscp_to_tc[8] == 0 and port.dscp_to_tc[46] == 5 and port.dscp_to_tc[48] == 6
        assert port.dscp_to_tc[26] == 1  # RoCE's DSCP 26 is lossy under AZURE maps
        assert port.tc_to_pg[:8] == (0, 0, 0, 3, 4, 0, 0, 7) and port.tc_to_pg[8:] == (0,) * 8
        assert port.pfc_enable == {3, 4}
        assert [pg for pg in range(8) if port.lossless_pg(pg)] == [3, 4]


def test_full_config_db_thresholds_follow_cable_length(full: QosProfile) -> None:
    server_pg = port_qos(full, "Ethernet0").pgs[3]
    uplink_pg = port_qos(full, "Ethernet28").pgs[4]
    assert (server_pg.xoff_bytes, server_pg.xon_bytes, server_pg.xon_offset_bytes) == (
        34816, 18432, 2496)
    assert (server_pg.dynamic_th, server_pg.size_bytes) == (-3, 1248)
    assert uplink_pg.name == "pg_lossless_100000_40m_profile"
    assert uplink_pg.xoff_bytes == 41600
    assert full.pools["ingress_lossless_pool"] == BufferPool(
        "ingress_lossless_pool", "ingress", "dynamic", 10485760)


def test_full_config_db_queues(full: QosProfile) -> None:
    queues = port_qos(full, "Ethernet12").queues
    assert set(queues) == set(range(7))
    roce = queues[3]
    assert roce.scheduler == Scheduler("scheduler.1", "DWRR", 15)
    assert (roce.wred.ecn, roce.wred.green_min_threshold_bytes,
            roce.wred.green_max_threshold_bytes, roce.wred.green_drop_probability_pct) == (
        "ecn_all", 1048576, 2097152, 5)
    assert roce.buffer.static_th_bytes == 14155776
    assert queues[0].scheduler.weight == 14 and queues[0].wred is None
    assert queues[5].buffer.name == "egress_lossy_profile"


def test_full_config_db_pfc_watchdog_per_port(full: QosProfile) -> None:
    server, uplink = port_qos(full, "Ethernet0"), port_qos(full, "Ethernet28")
    assert (server.pfc_wd.action, server.pfc_wd.detection_time_ms,
            server.pfc_wd.restoration_time_ms) == ("drop", 400, 400)
    assert (uplink.pfc_wd.action, uplink.pfc_wd.restoration_time_ms) == ("alert", 2000)
    # No pfcwd_sw_enable in this file: the watchdog guards the PFC priorities.
    assert uplink.pfcwd_priorities == {3, 4}
    assert "GLOBAL" not in full.ports


def test_ports_answer_to_rocelab_names(full: QosProfile) -> None:
    assert port_qos(full, "eth8") is full.ports["Ethernet28"]
    assert port_qos(full, "eth9") == PortQos(port="Ethernet32")  # not configured: lossy


def test_render_writes_only_qos_tables_with_plain_names(full: QosProfile) -> None:
    doc = render_config_db(full)
    assert set(doc) == {"BUFFER_POOL", "BUFFER_PROFILE", "DSCP_TO_TC_MAP", "TC_TO_QUEUE_MAP",
                        "TC_TO_PRIORITY_GROUP_MAP", "MAP_PFC_PRIORITY_TO_QUEUE", "PORT_QOS_MAP",
                        "BUFFER_PG", "BUFFER_QUEUE", "WRED_PROFILE", "SCHEDULER", "QUEUE",
                        "PFC_WD"}
    assert doc["PORT_QOS_MAP"]["Ethernet28"] == {
        "dscp_to_tc_map": "AZURE", "tc_to_queue_map": "AZURE", "tc_to_pg_map": "AZURE",
        "pfc_to_queue_map": "AZURE", "pfc_enable": "3,4"}
    assert doc["BUFFER_PG"]["Ethernet28|3-4"] == {"profile": "pg_lossless_100000_40m_profile"}
    assert doc["BUFFER_PROFILE"]["egress_lossy_profile"]["pool"] == "egress_lossy_pool"
    assert doc["QUEUE"]["Ethernet0|3-4"] == {"scheduler": "scheduler.1",
                                             "wred_profile": "AZURE_LOSSLESS"}


# --- shipped profiles


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profile_covers_32_ports(path: Path) -> None:
    profile = load_config_db(path)
    assert list(profile.ports) == SHIPPED_PORTS


@pytest.mark.parametrize("path", PROFILES, ids=lambda p: p.name)
def test_shipped_profile_is_written_as_render_writes_it(path: Path) -> None:
    assert dump_config_db(load_config_db(path)) == path.read_text()


def test_shipped_profiles_are_the_documented_three() -> None:
    assert [p.name for p in PROFILES] == ["azure-lossless.json", "lossy.json",
                                          "roce-lossless.json"]


def test_roce_lossless_classes() -> None:
    port = port_qos(_load_profile("roce-lossless"), "eth1")
    roce_tc, cnp_tc, other_tc = port.dscp_to_tc[26], port.dscp_to_tc[48], port.dscp_to_tc[0]
    assert (roce_tc, cnp_tc, other_tc) == (3, 6, 0)
    assert sum(tc != 0 for tc in port.dscp_to_tc) == 2
    assert port.pfc_enable == {3} and port.pfcwd_priorities == {3}
    assert port.lossless_pg(port.tc_to_pg[roce_tc])
    assert not port.lossless_pg(port.tc_to_pg[cnp_tc])
    assert not port.lossless_pg(port.tc_to_pg[other_tc])
    assert port.queues[port.tc_to_queue[cnp_tc]].scheduler.type == "STRICT"
    assert port.queues[port.tc_to_queue[other_tc]].scheduler.type == "DWRR"
    assert port.queues[port.tc_to_queue[roce_tc]].wred.ecn == "ecn_all"
    assert (port.pfc_wd.action, port.pfc_wd.detection_time_ms,
            port.pfc_wd.restoration_time_ms) == ("drop", 200, 200)


def test_roce_lossless_marks_ecn_well_before_pfc_pauses() -> None:
    """The numbers profiles/README.md explains, for a 4:1 incast into one 100G port."""
    profile = _load_profile("roce-lossless")
    port = port_qos(profile, "Ethernet0")
    pg = port.pgs[3]
    pool_bytes = profile.pools[pg.pool].size_bytes
    alpha = 2.0 ** pg.dynamic_th
    senders = 4
    # Each ingress PG holds 1/senders of the egress queue Q; XOFF when Q/senders > α(S − Q).
    queue_at_xoff = senders * alpha * pool_bytes / (1 + senders * alpha)
    per_pg_at_xoff = queue_at_xoff / senders
    wred = port.queues[3].wred
    assert 300_000 < per_pg_at_xoff < 400_000  # "a few hundred KB"
    assert wred.green_min_threshold_bytes * 10 < queue_at_xoff
    assert wred.green_max_threshold_bytes < alpha * pool_bytes < queue_at_xoff


def test_roce_lossless_headroom_covers_a_40m_cable() -> None:
    pg = port_qos(_load_profile("roce-lossless"), "Ethernet0").pgs[3]
    rate_bps = 100e9
    response_bytes = 394 * 512 / 8  # IEEE 802.3 peer response at 100G
    cable_bytes = 2 * cable_delay_s(40) * rate_bps / 8
    frames_bytes = 2 * (4174 + 20)  # a 4 KB RDMA WRITE FIRST on the wire, each side
    assert pg.xoff_bytes >= response_bytes + cable_bytes + frames_bytes + 84


def test_lossy_profile_has_no_pfc_and_no_ecn() -> None:
    profile = _load_profile("lossy")
    roce = _load_profile("roce-lossless")
    for name, port in profile.ports.items():
        assert port.pfc_enable == frozenset()
        assert not any(port.lossless_pg(pg) for pg in range(8))
        assert all(queue.wred is None for queue in port.queues.values())
        assert port.pfc_wd is None
        assert port.dscp_to_tc == roce.ports[name].dscp_to_tc


def test_azure_lossless_classes() -> None:
    port = port_qos(_load_profile("azure-lossless"), "eth32")
    assert port.port == "Ethernet124"
    assert (port.dscp_to_tc[3], port.dscp_to_tc[4]) == (3, 4)
    assert port.pfc_enable == {3, 4}
    assert [pg for pg in range(8) if port.lossless_pg(pg)] == [3, 4]
    assert port.dscp_to_tc[26] == 1  # a host marking RoCE's 26 is lossy here
    assert {q for q, queue in port.queues.items() if queue.wred} == {3, 4}


# --- round trip


@pytest.mark.parametrize("path", [FULL, *PROFILES], ids=lambda p: p.name)
def test_render_then_load_round_trips(path: Path) -> None:
    profile = load_config_db(path)
    assert profile_from_config_db(render_config_db(profile), profile.source) == profile


def test_hand_built_profile_round_trips_with_generated_map_names() -> None:
    lossless = BufferProfile("pg_lossless", "ingress", 0, dynamic_th=-2, xon_bytes=18432,
                             xoff_bytes=40960)
    roce = PortQos(port="Ethernet0", dscp_to_tc=tuple(3 if d == 26 else 0 for d in range(64)),
                   tc_to_pg=(0, 0, 0, 3, 0, 0, 0, 0), pfc_enable=frozenset({3}),
                   pgs={3: lossless},
                   queues={3: QueueQos(scheduler=Scheduler("strict", "STRICT"))})
    other = PortQos(port="Ethernet4", dscp_to_tc=tuple(1 for _ in range(64)))
    profile = QosProfile("hand.json", {"ingress": BufferPool("ingress", "ingress", "dynamic",
                                                             1 << 20)},
                         {"Ethernet0": roce, "Ethernet4": other})
    doc = render_config_db(profile)
    assert sorted(doc["DSCP_TO_TC_MAP"]) == ["ROCELAB_1", "ROCELAB_2"]
    assert "TC_TO_QUEUE_MAP" not in doc  # default identity maps need no table
    assert doc["SCHEDULER"] == {"strict": {"type": "STRICT"}}
    assert profile_from_config_db(doc, "hand.json") == profile


def test_render_refuses_two_different_objects_with_one_name() -> None:
    a = BufferProfile("same", "ingress", 0, dynamic_th=0)
    b = BufferProfile("same", "ingress", 0, dynamic_th=1)
    profile = QosProfile("hand.json", {}, {"Ethernet0": PortQos("Ethernet0", pgs={0: a}),
                                           "Ethernet4": PortQos("Ethernet4", pgs={0: b})})
    with pytest.raises(ValueError, match="two different BUFFER_PROFILE entries are both "
                                         "named 'same'"):
        render_config_db(profile)


# --- accepted syntax variants


def _minimal() -> dict:
    """A small valid config_db: one port, every QoS table, new-style references."""
    return {
        "BUFFER_POOL": {
            "ingress_lossless_pool": {"type": "ingress", "mode": "dynamic", "size": "1048576"},
            "egress_lossy_pool": {"type": "egress", "mode": "dynamic", "size": "1048576"},
        },
        "BUFFER_PROFILE": {
            "pg_lossless": {"pool": "ingress_lossless_pool", "size": "0", "dynamic_th": "-2",
                            "xon": "18432", "xoff": "38816", "xon_offset": "9216"},
            "egress_lossy": {"pool": "egress_lossy_pool", "size": "1518", "dynamic_th": "3"},
        },
        "DSCP_TO_TC_MAP": {"ROCE": {"26": "3", "48": "6"}},
        "TC_TO_QUEUE_MAP": {"ROCE": {"3": "3", "6": "6"}},
        "TC_TO_PRIORITY_GROUP_MAP": {"ROCE": {"3": "3"}},
        "MAP_PFC_PRIORITY_TO_QUEUE": {"ROCE": {"3": "3"}},
        "PORT_QOS_MAP": {"Ethernet0": {"dscp_to_tc_map": "ROCE", "tc_to_queue_map": "ROCE",
                                       "tc_to_pg_map": "ROCE", "pfc_to_queue_map": "ROCE",
                                       "pfc_enable": "3"}},
        "BUFFER_PG": {"Ethernet0|3": {"profile": "pg_lossless"}},
        "BUFFER_QUEUE": {"Ethernet0|0-2": {"profile": "egress_lossy"}},
        "WRED_PROFILE": {"ECN": {"wred_green_enable": "true", "ecn": "ecn_all",
                                 "green_min_threshold": "102400",
                                 "green_max_threshold": "307200",
                                 "green_drop_probability": "20"}},
        "SCHEDULER": {"scheduler.0": {"type": "DWRR", "weight": "50"}},
        "QUEUE": {"Ethernet0|3": {"scheduler": "scheduler.0", "wred_profile": "ECN"}},
        "PFC_WD": {"Ethernet0": {"action": "drop", "detection_time": "200",
                                 "restoration_time": "200"}},
    }


def test_minimal_config_loads() -> None:
    port = profile_from_config_db(_minimal(), "x.json").ports["Ethernet0"]
    assert port.dscp_to_tc[26] == 3 and port.dscp_to_tc[0] == 0
    assert port.tc_to_queue[:8] == (0, 1, 2, 3, 4, 5, 6, 7)  # unmapped TCs keep SAI's identity
    assert port.tc_to_queue[8:] == (0,) * 8  # SONiC's TCs 8–15, unmapped: queue 0
    assert port.pgs[3].xoff_bytes == 38816
    assert port.queues[3].wred.green_min_threshold_bytes == 102400
    assert port.queues[1].buffer.name == "egress_lossy"


def test_old_and_new_style_references_load_the_same() -> None:
    old = _minimal()
    old["PORT_QOS_MAP"]["Ethernet0"] = {
        "dscp_to_tc_map": "[DSCP_TO_TC_MAP|ROCE]", "tc_to_queue_map": "[TC_TO_QUEUE_MAP|ROCE]",
        "tc_to_pg_map": "[TC_TO_PRIORITY_GROUP_MAP|ROCE]",
        "pfc_to_queue_map": "[MAP_PFC_PRIORITY_TO_QUEUE|ROCE]", "pfc_enable": "3"}
    old["BUFFER_PROFILE"]["pg_lossless"]["pool"] = "[BUFFER_POOL|ingress_lossless_pool]"
    old["BUFFER_PG"]["Ethernet0|3"]["profile"] = "[BUFFER_PROFILE|pg_lossless]"
    old["QUEUE"]["Ethernet0|3"] = {"scheduler": "[SCHEDULER|scheduler.0]",
                                   "wred_profile": "[WRED_PROFILE|ECN]"}
    assert profile_from_config_db(old, "x.json") == profile_from_config_db(_minimal(), "x.json")


def test_comma_joined_port_keys_equal_per_port_keys() -> None:
    joined, split = _minimal(), _minimal()
    joined["BUFFER_PG"] = {"Ethernet0,Ethernet4|3-4": {"profile": "pg_lossless"}}
    split["BUFFER_PG"] = {f"{port}|{pg}": {"profile": "pg_lossless"}
                          for port in ("Ethernet0", "Ethernet4") for pg in (3, 4)}
    loaded = profile_from_config_db(joined, "x.json")
    assert loaded == profile_from_config_db(split, "x.json")
    assert set(port_qos(loaded, "eth2").pgs) == {3, 4}


def test_global_dscp_map_applies_where_a_port_names_none() -> None:
    doc = _minimal()
    doc["DSCP_TO_TC_MAP"]["AZURE"] = {"3": "3", "4": "4"}
    doc["PORT_QOS_MAP"]["global"] = {"dscp_to_tc_map": "AZURE"}
    doc["PORT_QOS_MAP"]["Ethernet4"] = {"pfc_enable": "3,4"}
    profile = profile_from_config_db(doc, "x.json")
    assert port_qos(profile, "Ethernet4").dscp_to_tc[4] == 4
    assert port_qos(profile, "Ethernet0").dscp_to_tc[4] == 0  # its own ROCE map wins
    assert render_config_db(profile)["PORT_QOS_MAP"]["Ethernet4"]["dscp_to_tc_map"] == "AZURE"


def test_sonic_defaults_fill_optional_fields() -> None:
    doc = _minimal()
    doc["SCHEDULER"]["scheduler.0"] = {}
    doc["WRED_PROFILE"]["ECN"] = {"green_min_threshold": "1000", "green_max_threshold": "2000"}
    queue = profile_from_config_db(doc, "x.json").ports["Ethernet0"].queues[3]
    assert queue.scheduler == Scheduler("scheduler.0", "WRR", 1)
    assert (queue.wred.ecn, queue.wred.wred_green_enable,
            queue.wred.green_drop_probability_pct) == ("ecn_none", False, 100)


def test_pfc_wd_global_and_unemulated_fields_are_accepted() -> None:
    doc = _minimal()
    doc["PFC_WD"]["GLOBAL"] = {"POLL_INTERVAL": "200", "BIG_RED_SWITCH": "disable"}
    doc["WRED_PROFILE"]["ECN"]["yellow_min_threshold"] = "1"
    doc["SCHEDULER"]["scheduler.0"]["meter_type"] = "bytes"
    doc["PORT_QOS_MAP"]["Ethernet0"]["tc_to_dscp_map"] = "ANY"
    doc["DEVICE_METADATA"] = {"localhost": {"hostname": "leaf1"}}
    profile = profile_from_config_db(doc, "x.json")
    assert profile == profile_from_config_db(_minimal(), "x.json")


def test_empty_pfc_enable_means_no_lossless_priority() -> None:
    doc = _minimal()
    doc["PORT_QOS_MAP"]["Ethernet0"]["pfc_enable"] = ""
    assert profile_from_config_db(doc, "x.json").ports["Ethernet0"].pfc_enable == frozenset()


# --- errors: each names table, key, field, the bad value and what was expected

DELETE = object()
MALFORMED = [
    # (case id, table, key, field, new value, the one line the user reads)
    ("byte-count-text", "BUFFER_PROFILE", "pg_lossless", "xoff", "abc",
     "BUFFER_PROFILE.pg_lossless.xoff: 'abc' is not a byte count (expected a non-negative "
     'integer string like "38816")'),
    ("byte-count-negative", "BUFFER_PROFILE", "pg_lossless", "xon", "-1",
     "BUFFER_PROFILE.pg_lossless.xon: '-1' is not a byte count (expected a non-negative "
     'integer string like "38816")'),
    ("byte-count-number", "BUFFER_PROFILE", "pg_lossless", "size", 1024,
     "BUFFER_PROFILE.pg_lossless.size: 1024 is not a byte count (expected a non-negative "
     'integer string like "38816") (hint: config_db holds every value as a string, like '
     '"1024")'),
    ("dynamic-th-range", "BUFFER_PROFILE", "pg_lossless", "dynamic_th", "9",
     "BUFFER_PROFILE.pg_lossless.dynamic_th: '9' is not a dynamic_th exponent (expected an "
     'integer string from "-8" to "7" like "-5")'),
    ("pool-type", "BUFFER_POOL", "egress_lossy_pool", "type", "shared",
     "BUFFER_POOL.egress_lossy_pool.type: 'shared' is not a pool type (expected one of "
     '"ingress", "egress", "both")'),
    ("pool-mode", "BUFFER_POOL", "egress_lossy_pool", "mode", "shared",
     "BUFFER_POOL.egress_lossy_pool.mode: 'shared' is not a pool mode (expected one of "
     '"static", "dynamic")'),
    ("threshold-both", "BUFFER_PROFILE", "pg_lossless", "static_th", "1000",
     "BUFFER_PROFILE.pg_lossless: sets dynamic_th and static_th (expected exactly one: "
     "dynamic_th for a dynamic pool, static_th for a static pool)"),
    ("threshold-neither", "BUFFER_PROFILE", "egress_lossy", "dynamic_th", DELETE,
     "BUFFER_PROFILE.egress_lossy: sets neither dynamic_th nor static_th (expected exactly "
     "one: dynamic_th for a dynamic pool, static_th for a static pool)"),
    ("unknown-field", "BUFFER_PROFILE", "pg_lossless", "xof", "38816",
     "BUFFER_PROFILE.pg_lossless.xof: unknown field (expected one of: pool, size, dynamic_th, "
     'static_th, xon, xoff, xon_offset) (hint: did you mean "xoff"?)'),
    ("pfc-enable", "PORT_QOS_MAP", "Ethernet0", "pfc_enable", "3;4",
     "PORT_QOS_MAP.Ethernet0.pfc_enable: '3;4' is not a priority list (expected priorities "
     '0-7 separated by commas like "3,4", or "" for none)'),
    ("pfc-enable-misspelt", "PORT_QOS_MAP", "Ethernet0", "pfc_enabled", "3",
     "PORT_QOS_MAP.Ethernet0.pfc_enabled: unknown field (expected one of: dscp_to_tc_map, "
     "tc_to_queue_map, tc_to_pg_map, pfc_to_queue_map, pfc_enable, pfcwd_sw_enable) "
     '(hint: did you mean "pfc_enable"?)'),
    ("map-value", "DSCP_TO_TC_MAP", "ROCE", "26", "16",
     "DSCP_TO_TC_MAP.ROCE.26: '16' is not a traffic class (expected an integer string from "
     '"0" to "15" like "3")'),
    ("map-key", "DSCP_TO_TC_MAP", "ROCE", "64", "0",
     "DSCP_TO_TC_MAP.ROCE: '64' is not a DSCP value (expected an integer string from \"0\" "
     'to "63" like "26")'),
    ("wred-ecn", "WRED_PROFILE", "ECN", "ecn", "ecn_on",
     "WRED_PROFILE.ECN.ecn: 'ecn_on' is not an ECN mode (expected one of \"ecn_none\", "
     '"ecn_green", "ecn_yellow", "ecn_red", "ecn_green_yellow", "ecn_green_red", '
     '"ecn_yellow_red", "ecn_all")'),
    ("wred-bool", "WRED_PROFILE", "ECN", "wred_green_enable", "yes",
     "WRED_PROFILE.ECN.wred_green_enable: 'yes' is not a boolean (expected \"true\" or "
     '"false")'),
    ("wred-probability", "WRED_PROFILE", "ECN", "green_drop_probability", "120",
     "WRED_PROFILE.ECN.green_drop_probability: '120' is not a percentage (expected an integer "
     'string from "0" to "100" like "20")'),
    ("wred-min-above-max", "WRED_PROFILE", "ECN", "green_max_threshold", "1000",
     "WRED_PROFILE.ECN.green_max_threshold: '1000' is below green_min_threshold '102400' "
     "(expected a byte count no smaller than green_min_threshold)"),
    ("scheduler-type", "SCHEDULER", "scheduler.0", "type", "strict",
     "SCHEDULER.\"scheduler.0\".type: 'strict' is not a scheduler type (expected one of "
     '"STRICT", "DWRR", "WRR")'),
    ("scheduler-weight", "SCHEDULER", "scheduler.0", "weight", "0",
     "SCHEDULER.\"scheduler.0\".weight: '0' is not a scheduler weight (expected an integer "
     'string from "1" to "100" like "60")'),
    ("pfcwd-detection", "PFC_WD", "Ethernet0", "detection_time", "50",
     "PFC_WD.Ethernet0.detection_time: '50' is not a detection time in ms (expected an "
     'integer string from "100" to "5000" like "200")'),
    ("pfcwd-action", "PFC_WD", "Ethernet0", "action", "shutdown",
     "PFC_WD.Ethernet0.action: 'shutdown' is not a PFC watchdog action (expected one of "
     '"drop", "forward", "alert")'),
    ("pfcwd-restoration-missing", "PFC_WD", "Ethernet0", "restoration_time", DELETE,
     "PFC_WD.Ethernet0.restoration_time: missing (expected an integer string from \"100\" to "
     '"60000" like "200")'),
    ("pfcwd-poll-interval", "PFC_WD", "GLOBAL", "POLL_INTERVAL", "fast",
     "PFC_WD.GLOBAL.POLL_INTERVAL: 'fast' is not a poll interval in ms (expected an integer "
     'string from "100" to "1000" like "200")'),
    # references to what the file does not define
    ("missing-pool", "BUFFER_PROFILE", "pg_lossless", "pool", "ingress_pool",
     "BUFFER_PROFILE.pg_lossless.pool: 'ingress_pool' names no BUFFER_POOL entry (expected "
     "one of: ingress_lossless_pool, egress_lossy_pool) (hint: did you mean "
     '"ingress_lossless_pool"?)'),
    ("missing-profile", "BUFFER_PG", "Ethernet0|3", "profile", "[BUFFER_PROFILE|lossless]",
     "BUFFER_PG.\"Ethernet0|3\".profile: '[BUFFER_PROFILE|lossless]' names no BUFFER_PROFILE "
     "entry (expected one of: pg_lossless, egress_lossy) (hint: did you mean \"pg_lossless\"?)"),
    ("missing-map", "PORT_QOS_MAP", "Ethernet0", "dscp_to_tc_map", "AZURE",
     "PORT_QOS_MAP.Ethernet0.dscp_to_tc_map: 'AZURE' names no DSCP_TO_TC_MAP entry (expected "
     "one of: ROCE)"),
    ("map-of-wrong-table", "PORT_QOS_MAP", "Ethernet0", "tc_to_pg_map", "[TC_TO_QUEUE_MAP|ROCE]",
     "PORT_QOS_MAP.Ethernet0.tc_to_pg_map: '[TC_TO_QUEUE_MAP|ROCE]' refers to table "
     'TC_TO_QUEUE_MAP (expected "[TC_TO_PRIORITY_GROUP_MAP|name]" or a plain name)'),
    ("missing-scheduler", "QUEUE", "Ethernet0|3", "scheduler", "scheduler.1",
     "QUEUE.\"Ethernet0|3\".scheduler: 'scheduler.1' names no SCHEDULER entry (expected one "
     'of: scheduler.0) (hint: did you mean "scheduler.0"?)'),
    ("missing-wred", "QUEUE", "Ethernet0|3", "wred_profile", "AZURE_LOSSLESS",
     "QUEUE.\"Ethernet0|3\".wred_profile: 'AZURE_LOSSLESS' names no WRED_PROFILE entry "
     "(expected one of: ECN)"),
    # references that resolve to the wrong kind of object
    ("pg-on-egress-profile", "BUFFER_PG", "Ethernet0|3", "profile", "egress_lossy",
     "BUFFER_PG.\"Ethernet0|3\".profile: 'egress_lossy' draws from egress pool "
     "'egress_lossy_pool' (expected a profile of an ingress pool)"),
]


def _patched(table: str, key: str, field: str, value: object) -> dict:
    doc = _minimal()
    entry = doc.setdefault(table, {}).setdefault(key, {})
    if value is DELETE:
        del entry[field]
    else:
        entry[field] = value
    return doc


def _problems(doc: object) -> list[str]:
    with pytest.raises(InputError) as raised:
        profile_from_config_db(doc, "profiles/x.json")
    return str(raised.value).splitlines()


@pytest.mark.parametrize("table,key,field,value,expected", [case[1:] for case in MALFORMED],
                         ids=[case[0] for case in MALFORMED])
def test_malformed_value_is_reported_at_its_path(table: str, key: str, field: str,
                                                 value: object, expected: str) -> None:
    assert _problems(_patched(table, key, field, value)) == [f"profiles/x.json: {expected}"]


def test_a_profile_may_set_its_own_threshold_mode_as_sai_allows() -> None:
    doc = _minimal()
    doc["BUFFER_PROFILE"]["egress_lossy"] = {"pool": "egress_lossy_pool", "size": "0",
                                             "static_th": "65536"}
    profile = profile_from_config_db(doc, "x.json").ports["Ethernet0"].queues[1].buffer
    assert (profile.static_th_bytes, profile.dynamic_th) == (65536, None)


def test_queue_buffer_must_come_from_an_egress_pool() -> None:
    doc = _minimal()
    doc["BUFFER_QUEUE"]["Ethernet0|3"] = {"profile": "pg_lossless"}
    assert _problems(doc) == [
        "profiles/x.json: BUFFER_QUEUE.\"Ethernet0|3\".profile: 'pg_lossless' draws from "
        "ingress pool 'ingress_lossless_pool' (expected a profile of an egress pool)"]


_NOT_A_PORT = "is not a SONiC port name (expected Ethernet<N>, like Ethernet0)"
PORT_FORMS = [
    # (key, the problem's path inside BUFFER_PG and message)
    ("eth1|3", f'"eth1|3": \'eth1\' {_NOT_A_PORT} (hint: config_db names rocelab\'s eth1 '
               "Ethernet0)"),
    ("PortChannel0001|3", f'"PortChannel0001|3": \'PortChannel0001\' {_NOT_A_PORT}'),
    ("Ethernet8,eth6|3", f'"Ethernet8,eth6|3": \'eth6\' {_NOT_A_PORT} (hint: config_db names rocelab\'s eth6 '
                         "Ethernet20)"),
    ("Ethernet4", 'Ethernet4: \'Ethernet4\' is not a "<port>|<index>" key (expected e.g. '
                  '"Ethernet0|3" or "Ethernet0|3-4")'),
    ("Ethernet4|8", '"Ethernet4|8": \'8\' is not a priority group index or range (expected '
                    'an index from 0 to 7 or a range like "3-4")'),
    ("Ethernet4|4-3", '"Ethernet4|4-3": \'4-3\' is not a priority group index or range '
                      '(expected an index from 0 to 7 or a range like "3-4")'),
]


@pytest.mark.parametrize("key,expected", PORT_FORMS, ids=[k for k, _ in PORT_FORMS])
def test_port_key_forms(key: str, expected: str) -> None:
    doc = _minimal()
    doc["BUFFER_PG"][key] = {"profile": "pg_lossless"}
    assert _problems(doc) == [f"profiles/x.json: BUFFER_PG.{expected}"]


def test_port_qos_map_with_a_rocelab_port_name() -> None:
    doc = _minimal()
    doc["PORT_QOS_MAP"]["eth2"] = {"pfc_enable": "3"}
    assert _problems(doc) == [
        f"profiles/x.json: PORT_QOS_MAP.eth2: 'eth2' {_NOT_A_PORT} (hint: config_db names "
        "rocelab's eth2 Ethernet4)"]


def test_a_port_set_twice_is_reported_with_both_keys() -> None:
    doc = _minimal()
    doc["BUFFER_PG"]["Ethernet0,Ethernet4|2-3"] = {"profile": "pg_lossless"}
    assert _problems(doc) == [
        "profiles/x.json: BUFFER_PG.\"Ethernet0,Ethernet4|2-3\": sets index 3 of Ethernet0 a "
        "second time (expected once; it is also set by BUFFER_PG.\"Ethernet0|3\")"]


def test_every_problem_is_reported_at_once() -> None:
    doc = _minimal()
    doc["BUFFER_POOL"]["egress_lossy_pool"]["size"] = "8MB"
    doc["WRED_PROFILE"]["ECN"]["ecn"] = "on"
    doc["QUEUE"]["Ethernet0|3"]["scheduler"] = "nope"
    problems = _problems(doc)
    assert [line.split(":")[1].strip() for line in problems] == [
        "BUFFER_POOL.egress_lossy_pool.size", "WRED_PROFILE.ECN.ecn",
        'QUEUE."Ethernet0|3".scheduler']


@pytest.mark.parametrize("doc,expected", [
    ([], "profiles/x.json: the document is an array (expected a config_db object of tables "
         'like {"BUFFER_POOL": {…}})'),
    ({"BUFFER_PG": ["Ethernet0|3"]},
     "profiles/x.json: BUFFER_PG: is an array (expected an object of named entries)"),
    ({"SCHEDULER": {"scheduler.0": "DWRR"}},
     'profiles/x.json: SCHEDULER."scheduler.0": is a string (expected an object of fields)'),
], ids=["document", "table", "entry"])
def test_wrong_json_shapes(doc: object, expected: str) -> None:
    assert _problems(doc) == [expected]


def test_a_file_with_no_qos_table_says_what_is_missing() -> None:
    doc = json.loads(FULL.read_text())
    others = {table: entries for table, entries in doc.items() if table in (
        "DEVICE_METADATA", "PORT", "INTERFACE", "BGP_NEIGHBOR", "FEATURE", "CRM")}
    (problem,) = _problems(others)
    assert "holds no QoS table (expected at least one of BUFFER_POOL" in problem
    assert "tables present: BGP_NEIGHBOR, CRM, DEVICE_METADATA" in problem


# --- files


def test_json_syntax_error_names_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "config_db.json"
    path.write_text('{\n  "BUFFER_POOL": {\n    "p": {"type": "ingress",}\n  }\n}\n')
    with pytest.raises(InputError) as raised:
        load_config_db(path)
    assert str(raised.value) == (f"{path}: line 3 column 29: invalid JSON: Expecting property "
                                 "name enclosed in double quotes")


def test_missing_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(InputError) as raised:
        load_config_db(path)
    assert str(raised.value) == f"{path}: cannot read the file: No such file or directory"


def test_binary_file_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "config_db.json"
    path.write_bytes(b"\xff\xfe{}")
    with pytest.raises(InputError) as raised:
        load_config_db(path)
    assert str(raised.value).startswith(f"{path}: is not UTF-8 text:")


def test_problems_name_the_file_given(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps(_patched("BUFFER_PROFILE", "pg_lossless", "xoff", "abc")))
    with pytest.raises(InputError) as raised:
        load_config_db(path)
    assert [(p.file, p.path) for p in raised.value.problems] == [
        (str(path), "BUFFER_PROFILE.pg_lossless.xoff")]


# --- what the switch derives at run time (rocelab.qos.derived)

# A template rendering's shape: PORT and CABLE_LENGTH, a lossy PG 0 per port, PFC on 3 and 4,
# and no lossless BUFFER_PG: buffermgrd writes those from pg_profile_lookup.ini.
TEMPLATE = {
    "DEVICE_METADATA": {"localhost": {"hostname": "t0", "default_pfcwd_status": "enable"}},
    "PORT": {"Ethernet0": {"speed": "100000", "admin_status": "up", "mtu": "9100"},
             "Ethernet4": {"speed": "40000", "admin_status": "up"},
             "Ethernet8": {"speed": "100000"}},
    "CABLE_LENGTH": {"AZURE": {"Ethernet0": "40m", "Ethernet4": "5m", "Ethernet8": "0m"}},
    "BUFFER_POOL": {"ingress_lossless_pool": {"type": "ingress", "mode": "dynamic", "size": "12000000"}},
    "BUFFER_PROFILE": {"ingress_lossy_profile": {"pool": "ingress_lossless_pool", "size": "0", "dynamic_th": "3"}},
    "BUFFER_PG": {"Ethernet0|0": {"profile": "ingress_lossy_profile"}},
    "PORT_QOS_MAP": {"Ethernet0": {"pfc_enable": "3,4"}, "Ethernet4": {"pfc_enable": "3,4,6"},
                     "Ethernet8": {"pfc_enable": "3"}},
}
LOOKUP = """\
# speed cable size xon xoff threshold xon_offset
100000  40m   0    18432 45056 -3 2496
40000   5m    1024 18432 30720 -4
"""


def _derived(doc: dict, lookup: str = LOOKUP) -> "derived.DerivedPgs":
    profile = profile_from_config_db(doc, "t0.json")
    rows = derived.parse_pg_profile_lookup(lookup, "lookup.ini")
    return derived.derive_lossless_pgs(profile, switch_facts(doc, "t0.json"), rows, "lookup.ini", "t0.json")


def test_buffermgrd_gives_each_pfc_enable_priority_the_profile_of_its_speed_and_cable() -> None:
    result = _derived(TEMPLATE)
    ports = result.profile.ports
    pg = ports["Ethernet0"].pgs[3]
    assert ports["Ethernet0"].pgs[4] is pg and ports["Ethernet0"].pgs[0].name == "ingress_lossy_profile"
    assert (pg.name, pg.pool, pg.size_bytes, pg.xon_bytes, pg.xoff_bytes, pg.xon_offset_bytes, pg.dynamic_th) == (
        "pg_lossless_100000_40m_profile", "ingress_lossless_pool", 0, 18432, 45056, 2496, -3)
    # The PG numbers are pfc_enable's, 6 included; a row without xon_offset leaves it unset.
    other = ports["Ethernet4"].pgs
    assert set(other) == {3, 4, 6} and other[6].name == "pg_lossless_40000_5m_profile"
    assert (other[6].size_bytes, other[6].xon_offset_bytes, other[6].dynamic_th) == (1024, None, -4)
    # CABLE_LENGTH "0m": buffermgrd leaves the port alone.
    assert not ports["Ethernet8"].lossless_pg(3)
    assert result.origins["pg_lossless_40000_5m_profile"] == "lookup.ini: line 3 (speed 40000, cable 5m)"
    assert any('"0m"' in note for note in result.profile.notes)


def test_a_static_lossless_pool_takes_the_threshold_as_static_th() -> None:
    doc = json.loads(json.dumps(TEMPLATE))
    doc["BUFFER_POOL"]["ingress_lossless_pool"]["mode"] = "static"
    doc["BUFFER_PROFILE"]["ingress_lossy_profile"] = {"pool": "ingress_lossless_pool", "size": "0", "static_th": "9000"}
    pg = _derived(doc, LOOKUP.replace(" -3 ", " 600000 ").replace(" -4", " 500000")).profile.ports["Ethernet0"].pgs[3]
    assert (pg.static_th_bytes, pg.dynamic_th) == (600000, None)


def test_a_profile_of_that_name_in_the_file_is_reused_as_buffermgrd_does() -> None:
    doc = json.loads(json.dumps(TEMPLATE))
    doc["BUFFER_PROFILE"]["pg_lossless_100000_40m_profile"] = {
        "pool": "ingress_lossless_pool", "size": "0", "xoff": "50000", "dynamic_th": "-2"}
    result = _derived(doc)
    assert result.profile.ports["Ethernet0"].pgs[3].xoff_bytes == 50000
    assert "which buffermgrd reuses" in result.origins["pg_lossless_100000_40m_profile"]


def test_a_speed_and_cable_without_a_row_is_an_error_naming_both() -> None:
    with pytest.raises(InputError) as info:
        _derived(TEMPLATE, LOOKUP.replace("40m", "300m"))
    (problem,) = info.value.problems
    assert problem.file == "lookup.ini"
    assert "has no row for speed 100000 and cable 40m, which Ethernet0 has" in problem.message
    assert "t0.json: PORT.Ethernet0.speed, CABLE_LENGTH.AZURE.Ethernet0" in problem.message
    assert problem.hint == "cables for speed 100000: 300m"


def test_without_the_lossless_pool_buffermgrd_has_nowhere_to_put_pgs() -> None:
    doc = json.loads(json.dumps(TEMPLATE))
    doc["BUFFER_POOL"] = {"ingress_pool": doc["BUFFER_POOL"]["ingress_lossless_pool"]}
    doc["BUFFER_PROFILE"]["ingress_lossy_profile"]["pool"] = "ingress_pool"
    with pytest.raises(InputError, match="t0.json: BUFFER_POOL: has no ingress_lossless_pool"):
        _derived(doc)


@pytest.mark.parametrize("text,where,message", [
    ("100000 40m 0 18432 45056\n", "line 1", "has 5 columns (expected 6 or 7"),
    ("# c\n100000 40 0 18432 45056 -3\n", "line 2 column 8", "cable '40' is not a cable length like \"40m\""),
    ("100000 40m 0 18432 4k -3 2496\n", "line 1 column 20", "xoff '4k' is not a byte count"),
    ("100000 40m 0 18432 45056 -3 -1\n", "line 1 column 29", "xon_offset '-1' is not a byte count"),
])
def test_a_malformed_lookup_row_is_named_by_line_and_column(text: str, where: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        derived.parse_pg_profile_lookup(text, "lookup.ini")
    (problem,) = info.value.problems
    assert (problem.file, problem.path) == ("lookup.ini", where)
    assert message in problem.message


def test_a_later_row_replaces_an_earlier_one_as_in_buffermgrd() -> None:
    rows = derived.parse_pg_profile_lookup("100000 40m 0 1 2 -3\n\n100000 40m 0 1 3 -3\n", "x")
    assert rows[("100000", "40m")].xoff_bytes == 3 and rows[("100000", "40m")].line == 3


def test_switch_facts_reads_port_cable_and_metadata() -> None:
    facts = switch_facts(dict(TEMPLATE, DEVICE_NEIGHBOR={"Ethernet0": {"name": "server1"}}), "t0.json")
    assert facts.ports["Ethernet0"] == derived.PortFacts(
        "100000", 9100, True, False, "40m", "CABLE_LENGTH.AZURE.Ethernet0")
    assert (facts.cable_m("Ethernet4"), facts.cable_m("Ethernet12")) == (5, None)
    assert (facts.port_entries, facts.default_pfcwd_status, facts.neighbours) == (3, "enable", {"Ethernet0"})
    with pytest.raises(InputError) as info:
        switch_facts({"CABLE_LENGTH": {"AZURE": {"Ethernet0": "40"}}, "PORT": {"Ethernet0": {"speed": "100G"}},
                      "DEVICE_METADATA": {"localhost": {"default_pfcwd_status": "on"}}}, "bad.json")
    assert {p.path for p in info.value.problems} == {
        "CABLE_LENGTH.AZURE.Ethernet0", "PORT.Ethernet0.speed", "DEVICE_METADATA.localhost.default_pfcwd_status"}


def test_pfcwd_start_default_guards_neighbour_ports_with_pfc_enable() -> None:
    doc = dict(TEMPLATE, PORT={**TEMPLATE["PORT"], "Ethernet12": {"role": "Int", "admin_status": "up"}},
               PORT_QOS_MAP={**TEMPLATE["PORT_QOS_MAP"], "Ethernet12": {"pfc_enable": "3"},
                             "Ethernet16": {"dscp_to_tc_map": "AZURE"}},
               DSCP_TO_TC_MAP={"AZURE": {"26": "3"}})
    facts = switch_facts(doc, "t0.json")
    profile = derived.derive_default_pfcwd(profile_from_config_db(doc, "t0.json"), facts,
                                           frozenset({"Ethernet0", "Ethernet8", "Ethernet16"}))
    # Neighbours and internal admin-up ports, where PORT_QOS_MAP sets pfc_enable.
    guarded = {name for name, port in profile.ports.items() if port.pfc_wd}
    assert guarded == {"Ethernet0", "Ethernet8", "Ethernet12"}
    assert profile.ports["Ethernet0"].pfc_wd == PfcWatchdog("drop", 200, 200)
    # Times grow with the PORT table: ⌈33 / 32⌉ = 2.
    assert derived.default_pfcwd(33) == PfcWatchdog("drop", 400, 400)
    assert derived.default_pfcwd(32) == PfcWatchdog("drop", 200, 200)


def test_voq_host_picks_another_line_card_as_the_devices_own() -> None:
    doc = {"DEVICE_METADATA": {"localhost": {"hostname": "lc1", "asic_name": "asic0"}},
           "SCHEDULER": {"s1": {"type": "DWRR", "weight": "50"}, "s2": {"type": "STRICT"}},
           "QUEUE": {"lc1|asic0|Ethernet0|3": {"scheduler": "s1"}, "lc2|asic0|Ethernet0|3": {"scheduler": "s2"}}}
    assert voq_hosts(doc) == ["lc1|asic0", "lc2|asic0"]
    assert profile_from_config_db(doc, "voq").ports["Ethernet0"].queues[3].scheduler.name == "s1"
    assert profile_from_config_db(doc, "voq", "lc2|asic0").ports["Ethernet0"].queues[3].scheduler.name == "s2"


def test_a_port_map_renders_as_port_aliases_and_loads_back() -> None:
    # What fabric.yml's `ports:` gives a device reaches switchd through the rendered file.
    profile = profile_from_config_db({"PORT_QOS_MAP": {"Ethernet1": {"pfc_enable": "3"}, "Ethernet2": {"pfc_enable": "4"}}},
                                     "split")
    mapped = replace(profile, lab_ports={"eth1": "Ethernet2", "eth2": "Ethernet1"})
    doc = render_config_db(mapped)
    assert doc["PORT"] == {"Ethernet2": {"alias": "eth1"}, "Ethernet1": {"alias": "eth2"}}
    again = profile_from_config_db(doc, "split")
    assert again == mapped and port_qos(again, "eth1").pfc_enable == {4}
    # A real file's aliases ("Ethernet1/1") are names, not rocelab interfaces: PORT's order rules.
    real = profile_from_config_db({"PORT": {"Ethernet2": {"alias": "Ethernet1/2", "index": "2"},
                                            "Ethernet1": {"alias": "Ethernet1/1", "index": "1"}},
                                   "PORT_QOS_MAP": {"Ethernet1": {"pfc_enable": "3"}}}, "real")
    assert real.lab_ports == {"eth1": "Ethernet1", "eth2": "Ethernet2"}


def test_a_port_without_a_speed_is_an_error_at_its_port_entry() -> None:
    # A template rendering's qos and buffers parts hold no PORT table: buffermgrd has no speed.
    doc = {name: table for name, table in TEMPLATE.items() if name != "PORT"}
    with pytest.raises(InputError) as info:
        _derived(doc)
    assert [(p.file, p.path) for p in info.value.problems] == [
        ("t0.json", "PORT.Ethernet0.speed"), ("t0.json", "PORT.Ethernet4.speed")]
    assert "buffermgrd looks the port's speed and cable up in lookup.ini" in info.value.problems[0].message


def test_a_rows_threshold_must_be_a_dynamic_th_when_the_pool_is_dynamic() -> None:
    with pytest.raises(InputError) as info:
        _derived(TEMPLATE, LOOKUP.replace(" -3 ", " 600000 "))
    (problem,) = info.value.problems
    assert (problem.file, problem.path) == ("lookup.ini", "line 2")
    assert "threshold 600000 is not a dynamic_th (expected -8 to 7" in problem.message
