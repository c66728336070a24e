"""Placeholder: filled in by its issue."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("sim", help="(not yet available)")
    p.set_defaults(handler=lambda args: 1)
