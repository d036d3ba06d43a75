"""``up data digits-det``: the digits_det scenes written as a COCO data set.

Layout under ``out``::

    images/train/000001.png ...   images/val/000001.png ...
    annotations/instances_train.json  annotations/instances_val.json

Image ids, boxes and labels equal what ``digits_det`` yields for the same arguments, so a
``coco`` dataset on the export reproduces its targets exactly (pixels are rounded to 8 bits).
"""
import os

import numpy as np

from ...atomic import write_json


def scene_dataset(split, num_images, seed, **scene_kwargs):
    from .digits_det import DigitsDetection

    return DigitsDetection(split=split, num_images=num_images, seed=seed, **scene_kwargs)


def write_split(ds, out, split):
    from PIL import Image

    img_dir = os.path.join(out, "images", split)
    os.makedirs(img_dir, exist_ok=True)
    images, anns = [], []
    for rec in ds.records:
        canvas, boxes, labels = ds.scene(rec["image_id"] - 1)
        name = f"{rec['image_id']:06d}.png"
        pixels = np.round(canvas * 255.0).astype(np.uint8)
        Image.fromarray(pixels, mode="L").convert("RGB").save(os.path.join(img_dir, name))
        images.append({"id": rec["image_id"], "file_name": name, "height": rec["height"], "width": rec["width"]})
        for box, label in zip(boxes, labels):
            w, h = box[2] - box[0], box[3] - box[1]
            anns.append({"id": len(anns) + 1, "image_id": rec["image_id"], "category_id": label,
                         "bbox": [box[0], box[1], w, h], "area": w * h, "iscrowd": 0})
    # Category id = label (1..10), named by the digit it shows.
    cats = [{"id": i + 1, "name": name, "supercategory": "digit"} for i, name in enumerate(ds.classes)]
    ann_dir = os.path.join(out, "annotations")
    os.makedirs(ann_dir, exist_ok=True)
    ann_file = os.path.join(ann_dir, f"instances_{split}.json")
    write_json(ann_file, {"info": {"description": f"digits_det {split} scenes"}, "images": images,
                          "annotations": anns, "categories": cats})
    return ann_file, img_dir


def export_digits_coco(out, num_images=1000, num_val_images=None, seed=0, **scene_kwargs):
    """Write train and val splits; returns {split: (ann_file, img_dir)}."""
    num_val_images = num_val_images if num_val_images is not None else max(1, num_images // 4)
    written = {}
    for split, n in (("train", num_images), ("val", num_val_images)):
        if n > 0:
            written[split] = write_split(scene_dataset(split, n, seed, **scene_kwargs), out, split)
    return written
