"""The dashboard's web server: Starlette routes served by uvicorn.

    GET  /                      the page (rocelab/dashboard/page.html)
    GET  /plotly.min.js         plotly.js from the installed plotly package (works offline)
    GET  /events                Server-Sent Events: one frame (JSON) per sample, ≥ 5 a second
    GET  /history               the frames kept for the time slider
    GET  /port/{node}/{port}    that port's counters in SONiC's shapes (`show counters`), as text
    GET  /probe/{node}/{port}   capture N seconds (?seconds=) on the port; the pcap comes back
    GET  /snapshot              one self-contained HTML file: the page, plotly.js and every frame
"""

from __future__ import annotations

import asyncio
import io
import json
import socket
import tempfile
import time
from importlib import resources
from pathlib import Path

from rich.console import Console
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route

from rocelab import probes

from rocelab.reporting import views
from rocelab.engines import state as lab_state
from rocelab.dashboard.sampler import DashboardSampler

MAX_PROBE_S = 30.0


def plotly_js() -> Path:
    """plotly.min.js as the plotly wheel installs it."""
    return Path(str(resources.files("plotly") / "package_data" / "plotly.min.js"))


def page_html(*, snapshot: list[dict] | None = None, inline_js: str | None = None) -> str:
    """The page; with `snapshot` it replays those frames and needs no server."""
    page = (resources.files("rocelab.dashboard") / "page.html").read_text()
    script = f"<script>{inline_js}</script>" if inline_js else '<script src="plotly.min.js"></script>'
    # </ inside JSON would close the script element early.
    frames = "null" if snapshot is None else json.dumps(snapshot).replace("</", "<\\/")
    return page.replace("<!--PLOTLY-->", script).replace("/*SNAPSHOT*/null", frames)


def port_text(record: lab_state.LabState, reading, before, node: str, port: str,
              line_rate_bps: float | None) -> str | None:
    """One port's counters as `invoke show counters` prints them; None when the agent is silent."""
    agent = next((a for a in reading.agents if a.node == node), None) if reading else None
    if agent is None or agent.reply is None:
        return None
    out = Console(file=io.StringIO(), width=150, record=True, color_system=None)
    counters = agent.reply["counters"]
    if agent.agent == "switchd":
        if port not in counters["ports"]:
            return None
        now = {"ports": {port: counters["ports"][port]}}
        old = next((a for a in before.agents if a.node == node and a.reply), None) if before else None
        interval_s = reading.t_s - before.t_s if old else 1.0
        then = {"ports": {port: old.reply["counters"]["ports"][port]}} if old else None
        chosen = views.VIEWS if then is not None and line_rate_bps else \
            tuple(v for v in views.VIEWS if v != "interfaces")  # its BPS and UTIL need two readings and the rate
        out.print(views.switch_views(node, now, then, interval_s, {port: line_rate_bps}, record.tdf, chosen))
    else:
        out.print(views.nic_view(node, counters, record.tdf))
    return out.export_text()


def app(sampler: DashboardSampler) -> Starlette:
    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(page_html())

    async def js(request: Request) -> FileResponse:
        return FileResponse(plotly_js(), media_type="text/javascript")

    async def events(request: Request) -> StreamingResponse:
        async def stream():
            seen = -1
            try:
                while not await request.is_disconnected():
                    if sampler.seq != seen:
                        seen = sampler.seq
                        yield f"data: {json.dumps(sampler.latest)}\n\n"
                    await asyncio.sleep(sampler.interval_s / 4)
            except asyncio.CancelledError:  # the browser left, or the server stops
                return

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store"})

    async def history(request: Request) -> JSONResponse:
        return JSONResponse(list(sampler.frames))

    async def port(request: Request) -> PlainTextResponse:
        node, name = request.path_params["node"], request.path_params["port"]
        record = sampler.record_now
        before, reading = sampler.last_readings
        text = port_text(record, reading, before, node, name, sampler.line_rates.get(f"{node}:{name}")) \
            if record else None
        if text is None:
            return PlainTextResponse(f"no counters for {node}:{name} (no lab up, or its agent is silent)",
                                     status_code=404)
        return PlainTextResponse(text)

    async def probe(request: Request):
        node, name = request.path_params["node"], request.path_params["port"]
        try:
            seconds = min(MAX_PROBE_S, max(0.5, float(request.query_params.get("seconds", "3"))))
        except ValueError:
            return PlainTextResponse("seconds: expected a number, e.g. 3", status_code=400)
        record = sampler.record_now
        try:
            netns = record.node(node).netns if record else None
        except KeyError:
            netns = None
        if netns is None:
            return PlainTextResponse(f"{node}:{name}: no such node in the lab up", status_code=404)
        target = Path(tempfile.mkdtemp(prefix="rocelab-dashboard-")) / f"{record.name}-{node}-{name}.pcap"

        def capture() -> None:
            with probes.Probe(netns, name, target) as p:
                time.sleep(seconds)
                p.stop()

        try:
            await run_in_threadpool(capture)
        except (probes.ProbeError, OSError) as exc:
            return PlainTextResponse(f"probe on {node}:{name} failed: {exc}", status_code=500)
        return FileResponse(target, media_type="application/vnd.tcpdump.pcap", filename=target.name)

    async def snapshot(request: Request) -> HTMLResponse:
        body = page_html(snapshot=list(sampler.frames), inline_js=plotly_js().read_text())
        return HTMLResponse(body, headers={"Content-Disposition": 'attachment; filename="dashboard.html"'})

    return Starlette(routes=[
        Route("/", index), Route("/plotly.min.js", js), Route("/events", events), Route("/history", history),
        Route("/port/{node}/{port}", port), Route("/probe/{node}/{port}", probe), Route("/snapshot", snapshot),
    ])


def bind(address: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts so a port in use is our message, not its."""
    sock = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((address, port))
    except OSError:
        sock.close()
        raise
    sock.listen(64)
    return sock
