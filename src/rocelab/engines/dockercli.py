"""Docker Engine through its own command line, behind a few typed functions.

The `docker` command is what every Docker install ships (Debian's docker.io included), and
containerlab drives the same daemon; a missing command or a daemon that does not answer is
an input error naming what to install or start.
"""

from __future__ import annotations

import json
import shutil
import subprocess

from rocelab.errors import InputError, Problem

INSTALL_HINT = ("install Docker Engine (Debian/Ubuntu: apt-get install docker.io) and start it "
                "(systemctl start docker, or `dockerd &` where there is no systemd)")


class DockerFailed(RuntimeError):
    pass


def require_docker(what: str, also: str = "") -> None:
    """An InputError unless the docker command exists and its daemon answers."""
    hint = f"{INSTALL_HINT}{'; ' + also if also else ''}"
    if shutil.which("docker") is None:
        raise InputError([Problem(what, "", "needs Docker Engine: the docker command is not installed", hint)])
    info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                          check=False)
    if info.returncode != 0:
        last = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        raise InputError([Problem(what, "", f"needs Docker Engine, whose daemon does not answer: {last}", hint)])


def docker(*args: str, stdin=None, timeout_s: float | None = None) -> str:
    """Run `docker ARGS…`; its stdout, or DockerFailed with its stderr."""
    done = subprocess.run(["docker", *args], stdin=stdin, capture_output=True, text=True, check=False,
                          timeout=timeout_s)
    if done.returncode != 0:
        raise DockerFailed(f"docker {' '.join(args[:2])}: {done.stderr.strip() or f'exit {done.returncode}'}")
    return done.stdout


def image(tag: str) -> dict | None:
    """`docker image inspect` of one image; None when there is no image by that tag."""
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True, text=True, check=False)
    return json.loads(done.stdout)[0] if done.returncode == 0 else None


def container_pid(name: str) -> int:
    """The host PID of a running container's first process (its namespaces are that process's)."""
    return int(docker("inspect", "--format", "{{.State.Pid}}", name).strip())


def running(names: list[str]) -> set[str]:
    """Those of these containers that are running (none where Docker is gone)."""
    if not names or shutil.which("docker") is None:
        return set()
    done = subprocess.run(["docker", "inspect", "--format", "{{.Name}} {{.State.Running}}", *names],
                          capture_output=True, text=True, check=False)  # non-zero when any is missing
    return {line.split()[0].lstrip("/") for line in done.stdout.splitlines() if line.endswith(" true")}


def remove(names: list[str]) -> None:
    """Force-remove containers; those already gone are fine."""
    for name in names:
        done = subprocess.run(["docker", "rm", "--force", "--volumes", name], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0 and "No such container" not in done.stderr:
            raise DockerFailed(f"docker rm {name}: {done.stderr.strip()}")


def remove_images(ids: set[str]) -> None:
    """Remove images a rebuild replaced; one a container still runs stays until that lab is down."""
    for image_id in ids:
        subprocess.run(["docker", "image", "rm", image_id], capture_output=True, check=False)
