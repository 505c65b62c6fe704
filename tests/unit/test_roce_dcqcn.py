"""DCQCN reaction point step by step against the paper's formulas; the CC registry; config."""

from __future__ import annotations

import dataclasses
import random

import pytest

from rocelab.roce import CcRegistry, DcqcnConfig, Nic, NicConfig, builtin_cc_registry, dilate
from rocelab.roce.cc import CcConfig, NoCc
from rocelab.roce.dcqcn import DCQCN_SETS, TARGET_AFTER_BYTE_INCREASE, Dcqcn
from rocelab.roce.sim import connect_qps, poll_until

LINE_BPS = 40e9
PERIOD_S = 55e-6
EPS_S = 1e-9  # land just after a timer expiry


class Expected:
    """The formulas of REFERENCE.md, written out independently of the implementation."""

    def __init__(self, g: float, rate_ai_bps: float, rate_hai_bps: float, stages: int):
        self.g, self.r_ai, self.r_hai, self.stages = g, rate_ai_bps, rate_hai_bps, stages
        self.rc = self.rt = LINE_BPS
        self.alpha = 1.0
        self.t = self.bc = 0

    def cnp(self):
        self.rt = self.rc
        self.rc = self.rc * (1 - self.alpha / 2)
        self.alpha = (1 - self.g) * self.alpha + self.g
        self.t = self.bc = 0

    def alpha_timer(self):
        self.alpha = (1 - self.g) * self.alpha

    def increase(self):
        if max(self.t, self.bc) <= self.stages:
            pass  # fast recovery
        elif min(self.t, self.bc) > self.stages:
            self.rt = min(self.rt + self.r_hai, LINE_BPS)
        else:
            self.rt = min(self.rt + self.r_ai, LINE_BPS)
        self.rc = min((self.rt + self.rc) / 2, LINE_BPS)

    def timer(self):
        self.t += 1
        self.increase()

    def bytes_counter(self):
        self.bc += 1
        self.increase()


def assert_matches(rp: Dcqcn, expected: Expected):
    assert rp.rate_bps == pytest.approx(expected.rc, rel=1e-12)
    assert rp.target_rate_bps == pytest.approx(expected.rt, rel=1e-12)
    assert rp.alpha == pytest.approx(expected.alpha, rel=1e-12)
    assert (rp.timer_count, rp.byte_count) == (expected.t, expected.bc)


def test_rate_follows_the_dcqcn_formulas_step_by_step():
    cfg = DcqcnConfig(byte_counter_bytes=1_000_000)
    rp = Dcqcn(LINE_BPS, cfg)
    ex = Expected(g=1 / 256, rate_ai_bps=40e6, rate_hai_bps=200e6, stages=5)

    rp.on_cnp(0.0)
    ex.cnp()
    assert_matches(rp, ex)
    assert rp.rate_bps == 20e9 and rp.target_rate_bps == 40e9

    t0 = 30e-6  # a second CNP before any timer: no decay, no increase in between
    rp.on_cnp(t0)
    ex.cnp()
    assert_matches(rp, ex)

    for k in range(1, 4):  # three quiet periods: alpha decays, fast recovery
        rp.advance(t0 + k * PERIOD_S + EPS_S)
        ex.alpha_timer()
        ex.timer()
        assert_matches(rp, ex)

    t1 = t0 + 3 * PERIOD_S + 10e-6
    rp.on_cnp(t1)  # alpha < 1 now, so the cut is smaller than half
    ex.cnp()
    assert_matches(rp, ex)
    assert ex.rc > ex.rt / 2

    for k in range(1, 8):  # T = 1..5 fast recovery, then additive increase
        rp.advance(t1 + k * PERIOD_S + EPS_S)
        ex.alpha_timer()
        ex.timer()
        assert_matches(rp, ex)

    now = t1 + 7 * PERIOD_S + 2 * EPS_S
    for _ in range(6):  # BC = 1..5 additive (T = 7 > F), BC = 6 hyper increase
        before = ex.rt
        rp.on_sent(1_000_000, now)
        ex.bytes_counter()
        assert_matches(rp, ex)
    assert ex.rt - before == pytest.approx(200e6)


def test_rate_recovers_to_line_rate_and_idle_time_is_cheap():
    rp = Dcqcn(LINE_BPS, DcqcnConfig())
    rp.on_cnp(0.0)
    rp.advance(3600.0)  # an hour of timer events must not be iterated one by one
    assert rp.rate_bps == LINE_BPS and rp.target_rate_bps == LINE_BPS
    assert rp.alpha == pytest.approx((1 - 1 / 256) ** int(3600.0 / PERIOD_S), rel=1e-6)


