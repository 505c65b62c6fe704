"""Shared-buffer accounting: the emulated ASIC's MMU, after HPCC's ns-3 `switch-mmu`.

It only accounts and decides; the pipeline sends PFC frames and releases bytes when a
packet leaves its egress queue (STYLE.md rule 6). Sizes are bytes, as config_db holds them.

Model (SONiC's BUFFER_POOL / BUFFER_PROFILE fields):

- A pool's `size_bytes` is its *shared* area. A PG's or queue's reserved `size_bytes` and a
  PG's private headroom (`xoff_bytes`) lie outside it, as in SONiC's buffer calculation,
  which has already carved them out when it sizes the pool.
- Bytes of a packet fill the owner's reserved area first, then go to shared if they fit
  under the owner's threshold T and the pool has room, where
  T = 2^dynamic_th × (pool size − pool shared use) for a dynamic profile, and
  T = static_th_bytes for a static one.
- Lossy traffic whose bytes do not fit is dropped (`tail_drop`), at the ingress PG or at
  the egress queue, whichever is full; PFC is never involved.
- Lossless traffic (a PG whose profile has xoff, and a TC in pfc_enable) whose bytes do not
  fit under T goes to the PG's headroom, up to the profile's `xoff_bytes` (and, when the
  pool has a shared headroom pool, `xoff_bytes` of the pool, which all PGs share). Past
  that it is dropped as `headroom_exceeded`: the headroom was too small for the link. (The
  pipeline may `hold` such a packet past the headroom instead: one that reached the switch
  only because its own XOFF left late; the headroom watermark leaves it out.)
  Lossless traffic is never dropped at an egress queue: PFC bounds it at ingress.

XOFF / XON rule (what `should_pause` / `should_resume` answer):

- XOFF: the first lossless packet that does not fit under T (so lands in headroom) makes
  the PG pause its peer: `headroom_used_bytes > 0` while not yet paused.
- XON: once the PG's headroom is empty and its shared use is at or below
  max(T − xon_offset_bytes, xon_bytes), T evaluated at that moment (missing fields are 0).
  The gap between the trigger T and the resume point is the hysteresis that keeps pauses
  from flapping; with neither field set the PG resumes as soon as it is back under T.

Releasing a packet's bytes takes them from headroom first, then shared, then reserved (as
HPCC does): the totals stay exact without remembering where each packet was stored.
"""

from __future__ import annotations

from rocelab.qos.model import BufferPool, BufferProfile
from rocelab.switch.counters import HEADROOM_EXCEEDED, TAIL_DROP

# A PG or queue without a buffer profile: lossy, no reserved bytes, at most 1 MiB of
# shared buffer (static threshold, no pool). Ample for a 100G port's 80 us of queueing.
DEFAULT_LOSSY_STATIC_TH_BYTES = 1 << 20
DEFAULT_LOSSY_PROFILE = BufferProfile(name="rocelab_default_lossy", pool="", size_bytes=0,
                                      static_th_bytes=DEFAULT_LOSSY_STATIC_TH_BYTES)


class Pool:
    """One BUFFER_POOL's shared area and (if `xoff_bytes` is set) its shared headroom."""

    __slots__ = ("size_bytes", "headroom_size_bytes", "shared_used_bytes",
                 "headroom_used_bytes")

    def __init__(self, pool: BufferPool):
        if pool.size_bytes is None:
            raise ValueError(f"buffer pool {pool.name!r} has no size: SONiC's dynamic buffer model sizes it at "
                             "run time; give the emulated switch its size (`show buffer pool` on the switch)")
        self.size_bytes = pool.size_bytes
        self.headroom_size_bytes = pool.xoff_bytes
        self.shared_used_bytes = 0
        self.headroom_used_bytes = 0


