"""The plan runner over NIC cores on the in-memory fabric: whole jobs, no root, no sockets."""

from __future__ import annotations

import random

import pytest

from rocelab.roce import Nic, NicConfig, dilate
from rocelab.roce.sim import FabricSim
from rocelab.roce.wire import Opcode, parse_frame
from rocelab.traffic.host import JobHost
from rocelab.traffic.patterns import builtin_patterns
from rocelab.traffic.runner import DONE, FAILED, PeerQps, PlanRunner, largest_message, message_count, qp_messages
from rocelab.traffic.sim import run_in_sim

PATTERNS = builtin_patterns()
HOSTS4 = ["h1", "h2", "h3", "h4"]
RATE_BPS = 100e6  # 100G at TDF 1000


def finished(runners) -> bool:
    return all(r.state == DONE for r in runners.values())


def test_ring_allreduce_moves_exact_bytes_and_reaches_line_rate():
    size = 4_000_000
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4, size)
    report, runners, _ = run_in_sim(plan, iterations=2, rate_bps=RATE_BPS)
    assert finished(runners)
    for h, rank in report["ranks"].items():
        assert rank["bytes_sent"] == rank["bytes_received"] == 2 * 2 * (4 - 1) * size // 4
        assert rank["steps_per_iteration"] == 6
    total = report["total"]
    assert total["iterations_completed"] == 2
    assert total["busbw_vs_line_rate"] >= 0.95  # headers and gaps cost ~2.5% at 4 KB MTU
    assert total["busbw_bps"]["production"] == pytest.approx(total["busbw_bps"]["emulated"] * 1000)
    assert total["time_s"]["production"] == pytest.approx(total["time_s"]["emulated"] / 1000)
    assert total["counters"]["retransmitted_bytes"] == 0


def test_a_rank_starts_step_s_plus_1_only_when_its_send_and_receive_of_step_s_are_done():
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4, 400_000)
    _, runners, _ = run_in_sim(plan, iterations=1, rate_bps=RATE_BPS)
    for h, runner in runners.items():
        result = runner.result()
        steps = sorted(result["steps"])
        sent = {(i, s): done for i, s, _, _, _, done in result["sends"]}
        arrived = {(i, s): at for i, s, _, _, at in result["recvs"]}
        for (i, s, start, end), following in zip(steps, steps[1:] + [None]):
            assert end >= sent[(i, s)] and end >= arrived[(i, s)]
            assert end == max(sent[(i, s)], arrived[(i, s)])  # and no later
            if following:
                assert following[2] == end


@pytest.mark.parametrize("name,n", [("halving-doubling", 4), ("alltoall", 4), ("incast", 4), ("elephant", 2)])
def test_every_pattern_completes_with_the_plans_byte_counts(name, n):
    plan = PATTERNS.get(name).plan(HOSTS4[:n], 2_000_000)
    report, runners, _ = run_in_sim(plan, iterations=2, rate_bps=RATE_BPS)
    assert finished(runners), [r.error for r in runners.values()]
    for rank in report["ranks"].values():
        assert rank["bytes_sent"] == rank["plan_bytes_sent"]
        assert rank["bytes_received"] == rank["plan_bytes_received"]
    assert report["total"]["fct_s"]["p50"]["emulated"] > 0


def test_qps_spread_a_transfer_over_distinct_udp_source_ports():
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 4_000_000)
    _, runners, _ = run_in_sim(plan, qps=4, message_bytes=256 * 1024, rate_bps=RATE_BPS)
    assert finished(runners)
    nic = runners["h1"]._t  # the runner's transport: h1's NIC core
    qps = nic.counters()["qps"]
    per_qp = [q["tx_bytes"] for q in qps.values()]
    assert len(per_qp) == 4 and min(per_qp) > 0.2 * sum(per_qp)
    assert len({nic.qp(int(qpn))._tx.udp_sport for qpn in qps}) == 4  # ECMP entropy


def test_a_transfer_is_an_equal_share_per_qp_cut_into_messages():
    assert [list(qp_messages(1000, 4, q, 300)) for q in range(4)] == [[250]] * 4
    assert [list(qp_messages(1001, 2, q, 300)) for q in range(2)] == [[300, 201], [300, 200]]
    assert message_count(1001, 2, 300) == 4 and message_count(3, 4, 300) == 3
    steps = PATTERNS.get("incast").plan(["a", "b", "c"], 1001).steps
    assert largest_message(steps["c"], {"a": 2, "b": 2}, 300, "recvs") == 300
    assert largest_message(steps["c"], {"a": 2, "b": 2}, 4096, "recvs") == 501