def test_min_rate_floor_and_scaled_defaults():
    rp = Dcqcn(100e9, DcqcnConfig())
    for i in range(100):
        rp.on_cnp(i * 1e-6)
    assert rp.rate_bps == pytest.approx(100e6)  # 40 Mb/s at 40G, scaled to 100G
    assert DcqcnConfig().rates_bps(100e9) == pytest.approx((100e6, 500e6, 100e6))
    assert DcqcnConfig(min_rate_bps=1e9).rates_bps(100e9)[2] == 1e9


def test_no_cc_ignores_cnps():
    cc = NoCc(25e9, CcConfig())
    cc.on_cnp(0.0)
    assert cc.rate_bps == 25e9


def test_registry_rejects_duplicates_and_names_valid_algorithms():
    registry = builtin_cc_registry()
    assert registry.names() == ["dcqcn", "none"]
    with pytest.raises(ValueError, match="already registered"):
        registry.register("dcqcn", NoCc)
    with pytest.raises(ValueError, match="unknown congestion control 'timely'; valid: dcqcn, none"):
        registry.create("timely", 1e9, CcConfig())
    with pytest.raises(ValueError, match="valid: dcqcn, none"):
        Nic("02:00:00:00:00:01", "198.18.0.1", 1e9, NicConfig(cc_algorithm="hpcc"),
            rng=random.Random(0))
    custom = CcRegistry()
    custom.register("none", NoCc)
    nic = Nic("02:00:00:00:00:01", "198.18.0.1", 1e9, NicConfig(cc_algorithm="none"),
              rng=random.Random(0), cc_registry=custom)
    qp = nic.create_qp()
    nic.connect(qp.qpn, remote_qpn=0x20, remote_ip="198.18.0.2", remote_mac="02:00:00:00:00:02",
                remote_psn=0)
    assert nic.counters()["qps"][str(qp.qpn)]["cc"] == {"algorithm": "none", "rate_bps": 1e9}


def test_dilate_stretches_periods_and_slows_explicit_rates():
    base = NicConfig(cc=CcConfig(dcqcn=DcqcnConfig(rate_ai_bps=40e6)))
    slow = dilate(base, 1000)
    assert slow.cnp_interval_s == pytest.approx(50e-3)
    assert slow.retransmit_timeout_s == pytest.approx(base.retransmit_timeout_s * 1000)
    assert slow.cc.dcqcn.alpha_period_s == pytest.approx(55e-3)
    assert slow.cc.dcqcn.rate_increase_period_s == pytest.approx(55e-3)
    assert slow.cc.dcqcn.rate_ai_bps == pytest.approx(40e3)
    assert slow.cc.dcqcn.rate_hai_bps is None  # still scales with the (dilated) line rate
    assert slow.cc.dcqcn.byte_counter_bytes == base.cc.dcqcn.byte_counter_bytes
    assert slow.pmtu_bytes == base.pmtu_bytes


def test_configs_report_every_problem_at_once():
    with pytest.raises(ValueError) as error:
        NicConfig(pmtu_bytes=1500, dscp=64, max_inflight_packets=0)
    message = str(error.value)
    assert "pmtu_bytes=1500" in message and "dscp=64" in message
    assert "max_inflight_packets=0" in message
    with pytest.raises(ValueError, match="g=0"):
        DcqcnConfig(g=0)


# ---- the `connectx` parameter set: NVIDIA's documented rules, each on its own ----------------

CX = DCQCN_SETS["connectx"].rp
CX_LINE_BPS = 100e9


def test_connectx_set_carries_nvidias_documented_defaults():
    """dce_tcp_g 1019/1024, dce_tcp_rtt 1 µs, initial alpha 1023/1024, rpg_gd 11 (α/2),
    rpg_min_dec_fac 50%, rate_reduce_monitor_period 4 µs, rpg_time_reset 300 µs, rpg_byte_reset
    32767 (64-byte units), rpg_threshold 1, AI 5 Mb/s, HAI 50 Mb/s, min rate 1 Mb/s; NP: one
    CNP per 4 µs."""
    assert (CX.g, CX.alpha_init, CX.alpha_period_s) == (5 / 1024, 1023 / 1024, 1e-6)
    assert (CX.rate_decrease_divisor, CX.min_decrease_factor, CX.rate_reduce_period_s) == (2, 0.5, 4e-6)
    assert (CX.rate_increase_period_s, CX.byte_counter_bytes, CX.fast_recovery_stages) == (300e-6, 32767 * 64, 1)
    assert CX.rates_bps(CX_LINE_BPS) == (5e6, 50e6, 1e6)  # absolute, not scaled with the port
    assert DCQCN_SETS["connectx"].min_time_between_cnps_s == 4e-6
    assert DCQCN_SETS["paper"].rp == DcqcnConfig()


