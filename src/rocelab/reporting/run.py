"""A run's report: PNG plots of its time series and one self-contained HTML page.

    report = write_report(None, lab_state, series, tables, verdict, "lab-pfc: 4:1 incast")
    # runs/<lab>-<YYYYmmdd-HHMMSS>/report.html, beside topology.png, queue_depth.png,
    # pfc.png, flow_rates.png, cnps_drops.png and series.json

The HTML embeds every picture as a data URI, so the one file can be mailed or attached to
a ticket; it also links the PNGs beside it. A plot with nothing to show (no NIC agents,
so no per-flow rates) is left out and the page says why. Plots run on emulated time, with
production-equivalent time (emulated / TDF) on the top axis; rates are shown
production-equivalent (emulated × TDF), byte counts as they are.
"""

from __future__ import annotations

import base64
import html
import json
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Sequence

from rocelab.reporting import graph

from rocelab import paths
from rocelab.errors import InputError
from rocelab.model.lab import load_lab
from rocelab.engines.state import LabState
from rocelab.runtime.timeseries import GAUGE, KINDS, Series, TimeSeries
from rocelab.model.topology import Fabric, load_topology

REPORT_NAME = "report.html"
DASHBOARD_NAME = "dashboard.html"  # a dashboard snapshot, when one served during the run
LINES_PER_GROUP = 6  # the busiest few stay legible; the rest are in series.json

Table = tuple[str, Sequence[str], Sequence[Sequence[object]]]  # (title, columns, rows)


@dataclass(frozen=True)
class _Lines:
    series: list[Series]
    prefix: str  # legend prefix: "tx ", "rx " …
    style: str  # matplotlib line style
    scale: float = 1.0


@dataclass(frozen=True)
class _Panel:
    title: str
    ylabel: str
    groups: list[_Lines]


@dataclass(frozen=True)
class _Plot:
    file: str
    caption: str
    absent: str  # what the page says when there is nothing to plot
    panels: list[_Panel]


def default_run_dir(lab: str, now: datetime | None = None) -> Path:
    """runs/<lab>-<YYYYmmdd-HHMMSS>/ under the project, made unique if that second is taken."""
    stem = paths.project_root() / "runs" / f"{lab}-{(now or datetime.now()).strftime('%Y%m%d-%H%M%S')}"
    candidate, n = stem, 1
    while candidate.exists():
        n += 1
        candidate = stem.with_name(f"{stem.name}-{n}")
    return candidate


def _busiest(series: list[Series], n: int = LINES_PER_GROUP) -> list[Series]:
    active = [s for s in series if any(s.values)]
    return sorted(active, key=lambda s: (max(s.values), sum(s.values)), reverse=True)[:n]


def uplink_share(ts: TimeSeries, uplinks: dict[str, list[str]]) -> list[Series]:
    """Per leaf (node → its uplink ports), its busiest uplink's tx over its uplinks' mean, per
    interval: 1 is an even spread, N all on one of N; 0 where the uplinks sent nothing."""
    shares = []
    for leaf, ports in sorted(uplinks.items()):
        rates = [s.values for s in ts.series if s.kind == "port_tx_bps" and s.labels.get("node") == leaf
                 and s.labels.get("port") in ports]
        if not rates:
            continue
        values = []
        for at in zip(*rates):
            mean = sum(at) / len(ports)
            values.append(max(at) / mean if mean else 0.0)
        shares.append(Series("uplink_share", {"node": leaf}, values))
    return shares


def _uplinks(fabric: Fabric) -> dict[str, list[str]]:
    """Each leaf's ports towards a spine."""
    return {s.name: [p.name for p in s.ports if fabric.node(p.peer_node).role == "spine"]
            for s in fabric.switches if s.role == "leaf"}


