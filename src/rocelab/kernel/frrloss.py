"""A share of FRR's own packets lost on a switch port, as a partly failing optic loses them.

switchd emulates a port's partial loss (an `impair` below 100%) on the frames it forwards, in
emulated time. FRR's BGP and BFD packets leave through the namespace's kernel, not the emulated
ASIC, so the same share is taken from them there, or BFD would never see the optic that drops
a share of everything (a gray failure: BFD flaps once three packets in a row are lost).

This kernel has neither netem nor tc's gact action (its random drop), so the drop is a small
BPF program on the port's egress (a clsact qdisc, cls_bpf in direct-action mode): an IPv4
packet from or to TCP port 179 (BGP) or to UDP port 3784, 3785 or 4784 (BFD control, echo,
multihop; RFC 5881, 5883) is dropped when a 16-bit random draw falls under the share; every
other frame passes untouched, switchd's among them. It lives with the port: `clear`, or `down`
with the namespace. What it dropped is the clsact qdisc's drop count.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from rocelab.kernel import deadlink

FILTER_NAME = "rocelab-frr-loss"
EGRESS_PARENT = 0xFFFFFFF3  # TC_H_MAKE(TC_H_CLSACT, TC_H_MIN_EGRESS)
BGP_TCP_PORT = 179
BFD_UDP_PORTS = (3784, 3785, 4784)
DRAW_BITS = 16  # the share's resolution: 1/65,536

# eBPF as the kernel reads it (include/uapi/linux/bpf.h): the few opcodes the program uses.
_LD_ABS_B, _LD_ABS_H, _LD_IND_H = 0x30, 0x28, 0x48
_MOV64_X, _AND64_K, _LSH64_K, _RSH64_K, _MOV64_K = 0xBF, 0x57, 0x67, 0x77, 0xB7
_JA, _JEQ_K, _JGE_K, _CALL, _EXIT = 0x05, 0x15, 0x35, 0x85, 0x95
_HELPER_GET_PRANDOM_U32 = 7
_TC_ACT_OK, _TC_ACT_SHOT = 0, 2
_ETH_HLEN, _ETH_P_IP = 14, 0x0800
_SYS_BPF = 321  # the bpf() system call's number on x86-64
_BPF_PROG_LOAD = 5
_BPF_PROG_TYPE_SCHED_CLS = 3
_LOG_BYTES = 1 << 16


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(loss_pct: float) -> bytes:
    """The egress program (module docstring) dropping `loss_pct` % of FRR's packets."""
    threshold = round(loss_pct / 100 * (1 << DRAW_BITS))
    code: list[tuple] = []  # (opcode, dst, src, label or off, imm) with jumps to labels resolved below
    labels: dict[str, int] = {}

    def emit(opcode: int, dst: int = 0, src: int = 0, to: str | int = 0, imm: int = 0) -> None:
        code.append((opcode, dst, src, to, imm))

    def label(name: str) -> None:
        labels[name] = len(code)

    emit(_MOV64_X, 6, 1)  # r6 = the skb: LD_ABS/LD_IND read through it (and leave with 0 past the end)
    emit(_LD_ABS_H, imm=12)
    emit(_JEQ_K, 0, to="ipv4", imm=_ETH_P_IP)
    emit(_JA, to="pass")
    label("ipv4")
    emit(_LD_ABS_B, imm=_ETH_HLEN)
    emit(_AND64_K, 0, imm=0x0F)
    emit(_LSH64_K, 0, imm=2)
    emit(_MOV64_X, 7, 0)  # r7 = the IPv4 header's length: the ports lie behind it
    emit(_LD_ABS_B, imm=_ETH_HLEN + 9)
    emit(_JEQ_K, 0, to="tcp", imm=6)
    emit(_JEQ_K, 0, to="udp", imm=17)
    emit(_JA, to="pass")
    label("tcp")
    emit(_LD_IND_H, 0, 7, imm=_ETH_HLEN)
    emit(_JEQ_K, 0, to="draw", imm=BGP_TCP_PORT)
    emit(_LD_IND_H, 0, 7, imm=_ETH_HLEN + 2)
    emit(_JEQ_K, 0, to="draw", imm=BGP_TCP_PORT)
    emit(_JA, to="pass")
    label("udp")
    emit(_LD_IND_H, 0, 7, imm=_ETH_HLEN + 2)
    for port in BFD_UDP_PORTS:
        emit(_JEQ_K, 0, to="draw", imm=port)
    emit(_JA, to="pass")
    label("draw")
    emit(_CALL, imm=_HELPER_GET_PRANDOM_U32)
    emit(_RSH64_K, 0, imm=32 - DRAW_BITS)
    emit(_JGE_K, 0, to="pass", imm=threshold)
    emit(_MOV64_K, 0, imm=_TC_ACT_SHOT)
    emit(_EXIT)
    label("pass")
    emit(_MOV64_K, 0, imm=_TC_ACT_OK)
    emit(_EXIT)
    return b"".join(_insn(op, dst, src, labels[to] - at - 1 if isinstance(to, str) else to, imm)
                    for at, (op, dst, src, to, imm) in enumerate(code))


