"""The Markdown report and PNG plots, from small aggregate tables on the driver.

Plots follow the extended report's figures: "Event distribution per topic with
log scale" (Figure 4) and "Comparison of events fulfilled by topic in a log
scale" (Figures 6, 8) → :func:`plot_events`; "Comparison of percentage of events
fulfilled by topic" (Figures 7, 9–11) → :func:`plot_coverage`; and one
side-by-side comparison of runs → :func:`plot_comparison`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "fmt",
    "markdown_table",
    "plot_comparison",
    "plot_coverage",
    "plot_events",
    "plotted_topics",
    "slug",
]

Row = Mapping[str, Any]


def slug(run: str, system: str) -> str:
    """A file-name-safe name for a run key."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{run}__{system}").strip("_") or "run"


def fmt(value: Any, kind: str = "") -> str:
    """One table cell: ``n/a`` for undefined, percentages, seconds, sizes."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if kind == "pct":
        return f"{100.0 * float(value):.1f} %"
    if kind == "s":
        v = float(value)
        return f"{v * 1000:.1f} ms" if abs(v) < 1 else f"{v:.3f} s"
    if kind == "mib":
        return f"{float(value) / 2**20:.2f} MiB"
    if kind == "gib":
        return f"{float(value) / 2**30:.3f} GiB"
    if isinstance(value, float):
        return f"{value:.3f}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Row], columns: Sequence[tuple[str, str, str]]) -> str:
    """``columns`` = (key, header, format kind)."""
    head = "| " + " | ".join(h for _k, h, _f in columns) + " |"
    sep = "|" + "|".join("---" if f == "" else "---:" for _k, _h, f in columns) + "|"
    seps = sep.replace("|---|", "|---|", 1)
    lines = [head, seps]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(k), f) for k, _h, f in columns) + " |")
    return "\n".join(lines)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plotted_topics(topics: Sequence[Row]) -> list[Row]:
    """The topics drawn in the per-topic plots, most events first.

    Meta topics (control traffic) and topics with neither injected nor
    published events are listed in the report's tables but not plotted.
    """
    rows = [
        r
        for r in topics
        if not r.get("meta") and ((r.get("injected") or 0) > 0 or (r.get("published") or 0) > 0)
    ]
    return sorted(rows, key=lambda r: (-(r["injected"] or 0), -(r["published"] or 0), r["topic"]))


def _label(name: Any, width: int = 28) -> str:
    text = str(name)
    return text if len(text) <= width else text[: width - 1] + "…"


def _run_label(run: Row) -> str:
    """A run's tick label: its name wrapped at hyphens (long names such as
    ``bench-20n-v2-latency`` overlapped their neighbours), then the system."""
    lines: list[str] = []
    for part in re.split(r"(?<=-)", str(run["run"])):
        if lines and len(lines[-1]) + len(part) <= 14:
            lines[-1] += part
        else:
            lines.append(part)
    return "\n".join([*lines, str(run["system"])])


def _topic_axes(plt: Any, rows: Sequence[Row], title: str) -> tuple[Any, Any, list[int]]:
    """A figure with one horizontal band per topic, the first topic on top."""
    y = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(8.0, max(3.0, 0.34 * len(rows) + 1.6)))
    ax.set_yticks(y)
    ax.set_yticklabels([_label(r["topic"]) for r in rows], fontsize=8)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_title(title, fontsize=10, pad=20)
    return fig, ax, y


def _legend_top(ax: Any, ncol: int) -> None:
    """The legend in one row between the title and the plot, where it cannot hide a bar."""
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, frameon=False)


def plot_events(topics: Sequence[Row], title: str, path: Path) -> None:
    """Injected, published and received (distinct deliveries) per topic, log scale.

    Only :func:`plotted_topics` are drawn, sorted by events (most first).
    """
    plt = _plt()
    rows = plotted_topics(topics)
    fig, ax, y = _topic_axes(plt, rows, title)
    height = 0.27
    series = (("injected", "injected"), ("published", "published"), ("deliveries", "received"))
    for i, (key, label) in enumerate(series):
        vals = [max(int(r[key] or 0), 0) for r in rows]
        ax.barh(
            [v + (i - 1) * height for v in y],
            [v if v > 0 else float("nan") for v in vals],
            height,
            label=label,
        )
    ax.set_xscale("log")
    ax.set_xlim(left=0.8)
    ax.set_xlabel("events (log scale)")
    _legend_top(ax, 3)
    ax.grid(axis="x", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_coverage(topics: Sequence[Row], title: str, path: Path) -> None:
    """Coverage per topic against injected and against published events (%);
    ``n/a`` where nothing was expected (no subscriber). Only
    :func:`plotted_topics` are drawn."""
    plt = _plt()
    rows = plotted_topics(topics)
    fig, ax, y = _topic_axes(plt, rows, title)
    height = 0.4
    for i, (key, label) in enumerate(
        (("coverage_injected", "vs injected"), ("coverage_published", "vs published"))
    ):
        vals = [float("nan") if r[key] is None else 100.0 * r[key] for r in rows]
        ax.barh([v + (i - 0.5) * height for v in y], vals, height, label=label)
    for yi, r in zip(y, rows, strict=True):
        if r["coverage_published"] is None and r["coverage_injected"] is None:
            ax.text(1, yi, "n/a (no subscriber)", va="center", fontsize=7, color="0.3")
    ax.set_xlim(0, 105)
    ax.set_xlabel("subscription coverage (%)")
    _legend_top(ax, 2)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _na(ax: Any, x: Sequence[float], values: Sequence[Any]) -> None:
    """Mark the runs whose value is undefined, so an empty slot is not read as 0."""
    for xi, v in zip(x, values, strict=True):
        if v is None:
            ax.text(xi, 0.02, "n/a", ha="center", va="bottom", transform=ax.get_xaxis_transform())


def plot_comparison(runs: Sequence[Row], path: Path) -> None:
    """Side by side per run: coverage, latency, RPCs sent per node, bytes."""
    plt = _plt()
    labels = [_run_label(r) for r in runs]
    x = list(range(len(runs)))
    fig, axes = plt.subplots(2, 2, figsize=(max(8.0, 1.6 * len(runs) + 4), 8.0))

    def nz(v: Any, scale: float = 1.0) -> float:
        return float("nan") if v is None else float(v) * scale

    ax = axes[0][0]
    w = 0.4
    ax.bar(
        [i - w / 2 for i in x],
        [nz(r["coverage_injected"], 100) for r in runs],
        w,
        label="vs injected",
    )
    ax.bar(
        [i + w / 2 for i in x],
        [nz(r["coverage_published"], 100) for r in runs],
        w,
        label="vs published",
    )
    _na(ax, x, [r["coverage_published"] for r in runs])
    ax.set_ylim(0, 105)
    ax.set_title("subscription coverage (%)", pad=20)
    _legend_top(ax, 4)

    ax = axes[0][1]
    w = 0.27
    for j, p in enumerate(("p50", "p95", "p99")):
        ax.bar(
            [i + (j - 1) * w for i in x], [nz(r[f"latency_{p}"], 1000) for r in runs], w, label=p
        )
    _na(ax, x, [r["latency_p50"] for r in runs])
    ax.set_title("delivery latency (ms)", pad=20)
    _legend_top(ax, 4)

    ax = axes[1][0]
    ax.bar(x, [nz(r["rpc_sent_mean"]) for r in runs], 0.5, label="mean", color="C0")
    for key, marker, label in (
        ("rpc_sent_p95", "^", "p95"),
        ("rpc_sent_p99", "D", "p99"),
        ("rpc_sent_max", "x", "max"),
    ):
        ax.plot(
            x,
            [nz(r.get(key)) for r in runs],
            marker,
            ls="",
            ms=8 if marker == "D" else 6,
            mfc="none",
            mec="C3" if marker == "x" else "k",
            label=label,
        )
    ax.set_ylim(bottom=0)
    ax.set_title("RPC messages sent per node", pad=20)
    _legend_top(ax, 4)

    ax = axes[1][1]
    w = 0.4
    ax.bar(
        [i - w / 2 for i in x],
        [nz(r["rpc_bytes_sent"], 2**-20) for r in runs],
        w,
        label="RPC bytes sent",
    )
    ax.bar(
        [i + w / 2 for i in x],
        [nz(r["cluster_bytes_out"], 2**-20) for r in runs],
        w,
        label="network out (stats/bw)",
    )
    _na(ax, [i + w / 2 for i in x], [r["cluster_bytes_out"] for r in runs])
    ax.set_title("bytes (MiB, whole cluster)", pad=20)
    _legend_top(ax, 4)
    for row in axes:
        for a in row:
            a.set_xticks(x)
            a.set_xlim(-0.6, len(runs) - 0.4)
            a.set_xticklabels(labels, fontsize=8)
            a.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
