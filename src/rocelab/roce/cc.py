"""Congestion-control algorithms of the NIC's reaction point, chosen by name.

An algorithm is a per-QP object with the small interface below; the QP's pacer sends at
its `rate_bps`. Algorithms live in a `CcRegistry`, the project's Registry (STYLE.md rule 4): built-ins are
registered in `builtin_cc_registry()`, an unknown name is answered with the valid ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Protocol

from rocelab.registry import Registry
from rocelab.roce.dcqcn import Dcqcn, DcqcnConfig


class CongestionControl(Protocol):
    name: str
    rate_bps: float  # what the QP may send at now

    def on_cnp(self, now: float) -> None: ...

    def on_sent(self, size_bytes: int, now: float) -> None: ...

    def advance(self, now: float) -> None:
        """Apply timer events due up to `now`."""

    def next_change_s(self) -> float | None:
        """When a timer of its own may next raise the rate (None: it will not by itself)."""

    def state(self) -> dict[str, float | int]:
        """JSON-able state for counters; includes rate_bps."""


@dataclass(frozen=True)
class CcConfig:
    """Parameters of every registered algorithm, one field per algorithm that has any."""

    dcqcn: DcqcnConfig = field(default_factory=DcqcnConfig)


CcFactory = Callable[[float, CcConfig], CongestionControl]


class NoCc:
    """No congestion control: always line rate; CNPs are counted by the QP and ignored."""

    name = "none"

    def __init__(self, line_rate_bps: float, config: CcConfig):
        self.rate_bps = float(line_rate_bps)

    def on_cnp(self, now: float) -> None:
        pass

    def on_sent(self, size_bytes: int, now: float) -> None:
        pass

    def advance(self, now: float) -> None:
        pass

    def next_change_s(self) -> float | None:
        return None

    def state(self) -> dict[str, float | int]:
        return {"rate_bps": self.rate_bps}


class CcRegistry(Registry[CcFactory]):
    """Congestion-control algorithms by name; misuse raises ValueError, as the NIC's API does."""

    def __init__(self) -> None:
        super().__init__("congestion control")

    def check(self, name: str) -> None:
        """Raise ValueError naming the valid algorithms if `name` is not one of them."""
        if name not in self.names():
            raise ValueError(f"unknown congestion control {name!r}; valid: {', '.join(self.names())}")

    def create(self, name: str, line_rate_bps: float, config: CcConfig) -> CongestionControl:
        self.check(name)
        return self.get(name)(line_rate_bps, config)


def builtin_cc_registry() -> CcRegistry:
    registry = CcRegistry()
    registry.register("dcqcn", lambda rate_bps, cfg: Dcqcn(rate_bps, cfg.dcqcn))
    registry.register("none", NoCc)
    return registry