def _load(insns: bytes) -> int:
    """The program loaded into the kernel: its file descriptor. OSError with the verifier's log."""
    libc = ctypes.CDLL(None, use_errno=True)
    text = ctypes.create_string_buffer(insns)
    license_ = ctypes.create_string_buffer(b"GPL")
    log = ctypes.create_string_buffer(_LOG_BYTES)
    # union bpf_attr, BPF_PROG_LOAD's leading fields: type, insn count, insns, license, log level/size/buf
    attr = struct.pack("<IIQQIIQ", _BPF_PROG_TYPE_SCHED_CLS, len(insns) // 8, ctypes.addressof(text),
                       ctypes.addressof(license_), 1, _LOG_BYTES, ctypes.addressof(log))
    buf = ctypes.create_string_buffer(attr, 128)
    fd = libc.syscall(_SYS_BPF, _BPF_PROG_LOAD, buf, 128)
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"the kernel refused rocelab's FRR-loss BPF program ({os.strerror(err)}): "
                           f"{log.value.decode(errors='replace').strip()[-500:]}")
    return fd


def set_loss(netns: str, ifname: str, loss_pct: float) -> None:
    """From now on `ifname` loses `loss_pct` % of FRR's packets (0: none, the program removed)."""
    with IPRoute(netns=netns) as ipr:
        index = ipr.link_lookup(ifname=ifname)[0]
        _remove(ipr, index)
        if loss_pct <= 0:
            return
        fd = _load(program(loss_pct))
        try:
            ipr.tc("add", "clsact", index)
            ipr.tc("add-filter", "bpf", index, ":1", fd=fd, name=FILTER_NAME, parent=EGRESS_PARENT,
                   classid=1, direct_action=True)
        finally:
            os.close(fd)  # the filter holds the program


def _remove(ipr: IPRoute, index: int) -> None:
    try:
        ipr.tc("del", "clsact", index)
    except NetlinkError as exc:
        if exc.code not in (errno.EINVAL, errno.ENOENT):  # no clsact on the port
            raise


def _ours(ipr: IPRoute) -> list[tuple[str, object]]:
    """(interface name, its clsact qdisc) for every port of `ipr`'s namespace losing FRR's packets."""
    return deadlink.on_ports(ipr, [q for q in ipr.get_qdiscs() if q.get_attr("TCA_KIND") == "clsact" and any(
        f.get_nested("TCA_OPTIONS", "TCA_BPF_NAME") == FILTER_NAME
        for f in ipr.get_filters(index=q["index"], parent=EGRESS_PARENT))])


def lost(netns: str) -> dict[str, int]:
    """Ports of `netns` losing FRR's packets: interface name → packets dropped so far."""
    with IPRoute(netns=netns) as ipr:
        return {name: deadlink.drops(q) for name, q in _ours(ipr)}


def clear(netns: str) -> list[str]:
    """No port of `netns` loses FRR's packets any more; the ports it cleared."""
    with IPRoute(netns=netns) as ipr:
        ours = _ours(ipr)
        for _, q in ours:
            _remove(ipr, q["index"])
    return [name for name, _ in ours]
