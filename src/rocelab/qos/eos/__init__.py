"""Arista EOS running-config ⇄ QosProfile: the QoS statements of an EOS switch.

`parse_eos` reads the statements that decide a packet's class, queue, PFC, ECN and MTU
(docs/plugin-eos.md lists them) and ignores every other one, so a whole `show
running-config` loads as saved:

    qos map dscp D... to traffic-class T [drop-precedence N]
    qos map cos C... to traffic-class T
    qos map traffic-class T... to tx-queue Q  |  ... to dscp D (with `qos rewrite dscp`)
    class-map [type qos] match-any|match-all NAME      match dscp D... | match ip access-group A
    policy-map [type quality-of-service] NAME          class NAME → set traffic-class T |
                                                       set dscp D | set drop-precedence N
    priority-flow-control all off | pause watchdog default ... | pause watchdog action ...
    interface defaults → mtu N;  l2 mtu N
    qos profile NAME                     per-port statements, applied by service-profile
    interface EthernetN | EthernetN/M | EthernetN/M/K | Port-ChannelN
       mtu N  |  l2 mtu N  |  speed [forced] 100g...  |  [no] switchport  |  channel-group N ...
       service-profile NAME  |  service-policy [type qos] input NAME
       qos trust dscp|cos  |  no qos trust  |  qos cos N
       priority-flow-control on | priority P no-drop|drop | pause watchdog ...
       shape rate R [kbps|mbps|gbps|percent]
       tx-queue N  |  uc-tx-queue N  (mc-tx-queue N: read and left alone)
          priority strict  |  no priority  |  bandwidth percent W  |  shape rate R
          random-detect ecn minimum-threshold X UNIT maximum-threshold Y UNIT
                            [max-mark-probability P] [weight W]
          random-detect drop minimum-threshold X UNIT maximum-threshold Y UNIT [...]

A malformed statement of these kinds is an error naming file and line; all are collected,
then raised once as InputError. A statement rocelab cannot evaluate (an ACL match, an
undefined service-profile, a QoS statement it does not know) is a warning naming file, line
and statement, in `EosConfig.warnings` and the profile's notes; where it may change the
class of a DSCP on a port, that DSCP is listed in `EosConfig.uncertain` for the fabric
description to refuse if the DSCP is one the hosts send.

How EOS maps onto the profile (PortQos per interface, keyed by SONiC port name):

- Port names: EOS `Ethernet1` is rocelab's `eth1`, which the profile (like every QosProfile)
  keys by its SONiC name `Ethernet0` (`rocelab.qos.ports`). A file that names its ports
  `EthernetN/M` or `EthernetN/M/K` (modules, breakouts) numbers its Ethernet interfaces in
  their natural order instead: the first is eth1. Port-Channels are not lab ports: their
  statements apply to their members (`channel-group N`), under the members' own.
- Statements under an interface override those of its service-profile. A service-profile
  naming no qos profile applies nothing (as EOS, which accepts the name) and is warned about.
- Class: a port trusting DSCP (EOS's default on the routed ports of lab fabrics) maps a
  packet's DSCP through `qos map dscp`; one trusting CoS maps a tagged frame's PCP through
  `qos map cos` (`dot1p_to_tc`) and an untagged packet's default CoS (`qos cos`, 0); an
  untrusted port (`no qos trust`) gives every packet its default CoS's class. An input
  service-policy decides first: the first class whose `match dscp` holds the DSCP (or
  class-default) and sets a traffic-class gives it; else the maps do. Defaults where no map
  says: DSCP 0-7 → TC 1, 8-15 → TC 0, then DSCP / 8; CoS 0 → TC 1, 1 → 0, then CoS → TC CoS
  (as Arista's manuals table them; recalled).
- TC → queue: `qos map traffic-class ... to tx-queue`, else the identity. A PFC priority P
  pauses TC P's queue; TC P is PG P (EOS configures no PGs).
- PFC: the `no-drop` priorities of a port with `priority-flow-control on` (and without
  `priority-flow-control all off`) are its pfc_enable.
- Queues: `priority strict` → STRICT; `no priority` or `bandwidth percent W` → DWRR with
  weight W (1 without `bandwidth percent`). EOS platforms differ in a queue's default mode,
  so a queue is strict only when it says so. `random-detect ecn` → a WRED profile that marks
  ECN on every colour (ecn_all) from Kmin to Kmax, max-mark-probability (default 100 %) at
  Kmax; `random-detect drop` adds early drops of green packets (wred_green_enable).
  `shape rate` → shape_bps. `bandwidth guaranteed` is a minimum rate the model has no room
  for: read and left alone.
- Threshold units: bytes, kbytes (1,024 B), mbytes (1,048,576 B), segments (the platform's
  buffer cell: `segment_bytes` given, else EOS_SEGMENT_BYTES_BY_PLATFORM by the `! device:`
  line; otherwise an error asking for it), milliseconds and microseconds (latency: bytes the
  port drains in that time at its speed, the interface's `speed` or the port's link rate
  the fabric description gives; a note says which).
- PFC watchdog: on for a PFC port when a timeout applies to it (its `port timer timeout` or
  the switch's `default timeout`) and it does not say `no priority-flow-control pause
  watchdog`; detection time = timeout, restoration time = recovery-time (0: none set, no
  automatic recovery). Actions: drop → drop, no-drop → forward; none → EOS's default,
  errdisable, which shuts the port and so is recorded as drop. (Recalled, not confirmed.)
- MTU: a routed port's `mtu` (IP MTU), else `interface defaults` `mtu`, else EOS's 1500; a
  switched port's `l2 mtu` (its own, else the global one) less the 14-byte Ethernet header.

What EOS cannot express, and `render_eos` leaves out: buffer pools, buffer profiles and PG
assignments (EOS has no config_db buffer model: a fabric description gives an EOS device's
PFC threshold and headroom as platform figures, see `rocelab.fabric.spec`); TC → PG maps;
MAP_PFC_PRIORITY_TO_QUEUE; pfcwd_sw_enable (EOS guards every PFC priority); WRED that only
drops (wred_green_enable) or marks some colours; the WRR/DWRR distinction (both render as
weighted round robin); map names. `parse_eos(render_eos(p)) == p` for every profile that
`parse_eos` returns from maps, trust, PFC and ECN alone (no policy-maps, shapers or drops).

The package: `names` (EOS port names ⇄ rocelab's), `parse` (the statements into settings as
written), `resolve` (those settings, port by port, into the EosConfig and its QosProfile; the
entry points), `render` (a QosProfile as EOS statements).
"""

from rocelab.qos.eos.names import eos_lab_names, eos_to_lab, lab_to_eos
from rocelab.qos.eos.parse import (
    DEFAULT_MARK_PROBABILITY_PCT, EOS_DEFAULT_COS_TO_TC, EOS_DEFAULT_DSCP_TO_TC, UNTRUSTED_TC,
)
from rocelab.qos.eos.render import render_eos
from rocelab.qos.eos.resolve import (
    EOS_DEFAULT_MTU_BYTES, EOS_SEGMENT_BYTES_BY_PLATFORM, EosConfig, load_eos, parse_eos, parse_eos_config,
)

__all__ = [
    "DEFAULT_MARK_PROBABILITY_PCT", "EOS_DEFAULT_COS_TO_TC", "EOS_DEFAULT_DSCP_TO_TC", "EOS_DEFAULT_MTU_BYTES",
    "EOS_SEGMENT_BYTES_BY_PLATFORM", "UNTRUSTED_TC", "EosConfig", "eos_lab_names", "eos_to_lab", "lab_to_eos",
    "load_eos", "parse_eos", "parse_eos_config", "render_eos",
]
