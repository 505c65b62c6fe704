"""SONiC config_db.json QoS tables ⇄ QosProfile.

The loader reads the QoS tables exactly as SONiC names them (REFERENCE.md, "PFC headroom
and the SONiC buffer model") and ignores every other table, so a whole config_db.json
saved on a switch loads as it is. It runs in steps: named objects (pools, buffer
profiles, WRED profiles, schedulers, maps) → per-port entries resolved against them →
one PortQos per port. Every malformed value or dangling reference becomes a Problem that
names table, key, field, the value and the form expected; all of them are raised once.

`render_config_db` is the inverse, written the way current SONiC writes config_db: one
key per port, plain-name references, PG and queue ranges like "Ethernet0|3-4".

What SONiC accepts is the reference (its YANG models, sonic-buildimage's rendered samples):
- port names are any `Ethernet<N>` (one number per port, split ports, Ethernet513); a file's
  PORT table gives their order (index, then first lane) and so which rocelab interface each
  is, eth1 onwards; without one, the four-lane convention of rocelab.qos.ports holds when
  every name is a multiple of four, else the names' numeric order;
- VOQ chassis keys `<host>|<asic>|<port>|<queue>` in QUEUE and BUFFER_QUEUE: the device's
  own host and ASIC (DEVICE_METADATA) are read, the other line cards' system ports noted;
- pools of type `both`, a profile's threshold mode differing from its pool's (SAI lets the
  profile's own mode decide), traffic classes 0–15;
- the dynamic buffer model: a pool with no size (or a `percentage`) and BUFFER_PG profile
  "NULL" are sized by buffermgrd at run time: loaded, noted, and left out of the checks
  that need their bytes;
- a file that is one part of a config_db (sonic-cfggen renders qos and buffers apart): a
  reference into a table the file does not hold at all is noted, not an error.

The package: `parse` (the JSON document, fields as typed values, entries and references),
`resolve` (the tables into PortQos per port; what buffermgrd and pfcwd read), `names` (which
rocelab interface each port is, the VOQ line cards), `render` (a QosProfile as tables).
"""

from rocelab.qos.sonic.names import lab_ports, voq_hosts
from rocelab.qos.sonic.parse import NULL, QOS_TABLES, read_config_db
from rocelab.qos.sonic.render import dump_config_db, render_config_db
from rocelab.qos.sonic.resolve import load_config_db, profile_from_config_db, switch_facts

__all__ = [
    "NULL", "QOS_TABLES", "dump_config_db", "lab_ports", "load_config_db", "profile_from_config_db",
    "read_config_db", "render_config_db", "switch_facts", "voq_hosts",
]
