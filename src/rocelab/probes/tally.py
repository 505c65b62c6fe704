"""The counting core of a probe: what one interface's frames say about PFC, ECN, CNPs and PSNs.

Pure and owning no I/O: `Tally.count(timestamp_s, frame)` over raw Ethernet frames, then
`Tally.report()`. Headers parse with precompiled structs, the hot path of STYLE.md rule 9:
scapy dissects a RoCE WRITE frame in ~200 us, these structs in a few, and a probe must keep
up with a data plane. The unit tests craft every frame with scapy's layers (BTH, AETH,
MACControlClassBasedFlowControl), which checks the structs against them; opcode names are
scapy's.

Keys: a flow is the IPv4 5-tuple; a QP is (destination address, destination QP), because
QP numbers are local to the node that owns them and one port carries many nodes' QPs.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from scapy.contrib.roce import BTH as ScapyBTH

from rocelab.ethernet import (ECN_CE, ECN_MASK, ETH, ETH_P_IPV4, ETH_P_MAC_CONTROL, IPPROTO_TCP, IPPROTO_UDP, ROCE_UDP_PORT,
                              mac_control)

VLAN_TPIDS = (0x8100, 0x88A8)

VLAN_TAG = struct.Struct("!HH")  # TCI, inner EtherType
# version/IHL, TOS, flags/fragment offset, protocol, source, destination
IPV4 = struct.Struct("!BB4xH1xB2x4s4s")
L4_PORTS = struct.Struct("!HH")
BTH = struct.Struct("!B3xII")  # opcode, FECN/BECN/resv/DestQP, AckReq/resv/PSN
AETH_SYNDROME = struct.Struct("!B")

ETH_BYTES = ETH.size
IPV4_FRAGMENT_OFFSET = 0x1FFF
UDP_BYTES = 8
QPN_MASK = PSN_MASK = 0xFFFFFF
PSN_HALF = 0x800000  # serial-number arithmetic over 24 bits: a difference above this is behind

OPCODE_NAMES: dict[int, str] = ScapyBTH.fields_desc[0].i2s
READ_REQUEST = 0x0C
ACKNOWLEDGE = 0x11
CNP = 0x81
# Requests carry the requester's PSN sequence; responses, ACKs and CNPs do not.
REQUEST_OPCODES = frozenset([*range(0x0D), 0x13, 0x14, *range(0x20, 0x2C)])
# AETH syndrome bits 7:5: 000 ACK, 001 RNR NAK, 011 NAK with a code in the low bits.
AETH_ACK, AETH_RNR_NAK, AETH_NAK = 0, 1, 3
NAK_CODES = {0x60: "psn_sequence_error", 0x61: "invalid_request",
             0x62: "remote_access_error", 0x63: "remote_operational_error"}
ECN_NAMES = ("not_ect", "ect1", "ect0", "ce")  # indexed by the two ECN bits of the TOS

RX, TX, UNKNOWN = "rx", "tx", "unknown"


def mac_text(raw: bytes) -> str:
    return raw.hex(":")


def opcode_name(opcode: int) -> str:
    return OPCODE_NAMES.get(opcode, f"0x{opcode:02x}")


def _stamp(record, event: str, timestamp_s: float) -> None:
    record.first_s.setdefault(event, timestamp_s)
    record.last_s[event] = timestamp_s


class Flow(NamedTuple):
    src: str
    dst: str
    protocol: int
    sport: int
    dport: int


class QpKey(NamedTuple):
    dst: str
    qp: int


class PfcKey(NamedTuple):
    direction: str  # rx, tx (as seen on the probed interface) or unknown
    priority: int


@dataclass(slots=True)
class PfcCount:
    """PFC frames on one priority in one direction. XON (quanta 0) is counted apart."""

    xoff_frames: int = 0
    xon_frames: int = 0
    pause_quanta: int = 0  # summed over XOFFs; one quantum = 512 bit times at the port's speed
    first_s: dict[str, float] = field(default_factory=dict)  # by event: "xoff", "xon"
    last_s: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class FlowCount:
    packets: int = 0
    bytes: int = 0
    ce_packets: int = 0
    first_s: dict[str, float] = field(default_factory=dict)  # by event: "ce"
    last_s: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class QpCount:
    packets: int = 0
    requests: int = 0
    psn_gaps: int = 0  # a request PSN above the one expected next
    psns_missing: int = 0  # PSNs skipped over by those gaps
    rewinds: int = 0  # a request PSN at or below the previous one: go-back-N starts over
    retransmitted_packets: int = 0  # requests at or below the highest PSN seen
    highest_psn: int | None = None
    cnps: int = 0
    acks: int = 0
    rnr_naks: int = 0
    naks: dict[str, int] = field(default_factory=dict)  # by NAK code name
    first_s: dict[str, float] = field(default_factory=dict)  # by event: cnp, psn_gap, rewind, nak
    last_s: dict[str, float] = field(default_factory=dict)


@dataclass
class ProbeReport:
    """What a probe counted. `to_json()` is a plain dict; `from_json` reads it back."""

    source: str  # "<netns>:<iface>" for a live capture, the file for a pcap
    mac: str | None  # the interface's own MAC: frames from it are tx
    first_frame_s: float | None
    last_frame_s: float | None
    kernel_drops: int | None  # frames the kernel dropped before the probe read them; None: a file
    link_downs: int | None  # times the interface was found down (no frames meanwhile); None: a file
    totals: dict[str, int]
    ecn: dict[str, int]
    roce_opcodes: dict[str, int]
    pfc: dict[PfcKey, PfcCount]
    flows: dict[Flow, FlowCount]
    qps: dict[QpKey, QpCount]

    @property
    def duration_s(self) -> float:
        return 0.0 if self.first_frame_s is None else self.last_frame_s - self.first_frame_s

    def to_json(self) -> dict:
        return {
            "capture": {"source": self.source, "mac": self.mac, "first_frame_s": self.first_frame_s,
                        "last_frame_s": self.last_frame_s, "kernel_drops": self.kernel_drops,
                        "link_downs": self.link_downs},
            "totals": dict(self.totals),
            "ecn": dict(self.ecn),
            "roce_opcodes": dict(self.roce_opcodes),
            "pfc": _rows(self.pfc),
            "flows": _rows(self.flows),
            "qps": _rows(self.qps),
        }

    @classmethod
    def from_json(cls, doc: dict) -> ProbeReport:
        def split(row: dict, key_type, count_type):
            keys = set(key_type._fields)
            return (key_type(**{k: v for k, v in row.items() if k in keys}),
                    count_type(**{k: v for k, v in row.items() if k not in keys}))

        capture = doc["capture"]
        return cls(capture["source"], capture["mac"], capture["first_frame_s"], capture["last_frame_s"],
                   capture["kernel_drops"], capture["link_downs"], dict(doc["totals"]), dict(doc["ecn"]),
                   dict(doc["roce_opcodes"]),
                   dict(split(r, PfcKey, PfcCount) for r in doc["pfc"]),
                   dict(split(r, Flow, FlowCount) for r in doc["flows"]),
                   dict(split(r, QpKey, QpCount) for r in doc["qps"]))


def _rows(counts: dict) -> list[dict]:
    """A table of records as JSON rows: the key's fields, then the counts."""
    return [{**key._asdict(), **_fields(count)} for key, count in sorted(counts.items())]


