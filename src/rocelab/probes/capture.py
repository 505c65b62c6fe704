"""Live capture: an AF_PACKET socket on one interface inside a node's network namespace.

`Probe` runs the capture in a child process (`python -m rocelab.probes`) that enters the
namespace with setns(2), so the caller keeps its own namespace and drives traffic meanwhile,
and the data planes never import scapy. The child answers one JSON document per line on its
stdout: a hello once the socket is bound (frames sent after `start()` returns are seen), then
a report per `report` or `stop` line on its stdin. It exits when its stdin closes, so a
crashed caller leaves no capture running.

The socket sees both directions (outgoing frames reach packet taps too). The kernel stamps
each frame (SO_TIMESTAMPNS) and hands back the 802.1Q tag that receive offload strips
(PACKET_AUXDATA), so the pcap holds the frame as it was on the wire. Frames the kernel drops
because the probe fell behind are counted (PACKET_STATISTICS) and reported, never hidden.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

from scapy.data import DLT_EN10MB
from scapy.error import Scapy_Exception
from scapy.utils import PcapWriter, RawPcapReader

from rocelab.kernel.netns import (NETNS_DIR, PACKET_AUXDATA, PACKET_STATISTICS, SO_RCVBUFFORCE, SO_TIMESTAMPNS,
                                  SOL_PACKET, enter)
from rocelab.errors import InputError, Problem
from rocelab.ethernet import ETH_P_8021Q, ETH_P_ALL, mac_bytes
from rocelab.probes.tally import ProbeReport, Tally, mac_text

TP_STATUS_VLAN_VALID = 1 << 4
TP_STATUS_VLAN_TPID_VALID = 1 << 6
MAC_ADDRESSES_BYTES = 12

AUXDATA = struct.Struct("=IIIHHHH")  # status, len, snaplen, mac, net, vlan_tci, vlan_tpid
TIMESPEC = struct.Struct("=qq")
PACKET_STATS = struct.Struct("=II")  # packets, drops; the kernel zeroes both on every read
VLAN_TAG = struct.Struct("!HH")  # TPID, TCI
CMSG_BYTES = socket.CMSG_SPACE(AUXDATA.size) + socket.CMSG_SPACE(TIMESPEC.size)

SNAPLEN_BYTES = 65535
# A burst the probe cannot count at once waits here. The kernel doubles it and charges
# ~2.3 KB per 1 KB frame: ~55k such frames.
RCVBUF_BYTES = 64 << 20
DRAIN_BATCH = 512  # frames read between two looks at the control pipe
QUIET_MS = 20  # on stop, frames this late are still counted: they were on their way
ANSWER_TIMEOUT_S = 10.0


class ProbeError(RuntimeError):
    """The probe's child process failed or stopped answering."""


