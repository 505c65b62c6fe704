"""DCQCN reaction point (Zhu et al., SIGCOMM 2015; REFERENCE.md "DCQCN").

One instance per QP. It holds the current rate Rc (`rate_bps`, what the QP's pacer
uses), the target rate Rt and alpha, and moves them on three kinds of event:

- a CNP: Rt ← Rc;  Rc ← max(Rc·(1 − α/2), min rate);  α ← (1 − g)·α + g;
  both increase counters and both timers restart.
- the alpha timer: α ← (1 − g)·α for every alpha period that passes without a CNP.
- an increase event, every rate-increase period (timer counter T += 1) and every
  `byte_counter_bytes` sent (byte counter BC += 1):
      max(T, BC) ≤ F  → fast recovery      (Rt unchanged)
      min(T, BC) > F  → hyper increase     Rt += R_HAI
      otherwise       → additive increase  Rt += R_AI
  and in every case Rc ← (Rt + Rc)/2, both capped at line rate. So F = 5 gives five
  fast-recovery steps after a CNP, then additive increase.

Timers exist only after the first CNP: before it the QP sends at line rate and α keeps
its initial value. They are evaluated lazily (`advance(now)`), which gives the same
result as firing them on time because nothing else reads the state in between, and
lets an idle NIC sleep instead of waking every period.

Two parameter sets (`DCQCN_SETS`): `paper`, the values above, and `connectx`, what
NVIDIA ConnectX-4 and later NICs ship (their `roce_rp`/`roce_np` sysfs parameters). The
NIC's firmware differs from the paper in four documented ways, each a field here:
- alpha is updated once per `alpha_period_s` (dce_tcp_rtt, 1 µs): up by g if a CNP
  arrived in that period, else down (`alpha_update="per_period"`);
- CNPs within `rate_reduce_period_s` (rate_reduce_monitor_period, 4 µs) of the last
  reduction make one reduction at the end of that period, not one each;
- a reduction is Rc·(1 − α/`rate_decrease_divisor`) (rpg_gd = 11: α/2), never below
  Rc·`min_decrease_factor` (rpg_min_dec_fac, 50%) nor the min rate;
- Rt ← Rc on a CNP only if the rate rose since the last reduction (clamp_tgt_rate 0:
  `target_on_cnp`); cuts with no increase between them leave Rt where it was, so
  recovery heads back there. With clamp_tgt_rate_after_time_inc 1 (the default) a rise
  on the timer counts, not only one on the byte counter.
The byte counter `rpg_byte_reset` counts 64-byte units, as Google's isekai simulator counts
it (Spirent's RoCEv2 DCQCN emulation defaults to 2 MB): 32767 is ~2 MB, not 32 KB.
What NVIDIA's tables leave undescribed is said where it is decided below.

Time dilation: every `*_s` field is a wall-clock period. Under TDF the shell passes
periods × TDF and the dilated line rate; R_AI, R_HAI and the min rate default to
fractions of the line rate, so they follow it (rocelab.roce.config.dilate does both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

_REFERENCE_LINE_RATE_BPS = 40e9  # R_AI / R_HAI below are the paper's values at 40G

ALPHA_ON_CNP = "on_cnp"  # the paper: α rises on each CNP, decays per period without one
ALPHA_PER_PERIOD = "per_period"  # ConnectX: once per period, up if a CNP came in it, else down
TARGET_ALWAYS = "always"  # the paper (and clamp_tgt_rate 1): Rt ← Rc on every reduction
# clamp_tgt_rate 0: Rt ← Rc only if the rate rose since the last reduction, on the byte counter
# or, with clamp_tgt_rate_after_time_inc 1, on the timer too (as Google's isekai simulator reads
# NVIDIA's "increased due to the timer, and not only due to the byte counter").
TARGET_AFTER_INCREASE = "after_increase"  # clamp_tgt_rate_after_time_inc 1
TARGET_AFTER_BYTE_INCREASE = "after_byte_increase"  # clamp_tgt_rate_after_time_inc 0


@dataclass(frozen=True)
class DcqcnConfig:
    """DCQCN reaction-point parameters. Defaults: REFERENCE.md (paper and simulators)."""

    g: float = 1 / 256
    alpha_init: float = 1.0
    alpha_period_s: float = 55e-6
    rate_increase_period_s: float = 55e-6
    fast_recovery_stages: int = 5
    byte_counter_bytes: int = 10_000_000
    # None: scale with the line rate from 40 Mb/s, 200 Mb/s and 40 Mb/s at 40 Gb/s.
    rate_ai_bps: float | None = None
    rate_hai_bps: float | None = None
    min_rate_bps: float | None = None
    alpha_update: str = ALPHA_ON_CNP  # or ALPHA_PER_PERIOD
    rate_reduce_period_s: float = 0.0  # 0: every CNP reduces at once
    rate_decrease_divisor: float = 2.0  # Rc·(1 − α/divisor)
    min_decrease_factor: float = 0.0  # a reduction keeps at least this share of Rc
    target_on_cnp: str = TARGET_ALWAYS  # or TARGET_AFTER_INCREASE, TARGET_AFTER_BYTE_INCREASE
    rate_on_first_cnp_bps: float | None = None  # Rc = Rt = this on a flow's first CNP

    def __post_init__(self) -> None:
        problems = []
        if self.alpha_update not in (ALPHA_ON_CNP, ALPHA_PER_PERIOD):
            problems.append(f"alpha_update={self.alpha_update!r} must be {ALPHA_ON_CNP} or {ALPHA_PER_PERIOD}")
        if self.target_on_cnp not in (TARGET_ALWAYS, TARGET_AFTER_INCREASE, TARGET_AFTER_BYTE_INCREASE):
            problems.append(f"target_on_cnp={self.target_on_cnp!r} must be {TARGET_ALWAYS}, "
                            f"{TARGET_AFTER_INCREASE} or {TARGET_AFTER_BYTE_INCREASE}")
        if self.rate_reduce_period_s < 0:
            problems.append(f"rate_reduce_period_s={self.rate_reduce_period_s} must be ≥ 0")
        if self.rate_decrease_divisor < 1:
            problems.append(f"rate_decrease_divisor={self.rate_decrease_divisor} must be ≥ 1")
        if not 0 <= self.min_decrease_factor <= 1:
            problems.append(f"min_decrease_factor={self.min_decrease_factor} must be in [0, 1]")
        if self.rate_on_first_cnp_bps is not None and self.rate_on_first_cnp_bps <= 0:
            problems.append(f"rate_on_first_cnp_bps={self.rate_on_first_cnp_bps} must be positive")
        if not 0 < self.g <= 1:
            problems.append(f"g={self.g} must be in (0, 1]")
        if not 0 <= self.alpha_init <= 1:
            problems.append(f"alpha_init={self.alpha_init} must be in [0, 1]")
        for name in ("alpha_period_s", "rate_increase_period_s", "byte_counter_bytes"):
            if getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be positive")
        if self.fast_recovery_stages < 0:
            problems.append(f"fast_recovery_stages={self.fast_recovery_stages} must be ≥ 0")
        for name in ("rate_ai_bps", "rate_hai_bps", "min_rate_bps"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                problems.append(f"{name}={value} must be positive")
        if problems:
            raise ValueError("DcqcnConfig: " + "; ".join(problems))

    def rates_bps(self, line_rate_bps: float) -> tuple[float, float, float]:
        """(R_AI, R_HAI, min rate) for a port of this speed."""
        scale = line_rate_bps / _REFERENCE_LINE_RATE_BPS
        return (self.rate_ai_bps if self.rate_ai_bps is not None else 40e6 * scale,
                self.rate_hai_bps if self.rate_hai_bps is not None else 200e6 * scale,
                self.min_rate_bps if self.min_rate_bps is not None else 40e6 * scale)


@dataclass(frozen=True)
class DcqcnSet:
    """A named DCQCN parameter set: the reaction point's, the notification point's CNP
    spacing, and where the figures come from."""

    name: str
    rp: DcqcnConfig
    min_time_between_cnps_s: float  # NP: the NIC's CNP interval per QP
    source: str


_NVIDIA_TABLE = ("NVIDIA, 'DCQCN CC Parameters' (DOCA / MLNX_OFED documentation, ConnectX-4 and later): "
                 "dce_tcp_g 1019, dce_tcp_rtt 1 µs, initial_alpha_value 1023, rate_to_set_on_first_cnp 0, "
                 "rpg_min_dec_fac 50%, rpg_min_rate 1 Mb/s, rpg_gd 11, rate_reduce_monitor_period 4 µs, "
                 "clamp_tgt_rate 0, clamp_tgt_rate_after_time_inc 1, rpg_time_reset 300 µs, "
                 "rpg_byte_reset 32767, rpg_threshold 1, rpg_ai_rate 5 Mb/s, rpg_hai_rate 50 Mb/s; "
                 "min_time_between_cnps 4 µs (the firmware default a ConnectX-7's `mlxconfig -q` lists: "
                 "MIN_TIME_BETWEEN_CNPS_P1 4). Byte counter in 64-byte units: how Google's isekai simulator "
                 "reads rpg_byte_reset, and the 2 MB default of Spirent's RoCEv2 DCQCN emulation")

DCQCN_SETS = {
    "paper": DcqcnSet("paper", DcqcnConfig(), 50e-6,
                      "Zhu et al., SIGCOMM 2015, and the reference simulators (REFERENCE.md)"),
    # rate_to_set_on_first_cnp 0: NVIDIA gives 0 as the default and its range as "0, 1…line
    # rate" without saying what 0 does; read here as "no special rate" (the ordinary reduction).
    "connectx": DcqcnSet("connectx", DcqcnConfig(
        g=(1024 - 1019) / 1024, alpha_init=1023 / 1024, alpha_period_s=1e-6, alpha_update=ALPHA_PER_PERIOD,
        rate_reduce_period_s=4e-6, rate_decrease_divisor=2 ** (11 - 10), min_decrease_factor=0.5,
        target_on_cnp=TARGET_AFTER_INCREASE, rate_increase_period_s=300e-6, byte_counter_bytes=32767 * 64,
        fast_recovery_stages=1, rate_ai_bps=5e6, rate_hai_bps=50e6, min_rate_bps=1e6), 4e-6, _NVIDIA_TABLE),
}


# A ConnectX's roce_rp sysfs file → (DcqcnConfig field, value from the file's integer).
_CONNECTX_RP = {
    "dce_tcp_g": ("g", lambda v: (1024 - v) / 1024),
    "dce_tcp_rtt": ("alpha_period_s", lambda v: v * 1e-6),
    "initial_alpha_value": ("alpha_init", lambda v: v / 1024),
    "rate_reduce_monitor_period": ("rate_reduce_period_s", lambda v: v * 1e-6),
    "rpg_gd": ("rate_decrease_divisor", lambda v: 2.0 ** (v - 10)),
    "rpg_min_dec_fac": ("min_decrease_factor", lambda v: v / 100),
    "rpg_min_rate": ("min_rate_bps", lambda v: v * 1e6),
    "rate_to_set_on_first_cnp": ("rate_on_first_cnp_bps", lambda v: v * 1e6 if v else None),
    "rpg_time_reset": ("rate_increase_period_s", lambda v: v * 1e-6),
    "rpg_byte_reset": ("byte_counter_bytes", lambda v: v * 64),
    "rpg_threshold": ("fast_recovery_stages", int),
    "rpg_ai_rate": ("rate_ai_bps", lambda v: v * 1e6),
    "rpg_hai_rate": ("rate_hai_bps", lambda v: v * 1e6),
}


def connectx_rp(values: Mapping[str, int]) -> dict[str, object]:
    """DcqcnConfig fields (over the `connectx` set) from a ConnectX's roce_rp sysfs values, as
    `rocelab.qos.nic.read_nic_sysfs` returns them. Files rocelab does not model (rpg_max_rate:
    a cap below line rate) are left out; the caller says so."""
    out: dict[str, object] = {field: convert(values[name]) for name, (field, convert) in _CONNECTX_RP.items()
                              if name in values}
    clamp, after_timer = values.get("clamp_tgt_rate"), values.get("clamp_tgt_rate_after_time_inc")
    if clamp is not None or after_timer is not None:
        out["target_on_cnp"] = (TARGET_ALWAYS if clamp else TARGET_AFTER_INCREASE if after_timer
                                else TARGET_AFTER_BYTE_INCREASE)
    return out


def connectx_files(config: DcqcnConfig, line_rate_bps: float) -> dict[str, int]:
    """The roce_rp sysfs values a ConnectX would show for `config` (connectx_rp's inverse; rates
    that scale with the line rate at this one): what a host's shell reads. rpg_max_rate 0: no cap."""
    ai, hai, floor = config.rates_bps(line_rate_bps)
    fields = {"g": 1024 - config.g * 1024, "alpha_period_s": config.alpha_period_s * 1e6,
              "alpha_init": config.alpha_init * 1024, "rate_reduce_period_s": config.rate_reduce_period_s * 1e6,
              "rate_decrease_divisor": math.log2(config.rate_decrease_divisor) + 10,
              "min_decrease_factor": config.min_decrease_factor * 100, "min_rate_bps": floor / 1e6,
              "rate_on_first_cnp_bps": (config.rate_on_first_cnp_bps or 0) / 1e6,
              "rate_increase_period_s": config.rate_increase_period_s * 1e6,
              "byte_counter_bytes": config.byte_counter_bytes / 64, "fast_recovery_stages": config.fast_recovery_stages,
              "rate_ai_bps": ai / 1e6, "rate_hai_bps": hai / 1e6}
    files = {name: round(fields[field]) for name, (field, _) in _CONNECTX_RP.items()}
    files["clamp_tgt_rate"] = int(config.target_on_cnp == TARGET_ALWAYS)
    files["clamp_tgt_rate_after_time_inc"] = int(config.target_on_cnp != TARGET_AFTER_BYTE_INCREASE)
    files["rpg_max_rate"] = 0
    return dict(sorted(files.items()))


