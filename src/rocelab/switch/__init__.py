"""The emulated switch ASIC's pure core (DESIGN.md, "The emulated ASIC (switchd)").

No sockets, sleeps or threads: switchd owns those and drives a `Switch`:

    switch = Switch("leaf1", [PortSpec("eth1", mac, rate_bps), ...], qos_profile, fib, rng)
    switch.receive("eth1", frame, now)      # every frame read from a port
    for port, frame in switch.poll(now):    # frames due now: send each out of `port`
        ...
    due = switch.next_event(now)            # sleep until then (None: until a frame arrives)
    switch.set_fib(fib)                     # the kernel's routes changed
    switch.counters(now) / switch.clear_counters(now)

`now` is float seconds from the caller's clock (monotonic, or simulated in tests). Port
rates are the emulated ones, already divided by the time-dilation factor.

Counters (`Switch.counters`, JSON-able):

    {"switch": name, "time_s": now,
     "drops": {reason: {"packets", "bytes"}},            # summed over everything below
     "ports": {port: {
         "rx_packets", "rx_bytes",                       # every frame received
         "tx_packets", "tx_bytes",                       # data frames sent (no PFC)
         "drops": {reason: {"packets", "bytes"}},        # parsing, routing, the link
         "pfc_rx_frames": [8], "pfc_tx_frames": [8],     # per priority, XON included
         "pause_rx_frames",                              # 802.3x PAUSE, honoured or not
         "paused_time_s": [8],                           # time the peer held us paused
         "queues": [8 × {"tx_packets", "tx_bytes", "ecn_marked_packets",
                         "ecn_marked_bytes", "depth_bytes", "watermark_bytes",
                         "shared_watermark_bytes", "drops": {...},
                         "pfcwd": None | {"stormed", "storms_detected", "storms_restored"}}],
         "pgs": [8 × {"rx_packets", "rx_bytes",          # admitted into the PG's buffer
                      "lossless", "xoff", "reserved_bytes", "shared_bytes",
                      "headroom_bytes", "shared_watermark_bytes",
                      "headroom_watermark_bytes",
                      "held_packets", "held_bytes",            # past the headroom: owed to a late XOFF
                      "drops": {...}}]}}}

Drop reasons are listed in `rocelab.switch.counters`.
"""

from rocelab.switch.fib import Fib, NextHop
from rocelab.switch.pipeline import PortSpec, Switch

__all__ = ["Fib", "NextHop", "PortSpec", "Switch"]
