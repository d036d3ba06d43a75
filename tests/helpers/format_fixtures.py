"""Small detection sets in each labelling tool's format, written from a COCO export of the
digits scenes by code that follows each format's published description (not by
``up data convert``), plus the boxes each format can hold after its own rounding."""
import base64
import json
import os
import shutil
from xml.sax.saxutils import escape, quoteattr

import yaml

from up_trainer.tasks.det.export import export_digits_coco

SCENE = dict(canvas_size=48, digits_per_image=[1, 3], scale_range=[10, 18])


def digits_coco(root, num_images=6, num_val_images=4, seed=5):
    """{split: (coco json dict, image folder)} of a fresh digits export under ``root/coco``."""
    written = export_digits_coco(os.path.join(root, "coco"), num_images, num_val_images, seed, **SCENE)
    out = {}
    for split, (ann, img_dir) in written.items():
        with open(ann) as f:
            out[split] = (json.load(f), img_dir, ann)
    return out


def by_image(coco):
    """{file_name: (image dict, [(xyxy box, category name)])}."""
    names = {c["id"]: c["name"] for c in coco["categories"]}
    out = {img["file_name"]: (img, []) for img in coco["images"]}
    file_of = {img["id"]: img["file_name"] for img in coco["images"]}
    for ann in coco["annotations"]:
        x, y, w, h = ann["bbox"]
        out[file_of[ann["image_id"]]][1].append(([x, y, x + w, y + h], names[ann["category_id"]]))
    return out


# -- Pascal VOC: integer 1-based inclusive pixel indices ------------------------------------------
def voc_ints(box):
    """The VOC bndbox a labelling tool writes for a continuous box: the pixels it covers,
    rounded to whole pixels, numbered from 1 (xmin = x1 + 1, xmax = x2)."""
    x1, y1, x2, y2 = (int(round(v)) for v in box)
    return x1 + 1, y1 + 1, x2, y2


