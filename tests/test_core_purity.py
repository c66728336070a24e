"""The core stays pure (STYLE.md): no clocks, I/O, global randomness or async in core/."""

from __future__ import annotations

import ast
from pathlib import Path

import pulsarcast_ipfs.core as core

CORE = Path(core.__file__).parent
FORBIDDEN_MODULES = {
    "anyio",
    "asyncio",
    "trio",
    "httpx",
    "socket",
    "ssl",
    "select",
    "selectors",
    "threading",
    "multiprocessing",
    "subprocess",
    "os",
    "sys",
    "time",
    "io",
    "pathlib",
    "shutil",
    "tempfile",
    "urllib",
    "http",
    "requests",
    "uvicorn",
    "starlette",
    "psutil",
    "secrets",
    "uuid",
    "logging",
    "pulsarcast_ipfs.kubo",
    "pulsarcast_ipfs.sim",
    "pulsarcast_ipfs.cli",
    "sidecar",
}
FORBIDDEN_CALLS = {
    ("datetime", "now"),
    ("datetime", "utcnow"),
    ("datetime", "today"),
    ("date", "today"),
    ("random", "random"),
    ("random", "randint"),
    ("random", "choice"),
    ("random", "uniform"),
    ("random", "shuffle"),
    ("random", "sample"),
    ("random", "getrandbits"),
    ("random", "seed"),
}
FORBIDDEN_NAMES = {"open", "print", "input", "eval", "exec", "__import__"}


def _modules() -> list[Path]:
    return sorted(CORE.glob("*.py"))


def test_core_imports_are_pure() -> None:
    problems: list[str] = []
    for path in _modules():
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if (
                    top in FORBIDDEN_MODULES
                    or name in FORBIDDEN_MODULES
                    or any(name.startswith(f + ".") for f in FORBIDDEN_MODULES)
                ):
                    problems.append(f"{path.name}: imports {name}")
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                    if (f.value.id, f.attr) in FORBIDDEN_CALLS:
                        problems.append(f"{path.name}:{node.lineno}: calls {f.value.id}.{f.attr}")
                if isinstance(f, ast.Name) and f.id in FORBIDDEN_NAMES:
                    problems.append(f"{path.name}:{node.lineno}: calls {f.id}")
    assert problems == []


def test_the_walker_catches_impurity() -> None:
    """The purity check is not vacuous: it flags a clock read and an I/O import."""
    bad = ast.parse("import time\nfrom datetime import datetime\nx = datetime.now()\n")
    seen = [n for n in ast.walk(bad) if isinstance(n, ast.Import) and n.names[0].name == "time"]
    calls = [
        n
        for n in ast.walk(bad)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and (n.func.value.id, n.func.attr) in FORBIDDEN_CALLS
    ]
    assert seen and calls


def test_random_only_injected() -> None:
    """``random`` is imported only for the type of the injected ``rng``."""
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "random":
                    assert node.attr == "Random", f"{path.name}: random.{node.attr}"


def test_public_names_complete() -> None:
    """Every public class/function of the private modules is exported (httpx-style)."""
    exported = set(core.__all__)
    for name in exported:
        assert hasattr(core, name), name
    for modname in ("_errors", "_io", "_codec", "_config", "_node", "_descriptors", "_history"):
        mod = getattr(core, modname)
        for name in getattr(mod, "__all__", []):
            assert name in exported, f"{modname}.{name} not exported"