def open_socket(iface: str) -> socket.socket:
    # Protocol 0 at creation: nothing is queued until bind() names the interface, so the
    # socket never holds another interface's frames.
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RCVBUF_BYTES)
        sock.setsockopt(SOL_PACKET, PACKET_AUXDATA, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind((iface, ETH_P_ALL))
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return sock


def unpack_received(data: bytes, ancdata: list[tuple[int, int, bytes]]) -> tuple[int, int, bytes]:
    """(seconds, nanoseconds, frame as on the wire) from one recvmsg() on a packet socket."""
    sec = nsec = 0
    for level, kind, payload in ancdata:
        if level == SOL_PACKET and kind == PACKET_AUXDATA:
            status, _, _, _, _, tci, tpid = AUXDATA.unpack_from(payload)
            if status & TP_STATUS_VLAN_VALID:
                tag = VLAN_TAG.pack(tpid if status & TP_STATUS_VLAN_TPID_VALID else ETH_P_8021Q, tci)
                data = data[:MAC_ADDRESSES_BYTES] + tag + data[MAC_ADDRESSES_BYTES:]
        elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = TIMESPEC.unpack_from(payload)
    return sec, nsec, data


def open_pcap(path: str | os.PathLike) -> PcapWriter:
    """A pcap (Ethernet, nanosecond stamps) whose header is written at once: an empty capture
    is still a file tshark opens."""
    writer = PcapWriter(str(path), linktype=DLT_EN10MB, nano=True, bufsz=1 << 20)
    writer.write_header(None)
    return writer


def decode_pcap(path: str | os.PathLike, mac: str | None = None) -> ProbeReport:
    """Count a capture file (pcap or pcapng, Ethernet) as a live probe would have.

    `mac` is the capturing interface's own MAC, which tells tx PFC frames from rx; without
    it their direction is "unknown"."""
    tally = Tally(mac_bytes(mac) if mac else None)
    try:
        reader = RawPcapReader(str(path))
    except (OSError, Scapy_Exception) as exc:
        raise InputError([Problem(str(path), "", f"is not a capture file ({exc})", "a pcap or pcapng file")]) from None
    with reader:
        pcap_linktype = getattr(reader, "linktype", DLT_EN10MB)  # pcapng: per interface, below
        for frame, meta in reader:
            if getattr(meta, "linktype", pcap_linktype) != DLT_EN10MB:
                raise InputError([Problem(str(path), "", "holds frames that are not Ethernet",
                                          "capture on an Ethernet interface (linktype 1)")])
            if hasattr(meta, "tsresol"):
                timestamp_s = ((meta.tshigh << 32) | meta.tslow) / meta.tsresol
            else:
                timestamp_s = meta.sec + meta.usec * (1e-9 if reader.nano else 1e-6)
            tally.count(timestamp_s, frame)
    return tally.report(str(path))


class _Capture:
    """The child's side: one bound socket, its tally, an optional pcap."""

    def __init__(self, sock: socket.socket, source: str, pcap: str | None):
        self.sock = sock
        self.source = source
        self.own_mac = sock.getsockname()[4]  # a bound packet socket names its device's address
        self.tally = Tally(self.own_mac)
        self.pcap = open_pcap(pcap) if pcap else None
        self.kernel_drops = 0
        self.link_downs = 0

    def drain(self, limit: int) -> None:
        recvmsg, count = self.sock.recvmsg, self.tally.count
        write = self.pcap.write_packet if self.pcap else None
        done = 0
        while done < limit:
            try:
                data, ancdata, _, _ = recvmsg(SNAPLEN_BYTES, CMSG_BYTES)
            except BlockingIOError:
                break
            except OSError as exc:
                # The interface went down (a link flap, or it was down at bind): the kernel says
                # so once, and hands us frames again when it comes back up.
                if exc.errno != errno.ENETDOWN:
                    raise
                self.link_downs += 1
                break
            sec, nsec, frame = unpack_received(data, ancdata)
            count(sec + nsec * 1e-9, frame)
            if write:
                write(frame, sec=sec, usec=nsec)
            done += 1

    def report(self) -> dict:
        _, drops = PACKET_STATS.unpack(self.sock.getsockopt(SOL_PACKET, PACKET_STATISTICS, PACKET_STATS.size))
        self.kernel_drops += drops
        return self.tally.report(self.source, self.kernel_drops, self.link_downs).to_json()

    def linger(self) -> None:
        """On stop: count every frame queued before it (the backlog of a probe that fell behind
        too), and those still on their way, until QUIET_MS pass with none or frames stamped
        QUIET_MS after the stop come up (traffic that never stops)."""
        stop_s = time.time()  # the kernel stamps frames with the same clock (CLOCK_REALTIME)
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        while poller.poll(QUIET_MS):
            self.drain(DRAIN_BATCH)
            if self.tally.last_frame_s > stop_s + QUIET_MS / 1000:
                break

    def serve(self) -> None:
        poller = select.poll()
        poller.register(self.sock, select.POLLIN)
        poller.register(sys.stdin.fileno(), select.POLLIN)
        while True:
            for fd, _ in poller.poll():
                if fd == self.sock.fileno():
                    self.drain(DRAIN_BATCH)
                    continue
                commands = os.read(fd, 4096).split()
                if not commands or b"stop" in commands:
                    self.linger()
                    if self.pcap:
                        self.pcap.close()
                    if commands:  # else stdin closed: the caller is gone, nobody to answer
                        _answer(self.report())
                    return
                _answer(self.report())


def _answer(doc: dict) -> None:
    line = (json.dumps(doc) + "\n").encode()
    view = memoryview(line)
    while view:
        view = view[os.write(sys.stdout.fileno(), view):]


def _problem(netns: str | None, iface: str, exc: OSError) -> dict:
    if isinstance(exc, PermissionError):
        return {"error": "needs root: a probe opens a packet socket inside a network namespace",
                "hint": "run it as root (sudo), or with CAP_NET_RAW and CAP_SYS_ADMIN"}
    if netns and not (NETNS_DIR / netns).exists():
        known = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else []
        return {"error": f"no network namespace {netns}", "hint": f"namespaces: {', '.join(known) or 'none'}"}
    if exc.errno == errno.ENODEV:
        names = sorted(name for _, name in socket.if_nameindex())
        return {"error": f"no interface {iface}", "hint": f"interfaces: {', '.join(names)}"}
    return {"error": f"cannot capture: {exc}", "hint": ""}


def child_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocelab.probes")
    parser.add_argument("--netns")
    parser.add_argument("--iface", required=True)
    parser.add_argument("--pcap")
    args = parser.parse_args(argv)
    # Ctrl-C reaches the whole process group; the caller decides when the capture ends.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        if args.netns:
            enter(args.netns)
        sock = open_socket(args.iface)
    except OSError as exc:
        _answer(_problem(args.netns, args.iface, exc))
        return 2
    capture = _Capture(sock, f"{args.netns}:{args.iface}" if args.netns else args.iface, args.pcap)
    _answer({"mac": mac_text(capture.own_mac)})
    capture.serve()
    return 0


class Probe:
    """A capture on `iface` inside `netns` (None: the caller's own namespace).

        with Probe("lab.h1", "eth1", pcap="h1.pcap") as probe:
            ...drive traffic...
        probe.report.totals["cnps"]
    """

    def __init__(self, netns: str | None, iface: str, pcap: str | os.PathLike | None = None):
        self.netns, self.iface = netns, iface
        self.pcap = Path(pcap) if pcap else None
        self.mac: str | None = None
        self.report: ProbeReport | None = None  # set by stop()
        self._child: subprocess.Popen | None = None

    @property
    def name(self) -> str:
        return f"{self.netns}:{self.iface}" if self.netns else self.iface

    def start(self) -> Probe:
        """Returns once the socket is bound: every frame from then on is counted."""
        argv = [sys.executable, "-m", "rocelab.probes", "--iface", self.iface]
        if self.netns:
            argv += ["--netns", self.netns]
        if self.pcap:
            argv += ["--pcap", str(self.pcap.resolve())]
        src = str(Path(__file__).resolve().parents[2])  # so the child finds rocelab however we were found
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])))
        self._child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, env=env)
        hello = self._read()
        if "error" in hello:
            self._child.wait()
            self._child = None
            raise InputError([Problem(self.name, "", hello["error"], hello["hint"])])
        self.mac = hello["mac"]
        return self

    def snapshot(self) -> ProbeReport:
        """The counts so far; the capture goes on."""
        return ProbeReport.from_json(self._ask(b"report\n"))

    def stop(self) -> ProbeReport:
        """Reads the frames still on their way, ends the capture, closes the pcap."""
        doc = self._ask(b"stop\n")
        self._child.wait()
        self._close()
        self.report = ProbeReport.from_json(doc)
        return self.report

    def __enter__(self) -> Probe:
        return self if self._child is not None else self.start()

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._child is not None:
            self.stop()  # on an error too: the pcap of a failed run is the one worth reading

    def _ask(self, command: bytes) -> dict:
        if self._child is None:
            raise ProbeError(f"the probe on {self.name} is not running")
        try:
            self._child.stdin.write(command)
            self._child.stdin.flush()
        except BrokenPipeError:
            pass  # the child is gone: _read says why
        return self._read()

    def _read(self) -> dict:
        ready, _, _ = select.select([self._child.stdout], [], [], ANSWER_TIMEOUT_S)
        line = self._child.stdout.readline() if ready else b""
        if line:
            return json.loads(line)
        self._child.kill()
        self._child.wait()
        detail = self._child.stderr.read().decode(errors="replace").strip().splitlines()
        self._close()
        why = detail[-1] if detail else f"no answer within {ANSWER_TIMEOUT_S:g} s"
        raise ProbeError(f"the probe on {self.name} failed: {why}")

    def _close(self) -> None:
        for stream in (self._child.stdin, self._child.stdout, self._child.stderr):
            stream.close()
        self._child = None
