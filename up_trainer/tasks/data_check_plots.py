"""The PNGs of ``up data check``: boxes and images per class and split (bars), box width /
height / aspect histograms at the training input size, and a 4x4 contact sheet of random
train images with their boxes drawn (decoded through the dataset's own reader)."""
import os
import random

import numpy as np

from ..errors import DataError
from ..render import draw_boxes, enlarge, grid, save_png, to_uint8


def _figure(width, height):
    from matplotlib.figure import Figure  # a bare Figure renders with Agg: no display needed

    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def plot_counts(summary, path):
    from matplotlib.ticker import MaxNLocator

    splits = list(summary)
    classes = list(next(iter(summary.values()))["boxes_per_class"])
    fig = _figure(max(6.0, 0.5 * len(classes) + 2), 6.5)
    x = np.arange(len(classes))
    width = 0.8 / max(1, len(splits))
    for row, key in enumerate(("boxes_per_class", "images_per_class")):
        ax = fig.add_subplot(2, 1, row + 1)
        for k, name in enumerate(splits):
            values = [summary[name][key].get(c, 0) for c in classes]
            ax.bar(x + k * width - 0.4 + width / 2, values, width, label=f"{name} ({sum(values)})")
        crowded = len(classes) > 12
        ax.set_xticks(x, classes, rotation=45 if crowded else 0, ha="right" if crowded else "center")
        ax.set_ylabel("boxes" if row == 0 else "images with the class")
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.legend()
    fig.suptitle("boxes and images per class")
    fig.savefig(path)
    return path


def plot_box_sizes(summary, scale_text, path):
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig = _figure(12, 3.8)
    panels = (("box width (px)", lambda s: s[:, 0], True), ("box height (px)", lambda s: s[:, 1], True),
              ("aspect log2(w / h)", lambda s: np.log2(s[:, 0] / np.maximum(s[:, 1], 1e-9)), False))
    per_split = {name: np.asarray(s["box_sizes"], dtype=np.float64).reshape(-1, 2) for name, s in summary.items()}
    per_split = {name: v[(v > 0).all(axis=1)] for name, v in per_split.items()}
    for k, (title, value, log_x) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        values = {name: value(v) for name, v in per_split.items() if len(v)}
        if values:  # one set of bins for every split, so the bars compare
            both = np.concatenate(list(values.values()))
            lo, hi = float(both.min()), float(both.max())
            bins = np.geomspace(lo * 0.95, hi * 1.05, 25) if log_x else np.linspace(lo - 0.05, hi + 0.05, 25)
            for name, v in values.items():
                ax.hist(v, bins=bins, alpha=0.6, label=name)
            if log_x:
                ax.set_xscale("log")
                ax.xaxis.set_major_formatter(ScalarFormatter())
                ax.xaxis.set_minor_formatter(NullFormatter())
                ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024) if lo / 2 <= t <= hi * 2]
                ax.set_xticks(ticks)
                for stride in (8, 16, 32, 64):
                    if lo / 2 <= stride <= hi * 2:
                        ax.axvline(stride, color="gray", linewidth=0.6, linestyle="--")
            ax.legend()
        ax.set_title(title)
    fig.suptitle(f"box sizes at the training input size ({scale_text}); dashed: strides 8, 16, 32, 64")
    fig.savefig(path)
    return path


def contact_sheet(ds, path, seed, n=16):
    """(the sheet's path, or None when no picked image decodes; the DataError messages of the
    picked images that do not decode). An image that cannot be decoded (truncated, over
    runtime.max_image_pixels) is a finding of the check, not the end of it: its panel is left out."""
    rng = random.Random(seed)
    picks = sorted(rng.sample(range(len(ds.records)), min(n, len(ds.records))))
    panels, unreadable = [], []
    for i in picks:
        rec = ds.records[i]
        try:
            pixels = ds._image(rec)
        except DataError as exc:
            unreadable.append(str(exc))
            continue
        image, factor = enlarge(to_uint8(pixels), 160)
        boxes = np.asarray(rec["boxes"], dtype=np.float32).reshape(-1, 4) * factor
        panels.append(draw_boxes(image, boxes, rec["labels"], ds.classes, width=1))
    if not panels:
        return None, unreadable
    save_png(grid(panels, ncol=4), path)
    return path, unreadable


def write_plots(datasets, summary, scale_text, out_dir, seed, report):
    """The PNGs; images the contact sheet could not decode are added to ``report`` (once: a
    ``--decode`` check has reported them already)."""
    files = [plot_counts(summary, os.path.join(out_dir, "counts.png")),
             plot_box_sizes(summary, scale_text, os.path.join(out_dir, "box_sizes.png"))]
    if "train" in datasets:
        sheet, unreadable = contact_sheet(datasets["train"], os.path.join(out_dir, "train_samples.png"), seed)
        known = {f["message"] for f in report.findings if f["check"] == "unreadable" and f["split"] == "train"}
        for message in unreadable:
            if message not in known:
                report.add("error", "unreadable", "train", message)
        if sheet is not None:
            files.append(sheet)
    return files
