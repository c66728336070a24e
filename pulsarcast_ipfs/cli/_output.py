"""Where the commands' tables go (``status``, ``cluster status``)."""

from __future__ import annotations

import sys

from rich.console import Console

__all__ = ["table_console"]

PIPED_WIDTH = 100_000
"""The console width when standard output is not a terminal: rows are never wrapped."""


def table_console() -> Console:
    """A console for tables: in a terminal its width, where the columns declared
    ``overflow="fold"`` (IDs, addresses) fold onto further lines rather than being
    cut; piped, lines as long as the rows, so that whole IDs reach ``grep``."""
    if stdout_is_terminal():
        return Console(highlight=False)
    return Console(highlight=False, width=PIPED_WIDTH)


def stdout_is_terminal() -> bool:
    return sys.stdout.isatty()
