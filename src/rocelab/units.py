"""Parsing of the quantities users write: rates, delays, byte sizes.

Results carry their unit in the caller's variable name (rate_bps, delay_s, size_bytes).
"""

from __future__ import annotations

import re

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(?:bps|b/s|bit/s)?\s*$")
_RATE_SCALE = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}

_DELAY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)\s*$")
_DELAY_SCALE = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}

_BYTES = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)(i?)[bB]?\s*$")

# Light in fibre or copper travels at about 2/3 c (REFERENCE.md uses 1.98e8 m/s).
PROPAGATION_M_PER_S = 1.98e8


def parse_rate(value: object) -> int:
    """'100G' / '25Gbps' / '400g' / 1e9 → bits per second. Raises ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a rate")
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"{value!r} is not a positive rate")
        return int(value)
    m = _RATE.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a rate like 100G, 25Gbps or 400M")
    rate = float(m.group(1)) * _RATE_SCALE[m.group(2).lower()]
    if rate <= 0:
        raise ValueError(f"{value!r} is not a positive rate")
    return int(rate)


def parse_delay(value: object) -> float:
    """'25ns' / '1.5us' / '2ms' → seconds. Raises ValueError."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    m = _DELAY.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a delay like 25ns, 1.5us or 2ms")
    return float(m.group(1)) * _DELAY_SCALE[m.group(2)]


def parse_bytes(value: object) -> int:
    """'100KB' / '12MiB' / 4096 → bytes (KB = 1000, KiB = 1024). Raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _BYTES.match(str(value))
    if not m:
        raise ValueError(f"{value!r} is not a size like 4096, 100KB or 12MiB")
    base = 1024 if m.group(3) else 1000
    power = {"": 0, "k": 1, "m": 2, "g": 3}[m.group(2).lower()]
    return int(float(m.group(1)) * base**power)


def cable_delay_s(length_m: float) -> float:
    """One-way propagation delay of a cable of this length."""
    return length_m / PROPAGATION_M_PER_S


def format_rate(rate_bps: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "K")):
        if rate_bps >= scale:
            return f"{rate_bps / scale:g}{suffix}"
    return f"{rate_bps:g}"
