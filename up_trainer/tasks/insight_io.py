"""Writing evaluation insight: CSV tables and matplotlib figures (Agg, no pyplot) to a folder.

Each insight module returns an :class:`Insight`: the files it wrote, figures as uint8 images
for TensorBoard and scalars, so the hook that calls it only forwards them.
"""
import csv
import os
from dataclasses import dataclass, field

from ..atomic import opened


@dataclass
class Insight:
    files: list = field(default_factory=list)
    images: dict = field(default_factory=dict)  # tag -> uint8 3xHxW tensor
    scalars: dict = field(default_factory=dict)  # tag -> float


def write_csv(path, header, rows):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with opened(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def save_figure(fig, path):
    """PNG file and the same picture as uint8 3xHxW, rendered once (Agg) for both."""
    from ..render import figure_to_uint8, save_png

    image = figure_to_uint8(fig)
    save_png(image, path)
    return image


MAX_FIGURE_INCHES = 24.0  # 2400 px at 100 dpi: a 1000-class matrix stays a picture, not gigabytes
MAX_LABELLED = 60  # above this, every k-th class is labelled so the names stay legible


def confusion_figure(matrix, row_names, col_names, title, xlabel="predicted", ylabel="true"):
    """Counts as a heat map; cells annotated and every class labelled while the matrix is small
    (a data set's classes), a plain heat map of bounded size for hundreds of classes."""
    from matplotlib.figure import Figure

    n_rows, n_cols = len(row_names), len(col_names)
    side = min(MAX_FIGURE_INCHES, max(4.0, 0.45 * max(n_rows, n_cols) + 2.0))
    fig = Figure(figsize=(side + 1.0, side), dpi=100)
    ax = fig.subplots()
    im = ax.imshow(matrix, cmap="Blues", interpolation="nearest")
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    col_step = -(-n_cols // MAX_LABELLED)
    row_step = -(-n_rows // MAX_LABELLED)
    ax.set_xticks(range(0, n_cols, col_step), labels=col_names[::col_step], rotation=90 if n_cols > 8 else 0,
                  fontsize="small")
    ax.set_yticks(range(0, n_rows, row_step), labels=row_names[::row_step], fontsize="small")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    peak = max(1, max((max(r) for r in matrix), default=1))
    if n_rows * n_cols <= 900:
        for i in range(n_rows):
            for j in range(n_cols):
                v = matrix[i][j]
                if v:
                    ax.text(j, i, str(v), ha="center", va="center", fontsize="x-small",
                            color="white" if v > peak / 2 else "black")
    fig.tight_layout()
    return fig
