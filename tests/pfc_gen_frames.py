"""The frames sonic-mgmt's PFC storm generator (tests/common/helpers/pfc_gen.py) writes to its
raw socket, rebuilt by hand for the unit and live tests: Ethernet header, MAC Control opcode
and fields, and no padding, since pfc_gen leaves that to the sending MAC.

    PFC (opcode 0x0101): class-enable vector, then one pause time per class: `-t` quanta
        for an enabled class, 0 for the others. 8 times (34 bytes) since sonic-mgmt #7420
        (February 2023); 7 before it (32 bytes: class 7's time is missing).
    PAUSE (`-g`, 802.3x, opcode 0x0001): one pause_time (18 bytes).
"""

from __future__ import annotations

import struct

from rocelab.ethernet import ETH_P_MAC_CONTROL, MAC_CONTROL_PAUSE, MAC_CONTROL_PFC
from rocelab.switch.frames import PFC_DST_MAC

PFC_GEN_SRC_MAC = bytes.fromhex("000102030405")  # the fixed station address pfc_gen writes
TIME_FIELDS_BEFORE_7420 = 7
TIME_FIELDS = 8


def pfc_gen_pfc(class_enable: int, quanta: int, time_fields: int = TIME_FIELDS) -> bytes:
    """What `pfc_gen.py -p class_enable -t quanta` writes (`time_fields` 7: an older copy)."""
    times = [quanta if class_enable >> p & 1 else 0 for p in range(time_fields)]
    return struct.pack(f"!6s6sHHH{time_fields}H", PFC_DST_MAC, PFC_GEN_SRC_MAC, ETH_P_MAC_CONTROL,
                       MAC_CONTROL_PFC, class_enable, *times)


def pfc_gen_pause(quanta: int) -> bytes:
    """What `pfc_gen.py -g -t quanta` writes: an 802.3x PAUSE for the whole link."""
    return struct.pack("!6s6sHHH", PFC_DST_MAC, PFC_GEN_SRC_MAC, ETH_P_MAC_CONTROL, MAC_CONTROL_PAUSE, quanta)
