"""What happens after the scheduler picks a frame: pacing to line rate, then the link.

Rates are the emulated ones (already divided by the time-dilation factor by the caller).
"""

from __future__ import annotations

import random
from collections import deque

from rocelab.switch.frames import MAX_FRAME_BYTES

# How far a port may catch up when its caller polls late: up to this many bytes back to
# back, so the long-run rate holds even when the shell wakes up late.
DEFAULT_BURST_BYTES = 4 * MAX_FRAME_BYTES


class TokenBucket:
    """Paces one egress port to `rate_bps`.

    Kept as the virtual time the line is busy until: a frame occupies the line for
    size × 8 / rate_bps, and the next one may start when the line is free and the port
    has had something to send since (`eligible_s`: a packet arrived, a pause ended).
    Credit therefore accrues only while the port is held back by its rate, never while
    it is idle or paused, so it never sends faster than line rate after a pause. When
    the caller polls late, the port catches up from where it should have been, but at
    most burst_bytes' worth: a bucket burst_bytes deep.
    """

    __slots__ = ("s_per_byte", "burst_s", "busy_until_s")

    def __init__(self, rate_bps: float, burst_bytes: int):
        if rate_bps <= 0:
            raise ValueError(f"rate_bps must be positive, not {rate_bps}")
        self.s_per_byte = 8 / rate_bps
        self.burst_s = burst_bytes * self.s_per_byte
        self.busy_until_s = float("-inf")

    def start_s(self, now: float, eligible_s: float) -> float:
        """When the next frame starts on the line (≤ now: it is due)."""
        start = self.busy_until_s if self.busy_until_s > eligible_s else eligible_s
        floor = now - self.burst_s
        return start if start > floor else floor


class Link:
    """Per-link impairments applied to every frame the port sends: added delay, uniform
    jitter in [−jitter_s, +jitter_s] and random loss. A cable is FIFO, so jitter never
    reorders: a frame is never released before the one sent ahead of it."""

    __slots__ = ("delay_s", "jitter_s", "loss_probability", "rng", "frames", "last_release_s")

    def __init__(self, delay_s: float, jitter_s: float, loss_pct: float, rng: random.Random):
        self.rng = rng
        self.frames: deque[tuple[float, bytes | bytearray]] = deque()  # (release time, frame)
        self.last_release_s = float("-inf")
        self.impair(delay_s, jitter_s, loss_pct)

    def impair(self, delay_s: float, jitter_s: float, loss_pct: float) -> None:
        """Set the impairments; frames already on the cable keep their release times."""
        if delay_s < 0 or jitter_s < 0 or not 0 <= loss_pct <= 100:
            raise ValueError(f"impairment out of range: delay_s={delay_s}, "
                             f"jitter_s={jitter_s}, loss_pct={loss_pct}")
        self.delay_s = delay_s
        self.jitter_s = jitter_s
        self.loss_probability = loss_pct / 100

    @property
    def impaired(self) -> bool:
        return bool(self.delay_s or self.jitter_s or self.loss_probability)

    def send(self, frame: bytes | bytearray, now: float) -> bool:
        """Put a frame on the link; False when the link loses it."""
        if self.loss_probability and self.rng.random() < self.loss_probability:
            return False
        release = now + self.delay_s
        if self.jitter_s:
            release += self.rng.uniform(-self.jitter_s, self.jitter_s)
        if release < self.last_release_s:
            release = self.last_release_s
        self.last_release_s = release
        self.frames.append((release, frame))
        return True

    def deliver(self, now: float, port_name: str, out: list) -> None:
        """Move every frame whose release time has come to `out` as (port, frame)."""
        frames = self.frames
        while frames and frames[0][0] <= now:
            out.append((port_name, frames.popleft()[1]))