def test_cnps_within_the_rate_reduce_period_make_one_reduction_when_it_ends():
    cc = Dcqcn(CX_LINE_BPS, CX)
    cc.on_cnp(0.0)
    first = cc.rate_bps
    assert first == pytest.approx(CX_LINE_BPS * (1 - CX.alpha_init / 2))
    for t in (1e-6, 2e-6, 3e-6):  # three more CNPs inside the 4 µs monitor period
        cc.on_cnp(t)
        assert cc.rate_bps == first
    cc.advance(4e-6 + EPS_S)  # the period ends: one reduction for all three
    assert first * 0.5 <= cc.rate_bps < first
    assert cc.rate_bps == pytest.approx(first * (1 - cc.alpha / 2), rel=0.05)
    cc.advance(20e-6)
    assert cc.rate_bps > first * 0.5  # no CNP since: nothing further was taken off


def test_a_reduction_keeps_at_least_min_decrease_factor_of_the_rate():
    harsh = dataclasses.replace(CX, rate_decrease_divisor=1.0, alpha_init=1.0)  # 1 − α: would stop the flow
    cc = Dcqcn(CX_LINE_BPS, harsh)
    cc.on_cnp(0.0)
    assert cc.rate_bps == CX_LINE_BPS * 0.5


def test_target_moves_to_the_current_rate_only_after_an_increase():
    cc = Dcqcn(CX_LINE_BPS, CX)
    cc.on_cnp(0.0)  # no increase yet: the target stays at line rate
    cc.on_cnp(5e-6)  # nor between these two cuts
    assert cc.rate_bps < CX_LINE_BPS * (1 - CX.alpha_init / 2)
    assert cc.target_rate_bps == CX_LINE_BPS
    cut = cc.rate_bps
    t = 5e-6 + CX.rate_increase_period_s + EPS_S
    cc.advance(t)  # the timer raises the rate …
    raised = cc.rate_bps
    assert raised == pytest.approx((CX_LINE_BPS + cut) / 2)  # fast recovery: halfway to the untouched target
    cc.on_cnp(t + EPS_S)  # … so this CNP clamps the target to it (clamp_tgt_rate_after_time_inc 1)
    assert cc.target_rate_bps == pytest.approx(raised)

    bytes_only = Dcqcn(CX_LINE_BPS, dataclasses.replace(CX, target_on_cnp=TARGET_AFTER_BYTE_INCREASE))
    bytes_only.on_cnp(0.0)
    bytes_only.advance(CX.rate_increase_period_s + EPS_S)  # a timer increase does not count …
    bytes_only.on_cnp(CX.rate_increase_period_s + 2 * EPS_S)
    assert bytes_only.target_rate_bps == CX_LINE_BPS
    bytes_only.on_sent(CX.byte_counter_bytes, 10e-6 + CX.rate_increase_period_s)  # … a byte-counter one does
    raised = bytes_only.rate_bps
    bytes_only.on_cnp(20e-6 + CX.rate_increase_period_s)
    assert bytes_only.target_rate_bps == pytest.approx(raised)

    paper = Dcqcn(CX_LINE_BPS, DcqcnConfig())
    paper.on_cnp(0.0)
    assert paper.target_rate_bps == CX_LINE_BPS  # the paper: Rt ← Rc on every CNP (here at line rate)
    paper.on_cnp(1e-6)
    assert paper.target_rate_bps < CX_LINE_BPS


def test_alpha_rises_in_a_period_with_a_cnp_and_decays_in_each_one_without():
    cc = Dcqcn(CX_LINE_BPS, CX)
    cc.on_cnp(0.0)
    assert cc.alpha == CX.alpha_init  # unchanged until its period ends
    cc.advance(1e-6 + EPS_S)
    after_cnp_period = (1 - CX.g) * CX.alpha_init + CX.g
    assert cc.alpha == pytest.approx(after_cnp_period)
    cc.advance(11e-6 + EPS_S)  # ten quiet periods
    assert cc.alpha == pytest.approx(after_cnp_period * (1 - CX.g) ** 10)


