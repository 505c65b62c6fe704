"""`invoke dashboard` in a real browser (Debian's headless Chromium through selenium and
chromedriver) against a running lab-pfc: during the lossless incast leaf1 shows PFC
pauses on priority 3 towards the senders (h1-h4), their NICs show themselves held on priority 3,
its queue 3 towards the receiver h5 fills and the job panel shows the case's busbw; with PFC off
the drops appear; after `down` the page says "no lab up", and after `up` it shows the
lab again. A screenshot of each state is kept (paths printed; `pytest -s` shows them).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from test_labs import CLI, ROOT, cli

pytestmark = pytest.mark.root
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SENDER_PORTS = {f"leaf1:eth{i}" for i in (1, 2, 3, 4)}  # incast-4to1: h1..h4 → h5 (root) on incast-1x5
RECEIVER_PORT = "leaf1:eth5"
SENDER_NIC_PORTS = {f"h{i}:eth1" for i in (1, 2, 3, 4)}
LOSSLESS = 3
if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
    pytest.skip("needs Debian's chromium and chromium-driver", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium (pip install -e '.[dev]')")


@pytest.fixture
def lab_pfc():
    cli("down", check=False)
    cli("up", "lab-pfc")
    yield
    cli("down", check=False)


@pytest.fixture
def dashboard(lab_pfc, tmp_path):
    log = (tmp_path / "dashboard.log").open("w+")
    server = subprocess.Popen([*CLI, "dashboard", "--port", "0"], cwd=ROOT, stdout=subprocess.PIPE, stderr=log,
                              text=True)
    line = server.stdout.readline()  # "dashboard: http://127.0.0.1:PORT/ (…); Ctrl-C stops"
    assert line.startswith("dashboard: http://127.0.0.1:"), line + log.read()
    yield line.split()[1], log
    server.terminate()
    server.wait(timeout=20)
    log.seek(0)
    assert "Traceback" not in log.read()


@pytest.fixture
def browser(tmp_path):
    os.environ["SE_OFFLINE"] = "true"  # never let selenium fetch a browser or driver
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,1000", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(str(CHROMEDRIVER)))
    yield driver
    driver.quit()


def rows(driver, css: str) -> list[dict]:
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => Object.assign({}, e.dataset))", css)


def wait_for(driver, condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition(driver)
        if value:
            return value
        time.sleep(0.1)
    pytest.fail(f"the page never showed {what}; status: {driver.find_element('id', 'status').text}")


def on_slider(driver, seen):
    """Step the time slider back over the recorded frames, newest first: what the page shows
    for the moment `seen` looks for (a browser starved of CPU during the job can skip frames live)."""
    last = driver.execute_script("return frames.length") - 1
    for i in range(last, -1, -1):
        driver.execute_script("const s = document.getElementById('slider'); s.value = arguments[0];"
                              "s.dispatchEvent(new Event('input'))", i)
        found = seen(driver)
        if found:
            break
    else:
        found = None
    if found:
        driver.save_screenshot(found["screenshot"])
    back_to_live = driver.find_element("id", "live")
    if back_to_live.is_displayed():  # a snapshot has no live
        back_to_live.click()
    return found


def watch_case(driver, case: str, seen, timeout_s: float = 240) -> dict:
    """Run one case of lab-pfc while the page is open, polling the page every 0.1 s for what
    `seen(driver)` looks for; if the live page never showed it, look on the time slider.
    The screenshot is of the moment found."""
    job = subprocess.Popen([*CLI, "run", "lab-pfc", "--case", case, "--json"], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    found = None
    deadline = time.monotonic() + timeout_s
    while job.poll() is None and time.monotonic() < deadline:
        if found is None:
            driver.execute_script("live = false")  # hold the frame while we read it
            found = seen(driver)
            if found:
                driver.save_screenshot(found["screenshot"])
            driver.execute_script("live = true")
        time.sleep(0.1)
    out, err = job.communicate(timeout=30)
    how = "live"
    if found is None:
        found, how = on_slider(driver, seen), "on the time slider"
    assert found, f"case {case}: the page never showed it, live or on its time slider; run said: {err[-2000:]}"
    print(f"case {case}: seen {how}")
    return {**found, "run": json.loads(out)}


def test_the_page_shows_pfc_pauses_queue_depth_and_drops_live(dashboard, browser, tmp_path):
    url, _ = dashboard
    browser.get(url)
    wait_for(browser, lambda d: d.execute_script("return document.body.dataset.lab") == "lab-pfc"
             and d.find_element("id", "status").text.startswith("lab-pfc"), 30, "lab-pfc")
    assert browser.execute_script("return typeof Plotly") == "object"  # served from the plotly wheel
    assert len(browser.find_elements("css selector", "#topo .scatterlayer .trace")) > 0

    depth_before = max([float(q["depth"]) for q in rows(browser, f'.queue[data-port="{RECEIVER_PORT}"]')] or [0])

    def pfc_seen(d):
        pauses = [p for p in rows(d, ".pause") if p["dir"] == "tx" and p["port"] in SENDER_PORTS
                  and p["priority"] == str(LOSSLESS)]
        # The senders' NICs, held by those XOFFs, show it on their own ports.
        held = [p for p in rows(d, ".pause") if p["dir"] == "rx" and p["port"] in SENDER_NIC_PORTS
                and p["priority"] == str(LOSSLESS)]
        depth = [float(q["depth"]) for q in rows(d, f'.queue[data-port="{RECEIVER_PORT}"][data-queue="{LOSSLESS}"]')]
        busbw = d.find_elements("id", "busbw")  # the job panel: the running case's busbw so far
        if pauses and held and depth and depth[0] > 0 and busbw:
            return {"pauses": pauses, "held": held, "depth": depth[0], "busbw": busbw[0].text,
                    "screenshot": str(tmp_path / "pfc-on.png")}
        return None

    pfc = watch_case(browser, "pfc", pfc_seen)
    assert pfc["depth"] > depth_before
    assert pfc["busbw"].startswith("busbw ") and pfc["busbw"].endswith("b/s"), pfc["busbw"]
    # This test is about the page: a run the agents could not keep up with (a busy CI machine) is
    # inconclusive, not wrong, and the page must still have shown it; a failed check is a failure.
    assert pfc["run"]["verdict"] in ("passed", "inconclusive"), pfc["run"]["checks"]
    # The run report links the dashboard's snapshot: one HTML file with plotly.js inside.
    snapshot = Path(pfc["run"]["run_dir"]) / "dashboard.html"
    assert snapshot.is_file() and "dashboard.html" in (snapshot.parent / "pfc" / "report.html").read_text()
    assert 'src="plotly.min.js"' not in snapshot.read_text()

    def drops_seen(d):
        drops = [x for x in rows(d, ".drop") if x["port"].startswith("leaf1:") and int(x["total"]) > 0]
        return {"drops": drops, "screenshot": str(tmp_path / "pfc-off-drops.png")} if drops else None

    lossy = watch_case(browser, "no-pfc", drops_seen)
    assert lossy["drops"]
    assert not [p for p in rows(browser, ".pause") if p["dir"] == "tx"]  # lossy: the switch sends no PFC

    cli("down")
    wait_for(browser, lambda d: d.find_element("id", "status").text == "no lab up", 20, '"no lab up"')
    browser.save_screenshot(str(tmp_path / "no-lab-up.png"))
    assert browser.find_elements("css selector", ".queue") == []
    cli("up", "lab-pfc")
    wait_for(browser, lambda d: d.find_element("id", "status").text.startswith("lab-pfc"), 30, "lab-pfc again")

    # The port panel: SONiC-shaped counters of the clicked port.
    browser.execute_script(f"selectPort('{RECEIVER_PORT}')")
    counters = wait_for(browser, lambda d: d.find_element("id", "counters").text, 10, "the port's counters")
    assert "PFC counters" in counters and "Port Rx" in counters and "UC3" in counters
    # The probe button: a short capture on the port comes back as a pcap.
    browser.set_script_timeout(30)
    magic = browser.execute_async_script(
        "const done = arguments[0]; fetch(document.getElementById('probe').href.replace('seconds=3', 'seconds=1'))"
        ".then(r => r.arrayBuffer()).then(b => done(Array.from(new Uint8Array(b.slice(0, 4)))))"
        ".catch(e => done(String(e)))")
    pcap_magic = ([0xD4, 0xC3, 0xB2, 0xA1], [0x4D, 0x3C, 0xB2, 0xA1])  # pcap (µs, ns timestamps), little-endian
    assert magic in pcap_magic or magic[::-1] in pcap_magic, magic
    for shot in ("pfc-on.png", "pfc-off-drops.png", "no-lab-up.png", "snapshot.png"):
        print(f"screenshot: {tmp_path / shot}")
    # The snapshot opens from the file alone, and its slider replays the incast.
    browser.get(snapshot.as_uri())
    wait_for(browser, lambda d: "(snapshot)" in d.find_element("id", "status").text, 20, "the snapshot")
    assert browser.execute_script("return typeof Plotly") == "object"
    replayed = on_slider(browser, lambda d: (f := pfc_seen(d)) and {**f, "screenshot": str(tmp_path / "snapshot.png")})
    assert replayed is not None
    shutil.rmtree(pfc["run"]["run_dir"], ignore_errors=True)
    shutil.rmtree(lossy["run"]["run_dir"], ignore_errors=True)
