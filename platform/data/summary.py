"""Human-readable views of a partition: a client × class count table (for logs) and a heat-map PNG (for MLflow)."""
from __future__ import annotations

import os

from typing import Optional

import numpy as np

from platform.data.partition import class_counts


def partition_summary(labels: np.ndarray, parts: list[np.ndarray], num_classes: int, max_rows: int = 20) -> str:
    """The client × class count matrix N_k^c as a text table with per-client totals.

    Beyond ``max_rows`` clients only the first rows are printed, followed by a note; the last line is the
    per-class total over *all* clients, and a header line gives sizes (min / mean / max) and class coverage.
    """
    counts = class_counts(np.asarray(labels), parts, num_classes)
    totals = counts.sum(1)
    held = (counts > 0).sum(1)
    width = max(5, len(str(int(counts.max(initial=0)))), len(str(int(totals.sum()))))
    head = ["client".rjust(6)] + [f"c{c}".rjust(width) for c in range(num_classes)] + ["total".rjust(width)]
    lines = [
        f"{len(parts)} clients × {num_classes} classes, {int(totals.sum())} samples; per client: "
        f"min {int(totals.min()) if len(parts) else 0}, mean {totals.mean() if len(parts) else 0:.1f}, "
        f"max {int(totals.max()) if len(parts) else 0} samples, "
        f"{held.mean() if len(parts) else 0:.1f} classes on average",
        " ".join(head),
    ]
    for k in range(min(len(parts), max_rows)):
        lines.append(" ".join([str(k).rjust(6)] + [str(int(v)).rjust(width) for v in counts[k]]
                              + [str(int(totals[k])).rjust(width)]))
    if len(parts) > max_rows:
        lines.append(f"... {len(parts) - max_rows} more clients not shown (first {max_rows} of {len(parts)})")
    lines.append(" ".join(["all".rjust(6)] + [str(int(v)).rjust(width) for v in counts.sum(0)]
                          + [str(int(totals.sum())).rjust(width)]))
    return "\n".join(lines)


def partition_heatmap(counts: np.ndarray, path: str, title: str = "samples per client and class") -> str:
    """Write the client × class count matrix as a heat-map PNG at ``path`` and return the path."""
    counts = np.asarray(counts)
    clients, classes = counts.shape
    return heatmap_png(counts, path, title, xlabel="class", ylabel="client", colorbar_label="samples",
                       figsize=(min(16.0, 2.0 + 0.25 * classes), min(16.0, 1.5 + 0.12 * clients)))


def heatmap_png(array, path: str, title: str, *, xlabel: str = "column", ylabel: str = "row",
                colorbar_label: str = "", figsize: Optional[tuple[float, float]] = None) -> str:
    """Write a 2-D array as a heat-map PNG (rows down, columns across, a colour bar) at ``path``; return the path.

    Uses the Agg canvas directly (no pyplot), so no display is needed and no global backend is changed.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    array = np.asarray(array, dtype=float)
    rows, columns = array.shape
    if figsize is None:
        figsize = (min(16.0, 2.5 + 0.3 * columns), min(16.0, 2.0 + 0.3 * rows))
    fig = Figure(figsize=figsize, dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    image = ax.imshow(array, aspect="auto", interpolation="nearest", cmap="viridis")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.colorbar(image, ax=ax, label=colorbar_label)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png")
    return path