def test_loss_is_recovered_by_go_back_n_and_counted_in_the_report():
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4, 2_000_000)
    report, runners, _ = run_in_sim(plan, iterations=2, rate_bps=RATE_BPS, link={"loss": 0.01})
    assert finished(runners)
    assert all(r["bytes_received"] == r["plan_bytes_received"] for r in report["ranks"].values())
    assert report["total"]["counters"]["retransmitted_bytes"] > 0
    assert sum(it["counters"]["retransmitted_bytes"] for it in report["per_iteration"]) == \
        report["total"]["counters"]["retransmitted_bytes"]


def test_compute_gap_separates_iterations_on_every_host():
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4[:2], 200_000)
    gap_s = 0.05
    report, runners, _ = run_in_sim(plan, iterations=3, compute_gap_s=gap_s, rate_bps=RATE_BPS)
    assert finished(runners)
    for runner in runners.values():
        rounds = runner.result()["iterations"]
        for before, after in zip(rounds, rounds[1:]):
            assert after["start_s"] - before["end_s"] == pytest.approx(gap_s)
    assert report["total"]["wall_s"]["emulated"] > 2 * gap_s + 3 * report["total"]["time_s"]["emulated"] * 0.9


def test_write_verb_incast_delivers_every_byte_to_the_root():
    plan = PATTERNS.get("incast").plan(HOSTS4[:3], 300_000)
    report, runners, _ = run_in_sim(plan, verb="write", rate_bps=RATE_BPS)
    assert finished(runners), [r.error for r in runners.values()]
    assert report["verb"] == "write"
    assert report["ranks"]["h3"]["bytes_received"] == 600_000


def test_a_write_message_is_write_first_middle_last_then_send_only():
    rng = random.Random(5)
    config = dilate(NicConfig(), 1000)
    a = Nic("02:00:00:00:00:01", "198.18.127.1", RATE_BPS, config, rng=rng)
    b = Nic("02:00:00:00:00:02", "198.18.127.2", RATE_BPS, config, rng=rng)
    qa, qb = a.create_qp(), b.create_qp()
    a.connect(qa.qpn, remote_qpn=qb.qpn, remote_ip=b.ip, remote_mac=b.mac, remote_psn=qb.initial_psn)
    b.connect(qb.qpn, remote_qpn=qa.qpn, remote_ip=a.ip, remote_mac=a.mac, remote_psn=qa.initial_psn)
    region = b.register_mr(bytearray(3 * 4096))
    step = PATTERNS.get("elephant").plan(["a", "b"], 3 * 4096).steps
    sender = PlanRunner(a, step["a"], {"b": PeerQps((qa.qpn,), region.va, region.r_key)}, iterations=1,
                        compute_gap_s=0, message_bytes=1 << 20, verb="write")
    receiver = PlanRunner(b, step["b"], {"a": PeerQps((qb.qpn,))}, iterations=1, compute_gap_s=0,
                          message_bytes=1 << 20, verb="write")
    seen = []
    sim = FabricSim(random.Random(1))
    sim.on_transmit = lambda nic, frame: seen.append(parse_frame(frame).opcode) if nic is a else None
    for nic in (a, b):
        sim.attach(nic, delay_s=1e-6)
    for runner in (sender, receiver):
        runner.start(0.0)

    def advance() -> bool:
        for nic, runner in ((a, sender), (b, receiver)):
            if runner.advance(sim.now):
                sim.wake(nic)
        return sender.state == receiver.state == DONE

    advance()
    assert sim.run(10.0, stop=advance)
    assert seen == [Opcode.RDMA_WRITE_FIRST, Opcode.RDMA_WRITE_MIDDLE, Opcode.RDMA_WRITE_LAST, Opcode.SEND_ONLY]
    assert receiver.bytes_received == 3 * 4096


def test_a_dead_path_fails_the_job_with_the_qp_error_not_a_hang():
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 100_000)
    report, runners, _ = run_in_sim(plan, rate_bps=RATE_BPS, link={"loss": 1.0})
    assert runners["h1"].state == FAILED
    assert "RETRY_EXC_ERR" in runners["h1"].error and "h2" in runners["h1"].error
    assert report["total"]["iterations_completed"] == 0


def test_a_job_cut_short_names_what_each_host_still_waits_for():
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4[:2], 4_000_000)
    _, runners, _ = run_in_sim(plan, rate_bps=RATE_BPS, limit_s=0.05)
    assert all(r.state == FAILED for r in runners.values())
    assert "to arrive from h2" in runners["h1"].error


