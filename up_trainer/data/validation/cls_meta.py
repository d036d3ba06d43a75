"""UP's classification meta files, checked once: ``relative/path label`` lines (imagenet) or
JSON lines ``{"filename": str, "label": int}`` (custom_cls). A custom_cls label may be a list
``[a, b, ...]``: one class per classifier head (UP's multi-head form); it is read as a tuple,
and every labeled record of the file must give as many entries (checked by the dataset).

Errors (one line naming file:line): a line that does not parse; a label that is not a
non-negative integer; an image listed twice with two different labels (the same line
repeated is kept: repeating lines is how meta files oversample). Labels beyond the class
count and missing image files are checked by the dataset, which knows both.
"""
import json

from ...errors import DataError


def parse_label(value, where):
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise DataError(f"{where}: label must be an integer class index, got {value!r}")
    try:
        label = int(value)
    except ValueError:
        raise DataError(f"{where}: label {value!r} is not an integer") from None
    if label < 0:
        raise DataError(f"{where}: label {label} is negative")
    return label


def parse_json_line(line, where):
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise DataError(f"{where}: malformed JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(rec, dict) or "filename" not in rec or "label" not in rec:
        raise DataError(f"{where}: expected a JSON object with 'filename' and 'label'")
    if not isinstance(rec["filename"], str) or not rec["filename"]:
        raise DataError(f"{where}: 'filename' must be a string")
    label = rec["label"]
    if isinstance(label, list):  # UP's multi-head form: one class per head
        if not label:
            raise DataError(f"{where}: an empty label list (one class per classifier head expected)")
        return rec["filename"], tuple(parse_label(v, f"{where}: label entry {i}") for i, v in enumerate(label))
    return rec["filename"], parse_label(label, where)


def parse_text_line(line, where):
    parts = line.rsplit(None, 1)  # split from the right: file names may contain spaces
    if len(parts) != 2:
        raise DataError(f"{where}: expected 'relative/path label', got {line!r}")
    return parts[0], parse_label(parts[1], where)


def check_one_label_per_image(records, meta_file):
    """``records``: (path, label, line number). An image listed with two labels is refused."""
    first = {}
    for path, label, lineno in records:
        if label is None:
            continue
        seen = first.setdefault(path, (label, lineno))
        if seen[0] != label:
            raise DataError(f"{meta_file}:{lineno}: {path} has label {label} here and {seen[0]} on line {seen[1]} "
                            "(one image, two labels)")
