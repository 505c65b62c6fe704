"""rocelab's switch and host images, built on this machine with no container registry.

    invoke images [--force]

One root filesystem serves both roles (whether switchd or nicd runs in a node is the
engine's choice, not the image's), imported once and tagged twice:

1. base: `debootstrap --variant=minbase` of this machine's release against the mirror its
   apt already uses, with python3, venv, iproute2, ping, traceroute and tcpdump (what
   `invoke exec` users reach for) and frr (a switch container's routing suite, `routing: bgp`);
   cached as a tarball,
   so only the first build pays for it;
2. a venv at /opt/rocelab holding rocelab, built as a wheel from this checkout, and its
   dependencies, all as wheels the host's pip fetched (the chroot needs no network);
3. `docker import` of that tree, labelled with a digest of the checkout's sources: an image
   whose rocelab is not the checkout's is rebuilt, one that matches is left alone.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from rich.table import Table

import rocelab
from rocelab import paths
from rocelab.engines import dockercli
from rocelab.engines.clabfile import HOST_IMAGE, SWITCH_IMAGE
from rocelab.errors import InputError, Problem

BASE_PACKAGES = ("python3", "python3-venv", "iproute2", "iputils-ping", "traceroute", "tcpdump", "frr")
VENV = "/opt/rocelab"
SOURCE_LABEL = "org.rocelab.source"
IMAGE_CHANGES = (
    f"ENV PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    'CMD ["sleep", "infinity"]',  # a node is a namespace kept alive; the engine starts its agent
)
APT_SOURCES = (Path("/etc/apt/sources.list"), Path("/etc/apt/sources.list.d"))
CHROOT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}
DEBOOTSTRAP_HINT = "install it: apt-get install debootstrap"


@dataclass(frozen=True)
class ImageResult:
    tag: str
    roles: str
    image_id: str
    size_bytes: int
    built_s: float | None  # None: already present with this checkout's sources


# ---------------------------------------------------------------- pure: sources, digests

def mirror_from_sources(files: list[tuple[str, str]], suite: str) -> str | None:
    """The first `deb` mirror serving `suite`, from apt's one-line (.list) and deb822
    (.sources) files given as (name, text)."""
    for name, text in files:
        if name.endswith(".sources"):
            for stanza in text.split("\n\n"):
                fields: dict[str, list[str]] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line or line[0].isspace():
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.split()
                if ("deb" in fields.get("types", []) and suite in fields.get("suites", [])
                        and fields.get("enabled", ["yes"])[0].lower() != "no" and fields.get("uris")):
                    return fields["uris"][0]
        else:
            for line in text.splitlines():
                words = line.split("#", 1)[0].split()
                if words[:1] != ["deb"]:
                    continue
                if len(words) > 1 and words[1].startswith("["):  # [arch=amd64 signed-by=…]
                    while words and not words[1].endswith("]"):
                        del words[1]
                    del words[1]
                if len(words) >= 3 and words[2] == suite:
                    return words[1]
    return None


def source_digest(checkout: Path) -> str:
    """A digest of what goes into the rocelab wheel: pyproject.toml, setup.py and the package
    sources (the switch's C fast path among them)."""
    digest = hashlib.sha256()
    files = [path for path in (checkout / "pyproject.toml", checkout / "setup.py") if path.exists()]
    files += sorted(p for p in (checkout / "src" / "rocelab").rglob("*") if p.suffix in (".py", ".yml", ".c"))
    for path in files:
        digest.update(str(path.relative_to(checkout)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def base_name(suite: str, arch: str, mirror: str) -> str:
    key = hashlib.sha256(" ".join((mirror, *BASE_PACKAGES)).encode()).hexdigest()[:8]
    return f"base-{suite}-{arch}-{key}.tar"


# ---------------------------------------------------------------- the machine

def os_release() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in Path("/etc/os-release").read_text().splitlines() if "=" in line)
    return {k: v.strip('"') for k, v in pairs}


def apt_mirror(suite: str) -> str:
    files = []
    for where in APT_SOURCES:
        candidates = sorted(where.glob("*.list")) + sorted(where.glob("*.sources")) if where.is_dir() else [where]
        files += [(str(p), p.read_text(errors="replace")) for p in candidates if p.is_file()]
    mirror = mirror_from_sources(files, suite)
    if mirror is None:
        raise InputError([Problem("/etc/apt/sources.list", "", f"names no `deb` mirror for {suite}",
                                  "debootstrap builds the images' base from the mirror apt uses")])
    return mirror


def debian_arch() -> str:
    if shutil.which("dpkg") is None:
        raise InputError([Problem("invoke images", "", "builds the images' base with Debian's tools, and there is no dpkg",
                                  "build them on Debian or Ubuntu")])
    return subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=True).stdout.strip()


def checkout() -> Path:
    """The source checkout this rocelab runs from: the wheel is built from it."""
    root = Path(rocelab.__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise InputError([Problem("invoke images", "", f"rocelab runs from {root}, not from a source checkout",
                                  "build the images from a clone (pip install -e .)")])
    return root


def require_build_tools(need_debootstrap: bool) -> None:
    if os.geteuid() != 0:
        raise InputError([Problem("invoke images", "", "needs root to build: debootstrap and chroot",
                                  "run it as root (sudo)")])
    if need_debootstrap and shutil.which("debootstrap") is None:
        raise InputError([Problem("invoke images", "", "needs debootstrap to build the images' base", DEBOOTSTRAP_HINT)])


def _run(argv: list[str], what: str, **kwargs) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, **kwargs)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")


def build_base(target: Path, suite: str, mirror: str) -> None:
    """debootstrap into a scratch folder beside the cache, then one tarball, atomically."""
    with tempfile.TemporaryDirectory(dir=target.parent, prefix="debootstrap-") as scratch:
        root = Path(scratch) / "root"
        _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(root), mirror],
             "debootstrap")
        shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
        shutil.rmtree(root / "var" / "lib" / "apt" / "lists", ignore_errors=True)
        partial = Path(scratch) / "base.tar"
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "tar of the base")
        os.replace(partial, target)


