"""What every format reader shares: the parsed shape, a DTD-refusing XML parser that keeps
line numbers, image sizes from file headers, and number parsing that names where it failed."""
import math
import os
import xml.parsers.expat
from dataclasses import dataclass, field
from typing import Optional
from xml.etree.ElementTree import TreeBuilder

from ...errors import DataError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


@dataclass
class Obj:
    """One annotated object: ``box`` xyxy in pixels (0-based, continuous: a box covering pixel
    columns 0..9 is x1=0, x2=10), ``name`` its class, ``ignore`` a region neither positive nor
    negative (VOC ``difficult``), ``extra`` the format's own flags (truncated, occluded, ...)
    and ``where`` the file and line/element it came from."""
    box: list
    name: str
    where: str
    ignore: bool = False
    extra: dict = field(default_factory=dict)


@dataclass
class ImageRecord:
    file: str            # the image path as it will be opened
    file_name: str       # the name relative to the image folder, as the annotation wrote it
    width: int
    height: int
    where: str           # the annotation file (and line/element) naming this image
    objects: list = field(default_factory=list)
    embedded: Optional[str] = None  # LabelMe: a JSON file whose imageData holds the pixels


def object_name(value, where):
    """A class name as a file writes it, stripped; empty (or not text) is refused here, where
    the file and line are known."""
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: empty class name {value!r}")
    return value.strip()


@dataclass
class Parsed:
    records: list
    classes: Optional[list] = None   # the class names the files declare, in their order
    classes_from: Optional[str] = None  # where they are declared (file and field), for messages
    notes: list = field(default_factory=list)  # approximations, reported once at start-up


def count_note(counts, template):
    """'3 polygon(s) became their bounding box' style notes from a {kind: n} dict."""
    return [template.format(n=n, kind=kind) for kind, n in sorted(counts.items()) if n]


# -- XML ------------------------------------------------------------------------------------------
class XmlDoc:
    """An ElementTree parsed with expat directly, so every element's line is known and a DTD
    (the only way to declare entities: billion-laughs, external files) is refused outright."""

    def __init__(self, path):
        self.path = path
        self.lines = {}
        builder = TreeBuilder()
        parser = xml.parsers.expat.ParserCreate()
        parser.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)

        def refuse(*_):
            raise DataError(f"{path}:{parser.CurrentLineNumber}: XML with a DOCTYPE or entity declaration "
                            "is refused (annotation files need neither; it could expand entities)")

        parser.StartDoctypeDeclHandler = refuse
        parser.EntityDeclHandler = refuse

        def start(tag, attrs):
            self.lines[builder.start(tag, attrs)] = parser.CurrentLineNumber

        parser.StartElementHandler = start
        parser.EndElementHandler = builder.end
        parser.CharacterDataHandler = builder.data
        if not os.path.isfile(path):
            raise DataError(f"annotation file not found: {path}")
        try:
            with open(path, "rb") as f:
                parser.ParseFile(f)
            self.root = builder.close()
        except xml.parsers.expat.ExpatError as exc:
            raise DataError(f"{path}:{exc.lineno}: malformed XML: {xml.parsers.expat.ErrorString(exc.code)}") from None
        except OSError as exc:
            raise DataError(f"{path}: cannot read: {exc}") from None

    def where(self, elem, label=None):
        """'file:line <tag>' for error messages."""
        return f"{self.path}:{self.lines.get(elem, '?')} <{label or elem.tag}>"

    def text(self, parent, tag, required=True):
        """Stripped text of ``parent``'s child ``tag`` (None when absent and not required)."""
        child = parent.find(tag)
        if child is None or child.text is None or not child.text.strip():
            if required:
                raise DataError(f"{self.where(parent)}: missing <{tag}>")
            return None
        return child.text.strip()

    def number(self, parent, tag):
        return to_float(self.text(parent, tag), f"{self.where(parent.find(tag))}")


def to_float(value, where):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise DataError(f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise DataError(f"{where}: {value!r} is not a finite number")
    return number


def to_int(value, where, what="value"):
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = float("nan")
    if not math.isfinite(number) or number != int(number):
        raise DataError(f"{where}: {what} {value!r} is not an integer")
    return int(number)


# -- images -----------------------------------------------------------------------------------------
EXIF_ORIENTATION = 0x0112
TURNED = (5, 6, 7, 8)  # EXIF orientations that swap width and height


def image_size(path, where):
    """(width, height) of the picture as decoding hands it on (data/readers.py applies the
    EXIF orientation: a phone photo stored sideways comes out upright), from the file's header
    only: no pixel is decoded here."""
    from PIL import Image, UnidentifiedImageError

    if not os.path.isfile(path):
        raise DataError(f"{where}: image file not found: {path}")
    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None  # the decode guard applies when read
    try:
        with Image.open(path) as img:
            turned = img.getexif().get(EXIF_ORIENTATION, 1) in TURNED
            return (img.height, img.width) if turned else (img.width, img.height)
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"{where}: cannot read image {path}: {exc}") from None
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def text_lines(path):
    """(line number, text) of a UTF-8 text file; bytes that are not UTF-8 raise one DataError
    naming the file and the line (a label file saved in another encoding)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise DataError(f"{path}: cannot read: {exc}") from None
    if data.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark (Windows editors)
        data = data[3:]
    for lineno, raw in enumerate(data.splitlines(), 1):
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataError(f"{path}:{lineno}: not UTF-8 text (byte {raw[exc.start]:#04x} at column "
                            f"{exc.start + 1}); save the file as UTF-8") from None


def require_file(path, where):
    if not os.path.isfile(path):
        raise DataError(f"{where}: image file not found: {path}")
    return path


def require_dir(path, what):
    if not os.path.isdir(path):
        raise DataError(f"{what} is not a directory: {path}")
    return path


def sorted_files(folder, extensions):
    """Files directly in ``folder`` with one of ``extensions`` (any case), sorted by name."""
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.lower().endswith(extensions) and not f.startswith("."))
