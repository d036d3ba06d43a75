"""Tiny LVIS v1 files made from the COCO files of generated digit scenes.

LVIS v1's differences from COCO, all present: images named by ``coco_url`` (no ``file_name``),
per-image ``neg_category_ids`` (digits verified absent: every absent digit on even image ids,
none on odd ones) and ``not_exhaustive_category_ids`` (the first present digit on every third
image), categories with a ``frequency`` (digits 0-2 rare, 3-5 common, 6-9 frequent), no
``iscrowd``.
"""
import json
import os

URL = "http://images.cocodataset.org/"


def frequency_of(cat_id):
    return "r" if cat_id <= 3 else "c" if cat_id <= 6 else "f"


def lvis_from_coco(coco_file, out_file):
    with open(coco_file, encoding="utf-8") as f:
        data = json.load(f)
    present = {}
    for ann in data["annotations"]:
        present.setdefault(ann["image_id"], []).append(ann["category_id"])
        ann.pop("iscrowd", None)
    cat_ids = [c["id"] for c in data["categories"]]
    for img in data["images"]:
        img["coco_url"] = URL + img.pop("file_name")
        here = sorted(set(present.get(img["id"], [])))
        img["neg_category_ids"] = [c for c in cat_ids if c not in here] if img["id"] % 2 == 0 else []
        img["not_exhaustive_category_ids"] = here[:1] if img["id"] % 3 == 0 else []
    for cat in data["categories"]:
        cat["frequency"] = frequency_of(cat["id"])
        cat["synonyms"] = [cat["name"]]
    os.makedirs(os.path.dirname(out_file) or ".", exist_ok=True)
    with open(out_file, "w", encoding="utf-8") as f:
        json.dump(data, f)
    return out_file


def digits_lvis(root, num_images=6, num_val_images=4, seed=0):
    """{split: (lvis file, image dir)} of generated digit scenes."""
    from up_trainer.tasks.det.export import export_digits_coco

    coco = export_digits_coco(os.path.join(root, "coco"), num_images=num_images, num_val_images=num_val_images,
                              seed=seed)
    return {split: (lvis_from_coco(ann, os.path.join(root, f"lvis_v1_{split}.json")), img_dir)
            for split, (ann, img_dir) in coco.items()}
