"""The node's parts (core/_base.py, the mixins and the components) fit together."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from pulsarcast_ipfs.core import PulsarcastNode
from pulsarcast_ipfs.core._base import NodeBase

CORE = Path(__file__).resolve().parent.parent / "pulsarcast_ipfs" / "core"


def _declared() -> set[str]:
    """The methods NodeBase declares for the type checker (``if TYPE_CHECKING``)."""
    tree = ast.parse((CORE / "_base.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "NodeBase")
    block = next(n for n in cls.body if isinstance(n, ast.If))
    return {n.name for n in block.body if isinstance(n, ast.FunctionDef)}


def _parts() -> list[type]:
    return [k for k in PulsarcastNode.__mro__[1:] if k not in (NodeBase, object)]


def test_each_declared_method_is_defined_by_exactly_one_part() -> None:
    for name in _declared():
        owners = [k.__name__ for k in _parts() if name in vars(k)]
        assert len(owners) == 1, (name, owners)


def test_no_part_shadows_another() -> None:
    seen: dict[str, str] = {}
    for k in (PulsarcastNode, *_parts(), NodeBase):
        for name, value in vars(k).items():
            if name.startswith("__") or (not callable(value) and not isinstance(value, property)):
                continue
            assert name not in seen, f"{name} in {k.__name__} and {seen[name]}"
            seen[name] = k.__name__


def test_the_parts_are_small_enough_to_read_in_one_sitting() -> None:
    for k in (PulsarcastNode, *_parts(), NodeBase):
        lines = len(Path(inspect.getfile(k)).read_text().splitlines())
        assert lines <= 600, (k.__name__, lines)


def test_no_part_reaches_into_a_components_state() -> None:
    """The components (``_signing``, ``_acks``, ``_gate``, ``_guard``, ``_fast``,
    ``_admission``, ``_links``, ``_requests``, ``_keyspace``) own their state:
    the node and its parts call them, and never read or write their private fields."""
    import re

    names = "signing|acks|gate|guard|fast|admission|links|requests|keyspace"
    reach = re.compile(rf"\._({names})\._[a-z]")
    found = [
        f"{path.name}:{i}"
        for path in sorted(CORE.glob("*.py"))
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if reach.search(line)
    ]
    assert found == []


def _fast_state_touched(source: str) -> list[int]:
    """Lines of ``source`` that touch a tree's fast-group state (``<x>.fast``)."""
    return sorted(
        n.lineno
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.Attribute) and n.attr == "fast"
    )


def test_fast_groups_are_a_component_that_owns_its_state() -> None:
    """FastGroups is no mixin: the node holds one (``_fast``), and no other module of
    the core reads or writes the state it owns (each tree's ``fast``; its own tables
    are private: the reach check above)."""
    from pulsarcast_ipfs.core._fastgroup import FastGroups

    assert not issubclass(FastGroups, NodeBase)
    assert FastGroups not in PulsarcastNode.__mro__
    found = [
        f"{path.name}:{line}"
        for path in sorted(CORE.glob("*.py"))
        if path.name != "_fastgroup.py"
        for line in _fast_state_touched(path.read_text())
    ]
    assert found == []


def test_components_are_no_mixins() -> None:
    """A component is an object the node holds, not one of its bases; it imports
    nothing of NodeBase (no circle through core/_base.py)."""
    from pulsarcast_ipfs.core._admission import Admission
    from pulsarcast_ipfs.core._fastgroup import FastGroups
    from pulsarcast_ipfs.core._keyspace import Keyspace
    from pulsarcast_ipfs.core._links import PeerLinks
    from pulsarcast_ipfs.core._requests import PublishRequests

    for k in (FastGroups, Admission, PeerLinks, PublishRequests, Keyspace):
        assert not issubclass(k, NodeBase) and k not in PulsarcastNode.__mro__, k
        assert "._base" not in Path(inspect.getfile(k)).read_text(), k


def test_the_fast_state_check_catches_a_planted_one() -> None:
    planted = "tree.fast = None\nif tree.fast is not None:\n    tree.fast.joined.clear()\n"
    assert _fast_state_touched(planted) == [1, 2, 3]
    assert _fast_state_touched("fast = True\nself._fast.tick(now)\n") == []


def test_spark_does_not_import_the_cli() -> None:
    """The arrows run CLI -> library -> spark jobs' entry points, never back."""
    import re

    spark = CORE.parent.parent / "spark"
    found = [
        f"{p.name}:{i}"
        for p in sorted(spark.glob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.match(r"\s*(from|import) pulsarcast_ipfs\.cli\b", line)
    ]
    assert found == []


def test_the_repository_cites_no_issue_numbers_and_no_file_outside_it() -> None:
    """A reader of the repository cannot open an issue tracker's "issue 7" nor a file
    beside the repository: code and documents say the thing itself or cite docs/
    (docs/protocol.md is the specification). The history page keeps the journal of
    its time as written."""
    import re

    root = CORE.parent.parent
    bad = re.compile(r"(?i:\bissues? #?\d+\b)|\bPROTOCOL\.md|\bSTYLE\.md|\.\./shared/")
    skip = {"benchmark-history.md", "test_core_layout.py"}
    found = []
    for pattern in ("*.py", "*.md", "*.toml", "Makefile"):
        for path in root.rglob(pattern):
            parts = set(path.relative_to(root).parts)
            if parts & {".venv", ".tools", ".git", "node_modules", "runs"} or path.name in skip:
                continue
            for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if bad.search(line):
                    found.append(f"{path.relative_to(root)}:{i}")
    assert found == []


TESTS = Path(__file__).resolve().parent


def _test_module_imports(source: str) -> list[str]:
    """The modules of tests/ (``test_*``, ``_*`` helpers) that ``source`` imports."""
    local = {p.stem for p in TESTS.glob("*.py")} - {"conftest"}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            head = name.removeprefix("tests.").split(".")[0]
            if name.startswith("tests.") or head in local:
                found.append(name)
    return found


def test_no_test_module_imports_another() -> None:
    """Shared helpers live in pulsarcast_ipfs.testing, fixtures in conftest.py."""
    offenders = {
        p.name: got
        for p in sorted(TESTS.glob("*.py"))
        if (got := _test_module_imports(p.read_text(encoding="utf-8")))
    }
    assert offenders == {}


def test_the_import_check_catches_a_planted_one() -> None:
    planted = "from test_api_fake import sidecar_at\nimport tests.test_core_node\n"
    assert _test_module_imports(planted) == ["test_api_fake", "tests.test_core_node"]
    assert _test_module_imports("from pulsarcast_ipfs.testing import sidecar_at\n") == []
