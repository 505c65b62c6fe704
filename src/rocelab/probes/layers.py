"""scapy layers rocelab adds, for probes and tests (the data plane never imports scapy).

scapy 2.8's `scapy.contrib.roce` has BTH (with ICRC), AETH and the CNP padding but no
RETH, and binds AETH after ACKNOWLEDGE only; RETH is bound here, after BTH, for the opcodes
that carry it, and AETH for the RDMA READ responses that carry one. Importing this module
makes the bindings.
"""

from __future__ import annotations

from scapy.contrib.roce import AETH, BTH
from scapy.fields import IntField, XIntField, XLongField
from scapy.packet import Packet, bind_layers

RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_ONLY = 0x0A
RC_RDMA_READ_REQUEST = 0x0C
RC_RDMA_READ_RESPONSE_FIRST = 0x0D
RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E  # no AETH
RC_RDMA_READ_RESPONSE_LAST = 0x0F
RC_RDMA_READ_RESPONSE_ONLY = 0x10


class RETH(Packet):
    """RDMA Extended Transport Header (16 bytes): VA, R_Key, DMA length."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("r_key", 0),
        IntField("dma_length", 0),
    ]


for _opcode in (RC_RDMA_WRITE_FIRST, RC_RDMA_WRITE_ONLY, RC_RDMA_READ_REQUEST):
    bind_layers(BTH, RETH, opcode=_opcode)
for _opcode in (RC_RDMA_READ_RESPONSE_FIRST, RC_RDMA_READ_RESPONSE_LAST, RC_RDMA_READ_RESPONSE_ONLY):
    bind_layers(BTH, AETH, opcode=_opcode)