class Dcqcn:
    """The DCQCN rate of one QP; see the module docstring for the rules."""

    name = "dcqcn"

    def __init__(self, line_rate_bps: float, config: DcqcnConfig):
        self.line_rate_bps = float(line_rate_bps)
        self._cfg = config
        self._rate_ai_bps, self._rate_hai_bps, min_rate = config.rates_bps(line_rate_bps)
        self._min_rate_bps = min(min_rate, self.line_rate_bps)
        self.rate_bps = self.line_rate_bps  # Rc
        self.target_rate_bps = self.line_rate_bps  # Rt
        self.alpha = config.alpha_init
        self.timer_count = 0  # T
        self.byte_count = 0  # BC
        self._bytes_since_event = 0
        self._alpha_due_s: float | None = None
        self._increase_due_s: float | None = None
        self._cnp_in_period = False  # ALPHA_PER_PERIOD: a CNP came in the current alpha period
        self._last_reduce_s: float | None = None
        self._reduce_pending = False  # a CNP waits for the end of the rate-reduce period
        self._timer_increased = False  # the timer raised the rate since the last reduction
        self._bytes_increased = False  # the byte counter did

    def on_cnp(self, now: float) -> None:
        self.advance(now)
        cfg = self._cfg
        if cfg.alpha_update == ALPHA_PER_PERIOD:
            if self._alpha_due_s is None:  # the flow's first CNP starts its alpha clock
                self._alpha_due_s = now + cfg.alpha_period_s
            self._cnp_in_period = True
        if self._last_reduce_s is not None and now < self._last_reduce_s + cfg.rate_reduce_period_s:
            self._reduce_pending = True  # coalesced into one reduction when the period ends
            return
        self._reduce(now)

    def _reduce(self, now: float) -> None:
        cfg = self._cfg
        first = self._last_reduce_s is None
        if first and cfg.rate_on_first_cnp_bps is not None:
            self.rate_bps = self.target_rate_bps = min(cfg.rate_on_first_cnp_bps, self.line_rate_bps)
        else:
            if cfg.target_on_cnp == TARGET_ALWAYS or self._bytes_increased or (
                    cfg.target_on_cnp == TARGET_AFTER_INCREASE and self._timer_increased):
                self.target_rate_bps = self.rate_bps
            factor = max(1 - self.alpha / cfg.rate_decrease_divisor, cfg.min_decrease_factor)
            self.rate_bps = max(self.rate_bps * factor, self._min_rate_bps)
        if cfg.alpha_update == ALPHA_ON_CNP:
            self.alpha = (1 - cfg.g) * self.alpha + cfg.g
            self._alpha_due_s = now + cfg.alpha_period_s
        self.timer_count = self.byte_count = 0
        self._bytes_since_event = 0
        self._increase_due_s = now + cfg.rate_increase_period_s
        self._last_reduce_s = now
        self._timer_increased = self._bytes_increased = False

    def on_sent(self, size_bytes: int, now: float) -> None:
        if self._increase_due_s is None:
            return  # no CNP yet: at line rate, nothing to recover
        self._bytes_since_event += size_bytes
        while self._bytes_since_event >= self._cfg.byte_counter_bytes:
            self._bytes_since_event -= self._cfg.byte_counter_bytes
            self.byte_count += 1
            self._bytes_increased = True
            self._increase()

    def advance(self, now: float) -> None:
        """Apply every timer expiry up to `now`, in order: alpha periods, rate increases, and
        a reduction held for the end of its rate-reduce period."""
        if self._reduce_pending:
            at = self._last_reduce_s + self._cfg.rate_reduce_period_s
            if at <= now:
                self._advance_timers(at)
                self._reduce_pending = False
                self._reduce(at)
        # Called for every packet sent: most calls find no timer due.
        alpha_due, increase_due = self._alpha_due_s, self._increase_due_s
        if (alpha_due is not None and alpha_due <= now) or (increase_due is not None and increase_due <= now):
            self._advance_timers(now)

    def next_change_s(self) -> float | None:
        """The next rate-increase timer or held reduction; None at line rate with nothing held."""
        if self._reduce_pending:
            return self._last_reduce_s + self._cfg.rate_reduce_period_s
        if self._increase_due_s is None or self.rate_bps >= self.line_rate_bps:
            return None
        return self._increase_due_s

    def _advance_timers(self, now: float) -> None:
        cfg = self._cfg
        due = self._alpha_due_s
        if due is not None and due <= now:
            periods = int((now - due) // cfg.alpha_period_s) + 1
            if self._cnp_in_period:  # ALPHA_PER_PERIOD: the period that saw a CNP raises α, the rest decay
                self.alpha = (1 - cfg.g) * self.alpha + cfg.g
                self._cnp_in_period = False
                periods -= 1
            self.alpha *= (1 - cfg.g) ** periods
            self._alpha_due_s = due + (int((now - due) // cfg.alpha_period_s) + 1) * cfg.alpha_period_s
        due = self._increase_due_s
        if due is None:
            return
        period = cfg.rate_increase_period_s
        while due <= now:
            if self.rate_bps >= self.line_rate_bps:
                # Back at line rate: further increases change nothing, skip to the present.
                periods = int((now - due) // period) + 1
                self.timer_count += periods
                due += periods * period
                break
            self.timer_count += 1
            self._timer_increased = True
            self._increase()
            due += period
        self._increase_due_s = due

    def _increase(self) -> None:
        stages = self._cfg.fast_recovery_stages
        if max(self.timer_count, self.byte_count) <= stages:
            pass  # fast recovery: Rc climbs back towards Rt
        elif min(self.timer_count, self.byte_count) > stages:
            self.target_rate_bps += self._rate_hai_bps
        else:
            self.target_rate_bps += self._rate_ai_bps
        self.target_rate_bps = min(self.target_rate_bps, self.line_rate_bps)
        self.rate_bps = min((self.target_rate_bps + self.rate_bps) / 2, self.line_rate_bps)

    def state(self) -> dict[str, float | int]:
        return {"rate_bps": self.rate_bps, "target_rate_bps": self.target_rate_bps,
                "alpha": self.alpha, "timer_count": self.timer_count,
                "byte_count": self.byte_count}
