"""Classification lists as CSV or TSV with a header row: a path column and a label column
(``path,label`` by default). The delimiter is a tab for .tsv/.tab files or when the header
holds a tab, else a comma. Labels are class names or integer class indices (0-based), not
a mix. Paths are relative to ``image_dir`` (default: the CSV's folder)."""
import csv
import io
import logging
import os

from ...errors import DataError

log = logging.getLogger("up")


def utf8_text(path):
    """The file's text (UTF-8, a byte order mark dropped); other bytes are refused naming the
    file and the line, as every annotation reader names them."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte {data[exc.start]:#04x}); save the file as UTF-8") \
            from None


def read_rows(csv_file, path_column="path", label_column="label", image_dir=None):
    """[(path as written, label text, line number)] after checking the header; paths are
    relative to ``image_dir`` (default: the CSV's folder)."""
    if not os.path.isfile(csv_file):
        raise DataError(f"csv file not found: {csv_file}")
    try:
        with io.StringIO(utf8_text(csv_file), newline="") as f:
            first = f.readline()
            f.seek(0)
            tab = csv_file.lower().endswith((".tsv", ".tab")) or "\t" in first
            reader = csv.DictReader(f, delimiter="\t" if tab else ",")
            header = reader.fieldnames or []
            for column in (path_column, label_column):
                if column not in header:
                    raise DataError(f"{csv_file}:1: header has no {column!r} column (columns: "
                                    f"{', '.join(map(repr, header)) or 'none'})")
            rows = []
            for row in reader:
                lineno = reader.line_num
                path, label = row.get(path_column), row.get(label_column)
                if path is None or label is None:
                    raise DataError(f"{csv_file}:{lineno}: expected {len(header)} fields, got fewer")
                if not path.strip() and not label.strip():
                    continue
                if not path.strip() or not label.strip():
                    raise DataError(f"{csv_file}:{lineno}: empty {path_column if not path.strip() else label_column}")
                rows.append((path.strip(), label.strip(), lineno))
    except csv.Error as exc:
        raise DataError(f"{csv_file}: malformed CSV: {exc}") from None
    if not rows:
        raise DataError(f"{csv_file}: no rows after the header")
    image_dir = os.path.dirname(os.path.abspath(csv_file)) if image_dir is None else image_dir
    return without_repeats(rows, csv_file, image_dir)


def without_repeats(rows, csv_file, image_dir):
    """``rows`` with each image once. One image under two labels is refused (naming both
    lines: a single-label classifier cannot learn both, and the run would not say so); the
    same image and label listed again is dropped with a warning (it would be drawn twice as
    often as the others). An image is its file: the real path, links followed, so a relative
    and an absolute spelling (or a link) of one file are one image."""
    first, kept, repeats = {}, [], []
    for path, label, lineno in rows:
        key = os.path.realpath(os.path.join(image_dir, path))
        if key not in first:
            first[key] = (label, lineno)
            kept.append((path, label, lineno))
        elif first[key][0] != label:
            raise DataError(f"{csv_file}:{lineno}: {path} is labelled {label!r} here and {first[key][0]!r} at line "
                            f"{first[key][1]} (one label per image: remove one of the two lines)")
        else:
            repeats.append(lineno)
    if repeats:
        log.warning("%s: %d line(s) repeat an earlier image with the same label (line %s, ...): each image is "
                    "read once", csv_file, len(repeats), repeats[0])
    return kept


def is_int(text):
    return text.lstrip("-").isdigit()


def resolve_labels(rows, classes, csv_file):
    """(class names, [(path, label index, line)]): names map through ``classes`` (given) or
    their sorted set; integers index ``classes`` (given) or '0'..'max'."""
    as_int = [is_int(label) for _, label, _ in rows]
    if any(as_int) and not all(as_int):
        k = as_int.index(not as_int[0])
        raise DataError(f"{csv_file}:{rows[k][2]}: label {rows[k][1]!r} mixes integer and name labels "
                        f"(line {rows[0][2]} has {rows[0][1]!r})")
    if all(as_int):
        labels = [int(label) for _, label, _ in rows]
        names = [str(c) for c in classes] if classes is not None else [str(i) for i in range(max(labels) + 1)]
        for (_, label, lineno), value in zip(rows, labels):
            if not 0 <= value < len(names):
                raise DataError(f"{csv_file}:{lineno}: label {value} is out of range for {len(names)} classes")
        return names, [(p, v, n) for (p, _, n), v in zip(rows, labels)]
    names = [str(c) for c in classes] if classes is not None else sorted({label for _, label, _ in rows})
    index = {name: i for i, name in enumerate(names)}
    out = []
    for path, label, lineno in rows:
        if label not in index:
            raise DataError(f"{csv_file}:{lineno}: label {label!r} is not one of the classes ({', '.join(names[:10])})")
        out.append((path, index[label], lineno))
    return names, out