def test_a_paced_qp_speeds_up_when_the_rate_rises_mid_gap():
    """After deep cuts the pacer's gap is long; the rate-increase timer must shorten it, as a
    hardware rate limiter would, not wait for the gap computed at the old rate."""
    config = NicConfig(cc_algorithm="dcqcn", cc=CcConfig(dcqcn=CX), cnp_interval_s=0.0)
    rng = random.Random(1)
    a = Nic("02:00:00:00:00:01", "198.18.0.1", CX_LINE_BPS, config, rng=rng)
    b = Nic("02:00:00:00:00:02", "198.18.0.2", CX_LINE_BPS, config, rng=rng)
    qa, qb = connect_qps(a, b)
    mr = b.register_mr(bytearray(1 << 20))
    a.post_write(qa, 1, bytes(1 << 20), remote_va=mr.va, r_key=mr.r_key)
    qp = a.qp(qa)
    for i in range(20):  # one CNP per monitor period: the rate halves each time
        qp.cc.on_cnp(i * 5e-6)
    assert qp.cc.rate_bps < 1e6 * 200
    sent = poll_until(a, 1e-3, start_s=100e-6)
    # At ~100 Mb/s one 4 KB packet is a 330 µs gap; the 300 µs timer halves the distance to line
    # rate, after which packets follow in microseconds.
    times = [t for t, _ in sent]
    assert len(times) > 50 and times[10] < 500e-6


def test_a_lab_names_a_parameter_set_and_may_change_single_parameters():
    from rocelab.roce.config import roce_config

    connectx = roce_config({})  # a lab's default: the NIC people own
    assert connectx.cc.dcqcn == CX and connectx.cnp_interval_s == 4e-6  # the set's NP side too
    paper = roce_config({"dcqcn": "paper"})
    assert paper.cc.dcqcn == DcqcnConfig() and paper.cnp_interval_s == 50e-6
    tuned = roce_config({"dcqcn": {"parameters": "connectx", "rate_ai_bps": 20e6}, "cnp_interval_s": 0.0})
    assert tuned.cc.dcqcn == dataclasses.replace(CX, rate_ai_bps=20e6) and tuned.cnp_interval_s == 0.0
    with pytest.raises(ValueError, match="'cx7' is not a DCQCN parameter set; expected one of: paper, connectx"):
        roce_config({"dcqcn": "cx7"})
    slowed = dilate(connectx, 1000).cc.dcqcn
    assert (slowed.rate_reduce_period_s, slowed.alpha_period_s) == pytest.approx((4e-3, 1e-3))


def test_a_connectx_sysfs_reading_maps_onto_the_connectx_set():
    """NVIDIA's documented defaults, as `roce_rp` files, give back exactly the `connectx` set;
    a changed file changes its one parameter, in the core's units."""
    from rocelab.roce.dcqcn import TARGET_ALWAYS, connectx_rp

    defaults = {"dce_tcp_g": 1019, "dce_tcp_rtt": 1, "initial_alpha_value": 1023, "rate_reduce_monitor_period": 4,
                "rpg_gd": 11, "rpg_min_dec_fac": 50, "rpg_min_rate": 1, "rate_to_set_on_first_cnp": 0,
                "rpg_time_reset": 300, "rpg_byte_reset": 32767, "rpg_threshold": 1, "rpg_ai_rate": 5,
                "rpg_hai_rate": 50, "clamp_tgt_rate": 0, "clamp_tgt_rate_after_time_inc": 1}
    assert dataclasses.replace(CX, **connectx_rp(defaults)) == CX
    tuned = connectx_rp({**defaults, "rpg_ai_rate": 20, "rpg_time_reset": 55, "rate_to_set_on_first_cnp": 40000})
    assert (tuned["rate_ai_bps"], tuned["rate_increase_period_s"], tuned["rate_on_first_cnp_bps"]) == pytest.approx(
        (20e6, 55e-6, 40e9))
    assert connectx_rp({"clamp_tgt_rate": 1})["target_on_cnp"] == TARGET_ALWAYS
    assert connectx_rp({"clamp_tgt_rate": 0, "clamp_tgt_rate_after_time_inc": 0})["target_on_cnp"] == \
        TARGET_AFTER_BYTE_INCREASE
    assert connectx_rp({"rpg_byte_reset": 100})["byte_counter_bytes"] == 6400  # 64-byte units
