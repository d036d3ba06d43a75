"""Pascal VOC XML: one ``Annotations/<id>.xml`` per image.

Layouts: a VOC root (``Annotations/``, ``JPEGImages/``, ``ImageSets/Main/<split>.txt`` listing
image ids) or any folder of XML files plus an image folder.

Box rule: VOC writes ``xmin ymin xmax ymax`` as 1-based pixel indices, both ends inclusive
(a box over the first ten pixel columns is xmin=1, xmax=10). In the 0-based continuous
coordinates used everywhere here that box spans x 0..10, so x1 = xmin - 1, y1 = ymin - 1,
x2 = xmax, y2 = ymax, applied exactly (fractional values, which some tools write, follow the
same rule). ``difficult`` objects become ignore regions unless kept; ``truncated``,
``occluded`` and ``pose`` are carried in each object's ``extra``.
"""
import os

from ...errors import DataError
from .common import (ImageRecord, Obj, Parsed, XmlDoc, image_size, require_dir, sorted_files, text_lines,
                     to_int)

FLAGS = ("truncated", "occluded", "difficult")


def voc_files(root=None, split=None, ann_dir=None, img_dir=None):
    """(xml files, image folder) for a VOC root + split or an annotation + image folder."""
    if root is not None:
        require_dir(root, "voc root")
        ann_dir = ann_dir or os.path.join(root, "Annotations")
        img_dir = img_dir or os.path.join(root, "JPEGImages")
    if ann_dir is None:
        raise DataError("voc: give root (a VOC folder) or ann_dir (a folder of XML files)")
    require_dir(ann_dir, "voc ann_dir")
    img_dir = img_dir if img_dir is not None else ann_dir
    if root is not None and split is not None:
        listing = os.path.join(root, "ImageSets", "Main", f"{split}.txt")
        if not os.path.isfile(listing):
            raise DataError(f"voc split {split!r}: list file not found: {listing}")
        files = []
        for lineno, line in text_lines(listing):
            image_id = line.split()[0] if line.split() else ""
            if image_id:
                xml = os.path.join(ann_dir, image_id + ".xml")
                if not os.path.isfile(xml):
                    raise DataError(f"{listing}:{lineno}: annotation file not found: {xml}")
                files.append(xml)
    else:
        files = sorted_files(ann_dir, (".xml",))
    if not files:
        raise DataError(f"voc: no annotation files (*.xml) in {ann_dir}")
    return files, img_dir


def parse_voc(files, img_dir):
    records = []
    for path in files:
        doc = XmlDoc(path)
        root = doc.root
        if root.tag != "annotation":
            raise DataError(f"{doc.where(root)}: not a VOC annotation (the root element must be <annotation>)")
        file_name = doc.text(root, "filename")
        image = os.path.join(img_dir, file_name)
        size = root.find("size")
        width = height = 0
        if size is not None:
            width = to_int(doc.text(size, "width"), doc.where(size), "width")
            height = to_int(doc.text(size, "height"), doc.where(size), "height")
        if width <= 0 or height <= 0:  # some exporters write 0: the image's header knows
            width, height = image_size(image, doc.where(size if size is not None else root))
        elif not os.path.isfile(image):
            raise DataError(f"{doc.where(root.find('filename'))}: image file not found: {image}")
        rec = ImageRecord(image, file_name, width, height, path)
        for k, elem in enumerate(root.findall("object")):
            where = doc.where(elem, f"object #{k + 1}")
            box_elem = elem.find("bndbox")
            if box_elem is None:
                raise DataError(f"{where}: missing <bndbox>")
            xmin, ymin, xmax, ymax = (doc.number(box_elem, t) for t in ("xmin", "ymin", "xmax", "ymax"))
            extra = {flag: to_int(doc.text(elem, flag), doc.where(elem.find(flag)), flag)
                     for flag in FLAGS if doc.text(elem, flag, required=False) is not None}
            pose = doc.text(elem, "pose", required=False)
            if pose is not None:
                extra["pose"] = pose
            rec.objects.append(Obj([xmin - 1.0, ymin - 1.0, xmax, ymax], doc.text(elem, "name"), where,
                                   ignore=bool(extra.get("difficult", 0)), extra=extra))
        records.append(rec)
    return Parsed(records)
