"""QoS profiles: SONiC config_db QoS tables ⇄ a typed profile."""

from rocelab.qos.model import PortQos, QosProfile, port_qos
from rocelab.qos.sonic import (
    dump_config_db,
    load_config_db,
    profile_from_config_db,
    render_config_db,
)

__all__ = [
    "PortQos",
    "QosProfile",
    "dump_config_db",
    "load_config_db",
    "port_qos",
    "profile_from_config_db",
    "render_config_db",
]
