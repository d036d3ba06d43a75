"""metrics.csv and metrics.jsonl in the run dir: one row per train log line and per evaluation.

Every row carries ``phase`` (train | eval), ``epoch`` and ``iter`` (global iterations done).
Rows are written at once (append + flush) so a killed run loses nothing; a write that fails
(a full disk) leaves no half row and no temp file, and is one RunFileError (writers/run_files.py). The CSV header is
the union of all keys seen; when a row brings a new key the CSV is rewritten (atomically)
with the wider header, which happens only a few times per run (first train row, first eval).
"""
import csv
import json
import logging
import math
import os
import time

from .run_files import appending, write_text, writing

CSV_NAME = "metrics.csv"
JSONL_NAME = "metrics.jsonl"
log = logging.getLogger("up")
FIRST_COLUMNS = ["phase", "epoch", "iter"]


def _jsonable(value):
    # Strict JSON has no NaN/Infinity: a diverged loss becomes null rather than invalid JSON.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _row_iter(row):
    try:
        return int(float(row.get("iter")))
    except (TypeError, ValueError):
        return None


class MetricsTable:
    """Append-only CSV + JSONL pair. ``keep_upto_iter``: rows after that global iteration
    (left by a run that went further than the checkpoint being resumed) are dropped, so a
    resumed run's files have no duplicates; ``keep_upto_iter=0`` starts them afresh."""

    def __init__(self, run_dir, keep_upto_iter=0):
        with writing(run_dir):
            os.makedirs(run_dir, exist_ok=True)
        self.csv_path = os.path.join(run_dir, CSV_NAME)
        self.jsonl_path = os.path.join(run_dir, JSONL_NAME)
        self.columns = list(FIRST_COLUMNS)
        self._trim_csv(keep_upto_iter)
        self._trim_jsonl(keep_upto_iter)

    # -- resume -------------------------------------------------------------------------------
    def _trim_csv(self, upto):
        if not os.path.exists(self.csv_path):
            return
        try:
            with open(self.csv_path, newline="", encoding="utf-8") as f:
                reader = csv.DictReader(f)
                header = list(reader.fieldnames or [])
                rows = [r for r in reader if (_row_iter(r) or 0) <= upto]
            if header and not set(FIRST_COLUMNS) <= set(header):
                raise ValueError(f"its header has no {'/'.join(FIRST_COLUMNS)} columns")
        except (csv.Error, UnicodeDecodeError, ValueError, IsADirectoryError) as exc:
            set_aside(self.csv_path, exc)
            return
        if header:
            self.columns = header + [c for c in FIRST_COLUMNS if c not in header]
        self._rewrite_csv(rows)

    def _trim_jsonl(self, upto):
        if not os.path.exists(self.jsonl_path):
            return
        kept = []
        try:
            with open(self.jsonl_path, encoding="utf-8") as f:
                for line in f:
                    try:
                        row = json.loads(line)
                    except ValueError:  # a line cut short by a kill: drop it
                        continue
                    if isinstance(row, dict) and (_row_iter(row) or 0) <= upto:
                        kept.append(line if line.endswith("\n") else line + "\n")
        except UnicodeDecodeError as exc:
            set_aside(self.jsonl_path, exc)
            return
        write_text(self.jsonl_path, "".join(kept))

    # -- writing --------------------------------------------------------------------------------
    def write(self, row):
        """Append one row (a flat dict of scalars) to both files."""
        row = {k: v for k, v in row.items() if v is not None}
        new = [k for k in row if k not in self.columns]
        if new:
            self.columns += new
            self._rewrite_csv(self._read_csv_rows())
        with appending(self.csv_path) as f:
            if f.tell() == 0:
                csv.writer(f).writerow(self.columns)
            csv.DictWriter(f, self.columns).writerow(row)
        with appending(self.jsonl_path) as f:
            f.write(json.dumps({k: _jsonable(v) for k, v in row.items()}, allow_nan=False) + "\n")

    def _read_csv_rows(self):
        if not os.path.exists(self.csv_path):
            return []
        with open(self.csv_path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def _rewrite_csv(self, rows):
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, self.columns, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: v for k, v in r.items() if k is not None})
        write_text(self.csv_path, buf.getvalue())  # readers (`up plot` on a live run) never see half a file


def set_aside(path, why):
    """A metrics file that cannot be read (hand-edited, binary garbage) must not stop a resume:
    it is kept, renamed ``<name>.corrupt-<time>``, and a new file starts."""
    kept = f"{path}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}"
    n = 1
    while os.path.exists(kept):
        n += 1
        kept = f"{path}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}-{n}"
    with writing(path):
        os.replace(path, kept)
    log.warning("%s cannot be read (%s): kept as %s, starting a new one", os.path.basename(path),
                str(why).splitlines()[0][:200], os.path.basename(kept))


def read_rows(run_dir):
    """The rows of ``run_dir/metrics.csv`` as dicts of floats (empty cells left out)."""
    path = os.path.join(run_dir, CSV_NAME)
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            row = {"phase": r.get("phase") or ""}
            for k, v in r.items():
                if k in (None, "phase") or v in (None, ""):
                    continue
                try:
                    row[k] = float(v)
                except ValueError:
                    pass
            out.append(row)
    return out
