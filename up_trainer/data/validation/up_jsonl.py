"""UP's detection meta files (JSONL, one image per line) -> detection records, checked once.

A line: ``{filename: str, image_height: int, image_width: int, instances: [{bbox: [x1, y1,
x2, y2], label: 1..C, is_ignored: bool}]}``. Record problems (``on_bad_record: skip`` drops the
line and counts them): a line that is not a JSON object; a missing or mistyped key; a bbox
that is not 4 finite numbers, has no size or lies outside the image; a label outside 1..C
(``is_ignored`` instances need none); an image file that is not there.

An image is identified by its file (UP uses the file name as the image id): a file listed
twice with different sizes or instances is an error whatever ``on_bad_record`` says (one
image, two sets of labels). The same line repeated word for word is kept: repeating lines is
how UP meta files oversample images.
"""
import json
import os

from ...errors import DataError
from .common import FirstSeen, box_problem, clipped, flag_problem, four_numbers, shown, size_problem, whole_number


def up_jsonl_records(lines, meta_file, image_dir, limit, bad):
    """Records of every usable line of ``lines`` (the open ``meta_file``); ``limit`` is the
    number of classes when known."""
    records, seen = [], FirstSeen()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rec = line_record(line, f"{meta_file}:{lineno}", image_dir, limit, bad)
        if rec is None:
            continue
        content = (rec["height"], rec["width"], json.dumps(rec.pop("instances"), sort_keys=True))
        first = seen.repeat_of(os.path.normpath(rec["file"]), (lineno, content))
        if first is not None and first[1] != content:
            raise DataError(f"{meta_file}:{lineno}: filename {rec['filename']!r} repeats line {first[0]} with "
                            "other sizes or instances (one image, two sets of labels); merge them into one line")
        rec["image_id"] = len(records)
        records.append(rec)
    return records


def line_record(line, where, image_dir, limit, bad):
    try:
        meta = json.loads(line)
    except json.JSONDecodeError as exc:
        return bad(f"{where}: malformed record: not JSON ({exc.msg} at column {exc.colno})")
    if not isinstance(meta, dict):
        return bad(f"{where}: malformed record: expected a JSON object, got {shown(meta)}")
    filename = meta.get("filename")
    if not isinstance(filename, str) or not filename:
        return bad(f"{where}: malformed record: 'filename' must be a file name, got {shown(filename)}")
    problem = size_problem(meta, "image_height") or size_problem(meta, "image_width")
    if problem:
        return bad(f"{where}: malformed record: {problem}")
    instances = meta.get("instances")
    if instances is None:
        instances = []
    if not isinstance(instances, list):
        return bad(f"{where}: malformed record: 'instances' must be a list, got {shown(instances)}")
    h, w = int(meta["image_height"]), int(meta["image_width"])
    rec = {"file": os.path.join(image_dir, filename), "filename": filename, "height": h, "width": w,
           "boxes": [], "labels": [], "ignore": [], "instances": instances, "source": f"{where} ({filename})"}
    if not os.path.isfile(rec["file"]):
        return bad(f"{rec['source']}: image file not found: {rec['file']}")
    for j, inst in enumerate(instances):
        iwhere = f"{where}: instances[{j}]"
        if not isinstance(inst, dict):
            return bad(f"{iwhere}: malformed instance: expected a mapping, got {shown(inst)}")
        box = four_numbers(inst.get("bbox"))
        if box is None:
            return bad(f"{iwhere}: malformed instance: 'bbox' must be 4 finite numbers [x1, y1, x2, y2], "
                       f"got {shown(inst.get('bbox'))}")
        problem = flag_problem(inst, "is_ignored") or box_problem(box, w, h)
        if problem:
            return bad(f"{iwhere}: {problem}")
        box = clipped(box, w, h)
        if inst.get("is_ignored", False):
            rec["ignore"].append(box)
            continue
        label = whole_number(inst.get("label", -1))
        if label is None or label < 1 or (limit is not None and label > limit):
            return bad(f"{iwhere}: unknown label {short(inst.get('label'))} (labels are 1..{limit or 'C'})")
        rec["boxes"].append(box)
        rec["labels"].append(label)
    return rec


def short(value):
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