def _fields(record) -> dict:
    return {name: (dict(v) if isinstance(v := getattr(record, name), dict) else v)
            for name in record.__slots__}


class _PsnState:
    __slots__ = ("last_psn", "reserved")

    def __init__(self, psn: int):
        self.last_psn = psn
        self.reserved = False  # the last request was a READ: its responses took PSNs we never see


class Tally:
    """Counts frames of one interface. `own_mac` (6 bytes) tells tx from rx; None: unknown."""

    def __init__(self, own_mac: bytes | None = None):
        self.own_mac = own_mac
        self.frames = self.bytes = 0
        self.ipv4_packets = self.roce_packets = self.pfc_frames = self.truncated_frames = 0
        self.first_frame_s: float | None = None
        self.last_frame_s: float | None = None
        self.ecn = [0, 0, 0, 0]
        self.opcodes: dict[int, int] = {}
        self.pfc: dict[tuple[str, int], PfcCount] = {}  # by (direction, priority)
        # Raw 4-byte addresses while counting: text only when reporting.
        self.flows: dict[tuple[bytes, bytes, int, int, int], FlowCount] = {}
        self.qps: dict[tuple[bytes, int], QpCount] = {}
        self._psn: dict[tuple[bytes, int], _PsnState] = {}

    def count(self, timestamp_s: float, frame: bytes) -> None:
        self.frames += 1
        self.bytes += len(frame)
        if self.first_frame_s is None:
            self.first_frame_s = timestamp_s
        self.last_frame_s = timestamp_s
        try:
            _, src, ethertype = ETH.unpack_from(frame)
            offset = ETH_BYTES
            if ethertype in VLAN_TPIDS:
                _, ethertype = VLAN_TAG.unpack_from(frame, offset)
                offset += VLAN_TAG.size
            if ethertype == ETH_P_IPV4:
                self._ipv4(timestamp_s, frame, offset)
            elif ethertype == ETH_P_MAC_CONTROL:
                self._mac_control(timestamp_s, frame, offset, src)
        except struct.error:
            self.truncated_frames += 1

    def _ipv4(self, timestamp_s: float, frame: bytes, offset: int) -> None:
        version_ihl, tos, fragment, protocol, src, dst = IPV4.unpack_from(frame, offset)
        self.ipv4_packets += 1
        ecn = tos & ECN_MASK
        self.ecn[ecn] += 1
        l4 = offset + (version_ihl & 0x0F) * 4
        sport = dport = 0
        if protocol in (IPPROTO_UDP, IPPROTO_TCP) and not fragment & IPV4_FRAGMENT_OFFSET:
            sport, dport = L4_PORTS.unpack_from(frame, l4)
        key = (src, dst, protocol, sport, dport)
        flow = self.flows.get(key)
        if flow is None:
            flow = self.flows[key] = FlowCount()
        flow.packets += 1
        flow.bytes += len(frame)
        if ecn == ECN_CE:
            flow.ce_packets += 1
            _stamp(flow, "ce", timestamp_s)
        if dport == ROCE_UDP_PORT and protocol == IPPROTO_UDP:
            self._roce(timestamp_s, frame, l4 + UDP_BYTES, dst)

    def _roce(self, timestamp_s: float, frame: bytes, offset: int, dst: bytes) -> None:
        opcode, qp_word, psn_word = BTH.unpack_from(frame, offset)
        self.roce_packets += 1
        self.opcodes[opcode] = self.opcodes.get(opcode, 0) + 1
        key = (dst, qp_word & QPN_MASK)
        qp = self.qps.get(key)
        if qp is None:
            qp = self.qps[key] = QpCount()
        qp.packets += 1
        if opcode in REQUEST_OPCODES:
            self._request(timestamp_s, qp, key, opcode, psn_word & PSN_MASK)
        elif opcode == CNP:
            qp.cnps += 1
            _stamp(qp, "cnp", timestamp_s)
        elif opcode == ACKNOWLEDGE:
            (syndrome,) = AETH_SYNDROME.unpack_from(frame, offset + BTH.size)
            kind = syndrome >> 5
            if kind == AETH_ACK:
                qp.acks += 1
            elif kind == AETH_RNR_NAK:
                qp.rnr_naks += 1
                _stamp(qp, "nak", timestamp_s)
            elif kind == AETH_NAK:
                code = NAK_CODES.get(syndrome, f"0x{syndrome:02x}")
                qp.naks[code] = qp.naks.get(code, 0) + 1
                _stamp(qp, "nak", timestamp_s)

    def _request(self, timestamp_s: float, qp: QpCount, key: tuple[bytes, int], opcode: int, psn: int) -> None:
        qp.requests += 1
        state = self._psn.get(key)
        if state is None:
            state = self._psn[key] = _PsnState(psn)
            qp.highest_psn = psn
        else:
            step = (psn - state.last_psn) & PSN_MASK
            if step == 0 or step >= PSN_HALF:
                qp.rewinds += 1
                _stamp(qp, "rewind", timestamp_s)
            elif step > 1 and not state.reserved:
                qp.psn_gaps += 1
                qp.psns_missing += step - 1
                _stamp(qp, "psn_gap", timestamp_s)
            ahead = (psn - qp.highest_psn) & PSN_MASK
            if ahead == 0 or ahead >= PSN_HALF:
                qp.retransmitted_packets += 1
            else:
                qp.highest_psn = psn
            state.last_psn = psn
        state.reserved = opcode == READ_REQUEST

    def _mac_control(self, timestamp_s: float, frame: bytes, offset: int, src: bytes) -> None:
        _, asked = mac_control(frame, offset)  # read padded, as the switch and the NIC read it
        if not isinstance(asked, dict):  # not PFC
            return
        self.pfc_frames += 1
        direction = UNKNOWN if self.own_mac is None else TX if src == self.own_mac else RX
        for priority, quanta in asked.items():
            record = self.pfc.get((direction, priority))
            if record is None:
                record = self.pfc[direction, priority] = PfcCount()
            if quanta:
                record.xoff_frames += 1
                record.pause_quanta += quanta
                _stamp(record, "xoff", timestamp_s)
            else:
                record.xon_frames += 1
                _stamp(record, "xon", timestamp_s)

    def report(self, source: str, kernel_drops: int | None = None, link_downs: int | None = None) -> ProbeReport:
        """A snapshot: later counting does not change it."""
        qps = {QpKey(socket.inet_ntoa(dst), qp): _copy(c) for (dst, qp), c in self.qps.items()}
        pfc = {PfcKey(*k): _copy(c) for k, c in self.pfc.items()}
        totals = {
            "frames": self.frames, "bytes": self.bytes, "ipv4_packets": self.ipv4_packets,
            "roce_packets": self.roce_packets, "truncated_frames": self.truncated_frames,
            "pfc_frames": self.pfc_frames,
            "pfc_xoff": sum(c.xoff_frames for c in pfc.values()),
            "pfc_xon": sum(c.xon_frames for c in pfc.values()),
            "ce_packets": self.ecn[ECN_CE],
            "cnps": sum(c.cnps for c in qps.values()),
            "psn_gaps": sum(c.psn_gaps for c in qps.values()),
            "rewinds": sum(c.rewinds for c in qps.values()),
            "retransmitted_packets": sum(c.retransmitted_packets for c in qps.values()),
            "acks": sum(c.acks for c in qps.values()),
            "naks": sum(sum(c.naks.values()) for c in qps.values()),
            "rnr_naks": sum(c.rnr_naks for c in qps.values()),
        }
        return ProbeReport(
            source=source, mac=None if self.own_mac is None else mac_text(self.own_mac),
            first_frame_s=self.first_frame_s, last_frame_s=self.last_frame_s, kernel_drops=kernel_drops,
            link_downs=link_downs,
            totals=totals, ecn=dict(zip(ECN_NAMES, self.ecn)),
            roce_opcodes={opcode_name(op): n for op, n in sorted(self.opcodes.items())},
            pfc=pfc,
            flows={Flow(socket.inet_ntoa(s), socket.inet_ntoa(d), p, sp, dp): _copy(c)
                   for (s, d, p, sp, dp), c in self.flows.items()},
            qps=qps,
        )


def _copy(record):
    return type(record)(**_fields(record))
