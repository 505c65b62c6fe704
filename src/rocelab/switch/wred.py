"""WRED / ECN on an egress queue's instantaneous depth, decided when a packet is enqueued.

All traffic is green (the core has no policers), so only the green thresholds apply:
probability 0 below green_min, rising linearly to green_drop_probability at green_max,
1 above green_max. A packet picked with that probability is CE-marked when it is ECT and
the profile's ecn mode marks green; otherwise it is dropped if wred_green_enable, else
left alone.
"""

from __future__ import annotations

import random

from rocelab.qos.model import WredProfile
from rocelab.ethernet import ECN_CE

PASS, MARK, DROP = 0, 1, 2


class Wred:
    __slots__ = ("min_bytes", "max_bytes", "slope_per_byte", "marks", "drops")

    def __init__(self, profile: WredProfile):
        self.min_bytes = profile.green_min_threshold_bytes
        self.max_bytes = profile.green_max_threshold_bytes
        span = self.max_bytes - self.min_bytes
        max_probability = profile.green_drop_probability_pct / 100
        self.slope_per_byte = max_probability / span if span > 0 else 0.0
        self.marks = profile.marks_green
        self.drops = profile.wred_green_enable

    def decide(self, depth_bytes: int, ecn_bits: int, rng: random.Random) -> int:
        """PASS, MARK (set CE) or DROP for a packet arriving at a queue this deep.

        The RNG is drawn only for depths in (Kmin, Kmax], so a queue outside that range
        does not disturb the random stream.
        """
        if depth_bytes <= self.min_bytes:
            return PASS
        if depth_bytes <= self.max_bytes and \
                rng.random() >= (depth_bytes - self.min_bytes) * self.slope_per_byte:
            return PASS
        if self.marks and ecn_bits:
            return PASS if ecn_bits == ECN_CE else MARK
        return DROP if self.drops else PASS
