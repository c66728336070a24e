"""``pulsarcast report``: the metrics pipeline (PySpark) over one or more runs (the
job's arguments and run: :mod:`pulsarcast_ipfs._report_job`; docs/metrics.md)."""

from __future__ import annotations

import argparse
from typing import Any

from pulsarcast_ipfs._report_job import DESCRIPTION, add_arguments, run

__all__ = ["add_parser"]


def add_parser(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "report",
        help="compute metrics, tables, a Markdown report and plots from run records (PySpark)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(handler=run)
