"""Where rocelab finds labs, topologies and profiles, and keeps the state of running labs."""

from __future__ import annotations

import os
from pathlib import Path

# Namespaces live in /run/netns and vanish at reboot; lab state lives beside them so the
# two can never disagree across a reboot.
STATE_DIR = Path(os.environ.get("ROCELAB_STATE_DIR", "/run/rocelab"))


def cache_dir() -> Path:
    """What rocelab keeps between runs on this machine: image bases, the agents' calibration."""
    return Path(os.environ.get("ROCELAB_CACHE_DIR", "/var/cache/rocelab"))


def project_root() -> Path:
    """The folder holding labs/ and topologies/: $ROCELAB_HOME, else the nearest parent of
    the working directory that has both, else the source checkout this package runs from."""
    env = os.environ.get("ROCELAB_HOME")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for folder in (here, *here.parents):
        if (folder / "labs").is_dir() and (folder / "topologies").is_dir():
            return folder
    return Path(__file__).resolve().parents[2]


def labs_dir() -> Path:
    return project_root() / "labs"


def topologies_dir() -> Path:
    return project_root() / "topologies"


def profiles_dir() -> Path:
    return project_root() / "profiles"


def display(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
