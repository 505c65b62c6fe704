"""The docker engine: the lab's `.clab.yml` deployed onto Docker Engine directly, the way
containerlab deploys `linux` nodes, for machines without containerlab.

    invoke up LAB --engine docker

Each node: `docker run` of its image with no network (`network-mode: none`: no management
interface, no default route, nothing out of the lab), with the capabilities, binds, sysctls
and env the file gives its kind and node, and containerlab's labels. Links: veth pairs created by pyroute2 straight into the two containers' namespaces,
as on the netns engine. Network OS nodes need containerlab's kinds: `--engine clab`.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from rocelab.engines import dockercli
from rocelab.engines.clabfile import container_name
from rocelab.engines.containers import ContainerEngine
from rocelab.model.lab import Lab
from rocelab.engines.state import LabState
from rocelab.model.topology import refuse_nos_nodes

PULL = {"always": "always", "never": "never", "ifnotpresent": "missing"}  # containerlab's policy → docker's


def node_settings(doc: dict, node: str) -> dict:
    """One node's settings as containerlab combines them: defaults, then its kind's, then its own
    (lists such as binds add up, mappings such as sysctls merge, anything else is replaced)."""
    topology = doc["topology"]
    own = topology["nodes"][node] or {}
    kind = own.get("kind", (topology.get("defaults") or {}).get("kind", "linux"))
    merged: dict = {}
    for layer in (topology.get("defaults") or {}, (topology.get("kinds") or {}).get(kind) or {}, own):
        for key, value in layer.items():
            if isinstance(value, list):
                merged[key] = [*merged.get(key, []), *(v for v in value if v not in merged.get(key, []))]
            elif isinstance(value, dict):
                merged[key] = {**merged.get(key, {}), **value}
            else:
                merged[key] = value
    merged["kind"] = kind
    return merged


def run_argv(lab: str, node: str, settings: dict, topology: Path) -> list[str]:
    """`docker run` arguments for one node of a lab's .clab.yml."""
    argv = ["run", "--detach", "--name", container_name(lab, node), "--hostname", node,
            "--network", settings.get("network-mode", "none"),
            "--pull", PULL[settings.get("image-pull-policy", "IfNotPresent").lower()],
            "--label", f"containerlab={lab}", "--label", f"clab-node-name={node}",
            "--label", f"clab-node-kind={settings['kind']}", "--label", f"clab-topo-file={topology}"]
    if "group" in settings:
        argv += ["--label", f"clab-node-group={settings['group']}"]
    if settings.get("privileged"):
        argv.append("--privileged")
    argv += [arg for cap in settings.get("cap-add", []) for arg in ("--cap-add", cap)]
    argv += [arg for bind in settings.get("binds", []) for arg in ("--volume", bind)]
    argv += [arg for key, value in settings.get("sysctls", {}).items() for arg in ("--sysctl", f"{key}={value}")]
    argv += [arg for key, value in settings.get("env", {}).items() for arg in ("--env", f"{key}={value}")]
    argv += [arg for key, value in settings.get("labels", {}).items() for arg in ("--label", f"{key}={value}")]
    argv.append(settings["image"])
    if "cmd" in settings:
        argv += shlex.split(settings["cmd"])
    return argv


class DockerEngine(ContainerEngine):
    name = "docker"

    def _require(self, lab: Lab) -> None:
        dockercli.require_docker("--engine docker", also="or bring the lab up with --engine netns")
        refuse_nos_nodes(lab.fabric, self.name)  # before images are built, not after

    def _deploy(self, lab: Lab, topology: Path) -> None:
        doc = yaml.safe_load(topology.read_text())
        for node in doc["topology"]["nodes"]:
            dockercli.docker(*run_argv(lab.name, node, node_settings(doc, node), topology))

    def _destroy(self, record: LabState) -> None:
        dockercli.remove(self.containers(record))
