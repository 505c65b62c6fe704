"""DCQCN reaction point step by step against the paper's formulas; the CC registry; config."""

from __future__ import annotations

import random

import pytest

from rocelab.roce import CcRegistry, DcqcnConfig, Nic, NicConfig, builtin_cc_registry, dilate
from rocelab.roce.cc import CcConfig, NoCc
from rocelab.roce.dcqcn import Dcqcn

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
