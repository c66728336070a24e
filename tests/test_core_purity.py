"""The core stays pure (the sans-I/O rule): no clocks, I/O, global randomness or async in core/."""

from __future__ import annotations

import ast
import functools
import subprocess
import sys
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


def _module_file(name: str, root: Path) -> Path | None:
    """The source file of module ``name`` below ``root`` (a package's ``__init__``)."""
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported_names(tree: ast.Module, module: str, is_package: bool) -> list[str]:
    """Absolute names of what ``module`` imports: modules, and ``from x import y`` as
    both ``x`` and ``x.y`` (``y`` may be a submodule); relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                source = f"{base}.{node.module}" if node.module else base
            else:
                source = node.module or ""
            names.append(source)
            names += [f"{source}.{a.name}" for a in node.names if a.name != "*"]
    return names


def import_closure(*entries: str, root: Path) -> dict[str, Path]:
    """Every module of ``root`` that importing ``entries`` loads: each entry, its parent
    packages, and what each of them imports, transitively (found by parsing)."""
    todo = list(entries)
    seen: dict[str, Path] = {}
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b first
            mod = ".".join(parts[:i])
            path = _module_file(mod, root)
            if path is None or mod in seen:
                continue
            seen[mod] = path
            tree = ast.parse(path.read_text(), filename=str(path))
            todo += _imported_names(tree, mod, path.name == "__init__.py")
    return seen


def impurities(path: Path, module: str) -> list[str]:
    """What in the source of ``module`` breaks the core's purity."""
    tree = ast.parse(path.read_text(), filename=str(path))
    problems: list[str] = []
    for name in _imported_names(tree, module, path.name == "__init__.py"):
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_MODULES):
            problems.append(f"{module}: imports {name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if (f.value.id, f.attr) in FORBIDDEN_CALLS:
                    problems.append(f"{module}:{node.lineno}: calls {f.value.id}.{f.attr}")
            if isinstance(f, ast.Name) and f.id in FORBIDDEN_NAMES:
                problems.append(f"{module}:{node.lineno}: calls {f.id}")
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "random" and node.attr != "Random":
                problems.append(f"{module}:{node.lineno}: uses random.{node.attr}")
    return problems


ROOT = CORE.parents[1]


@functools.cache
def _modules() -> dict[str, Path]:
    """The core's import closure, and every module of ``core/`` (``core.testing`` too)."""
    inside = [f"pulsarcast_ipfs.core.{p.stem}" for p in CORE.glob("*.py") if p.stem != "__init__"]
    return import_closure("pulsarcast_ipfs.core", *inside, root=ROOT)


def test_the_closure_is_what_python_loads() -> None:
    """Parsing finds every project module a fresh interpreter loads with the core
    (kademlia and records among them), and the walk covers all of ``core/``."""
    code = (
        "import sys, pulsarcast_ipfs.core\n"
        "print(' '.join(m for m in sys.modules if m.split('.')[0] == 'pulsarcast_ipfs'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    loaded = set(out.stdout.split())
    closure = import_closure("pulsarcast_ipfs.core", root=ROOT)
    assert {"pulsarcast_ipfs.kademlia", "pulsarcast_ipfs.records"} <= loaded
    assert loaded <= set(closure), loaded - set(closure)
    assert {f"pulsarcast_ipfs.core.{p.stem}" for p in CORE.glob("*.py")} - {
        "pulsarcast_ipfs.core.__init__"
    } <= set(_modules())


def test_core_imports_are_pure() -> None:
    problems = [p for name, path in sorted(_modules().items()) for p in impurities(path, name)]
    assert problems == []


def test_the_walker_catches_impurity(tmp_path: Path) -> None:
    """The purity check is not vacuous: the walker flags a planted impure module
    reached only through an import of an import of the entry package."""
    pkg = tmp_path / "planted"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("from ._clean import f\n")
    (pkg / "core" / "_clean.py").write_text("from planted import helper\n\n\ndef f(): ...\n")
    (pkg / "helper.py").write_text(
        "import time\n"
        "from datetime import datetime\n"
        "import random\n"
        "x = datetime.now()\n"
        "y = random.random()\n"
        "open('/dev/null')\n"
    )
    closure = import_closure("planted.core", root=tmp_path)
    assert set(closure) == {"planted", "planted.core", "planted.core._clean", "planted.helper"}
    found = [p for name, path in closure.items() for p in impurities(path, name)]
    assert any("imports time" in p for p in found), found
    assert any("calls datetime.now" in p for p in found), found
    assert any("uses random.random" in p for p in found), found
    assert any("calls open" in p for p in found), found
    assert all(p.startswith("planted.helper") for p in found), found


def test_random_only_injected() -> None:
    """``random`` is imported only for the type of the injected ``rng``."""
    for name, path in _modules().items():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if node.value.id == "random":
                    assert node.attr == "Random", f"{name}: random.{node.attr}"


def test_public_names_complete() -> None:
    """Every public class/function of the private modules is exported (httpx-style)."""
    exported = set(core.__all__)
    for name in exported:
        assert hasattr(core, name), name
    for modname in ("_errors", "_io", "_codec", "_config", "_node", "_descriptors", "_history"):
        mod = getattr(core, modname)
        for name in getattr(mod, "__all__", []):
            assert name in exported, f"{modname}.{name} not exported"