class _SharedUser:
    """Reserved bytes plus a share of a pool under a dynamic or static threshold."""

    __slots__ = ("pool", "reserved_bytes", "alpha", "static_th_bytes", "reserved_used_bytes",
                 "shared_used_bytes", "shared_watermark_bytes")

    def __init__(self, profile: BufferProfile, pool: Pool | None):
        if profile.dynamic_th is not None and pool is None:
            raise ValueError(f"buffer profile {profile.name!r}: dynamic_th needs a pool")
        if profile.dynamic_th is None and profile.static_th_bytes is None:
            raise ValueError(f"buffer profile {profile.name!r} has neither dynamic_th "
                             "nor static_th")
        self.pool = pool
        self.reserved_bytes = profile.size_bytes
        self.alpha = None if profile.dynamic_th is None else 2.0 ** profile.dynamic_th
        self.static_th_bytes = profile.static_th_bytes or 0  # read only when there is no alpha: then it is set
        self.reserved_used_bytes = 0
        self.shared_used_bytes = 0
        self.shared_watermark_bytes = 0

    def threshold_bytes(self) -> float:
        """T: how much shared buffer this owner may hold right now."""
        pool = self.pool
        if self.alpha is None or pool is None:  # static (a dynamic profile always has a pool)
            return self.static_th_bytes
        free = pool.size_bytes - pool.shared_used_bytes
        return self.alpha * free if free > 0 else 0.0

    def _fits_shared(self, extra_bytes: int) -> bool:
        # threshold_bytes() inlined: this runs for every packet
        pool = self.pool
        if pool is None:
            return self.shared_used_bytes + extra_bytes <= self.static_th_bytes
        pool_used = pool.shared_used_bytes
        if pool_used + extra_bytes > pool.size_bytes:
            return False
        if self.alpha is None:
            return self.shared_used_bytes + extra_bytes <= self.static_th_bytes
        return self.shared_used_bytes + extra_bytes <= self.alpha * (pool.size_bytes - pool_used)

    def _take(self, nbytes: int) -> None:
        """Account bytes already admitted: reserved first, the rest from the shared pool."""
        room = self.reserved_bytes - self.reserved_used_bytes
        if nbytes <= room:
            self.reserved_used_bytes += nbytes
            return
        extra = nbytes - room
        self.reserved_used_bytes += room
        self.shared_used_bytes += extra
        if pool := self.pool:
            pool.shared_used_bytes += extra
        if self.shared_used_bytes > self.shared_watermark_bytes:
            self.shared_watermark_bytes = self.shared_used_bytes

    def _give_back(self, nbytes: int) -> None:
        """Return bytes: shared first, then reserved."""
        from_shared = nbytes if nbytes <= self.shared_used_bytes else self.shared_used_bytes
        self.shared_used_bytes -= from_shared
        if pool := self.pool:
            pool.shared_used_bytes -= from_shared
        self.reserved_used_bytes -= nbytes - from_shared