def build_wheels(wheelhouse: Path, source: Path) -> None:
    """rocelab's wheel from the checkout and every dependency's, with the host's pip settings."""
    wheelhouse.mkdir(parents=True, exist_ok=True)
    for stale in wheelhouse.glob("rocelab-*.whl"):
        stale.unlink()
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheelhouse),
          "--find-links", str(wheelhouse), str(source)], "pip wheel")


def chroot_python_version(root: Path) -> str:
    done = subprocess.run(["chroot", str(root), "python3", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                          capture_output=True, text=True, env=CHROOT_ENV, check=False)
    return done.stdout.strip()


def build_rootfs(root: Path, base: Path, wheelhouse: Path) -> None:
    _run(["tar", "--numeric-owner", "-C", str(root), "-xf", str(base)], "unpacking the base")
    here = "%d.%d" % sys.version_info[:2]
    there = chroot_python_version(root)
    if there != here:
        raise InputError([Problem("invoke images", "", f"the image's Python is {there}, this one's {here}: "
                                  "the wheels this pip fetches would not fit it", "run it with the distribution's python3")])
    shutil.copytree(wheelhouse, root / "tmp" / "wheels")
    _run(["chroot", str(root), "python3", "-m", "venv", VENV], "python3 -m venv", env=CHROOT_ENV)
    _run(["chroot", str(root), f"{VENV}/bin/pip", "install", "--quiet", "--no-index", "--no-cache-dir",
          "--find-links", "/tmp/wheels", "rocelab"], "pip install in the image", env=CHROOT_ENV)
    shutil.rmtree(root / "tmp" / "wheels")


def import_image(root: Path, tag: str, digest: str) -> None:
    changes = [f"LABEL {SOURCE_LABEL}={digest}", *IMAGE_CHANGES]
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-cf", "-", "."], stdout=subprocess.PIPE)
    try:
        dockercli.docker("import", *(arg for change in changes for arg in ("--change", change)), "-", tag,
                         stdin=tar.stdout)
    finally:
        tar.stdout.close()
        tar.wait()


def _current(tag: str, digest: str) -> dict | None:
    found = dockercli.image(tag)
    return found if found and (found["Config"].get("Labels") or {}).get(SOURCE_LABEL) == digest else None


def ensure_images(force: bool = False, on_step: Callable[[str], None] = lambda _: None) -> list[ImageResult]:
    """Build the switch and host images unless both exist with this checkout's sources."""
    roles = {SWITCH_IMAGE: "switch", HOST_IMAGE: "host"} if SWITCH_IMAGE != HOST_IMAGE else {SWITCH_IMAGE: "switch, host"}
    source = checkout()
    digest = source_digest(source)
    dockercli.require_docker("invoke images")
    stale = force or any(_current(tag, digest) is None for tag in roles)
    built_s = _build(list(roles), source, digest, on_step) if stale else None
    results = []
    for tag, role in roles.items():
        found = dockercli.image(tag)
        results.append(ImageResult(tag, role, found["Id"].split(":")[-1][:12], int(found["Size"]), built_s))
    return results


def _build(tags: list[str], source: Path, digest: str, on_step: Callable[[str], None]) -> float:
    """Base (cached), wheels, root filesystem, one import under the first tag, the others
    tagged onto it; the images this replaced are removed. Seconds it took."""
    suite = os_release().get("VERSION_CODENAME", "")
    arch = debian_arch()
    mirror = apt_mirror(suite)
    cache = paths.cache_dir()
    base = cache / base_name(suite, arch, mirror)
    require_build_tools(need_debootstrap=not base.is_file())
    replaced = {found["Id"] for found in map(dockercli.image, tags) if found}
    started = time.monotonic()
    cache.mkdir(parents=True, exist_ok=True)
    if not base.is_file():
        on_step(f"debootstrap {suite} ({arch}) from {mirror}")
        build_base(base, suite, mirror)
        # A base of other packages or another mirror is never read again: 200 MB each.
        for stale in cache.glob("base-*.tar"):
            if stale != base:
                stale.unlink()
    on_step("wheels: rocelab from this checkout, and its dependencies")
    build_wheels(cache / "wheels", source)
    first, *others = tags
    with tempfile.TemporaryDirectory(dir=cache, prefix="rootfs-") as scratch:
        on_step("root filesystem: the base, a venv with rocelab")
        build_rootfs(Path(scratch), base, cache / "wheels")
        on_step(f"docker import {first}")
        import_image(Path(scratch), first, digest)
    for tag in others:
        dockercli.docker("tag", first, tag)
    dockercli.remove_images(replaced - {dockercli.image(first)["Id"]})
    return time.monotonic() - started


def render_table(results: list[ImageResult]) -> Table:
    table = Table(title="rocelab images", title_justify="left")
    for column, justify in (("image", "left"), ("role", "left"), ("id", "left"), ("size", "right"), ("", "left")):
        table.add_column(column, justify=justify)
    for r in results:
        status = f"built in {r.built_s:.0f} s" if r.built_s is not None else "present, sources unchanged"
        table.add_row(r.tag, r.roles, r.image_id, f"{r.size_bytes / 1e6:.0f} MB", status)
    return table
