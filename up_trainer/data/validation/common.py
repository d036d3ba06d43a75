"""Value and box rules shared by the format validators."""
import math

from ...errors import short_repr

EDGE_TOLERANCE = 1.0  # pixels a box may stick out of its image (COCO rounding) before it is bad


def shown(value):
    """``str '7'`` / ``float nan``: a value as an error message quotes it (cut short)."""
    return f"{type(value).__name__} {short_repr(value, 60)}"


def is_integer(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def whole_number(value):
    """An int for 7 or 7.0 (JSON writers differ); None for anything else (7.5, '7', true)."""
    if is_integer(value):
        return value
    if isinstance(value, float) and math.isfinite(value) and value == int(value):
        return int(value)
    return None


def size_problem(record, key):
    """None when ``record[key]`` is a positive whole number; else what is wrong."""
    if key not in record:
        return f"missing '{key}'"
    if whole_number(record[key]) is None or whole_number(record[key]) < 1:
        return f"'{key}' must be a positive integer, got {shown(record[key])}"
    return None


def flag_problem(record, key):
    """None when ``record[key]`` is absent, a bool, 0 or 1 (COCO's iscrowd, UP's is_ignored)."""
    value = record.get(key, 0)
    if isinstance(value, bool) or (is_integer(value) and value in (0, 1)):
        return None
    return f"'{key}' must be 0, 1, true or false, got {shown(value)}"


def four_numbers(value):
    """A list of 4 finite floats from a JSON bbox, or None."""
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return None
    if not all(is_number(v) and math.isfinite(v) for v in value):
        return None
    return [float(v) for v in value]


def box_problem(box, width, height):
    """None when ``box`` (xyxy, pixels) is finite, has positive size and lies in the image
    (give or take EDGE_TOLERANCE); else what is wrong."""
    x1, y1, x2, y2 = box
    if not all(math.isfinite(float(v)) for v in box) or x2 <= x1 or y2 <= y1:
        return f"box {list(box)} has non-positive size"
    tol = EDGE_TOLERANCE
    if x1 < -tol or y1 < -tol or x2 > width + tol or y2 > height + tol:
        return f"box {list(box)} lies outside the {width}x{height} image"
    return None


def clipped(box, width, height):
    """A box sticking out by rounding only, clipped to the image."""
    x1, y1, x2, y2 = box
    return [max(x1, 0.0), max(y1, 0.0), min(x2, float(width)), min(y2, float(height))]


class FirstSeen:
    """Where each id (or file) was first seen, for ``x repeats y`` messages."""

    def __init__(self):
        self._where = {}

    def repeat_of(self, key, where):
        """The first place ``key`` was seen, or None (and ``where`` is remembered) when new."""
        try:
            if key in self._where:
                return self._where[key]
            self._where[key] = where
        except TypeError:  # an unhashable id: the type checks report it
            pass
        return None
