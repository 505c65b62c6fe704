"""The PFC watchdog (the receiving side's pause timers are rocelab.ethernet.PauseTimers,
shared with the NIC)."""

from __future__ import annotations

from rocelab.qos.model import PfcWatchdog


STORM_DETECTED = "storm_detected"
STORM_RESTORED = "storm_restored"


class QueueWatchdog:
    """PFC_WD for one egress queue.

    Detection: the queue has been paused without a break for detection_time → stormed.
    While stormed, action `drop` ignores pauses and drops the queue's packets, `forward`
    ignores pauses and keeps forwarding, `alert` only reports. Restoration: no pause frame
    has arrived for restoration_time → back to normal. Time is driven by `evaluate`, which
    the caller runs at `due_s()`.
    """

    __slots__ = ("action", "detection_s", "restoration_s", "paused_since_s", "last_pause_s",
                 "stormed", "storms_detected", "storms_restored")

    def __init__(self, config: PfcWatchdog):
        self.action = config.action
        self.detection_s = config.detection_time_ms / 1000
        self.restoration_s = config.restoration_time_ms / 1000
        self.paused_since_s: float | None = None
        self.last_pause_s = 0.0
        self.stormed = False
        self.storms_detected = 0
        self.storms_restored = 0

    @property
    def ignores_pause(self) -> bool:
        return self.stormed and self.action != "alert"

    @property
    def drops(self) -> bool:
        return self.stormed and self.action == "drop"

    def on_pause(self, now: float, was_paused: bool) -> None:
        """A pause (non-zero quanta) arrived for the queue."""
        self.last_pause_s = now
        if not was_paused and not self.stormed:
            self.paused_since_s = now

    def on_resume(self) -> None:
        """An XON arrived for the queue: the pause, if any, is broken."""
        if not self.stormed:
            self.paused_since_s = None

    def due_s(self) -> float | None:
        if self.stormed:
            return self.last_pause_s + self.restoration_s
        if self.paused_since_s is None:
            return None
        return self.paused_since_s + self.detection_s

    def evaluate(self, now: float, paused_until_s: float) -> str | None:
        """STORM_DETECTED, STORM_RESTORED or None, given until when the queue is paused."""
        if self.stormed:
            if now >= self.last_pause_s + self.restoration_s:
                self.stormed = False
                self.storms_restored += 1
                self.paused_since_s = None
                return STORM_RESTORED
            return None
        if self.paused_since_s is None or now < self.paused_since_s + self.detection_s:
            return None
        if paused_until_s >= self.paused_since_s + self.detection_s:
            self.stormed = True
            self.storms_detected += 1
            return STORM_DETECTED
        self.paused_since_s = None  # the pause ran out before detection time: no storm
        return None