def write_voc(coco, img_dir, root, split, difficult=()):
    """A VOC root: Annotations/<id>.xml, JPEGImages/, ImageSets/Main/<split>.txt. Objects whose
    (file, index) is in ``difficult`` get <difficult>1</difficult>."""
    for sub in ("Annotations", "JPEGImages", os.path.join("ImageSets", "Main")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
    ids = []
    for name, (img, objs) in sorted(by_image(coco).items()):
        stem = os.path.splitext(name)[0]
        ids.append(stem)
        shutil.copy(os.path.join(img_dir, name), os.path.join(root, "JPEGImages", name))
        parts = [f"<annotation>\n  <folder>VOC</folder>\n  <filename>{escape(name)}</filename>\n"
                 f"  <size><width>{img['width']}</width><height>{img['height']}</height><depth>3</depth></size>\n"
                 "  <segmented>0</segmented>\n"]
        for k, (box, cls) in enumerate(objs):
            xmin, ymin, xmax, ymax = voc_ints(box)
            parts.append(f"  <object>\n    <name>{escape(cls)}</name>\n    <pose>Unspecified</pose>\n"
                         f"    <truncated>0</truncated>\n    <difficult>{int((name, k) in difficult)}</difficult>\n"
                         f"    <bndbox>\n      <xmin>{xmin}</xmin>\n      <ymin>{ymin}</ymin>\n"
                         f"      <xmax>{xmax}</xmax>\n      <ymax>{ymax}</ymax>\n    </bndbox>\n  </object>\n")
        parts.append("</annotation>\n")
        with open(os.path.join(root, "Annotations", stem + ".xml"), "w") as f:
            f.write("".join(parts))
    with open(os.path.join(root, "ImageSets", "Main", f"{split}.txt"), "a") as f:
        f.write("".join(i + "\n" for i in ids))
    return root


# -- YOLO: class cx cy w h normalized ---------------------------------------------------------------
def write_yolo(splits, root, names_as_dict=True):
    """Ultralytics layout: images/<split>, labels/<split>, data.yaml. ``splits``: {split:
    (coco, img_dir)}. Class id = category id - 1 (digits' ids are 1..10)."""
    names = None
    for split, (coco, img_dir) in splits.items():
        cats = sorted(coco["categories"], key=lambda c: c["id"])
        names = [c["name"] for c in cats]
        os.makedirs(os.path.join(root, "images", split), exist_ok=True)
        os.makedirs(os.path.join(root, "labels", split), exist_ok=True)
        for name, (img, objs) in sorted(by_image(coco).items()):
            shutil.copy(os.path.join(img_dir, name), os.path.join(root, "images", split, name))
            lines = []
            for box, cls in objs:
                w, h = img["width"], img["height"]
                cx, cy = (box[0] + box[2]) / 2 / w, (box[1] + box[3]) / 2 / h
                lines.append(f"{names.index(cls)} {cx!r} {cy!r} {(box[2] - box[0]) / w!r} {(box[3] - box[1]) / h!r}\n")
            if lines:  # images without objects get no label file: negatives
                with open(os.path.join(root, "labels", split, os.path.splitext(name)[0] + ".txt"), "w") as f:
                    f.write("".join(lines))
    data = {"path": ".", **{split: f"images/{split}" for split in splits},
            "names": {i: n for i, n in enumerate(names)} if names_as_dict else names}
    with open(os.path.join(root, "data.yaml"), "w") as f:
        yaml.safe_dump(data, f)
    return os.path.join(root, "data.yaml")


# -- LabelMe ----------------------------------------------------------------------------------------
def write_labelme(coco, img_dir, root, polygon=(), embed=()):
    """One LabelMe JSON per image beside a copy of it. Objects (file, index) in ``polygon`` are
    written as 4-point polygons; images in ``embed`` carry imageData and no image file."""
    os.makedirs(root, exist_ok=True)
    for name, (img, objs) in sorted(by_image(coco).items()):
        shapes = []
        for k, (box, cls) in enumerate(objs):
            x1, y1, x2, y2 = box
            if (name, k) in polygon:
                shape = {"points": [[x1, y1], [x2, y1], [x2, y2], [x1, y2]], "shape_type": "polygon"}
            else:  # LabelMe stores the two corners in drawing order: here bottom-right first
                shape = {"points": [[x2, y2], [x1, y1]], "shape_type": "rectangle"}
            shapes.append({"label": cls, "group_id": None, "flags": {}, **shape})
        data = {"version": "5.2.1", "flags": {}, "shapes": shapes, "imagePath": name, "imageData": None,
                "imageHeight": img["height"], "imageWidth": img["width"]}
        if name in embed:
            with open(os.path.join(img_dir, name), "rb") as f:
                data["imageData"] = base64.b64encode(f.read()).decode()
        else:
            shutil.copy(os.path.join(img_dir, name), os.path.join(root, name))
        with open(os.path.join(root, os.path.splitext(name)[0] + ".json"), "w") as f:
            json.dump(data, f, indent=2)
    return root


# -- CVAT for images 1.1 -----------------------------------------------------------------------------
def write_cvat(coco, path, occluded=()):
    cats = [c["name"] for c in sorted(coco["categories"], key=lambda c: c["id"])]
    labels = "".join(f"<label><name>{escape(c)}</name><color>#000000</color><attributes/></label>" for c in cats)
    parts = ['<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n  <version>1.1</version>\n',
             f"  <meta><task><id>1</id><name>digits</name><labels>{labels}</labels></task></meta>\n"]
    for i, (name, (img, objs)) in enumerate(sorted(by_image(coco).items())):
        parts.append(f'  <image id="{i}" name={quoteattr(name)} width="{img["width"]}" height="{img["height"]}">\n')
        for k, (box, cls) in enumerate(objs):
            parts.append(f'    <box label={quoteattr(cls)} source="manual" occluded="{int((name, k) in occluded)}" '
                         f'xtl="{box[0]!r}" ytl="{box[1]!r}" xbr="{box[2]!r}" ybr="{box[3]!r}" z_order="0">\n'
                         f'      <attribute name="kind">digit</attribute>\n    </box>\n')
        parts.append("  </image>\n")
    parts.append("</annotations>\n")
    with open(path, "w") as f:
        f.write("".join(parts))
    return path


def det_cfg(train, test=None, epochs=1, batch_size=4):
    """A tiny FCOS run on 48-px digit scenes with the given dataset entries ({type, kwargs})."""
    return {"runtime": {"seed": 0, "num_threads": 1},
            "dataset": {"train": train, "test": test or train, "batch_size": batch_size, "test_batch_size": 8,
                        "num_workers": 0},
            "trainer": {"max_epoch": epochs, "optimizer": {"type": "AdamW", "kwargs": {"lr": 0.002}}},
            "saver": {"save_dir": "checkpoints"},
            "net": {"type": "fcos", "kwargs": {"num_classes": 10, "backbone": "resnet18", "returned_layers": [2, 3],
                                               "fpn_extra": "none", "fpn_channels": 32, "head_convs": 1,
                                               "min_size": 48, "max_size": 48}}}
