"""`up plot RUN_DIR`: training curves from metrics.csv to a PNG (matplotlib, rendered by Agg).

Panels: the losses, the learning rate and the grad norm against the global iteration (train
rows), then one panel per evaluation metric against the epoch (eval rows).
"""
import math
import os

from .errors import DataError

NOT_CURVES = {"phase", "epoch", "iter", "time"}
MAX_METRIC_PANELS = 12  # a detection evaluator reports a dozen APs/ARs; beyond that the grid gets unreadable


def _series(rows, x_key, key):
    pts = sorted((r[x_key], r[key]) for r in rows if x_key in r and key in r and math.isfinite(r[key]))
    return [p[0] for p in pts], [p[1] for p in pts]


def _panels(rows):
    """(title, x label, [(label, xs, ys)]) per panel, in drawing order."""
    train = [r for r in rows if r.get("phase") == "train"]
    evals = [r for r in rows if r.get("phase") == "eval"]
    train_keys = sorted({k for r in train for k in r} - NOT_CURVES)
    # Counts such as num_samples are bookkeeping, not curves.
    eval_keys = sorted(k for k in {k for r in evals for k in r} - NOT_CURVES if not k.startswith("num_"))
    panels = []
    loss_keys = [k for k in train_keys if "loss" in k]
    # The summed loss first (drawn thicker), its parts after it.
    loss_keys.sort(key=lambda k: (k not in ("loss", "total_loss"), k))
    if loss_keys:
        panels.append(("loss", "iteration", [(k, *_series(train, "iter", k)) for k in loss_keys]))
    for key, title in (("lr", "learning rate"), ("grad_norm", "grad norm")):
        if key in train_keys:
            panels.append((title, "iteration", [(key, *_series(train, "iter", key))]))
    for key in eval_keys[:MAX_METRIC_PANELS]:
        panels.append((key, "epoch", [(key, *_series(evals, "epoch", key))]))
    return [p for p in panels if any(xs for _, xs, _ in p[2])]


def plot_run(run_dir, out=None):
    """Draw ``run_dir/metrics.csv``; returns the PNG's path (default ``run_dir/results.png``)."""
    from .writers.run_files import replacing, writing
    from .writers.table import CSV_NAME, read_rows

    path = os.path.join(run_dir, CSV_NAME)
    if not os.path.isfile(path):
        raise DataError(f"{run_dir}: no {CSV_NAME} (train_val_logger writes it during training)")
    try:
        rows = read_rows(run_dir)
    except (OSError, ValueError) as exc:
        raise DataError(f"{path}: unreadable: {exc}") from None
    panels = _panels(rows)
    if not panels:
        raise DataError(f"{path}: no rows to plot yet")

    # A bare Figure renders with Agg without pyplot: no display needed (clusters, CI), no window
    # on a laptop, and the backend a user's own code chose stays as it was.
    from matplotlib.figure import Figure

    ncols = min(3, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig = Figure(figsize=(5.2 * ncols, 3.6 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    for ax, (title, xlabel, lines) in zip(axes.flat, panels):
        for label, xs, ys in lines:
            marker = "o" if len(xs) <= 30 else None
            ax.plot(xs, ys, label=label, marker=marker, markersize=3, linewidth=1.4 if label in ("loss", "total_loss")
                    else 1.0)
        ax.set_title(title)
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize="small")
        if xlabel == "epoch":
            ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)))
    fig.tight_layout()
    out = out or os.path.join(run_dir, "results.png")
    with writing(out):
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with replacing(out) as tmp:  # a failed save (a full disk) leaves the previous plot and no temp file
        fig.savefig(tmp, dpi=100)
    return out
