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

__all__ = ["fmt", "markdown_table", "plot_comparison", "plot_coverage", "plot_events", "slug"]

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


def plot_events(topics: Sequence[Row], title: str, path: Path) -> None:
    """Injected, published and received (distinct deliveries) per topic, log scale."""
    plt = _plt()
    rows = sorted(topics, key=lambda r: (-(r["injected"] or 0), -(r["published"] or 0), r["topic"]))
    names = [str(r["topic"]) for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.5))
    width = 0.27
    series = (("injected", "injected"), ("published", "published"), ("deliveries", "received"))
    for i, (key, label) in enumerate(series):
        vals = [max(int(r[key] or 0), 0) for r in rows]
        ax.bar(
            [v + (i - 1) * width for v in x],
            [v if v > 0 else float("nan") for v in vals],
            width,
            label=label,
        )
    ax.set_yscale("log")
    ax.set_ylim(bottom=0.5)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("events (log scale)")
    ax.set_title(title)
    ax.legend()
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_coverage(topics: Sequence[Row], title: str, path: Path) -> None:
    """Coverage per topic against injected and against published events (%)."""
    plt = _plt()
    rows = sorted(topics, key=lambda r: (-(r["injected"] or 0), -(r["published"] or 0), r["topic"]))
    names = [str(r["topic"]) for r in rows]
    x = list(range(len(rows)))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 4.5))
    width = 0.4
    for i, (key, label) in enumerate(
        (("coverage_injected", "vs injected"), ("coverage_published", "vs published"))
    ):
        vals = [float("nan") if r[key] is None else 100.0 * r[key] for r in rows]
        ax.bar([v + (i - 0.5) * width for v in x], vals, width, label=label)
    for xi, r in zip(x, rows, strict=True):
        if r["coverage_published"] is None and r["coverage_injected"] is None:
            ax.text(xi, 2, "n/a", ha="center", fontsize=7, rotation=90)
    ax.set_ylim(0, 105)
    ax.set_xticks(x)
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("subscription coverage (%)")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_comparison(runs: Sequence[Row], path: Path) -> None:
    """Side by side per run: coverage, latency, RPCs sent per node, bytes."""
    plt = _plt()
    labels = [f"{r['run']}\n{r['system']}" for r in runs]
    x = list(range(len(runs)))
    fig, axes = plt.subplots(2, 2, figsize=(max(8.0, 1.6 * len(runs) + 4), 7.5))

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
    ax.set_ylim(0, 105)
    ax.set_title("subscription coverage (%)")
    ax.legend(fontsize=8)

    ax = axes[0][1]
    w = 0.27
    for j, p in enumerate(("p50", "p95", "p99")):
        ax.bar(
            [i + (j - 1) * w for i in x], [nz(r[f"latency_{p}"], 1000) for r in runs], w, label=p
        )
    ax.set_title("delivery latency (ms)")
    ax.legend(fontsize=8)

    ax = axes[1][0]
    ax.bar(
        x,
        [nz(r["rpc_sent_mean"]) for r in runs],
        yerr=[0.0 if r["rpc_sent_std"] is None else r["rpc_sent_std"] for r in runs],
        capsize=3,
    )
    ax.set_title("RPC messages sent per node (mean ± sd)")

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
    ax.set_title("bytes (MiB, whole cluster)")
    ax.legend(fontsize=8)
    for row in axes:
        for a in row:
            a.set_xticks(x)
            a.set_xlim(-0.6, len(runs) - 0.4)
            a.set_xticklabels(labels, fontsize=8)
            a.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