class PgBuffer(_SharedUser):
    """One ingress port's priority group: reserved, shared and headroom use; PFC state."""

    __slots__ = ("headroom_bytes", "xon_bytes", "xon_offset_bytes", "headroom_used_bytes",
                 "headroom_watermark_bytes", "held_used_bytes", "xoff_active")

    def __init__(self, profile: BufferProfile, pool: Pool | None):
        super().__init__(profile, pool)
        self.headroom_bytes = profile.xoff_bytes or 0
        self.xon_bytes = profile.xon_bytes or 0
        self.xon_offset_bytes = profile.xon_offset_bytes or 0
        self.headroom_used_bytes = 0
        self.headroom_watermark_bytes = 0
        self.held_used_bytes = 0  # the part of headroom_used_bytes held past it (hold)
        self.xoff_active = False  # the caller sets it when it has sent XOFF

    def admit(self, nbytes: int, lossless: bool) -> str | None:
        """Account an arriving packet; None when admitted, else the drop reason."""
        room = self.reserved_bytes - self.reserved_used_bytes
        extra = nbytes - room
        if extra <= 0 or self._fits_shared(extra):
            self._take(nbytes)
            return None
        if not lossless:
            return TAIL_DROP
        if self.headroom_used_bytes + extra > self.headroom_bytes:
            return HEADROOM_EXCEEDED
        pool = self.pool
        if pool is not None and pool.headroom_size_bytes:
            if pool.headroom_used_bytes + extra > pool.headroom_size_bytes:
                return HEADROOM_EXCEEDED
            pool.headroom_used_bytes += extra
        self.reserved_used_bytes += room
        self.headroom_used_bytes += extra
        if self.headroom_used_bytes > self.headroom_watermark_bytes:
            self.headroom_watermark_bytes = self.headroom_used_bytes
        return None

    def hold(self, nbytes: int) -> None:
        """Account a lossless packet that `admit` refused for headroom, past the headroom (the
        pipeline decides when: a frame owed to its own late XOFF, rocelab.switch.pipeline). The
        headroom watermark leaves it out: it shows what the link's own traffic needed, which
        `admit` keeps within the headroom while held bytes remain. So does the pool's shared
        headroom: the other PGs keep what they may use of it."""
        room = self.reserved_bytes - self.reserved_used_bytes
        extra = nbytes - room
        self.reserved_used_bytes += room
        self.headroom_used_bytes += extra
        self.held_used_bytes += extra

    def release(self, nbytes: int) -> None:
        """Give back a packet's bytes when it leaves the switch (or is dropped late):
        headroom first (what was held past it first of all), then shared, then reserved."""
        pool = self.pool
        if self.headroom_used_bytes:
            from_headroom = min(nbytes, self.headroom_used_bytes)
            self.headroom_used_bytes -= from_headroom
            from_held = min(from_headroom, self.held_used_bytes)
            self.held_used_bytes -= from_held
            if pool is not None and pool.headroom_size_bytes:
                pool.headroom_used_bytes -= from_headroom - from_held
            nbytes -= from_headroom
        self._give_back(nbytes)

    def should_pause(self) -> bool:
        return not self.xoff_active and self.headroom_used_bytes > 0

    def should_resume(self) -> bool:
        if not self.xoff_active or self.headroom_used_bytes:
            return False
        resume_bytes = max(self.threshold_bytes() - self.xon_offset_bytes, self.xon_bytes)
        return self.shared_used_bytes <= resume_bytes

    def reset_watermarks(self) -> None:
        self.shared_watermark_bytes = self.shared_used_bytes
        self.headroom_watermark_bytes = self.headroom_used_bytes - self.held_used_bytes  # see hold


class QueueBuffer(_SharedUser):
    """One egress queue's use of the buffer; `depth_bytes` is what WRED looks at."""

    __slots__ = ("depth_bytes", "watermark_bytes")

    def __init__(self, profile: BufferProfile, pool: Pool | None):
        super().__init__(profile, pool)
        self.depth_bytes = 0
        self.watermark_bytes = 0

    def fits(self, nbytes: int) -> bool:
        """Would a lossy packet of this size be admitted? (Lossless ones always are.)"""
        room = self.reserved_bytes - self.reserved_used_bytes
        return nbytes <= room or self._fits_shared(nbytes - room)

    def add(self, nbytes: int) -> None:
        """Account an admitted packet (shared use past T only for lossless traffic)."""
        self._take(nbytes)
        self.depth_bytes += nbytes
        if self.depth_bytes > self.watermark_bytes:
            self.watermark_bytes = self.depth_bytes

    def release(self, nbytes: int) -> None:
        """Give back a packet's bytes when it leaves the queue: shared first, then reserved."""
        self.depth_bytes -= nbytes
        self._give_back(nbytes)

    def reset_watermarks(self) -> None:
        self.shared_watermark_bytes = self.shared_used_bytes
        self.watermark_bytes = self.depth_bytes
