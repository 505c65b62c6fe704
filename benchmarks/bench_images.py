"""Time `invoke images` from nothing, with its base cached, and with nothing to do; sizes.

    python benchmarks/bench_images.py

From nothing: an empty cache folder, so debootstrap runs (the machine's apt mirror). With
the base cached: the same again (`--force`): wheels, venv and import only, what every change
to rocelab's sources costs the next container `up`. Nothing to do: the images hold this
checkout already. Each is the whole `rocelab images` command, as a user waits for it. Needs
root and Docker Engine; leaves the images built.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rocelab.engines import dockercli  # noqa: E402
from rocelab.engines.clabfile import HOST_IMAGE, SWITCH_IMAGE  # noqa: E402


def timed_images(cache: Path, *flags: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rocelab", "images", *flags], check=True, capture_output=True,
                   env={**os.environ, "ROCELAB_CACHE_DIR": str(cache)})
    return time.perf_counter() - start


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("bench_images: needs root (debootstrap, chroot, Docker)")
    with tempfile.TemporaryDirectory(prefix="rocelab-bench-cache-", dir="/var/tmp") as tmp:
        cache = Path(tmp)
        rows = [("from nothing (debootstrap, wheels, venv, import)", timed_images(cache, "--force")),
                ("base cached (wheels, venv, import)", timed_images(cache, "--force")),
                ("nothing to do (images hold this checkout)", timed_images(cache))]
        base = sum(p.stat().st_size for p in cache.glob("base-*.tar"))
    for what, seconds in rows:
        print(f"{what:52} {seconds:7.1f} s")
    print(f"{'base root filesystem tarball (cached)':52} {base / 1e6:7.0f} MB")
    for tag in (SWITCH_IMAGE, HOST_IMAGE):
        found = dockercli.image(tag)
        print(f"{tag + ' (' + found['Id'].split(':')[-1][:12] + ')':52} {int(found['Size']) / 1e6:7.0f} MB")


if __name__ == "__main__":
    main()
