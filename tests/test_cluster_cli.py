"""``pulsarcast cluster up/status/down`` across processes, and start-up failures."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from pulsarcast_ipfs.cluster import ClusterConfig, ClusterError, LocalCluster
from pulsarcast_ipfs.tools import ipfs_binary


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from pulsarcast_ipfs.cli import main; sys.exit(main())",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.mark.cluster
def test_cli_up_status_down_from_separate_processes(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    up = _cli("cluster", "--state-dir", state, "up", "-n", "3", "--toxiproxy")
    try:
        assert up.returncode == 0, up.stderr
        again = _cli("cluster", "--state-dir", state, "up", "-n", "3")
        assert again.returncode == 1 and "already running" in again.stderr
        # --state-dir before the action or after it, as with ipfs' global options
        status = _cli("cluster", "status", "--json", "--state-dir", state)
        assert status.returncode == 0, status.stderr
        doc = json.loads(status.stdout)
        assert [n["name"] for n in doc["nodes"]] == ["node0", "node1", "node2"]
        assert all(n["running"] and n["lan_peers"] == 2 for n in doc["nodes"])
        assert doc["toxiproxy"].startswith("http://127.0.0.1:")
        pids = [n["pid"] for n in doc["nodes"]]
        assert all(_running(p) for p in pids)
    finally:
        down = _cli("cluster", "down", "--state-dir", state)
    assert down.returncode == 0, down.stderr
    assert not any(_running(p) for p in pids)
    assert not (tmp_path / "state" / "nodes").exists()
    gone = _cli("cluster", "--state-dir", state, "status")
    assert gone.returncode == 1 and "no cluster is running" in gone.stderr


@pytest.mark.kubo
@pytest.mark.anyio
async def test_a_daemon_that_dies_names_the_node_and_its_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Kubo that exits at start-up: ClusterError with the node and its log's tail."""
    fake = tmp_path / "ipfs"
    fake.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = daemon ]; then\n'
        '  echo "Error: simulated failure in $IPFS_PATH" >&2; exit 1\n'
        "fi\n"
        f'exec {ipfs_binary()} "$@"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PULSARCAST_IPFS_BIN", str(fake))
    cluster = LocalCluster(config=ClusterConfig(nodes=2))
    with pytest.raises(ClusterError, match=r"node\d: the Kubo daemon exited") as exc:
        await cluster.start()
    assert "Error: simulated failure in" in str(exc.value)
    assert not cluster.base_dir.exists()


def test_cluster_config_validation() -> None:
    with pytest.raises(ValueError):
        ClusterConfig(nodes=0)
    with pytest.raises(ValueError):
        ClusterConfig(pubsub_router="meshsub")
    assert ClusterConfig(nodes=10).table_target == 4
    assert ClusterConfig(nodes=2).table_target == 1
