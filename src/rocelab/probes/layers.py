"""scapy layers rocelab adds, for probes and tests (the data plane never imports scapy).

scapy 2.8's `scapy.contrib.roce` has BTH (with ICRC), AETH and the CNP padding but no
RETH; RETH is bound here, after BTH, for the opcodes that carry it. Importing this
module makes the bindings.
"""

from __future__ import annotations

from scapy.contrib.roce import BTH
from scapy.fields import IntField, XIntField, XLongField
from scapy.packet import Packet, bind_layers

RC_RDMA_WRITE_FIRST = 0x06
RC_RDMA_WRITE_ONLY = 0x0A


class RETH(Packet):
    """RDMA Extended Transport Header (16 bytes): VA, R_Key, DMA length."""

    name = "RETH"
    fields_desc = [
        XLongField("va", 0),
        XIntField("r_key", 0),
        IntField("dma_length", 0),
    ]


bind_layers(BTH, RETH, opcode=RC_RDMA_WRITE_FIRST)
bind_layers(BTH, RETH, opcode=RC_RDMA_WRITE_ONLY)