def _plots(ts: TimeSeries, uplinks: dict[str, list[str]] | None = None) -> list[_Plot]:
    production_gbps = ts.tdf / 1e9
    flows = _busiest(ts.of("qp_tx_bps"))
    # A receiver's QP sends only ACKs (under 1% of a data flow's peak) and idles at line
    # rate in congestion control: plotting it would only crowd the data flows.
    flows = [f for f in flows if max(f.values) >= 0.01 * max(flows[0].values)] if flows else []
    cc_rates = [s for s in ts.of("qp_rate_bps") if s.labels in [f.labels for f in flows]]
    return [
        _Plot("queue_depth.png", "Egress queue depth over time, busiest queues.", "no egress queue held any bytes",
              [_Panel("egress queue depth", "kB", [_Lines(_busiest(ts.of("queue_depth_bytes")), "", "-", 1e-3)])]),
        _Plot("pfc.png", "PFC frames sent and received per sample interval, and pause state.",
              "no PFC frame was sent or received",
              [_Panel("PFC frames per sample", "frames", [_Lines(_busiest(ts.of("pfc_tx_frames")), "tx ", "-"),
                                                          _Lines(_busiest(ts.of("pfc_rx_frames")), "rx ", "--")]),
               _Panel("pause state", "share of interval / on", [
                   _Lines(_busiest(ts.of("paused_fraction")), "paused ", "-"),
                   _Lines(_busiest(ts.of("pg_xoff")), "xoff ", ":")])]),
        _Plot("flow_rates.png", "Per-flow rate: measured from sent bytes (solid) and congestion control's "
                                "rate (dashed), production-equivalent.", "no queue pair reported a rate (no nicd)",
              [_Panel("per-flow rate", "Gb/s (production-equivalent)", [
                  _Lines(flows, "sent ", "-", production_gbps),
                  _Lines(cc_rates, "cc ", "--", production_gbps)])]),
        _Plot("cnps_drops.png", "ECN marks, CNPs, drops and retransmissions per sample interval.",
              "no ECN mark, CNP, drop or retransmission",
              [_Panel("ECN marks and CNPs per sample", "packets", [
                  _Lines(_busiest(ts.of("ecn_marked_packets")), "CE ", "-"),
                  _Lines(_busiest(ts.of("cnps_received")), "CNP rx ", "--")]),
               _Panel("drops and retransmissions per sample", "packets", [
                   _Lines(_busiest(ts.of("drops")), "drop ", "-"),
                   _Lines(_busiest(ts.of("retransmitted_packets")), "retx ", "--")])]),
        _Plot("load_balance.png", "How evenly each leaf spread its bytes over its uplinks (busiest ÷ mean, per "
                                  "interval), and the reordering the receivers saw.",
              "no leaf uplink carried bytes and no packet arrived out of order",
              [_Panel("uplink share (busiest ÷ mean uplink)", "× mean", [
                  _Lines(uplink_share(ts, uplinks or {}), "", "-")]),
               _Panel("reordering", "packets / PSNs", [
                   _Lines(_busiest(ts.of("ooo_received")), "out of order ", "-"),
                   _Lines(_busiest(ts.of("reorder_distance_max")), "max distance ", "--")])]),
    ]


def _draw(plot: _Plot, ts: TimeSeries, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # no display: write the file only
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(plot.panels), 1, figsize=(9, 3.4 * len(plot.panels)), sharex=True, squeeze=False)
    for ax, panel in zip(axes[:, 0], plot.panels):
        drawn = 0
        colours: dict[str, str] = {}  # one colour per place, so a flow's sent and cc lines match
        for group in panel.groups:
            for s in group.series:
                # A per-interval value covers the interval that ends at its sample.
                step = "default" if KINDS[s.kind] == GAUGE else "steps-pre"
                colour = colours.setdefault(s.title, f"C{len(colours) % 10}")
                ax.plot(ts.t_s, [v * group.scale for v in s.values], group.style, drawstyle=step, color=colour,
                        label=f"{group.prefix}{s.title}", linewidth=1.2)
                drawn += 1
        if drawn:
            ax.legend(fontsize=7, loc="upper right", ncol=2 if drawn > 6 else 1)
        else:
            ax.text(0.5, 0.5, "none in this run", transform=ax.transAxes, ha="center", va="center", color="#777777")
        ax.set_title(panel.title, fontsize=10, loc="left")
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("emulated time (s)")
    tdf = ts.tdf
    top = axes[0, 0].secondary_xaxis("top", functions=(lambda t: t / tdf * 1e3, lambda ms: ms * tdf / 1e3))
    top.set_xlabel(f"production-equivalent time (ms, emulated / TDF {tdf})")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def _fabric(record: LabState) -> Fabric:
    """The lab's fabric, re-read from the lab or topology file it was brought up from."""
    source = Path(record.source)
    if not source.is_absolute() and not source.exists():
        source = paths.project_root() / source
    if source.name == "lab.yml":
        return load_lab(source.parent.name).fabric
    return load_topology(source)