def test_job_host_serves_a_whole_job_then_a_second_one():
    rng = random.Random(7)
    config = dilate(NicConfig(), 1000)
    nics = {h: Nic(f"02:00:00:00:01:0{n}", f"198.18.1.{n}", RATE_BPS, config, rng=rng)
            for n, h in enumerate(["h1", "h2"], start=1)}
    sim = FabricSim(random.Random(2))
    for nic in nics.values():
        sim.attach(nic, delay_s=1e-6)
    hosts = {h: JobHost(nic, ip=f"198.18.1.{n}", port_rate_bps=RATE_BPS, next_hop_mac=nics["h2" if h == "h1" else "h1"].mac.hex(":"),
                        clock=lambda: sim.now) for n, (h, nic) in enumerate(nics.items(), start=1)}
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 1_000_000, {"bidirectional": True})

    def run(job: str) -> dict:
        prepared = {h: hosts[h].handle({"op": "job_prepare", "job": job, "steps": [s.to_json() for s in plan.steps[h]],
                                        "peers": {p: 2 for p in plan.peers(h)}, "iterations": 1, "compute_gap_s": 0,
                                        "message_bytes": 1 << 18, "verb": "send"}) for h in hosts}
        for h in hosts:
            hosts[h].handle({"op": "job_connect", "job": job, "peers": {
                p: {"ip": prepared[p]["ip"], "qps": prepared[p]["qps"][h], "region": prepared[p]["region"]}
                for p in prepared[h]["qps"]}})
        for h in hosts:
            hosts[h].handle({"op": "job_start", "job": job, "start_at": sim.now})

        def advance() -> bool:
            for h, host in hosts.items():
                if host.advance(sim.now):
                    sim.wake(nics[h])
            return all(host.handle({"op": "job_status", "job": job})["state"] == DONE for host in hosts.values())

        advance()
        assert sim.run(sim.now + 10.0, stop=advance)
        results = {h: host.handle({"op": "job_result", "job": job}) for h, host in hosts.items()}
        with pytest.raises(ValueError, match="busy with job"):
            hosts["h1"].handle({"op": "job_prepare", "job": "other", "steps": [], "peers": {}, "iterations": 1,
                                "compute_gap_s": 0, "message_bytes": 1})
        for host in hosts.values():
            host.handle({"op": "job_end", "job": job})
        return results

    first = run("one")
    assert first["h1"]["bytes_received"] == first["h2"]["bytes_received"] == 1_000_000
    assert all(not nic.counters()["qps"] for nic in nics.values())  # QPs destroyed
    second = run("two")  # the first job's flushed completions must not leak into it
    assert second["h2"]["bytes_sent"] == 1_000_000
    with pytest.raises(ValueError, match="no job 'two'"):
        hosts["h1"].handle({"op": "job_status", "job": "two"})


def test_a_job_of_many_qps_at_a_high_tdf_gets_until_its_first_messages_can_finish_before_it_stalls():
    from rocelab.traffic.job import STALL_ROUNDS, _stall_s
    from rocelab.traffic.patterns import builtin_patterns
    from rocelab.traffic.spec import JobSpec

    plan = builtin_patterns().get("elephant").plan(("h1", "h5"), 16 << 20)
    spec = JobSpec("elephant", qps=16, message_bytes=1 << 20, stall_timeout_s=20.0)
    slow = {h: {"port_rate_bps": 100e9 / 12500} for h in plan.hosts}  # 8 Mb/s
    assert _stall_s(spec, plan, slow) == pytest.approx(STALL_ROUNDS * 16 * (1 << 20) * 8 / 8e6)  # 67 s
    fast = {h: {"port_rate_bps": 100e9 / 1000} for h in plan.hosts}
    assert _stall_s(spec, plan, fast) == 20.0  # where messages come quickly, the spec's own timeout


def test_a_job_waits_out_the_nics_loss_recovery_before_it_counts_as_stalled():
    """At TDF 25000 nicd's 1 ms retransmission timeout is 25 s: a retransmission lost again waits
    50 s more, which lab-loss's 1 % loss case met (it was called stalled at 20 s)."""
    from rocelab.traffic.job import RECOVERY_TIMEOUTS, _stall_s
    from rocelab.traffic.patterns import builtin_patterns
    from rocelab.traffic.spec import JobSpec

    plan = builtin_patterns().get("elephant").plan(("h1", "h5"), 16 << 20)
    spec = JobSpec("elephant", stall_timeout_s=20.0)
    dilated = {h: {"port_rate_bps": 100e9 / 25000, "retransmit_timeout_s": 1e-3 * 25000} for h in plan.hosts}
    assert _stall_s(spec, plan, dilated) == pytest.approx(RECOVERY_TIMEOUTS * 25.0)
    assert RECOVERY_TIMEOUTS * 25.0 > 3 * 25.0  # a timeout and its doubled retry, with room


