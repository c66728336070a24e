"""compose/: what can be checked without a Docker engine.

The compose file parses and holds exactly the services, host ports and volumes that
compose/README.md promises; the Kubo configuration script sets the local cluster's
keys and values (read from :func:`pulsarcast_ipfs.cluster.kubo_settings`, not a
copy), and, run against a real Kubo repo, produces that configuration; the Dockerfile
builds the sidecar entrypoint; the shell scripts parse.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from pulsarcast_ipfs.cluster import INIT_PROFILES, kubo_settings
from pulsarcast_ipfs.tools import ipfs_binary

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose"
# Keys whose values the script adapts to a Docker network (compose/kubo-init.sh).
ADAPTED = {"Addresses.API", "Addresses.Swarm", "Addresses.Announce"}
KUBO_IMAGE = "ipfs/kubo:v0.43.0"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    assert isinstance(doc, dict)
    return doc


def readme_table(section: str) -> list[list[str]]:
    """Rows (cells without backticks) of the first table under ``## section``."""
    text = (COMPOSE / "README.md").read_text()
    match = re.search(rf"^## {re.escape(section)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"compose/README.md has no '## {section}' section"
    rows = [ln for ln in match.group(1).splitlines() if ln.startswith("|")]
    assert len(rows) > 2, f"no table under '## {section}'"
    return [
        [cell.strip().replace("`", "") for cell in row.strip("|").split("|")] for row in rows[2:]
    ]


def local_settings() -> dict[str, Any]:
    return kubo_settings(stream_mounting=True, pubsub_router=None, announce=[])


def script_settings() -> dict[str, Any]:
    """``KEY -> value`` of every ``ipfs config --json KEY VALUE`` line of kubo-init.sh."""
    found: dict[str, Any] = {}
    for line in (COMPOSE / "kubo-init.sh").read_text().splitlines():
        words = shlex.split(line.strip(), comments=True)
        if words[:3] == ["ipfs", "config", "--json"] and len(words) == 5:
            key, value = words[3], words[4]
            if key in found and key in ADAPTED:
                continue  # the two branches of the announce `if`
            assert key not in found, f"kubo-init.sh sets {key} twice"
            found[key] = json.loads(value) if "$" not in value else value
    return found


# -- the compose file against its README -------------------------------------------------


def test_services_are_the_documented_ones(compose: dict[str, Any]) -> None:
    services = compose["services"]
    documented = {row[0]: row[1] for row in readme_table("Services")}
    assert set(services) == set(documented)
    for name, image in documented.items():
        assert services[name]["image"] == image.split(" ")[0], name
    kubos = [n for n, s in services.items() if s["image"] == KUBO_IMAGE and n != "kubo-connect"]
    assert kubos == ["kubo0", "kubo1", "kubo2"]
    for n in range(3):
        sidecar = services[f"sidecar{n}"]
        assert sidecar["network_mode"] == f"service:kubo{n}"
        assert sidecar["build"]["dockerfile"] == "compose/Dockerfile"
        assert (COMPOSE / sidecar["build"]["context"] / "pyproject.toml").exists()
        assert "--p2p-port" in sidecar["command"]
        assert sidecar["environment"]["PULSARCAST_API_TOKEN"].startswith("${PULSARCAST_API_TOKEN:?")
        kubo = services[f"kubo{n}"]
        assert kubo["environment"]["IPFS_PROFILE"] == INIT_PROFILES
        assert kubo["environment"]["PULSARCAST_ANNOUNCE"] == f"/dns4/toxiproxy/tcp/1400{n}"
        assert "./kubo-init.sh:/container-init.d/10-pulsarcast.sh:ro" in kubo["volumes"]


def test_ports_are_the_documented_ones(compose: dict[str, Any]) -> None:
    published: set[tuple[str, str, str]] = set()
    for name, service in compose["services"].items():
        for spec in service.get("ports", []):
            host_ip, host, container = str(spec).split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes {spec} beyond loopback"
            published.add((host, name, container))
    documented = {(row[0], row[1], row[2]) for row in readme_table("Ports")}
    assert published == documented


def test_volumes_are_the_documented_ones(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    documented = {row[0]: row[1] for row in readme_table("Volumes")}
    assert declared == set(documented)
    mounted: dict[str, str] = {}
    for name, service in compose["services"].items():
        for spec in service.get("volumes", []):
            source, target = str(spec).split(":")[:2]
            if source in declared:
                mounted[source] = f"{target} in {name}"
    assert mounted == documented


def test_toxiproxy_fronts_every_kubo_swarm_port(compose: dict[str, Any]) -> None:
    proxies = json.loads((COMPOSE / "toxiproxy.json").read_text())
    assert [(p["name"], p["listen"], p["upstream"]) for p in proxies] == [
        (f"kubo{n}", f"0.0.0.0:1400{n}", f"kubo{n}:4001") for n in range(3)
    ]
    nodes = compose["services"]["kubo-connect"]["environment"]["PULSARCAST_NODES"].split()
    assert nodes == [f"kubo{n}=toxiproxy:1400{n}" for n in range(3)]


# -- the Kubo configuration --------------------------------------------------------------


def test_the_kubo_script_sets_the_local_cluster_configuration() -> None:
    script = script_settings()
    local = local_settings()
    assert set(script) == set(local), "kubo-init.sh and kubo_settings name different keys"
    for key, value in local.items():
        if key not in ADAPTED:
            assert script[key] == value, key
    assert script["Addresses.API"] == "/ip4/0.0.0.0/tcp/5001"
    assert script["Addresses.Swarm"] == ["/ip4/0.0.0.0/tcp/4001"]


@pytest.mark.kubo
def test_the_kubo_script_configures_a_real_repo(tmp_path: Path) -> None:
    """Run kubo-init.sh as the image does (after ``ipfs init --profile=test,pebbleds``)."""
    ipfs = ipfs_binary()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "ipfs").symlink_to(ipfs)
    env = dict(os.environ)
    env.update(
        IPFS_PATH=str(tmp_path / "repo"),
        PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
        IPFS_TELEMETRY="off",
        PULSARCAST_ANNOUNCE="/dns4/toxiproxy/tcp/14001",
    )
    subprocess.run(
        [ipfs, "init", f"--profile={INIT_PROFILES}"], env=env, check=True, capture_output=True
    )
    sh = shutil.which("sh")
    assert sh is not None
    subprocess.run([sh, COMPOSE / "kubo-init.sh"], env=env, check=True, capture_output=True)
    config = json.loads((tmp_path / "repo" / "config").read_text())

    def get(dotted: str) -> Any:
        node: Any = config
        for part in dotted.split("."):
            node = node[part]
        return node

    for key, value in local_settings().items():
        if key not in ADAPTED:
            assert get(key) == value, key
    assert get("Addresses.Announce") == ["/dns4/toxiproxy/tcp/14001"]
    assert get("Addresses.API") == "/ip4/0.0.0.0/tcp/5001"


def test_shell_scripts_parse() -> None:
    sh = shutil.which("sh")
    assert sh is not None
    for script in ("kubo-init.sh", "connect.sh"):
        path = COMPOSE / script
        assert os.access(path, os.X_OK), f"{script} is not executable"
        subprocess.run([sh, "-n", path], check=True)


def test_the_dockerfile_runs_the_sidecar() -> None:
    text = (COMPOSE / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert 'ENTRYPOINT ["pulsarcast-sidecar"]' in text
    assert "EXPOSE 5050" in text
    for copied in re.findall(r"^COPY (\S+) ", text, re.M):
        assert (ROOT / copied).exists(), f"the Dockerfile copies a missing {copied}"
    ignore = (COMPOSE / "Dockerfile.dockerignore").read_text().splitlines()
    assert "**" in ignore and "!sidecar/**" in ignore