def _data_uri(png: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def _figure(png: Path, caption: str) -> str:
    name = html.escape(png.name)
    return (f'<figure><a href="{name}"><img src="{_data_uri(png)}" alt="{html.escape(caption)}"></a>'
            f'<figcaption>{html.escape(caption)} (<a href="{name}">{name}</a>)</figcaption></figure>')


def _table(title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>" for row in rows)
    return f"<h3>{html.escape(title)}</h3><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict(verdict: str | None) -> str:
    if verdict is None:
        return ""
    first = verdict.strip().lower()
    tone = "pass" if first.startswith("pass") else "fail" if first.startswith("fail") else "note"
    return f'<div class="verdict {tone}"><strong>Verdict:</strong> {html.escape(verdict)}</div>'


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
.meta { color: #555; }
.verdict { padding: .8em 1em; border-radius: 6px; margin: 1em 0; background: #eee; }
.verdict.pass { background: #e3f4e3; border-left: 6px solid #2e8b2e; }
.verdict.fail { background: #fbe4e4; border-left: 6px solid #c0392b; }
figure { margin: 1em 0; } img { max-width: 100%; border: 1px solid #ddd; }
figcaption, .absent { color: #555; font-size: .9em; }
table { border-collapse: collapse; margin-bottom: 1.5em; font-size: .9em; }
th, td { border-bottom: 1px solid #ddd; padding: .25em .7em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
"""


def _meta(record: LabState, ts: TimeSeries) -> str:
    span_s = ts.t_s[-1] - ts.t_s[0] if len(ts.t_s) > 1 else 0.0
    missed = ", ".join(f"{node} missed {n}" for node, n in sorted(ts.missed_polls.items()))
    return (f'<p class="meta">Lab <strong>{html.escape(record.name)}</strong> · {html.escape(record.dataplane)} '
            f"data plane · TDF {ts.tdf} · {len(ts.t_s)} samples every {ts.interval_s * 1e3:.3g} ms · "
            f"{span_s:.3f} s emulated = {span_s / ts.tdf * 1e3:.3f} ms production-equivalent"
            f"{' · polls: ' + html.escape(missed) if missed else ''} · written "
            f"{datetime.now().strftime('%Y-%m-%d %H:%M:%S')}</p>")


def write_reports(run_dir: Path, lab_state: LabState, cases: Sequence[tuple[str, TimeSeries, str, str]],
                  tables: Sequence[Table], dashboard: Path | None = None) -> list[Path]:
    """Every case's report of one run (cases: folder name, series, verdict, title), each in
    `run_dir`/NAME: the topology drawn once for the run, the cases written by a worker process
    per core, which `invoke run` can spare once its last case is done and the agents idle."""
    run_dir.mkdir(parents=True, exist_ok=True)
    topology = None
    try:
        topology = graph.draw(_fabric(lab_state), run_dir / "topology.png")
    except InputError:
        pass  # each case's report says why it has no picture
    jobs = [(run_dir / name, lab_state, series, tables, verdict, title, dashboard, topology)
            for name, series, verdict, title in cases]
    workers = min(len(jobs), os.cpu_count() or 1)
    if workers <= 1:
        return [write_report(*job) for job in jobs]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        return list(pool.map(write_report, *zip(*jobs)))


def write_report(run_dir: Path | None, lab_state: LabState, series: TimeSeries, tables: Sequence[Table],
                 verdict: str | None, title: str, dashboard: Path | None = None,
                 topology: Path | None = None) -> Path:
    """Write the plots, series.json and report.html into `run_dir` (None: a new folder under
    runs/); returns the report's path, whose folder is the run folder. `dashboard`: a
    dashboard snapshot (one HTML file) the report links to; `topology`: the lab's picture,
    drawn already (else drawn here)."""
    run_dir = Path(run_dir) if run_dir is not None else default_run_dir(lab_state.name)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "series.json").write_text(json.dumps(series.to_json()))

    parts = [f"<h1>{html.escape(title)}</h1>", _meta(lab_state, series), _verdict(verdict), "<h2>Topology</h2>"]
    uplinks = {}
    try:
        fabric = _fabric(lab_state)
        uplinks = _uplinks(fabric)
        picture = run_dir / "topology.png"
        if topology is None:
            graph.draw(fabric, picture)
        else:
            shutil.copyfile(topology, picture)
        parts.append(_figure(picture, f"{lab_state.name}: topology"))
    except InputError as exc:  # the lab's file moved or changed since `up`: say so, keep the report
        parts.append(f'<p class="absent">No topology picture: {html.escape(str(exc))}</p>')

    parts.append("<h2>Over time</h2>")
    for plot in _plots(series, uplinks):
        if not any(group.series for panel in plot.panels for group in panel.groups):
            parts.append(f'<p class="absent">No {html.escape(plot.file.removesuffix(".png"))} plot: '
                         f"{html.escape(plot.absent)}.</p>")
            continue
        _draw(plot, series, run_dir / plot.file)
        parts.append(_figure(run_dir / plot.file, plot.caption))

    if tables:
        parts.append("<h2>Observations</h2>")
        parts += [_table(*t) for t in tables]
    parts.append('<p class="meta">Every sampled series: <a href="series.json">series.json</a>.</p>')
    if dashboard is not None:
        href = html.escape(os.path.relpath(dashboard, run_dir))
        parts.append(f'<p class="meta">The live dashboard as it was: <a href="{href}">{href}</a> '
                     "(one self-contained HTML file: drag the time slider).</p>")
    page = (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{_STYLE}</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n")
    report = run_dir / REPORT_NAME
    report.write_text(page)
    return report

