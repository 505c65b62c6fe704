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

Time dilation: every `*_s` field is a wall-clock period. Under TDF the shell passes
periods × TDF and the dilated line rate; R_AI, R_HAI and the min rate default to
fractions of the line rate, so they follow it (rocelab.roce.config.dilate does both).
"""

from __future__ import annotations

from dataclasses import dataclass

_REFERENCE_LINE_RATE_BPS = 40e9  # R_AI / R_HAI below are the paper's values at 40G


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

    def __post_init__(self) -> None:
        problems = []
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

    def on_cnp(self, now: float) -> None:
        self.advance(now)
        cfg = self._cfg
        self.target_rate_bps = self.rate_bps
        self.rate_bps = max(self.rate_bps * (1 - self.alpha / 2), self._min_rate_bps)
        self.alpha = (1 - cfg.g) * self.alpha + cfg.g
        self.timer_count = self.byte_count = 0
        self._bytes_since_event = 0
        self._alpha_due_s = now + cfg.alpha_period_s
        self._increase_due_s = now + cfg.rate_increase_period_s

    def on_sent(self, size_bytes: int, now: float) -> None:
        if self._increase_due_s is None:
            return  # no CNP yet: at line rate, nothing to recover
        self._bytes_since_event += size_bytes
        while self._bytes_since_event >= self._cfg.byte_counter_bytes:
            self._bytes_since_event -= self._cfg.byte_counter_bytes
            self.byte_count += 1
            self._increase()

    def advance(self, now: float) -> None:
        """Apply every alpha-timer and rate-increase-timer expiry up to `now`, in order."""
        cfg = self._cfg
        due = self._alpha_due_s
        if due is not None and due <= now:
            periods = int((now - due) // cfg.alpha_period_s) + 1
            self.alpha *= (1 - cfg.g) ** periods
            self._alpha_due_s = due + periods * cfg.alpha_period_s
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
