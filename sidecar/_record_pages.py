"""Pages of this sidecar's metric records, for ``GET /v1/records``.

The records are served from the files :class:`._metrics.MetricsWriter` writes:
``<run>-<peer>.jsonl`` and its rotated copies ``<run>-<peer>.jsonl.<n>``. Rotation
renames the live file to the first free number, so the files form a sequence of
*generations*: ``.jsonl.1``, ``.jsonl.2``, …, then the live file, whose generation is
one more than the highest rotated number. A generation keeps its number when it is
rotated, so a cursor ``<generation>:<byte offset>`` stays valid across rotation.

A page holds whole lines only (a line the writer has not finished is left for the
next page), at most ``limit`` records and about ``max_bytes`` of them, and its
``next`` cursor is where the next page starts. Blank lines are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

__all__ = ["MAX_LIMIT", "CursorError", "RecordPage", "parse_cursor", "read_page"]

MAX_LIMIT: Final = 10_000
"""The most records one page holds."""
MAX_PAGE_BYTES: Final = 4 * 1024 * 1024
"""About the most bytes of records one page holds (at least one record)."""

_CURSOR = re.compile(r"([1-9][0-9]{0,8}):(0|[1-9][0-9]{0,15})")


class CursorError(ValueError):
    """A cursor that does not parse, or points past what was written."""


@dataclass(frozen=True, slots=True)
class RecordPage:
    lines: list[bytes]
    """Each record's JSON text, without the newline."""
    next: str
    """The cursor of the next page."""
    more: bool
    """Whether more records were already written after this page."""


def parse_cursor(text: str) -> tuple[int, int]:
    m = _CURSOR.fullmatch(text)
    if m is None:
        raise CursorError(f"bad cursor {text!r}: expected GENERATION:OFFSET, e.g. 1:0")
    return int(m.group(1)), int(m.group(2))


def generations(live: Path) -> dict[int, Path]:
    """Generation number -> file, the live file last (see the module docstring)."""
    found: dict[int, Path] = {}
    prefix = live.name + "."
    if live.parent.is_dir():
        for p in live.parent.iterdir():
            if p.name.startswith(prefix) and p.name[len(prefix) :].isdigit():
                found[int(p.name[len(prefix) :])] = p
    found[max(found, default=0) + 1] = live
    return dict(sorted(found.items()))


def read_page(
    live: Path, cursor: tuple[int, int] | None, limit: int, max_bytes: int = MAX_PAGE_BYTES
) -> RecordPage:
    """The page after ``cursor`` (``None``: from the first record) of the records
    in ``live`` and its rotated copies."""
    gens = generations(live)
    last = max(gens)
    gen, offset = cursor if cursor is not None else (min(gens), 0)
    if gen > last:
        raise CursorError(f"bad cursor {gen}:{offset}: no generation {gen} yet (newest {last})")
    lines: list[bytes] = []
    size = 0
    while True:
        path = gens.get(gen)
        if path is None:  # a rotated file removed since: go on with the next one
            gen, offset = min(g for g in gens if g > gen), 0
            continue
        try:
            with path.open("rb") as f:
                length = f.seek(0, 2)
                if offset > length:
                    raise CursorError(
                        f"bad cursor {gen}:{offset}: past the end of generation {gen} "
                        f"({length} bytes)"
                    )
                f.seek(offset)
                while len(lines) < limit and (size < max_bytes or not lines):
                    line = f.readline()
                    if not line.endswith(b"\n"):
                        break  # the end, or a line not finished yet
                    offset += len(line)
                    text = line.strip()
                    if text:
                        lines.append(text)
                        size += len(text)
        except FileNotFoundError:
            if gen == last:  # the writer has not opened its file yet
                return RecordPage(lines, f"{gen}:{offset}", False)
            del gens[gen]  # rotated away since the listing: go on with the next one
            continue
        full = len(lines) >= limit or (size >= max_bytes and bool(lines))
        if full or gen == last:
            more = full and (offset < length or gen < last)
            return RecordPage(lines, f"{gen}:{offset}", more)
        gen, offset = min(g for g in gens if g > gen), 0
