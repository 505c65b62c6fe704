"""How a probe's counts look to a person: rich tables, and a view that refreshes while it runs."""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import nullcontext

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from rocelab.probes.capture import Probe
from rocelab.ethernet import PRIORITIES
from rocelab.probes.tally import ProbeReport

MAX_ROWS = 20  # flows and QPs beyond this are in the JSON, not on screen


def _n(value: int) -> str:
    return f"{value:,}"


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)  # as SONiC's show commands
    for i, column in enumerate(columns):
        table.add_column(column, justify="left" if i == 0 else "right")
    return table


def render(report: ProbeReport) -> Group:
    t = report.totals
    drops = "N/A" if report.kernel_drops is None else _n(report.kernel_drops)
    # Label/value pairs, three to a row: the summary fits an 80-column terminal.
    cells = [("frames", _n(t["frames"])), ("bytes", _n(t["bytes"])), ("kernel drops", drops),
             ("RoCE", _n(t["roce_packets"])), ("CE", _n(t["ce_packets"])), ("CNPs", _n(t["cnps"])),
             ("PFC XOFF", _n(t["pfc_xoff"])), ("PFC XON", _n(t["pfc_xon"])), ("NAKs", _n(t["naks"])),
             ("PSN gaps", _n(t["psn_gaps"])), ("rewinds", _n(t["rewinds"])),
             ("retransmitted", _n(t["retransmitted_packets"]))]
    flaps = f" · link down {report.link_downs}×" if report.link_downs else ""
    summary = Table(title=f"probe {report.source} · mac {report.mac or 'N/A'} · {report.duration_s:.3f} s{flaps}",
                    title_justify="left", show_header=False, box=box.SIMPLE_HEAD, pad_edge=False)
    for _ in range(3):
        summary.add_column(style="bold")
        summary.add_column(justify="right")
    for i in range(0, len(cells), 3):
        summary.add_row(*(text for cell in cells[i:i + 3] for text in cell))
    parts = [summary]

    ecn = _table("ECN (IPv4 packets)", "not-ECT", "ECT(0)", "ECT(1)", "CE")
    ecn.columns[0].justify = "right"
    ecn.add_row(*(_n(report.ecn[k]) for k in ("not_ect", "ect0", "ect1", "ce")))
    parts.append(ecn)

    if report.pfc:
        pfc = _table("PFC frames per priority", "dir", "", *(f"PFC{p}" for p in range(PRIORITIES)))
        for direction in sorted({d for d, _ in report.pfc}):
            counts = [report.pfc.get((direction, p)) for p in range(PRIORITIES)]
            for i, (label, field) in enumerate((("XOFF", "xoff_frames"), ("XON", "xon_frames"),
                                                ("quanta", "pause_quanta"))):
                pfc.add_row(direction if i == 0 else "", label,
                            *(_n(getattr(c, field)) if c else "0" for c in counts), end_section=i == 2)
        parts.append(pfc)

    if report.qps:
        qps = _table("RoCE per QP: PSN gaps, PSNs missing, go-back-N rewinds, retransmitted packets",
                     "dst/QP", "pkts", "gaps", "missing", "rewinds", "retx", "CNPs", "ACKs", "NAKs")
        rows = sorted(report.qps.items(), key=lambda kv: -kv[1].packets)
        labels = [f"{key.dst}/0x{key.qp:x}" for key, _ in rows[:MAX_ROWS]]
        qps.columns[0].min_width = max(map(len, labels))  # narrow terminals squeeze the counts, not the QP
        for label, (key, c) in zip(labels, rows):
            qps.add_row(label, _n(c.packets), _n(c.psn_gaps), _n(c.psns_missing), _n(c.rewinds),
                        _n(c.retransmitted_packets), _n(c.cnps), _n(c.acks), _n(sum(c.naks.values()) + c.rnr_naks))
        codes: dict[str, int] = {}
        for c in report.qps.values():
            for code, n in [*c.naks.items(), ("rnr", c.rnr_naks)]:
                codes[code] = codes.get(code, 0) + n
        notes = [f"NAKs: {', '.join(f'{code} {n:,}' for code, n in sorted(codes.items()) if n)}"] if any(codes.values()) \
            else []
        if len(rows) > MAX_ROWS:
            notes.append(f"… {len(rows) - MAX_ROWS} more QPs in --json")
        qps.caption = "; ".join(notes) or None
        parts.append(qps)

    if report.flows:
        flows = _table("IPv4 flows", "flow", "protocol", "packets", "bytes", "CE", "CE %")
        rows = sorted(report.flows.items(), key=lambda kv: (-kv[1].ce_packets, -kv[1].packets))
        for f, c in rows[:MAX_ROWS]:
            flows.add_row(f"{f.src}:{f.sport} → {f.dst}:{f.dport}", str(f.protocol), _n(c.packets), _n(c.bytes),
                          _n(c.ce_packets), f"{100 * c.ce_packets / c.packets:.1f}")
        if len(rows) > MAX_ROWS:
            flows.caption = f"… {len(rows) - MAX_ROWS} more flows in --json"
        parts.append(flows)

    if report.roce_opcodes:
        opcodes = _table("RoCE opcodes", "opcode", "packets")
        for name, n in report.roce_opcodes.items():
            opcodes.add_row(name, _n(n))
        parts.append(opcodes)
    return Group(*parts)


def _start_holding_stops(probe: Probe) -> bool:
    """Start the capture. A Ctrl-C or SIGTERM while it starts (the command's own start-up can take
    seconds on a busy machine) is held, and ends the capture as soon as it runs, with its report:
    True when one came. Signals are the main thread's only: elsewhere, a plain start."""
    if threading.current_thread() is not threading.main_thread():
        probe.start()
        return False
    came: list[int] = []
    held = {stop: signal.signal(stop, lambda number, _: came.append(number))
            for stop in (signal.SIGINT, signal.SIGTERM)}
    try:
        probe.start()
    finally:
        for stop, handler in held.items():
            signal.signal(stop, handler)
    return bool(came)


def live(netns: str | None, iface: str, duration_s: float | None = None, pcap: str | os.PathLike | None = None,
         json: bool = False, console: Console | None = None, refresh_s: float = 0.5) -> ProbeReport:
    """Capture for `duration_s` (None: until Ctrl-C), refreshing the counts on screen.

    Without `json` the view goes to `console` (stdout) and its last state stays there; with no
    terminal (CI) only that last state is written. With `json` the view goes to stderr, and
    only to a terminal, so stdout is left for the one JSON document the caller prints from the
    returned report."""
    console = console or Console(stderr=json)
    show = not json or console.is_terminal
    deadline = None if duration_s is None else time.monotonic() + duration_s
    probe = Probe(netns, iface, pcap)
    stopped = _start_holding_stops(probe)
    with probe:
        view = Live(render(probe.snapshot()), console=console, transient=json, auto_refresh=False) if show \
            else nullcontext()
        with view:
            try:
                while not stopped and (deadline is None or time.monotonic() < deadline):
                    time.sleep(refresh_s if deadline is None else max(0.0, min(refresh_s, deadline - time.monotonic())))
                    if show:
                        view.update(render(probe.snapshot()), refresh=True)
            except KeyboardInterrupt:
                pass  # Ctrl-C ends the capture; the report still comes back
            report = probe.stop()
            if show:
                view.update(render(report), refresh=True)
    return report
