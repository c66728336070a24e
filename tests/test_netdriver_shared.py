"""One in-process network driver of the core and one peer-ID generator:
CoreNet (core/testing.py) and the simulator (sim/) are both built on
core/_netdriver.py, and neither keeps mechanics or an ID generator of its own."""

from __future__ import annotations

import ast
from pathlib import Path

import pulsarcast_ipfs.core as core
import pulsarcast_ipfs.core.testing as testing
import pulsarcast_ipfs.sim as sim
from pulsarcast_ipfs.core import NetDriver
from pulsarcast_ipfs.core.testing import CoreNet
from pulsarcast_ipfs.sim import SimConfig, Simulation
from pulsarcast_ipfs.workload import load_workload

PACKAGE = Path(core.__file__).resolve().parent.parent
DRIVER = PACKAGE / "core" / "_netdriver.py"

SHARED = {"EventHeap", "Links", "NetDriver", "make_peer_ids", "make_signers", "substream"}
"""What only the driver module defines."""
MECHANICS = {
    "_drain",
    "_fire_timer",
    "_deliver_rpc",
    "_unreachable",
    "_unreachable_later",
    "_finish_fetch",
    "on_send_rpc",
    "on_fetch_block",
    "on_sign_request",
    "take_down",
    "bring_up",
}
"""The driver's own methods: its users hook in around them, never rewrite them."""


def _definitions(path: Path) -> list[tuple[str, str]]:
    """(enclosing class or "", name) of every function and class defined in ``path``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.append(("", node.name))
            found += [
                (node.name, f.name)
                for f in node.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(("", node.name))
        elif isinstance(node, ast.Assign):
            found += [("", t.id) for t in node.targets if isinstance(t, ast.Name)]
    return found


def _users() -> list[Path]:
    return [PACKAGE / "core" / "testing.py", *sorted((PACKAGE / "sim").glob("*.py"))]


def test_corenet_and_the_simulator_are_the_one_driver() -> None:
    assert issubclass(CoreNet, NetDriver) and issubclass(Simulation, NetDriver)
    for name in ("make_peer_ids", "make_signers"):
        assert getattr(testing, name) is getattr(core, name) is getattr(sim, name)
    assert sim.EventHeap is core.EventHeap and sim.substream is core.substream


def test_no_second_copy_of_the_plumbing() -> None:
    assert not (PACKAGE / "sim" / "_engine.py").exists()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == DRIVER:
            continue
        top = {name for cls, name in _definitions(path) if not cls}
        assert not top & SHARED, (path.relative_to(PACKAGE), top & SHARED)
    for path in _users():
        methods = {name for cls, name in _definitions(path) if cls}
        assert not methods & MECHANICS, (path.relative_to(PACKAGE), methods & MECHANICS)
    assert {name for _, name in _definitions(DRIVER)} >= SHARED | MECHANICS


def test_same_seed_same_peers_in_corenet_and_the_simulator() -> None:
    workload = load_workload()
    for signatures in (False, True):
        config = SimConfig(nodes=24, topics=3, events=0, seed=3, signatures=signatures)
        run = Simulation(config, workload=workload)
        net = CoreNet(24, seed=3, signatures=signatures)
        assert run.peer_ids == net.peers
        assert all(p.startswith("12D3KooW") for p in net.peers)
        assert set(run.signers) == set(net.signers) == (set(net.peers) if signatures else set())