def test_read_verb_ring_allreduce_pulls_every_byte_at_line_rate():
    """verb read: each rank pulls its step's chunk from the rank before it with RDMA READs."""
    size = 4_000_000
    plan = PATTERNS.get("ring-allreduce").plan(HOSTS4, size)
    report, runners, _ = run_in_sim(plan, iterations=2, verb="read", rate_bps=RATE_BPS)
    assert finished(runners), [r.error for r in runners.values()]
    for rank in report["ranks"].values():
        assert rank["bytes_received"] == rank["plan_bytes_received"] == 2 * 2 * 3 * size // 4
        assert rank["bytes_sent"] == rank["plan_bytes_sent"]  # served: what the peers read from it
    total = report["total"]
    assert total["busbw_vs_line_rate"] >= 0.9
    assert total["counters"]["retransmitted_bytes"] == 0
    reads = sum(r.result()["pulls"] != [] for r in runners.values())
    assert reads == 4


def test_read_verb_times_a_job_by_the_reader_not_the_passive_source():
    """elephant h1 → h2 read by h2: h1's iterations end at once and are marked passive; the
    job's iterations are h2's reads, back to back, each with its flow completion time."""
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 1_000_000)
    report, runners, _ = run_in_sim(plan, iterations=3, verb="read", rate_bps=RATE_BPS)
    assert finished(runners), [r.error for r in runners.values()]
    source, reader = runners["h1"].result(), runners["h2"].result()
    assert all(it["passive"] for it in source["iterations"])
    assert not any(it["passive"] for it in reader["iterations"])
    for it, mine in zip(report["per_iteration"], reader["iterations"]):
        assert it["start_s"] == mine["start_s"]
        assert it["time_s"]["emulated"] == pytest.approx(mine["end_s"] - mine["start_s"])
        assert it["time_s"]["emulated"] >= 1_000_000 * 8 / RATE_BPS  # it cannot beat the wire
        assert it["fct_s"]["p50"]["emulated"] > 0
    assert source["bytes_sent"] == 0 and report["ranks"]["h1"]["bytes_sent"] == 3_000_000


def test_read_verb_recovers_from_loss():
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 2_000_000)
    report, runners, _ = run_in_sim(plan, iterations=2, verb="read", rate_bps=RATE_BPS, link={"loss": 0.01})
    assert finished(runners), [r.error for r in runners.values()]
    assert report["ranks"]["h2"]["bytes_received"] == 4_000_000
    assert report["total"]["counters"]["retransmitted_packets"] > 0  # READs asked again by the reader


def test_outstanding_reads_bound_a_read_stream_by_the_round_trip():
    """The bandwidth-delay product: on a link whose round trip is long next to a message's time on
    the wire, one READ outstanding per QP leaves the wire idle while the request travels; sixteen
    fill it (perftest's ib_read_bw -o)."""
    plan = PATTERNS.get("elephant").plan(["h1", "h2"], 2_000_000)
    times = {}
    for outstanding in (1, 16):
        report, runners, _ = run_in_sim(plan, verb="read", message_bytes=65536, rate_bps=RATE_BPS,
                                        link={"delay_s": 2e-3}, max_rd_atomic=outstanding)
        assert finished(runners) and report["ranks"]["h2"]["bytes_received"] == 2_000_000
        times[outstanding] = report["total"]["time_s"]["emulated"]
    # 64 KB takes 5.2 ms at 100 Mb/s; each READ alone waits 4 ms more for its request to arrive.
    assert times[1] > 1.5 * times[16]
    assert times[16] < 1.2 * 2_000_000 * 8 / RATE_BPS + 4e-3


def test_a_job_host_refuses_a_bad_outstanding_reads():
    from rocelab.traffic.host import JobHost

    nic = Nic("02:00:00:00:7f:01", "198.18.127.1", RATE_BPS, dilate(NicConfig(), 1000), rng=random.Random(1))
    host = JobHost(nic, ip="198.18.127.1", port_rate_bps=RATE_BPS, next_hop_mac="02:00:00:00:7f:02", clock=lambda: 0.0)
    with pytest.raises(ValueError, match="max_rd_atomic 0: expected a whole number ≥ 1"):
        host.handle({"op": "job_prepare", "job": "j", "steps": [], "peers": {}, "iterations": 1,
                     "compute_gap_s": 0, "message_bytes": 1, "verb": "read", "max_rd_atomic": 0})
