"""``up predict``: run a trained model on image files; write predictions.jsonl and drawn PNGs.

Detection: one JSON line per image {file, width, height, boxes (xyxy, original pixels),
scores, labels (1..C), classes}; the PNG shows every box with score >= score_thr, its class
name and score. Classification: {file, label, class, score, topk}; the PNG shows the image
framed and captioned with the predicted class and score. Small images are drawn enlarged
(integer factor up to a 256-pixel short side) so the labels stay readable. The drawing of
``a.jpg`` is ``<out>/a.jpg.png`` (:func:`drawing_name`); ``--out`` may not be a directory that
holds an input.

Preprocessing follows the config's test dataset: its transform pipeline (e.g. the detector's
keep_ar_resize_max) on the decoded uint8 image, then its model-input conversion (the pipeline's
to_tensor / normalize, data/model_input.py) on the device; its EXIF setting; for
classification, its color mode / channel count and size.
"""
import json
import logging
import os
import stat

import torch

from .errors import CheckpointError, ConfigError, DataError
from .paths import guard_output_dir, kind_of
from .render import draw_boxes, draw_caption, enlarge, save_png, to_uint8

log = logging.getLogger("up")
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")


def list_inputs(path):
    """The image files ``--input`` names: the file itself, or the directory's image files.
    Each must be a regular file (a FIFO would block its reader forever)."""
    if os.path.isdir(path):
        files = sorted(os.path.join(path, f) for f in os.listdir(path) if f.lower().endswith(IMAGE_EXTENSIONS))
        if not files:
            raise DataError(f"--input {path}: no image files ({', '.join(IMAGE_EXTENSIONS)})")
    elif os.path.exists(path):
        files = [path]
    else:
        raise DataError(f"--input {path}: no such file or directory")
    for file in files:
        mode = os.stat(file).st_mode
        if not stat.S_ISREG(mode):
            raise DataError(f"--input: {file} is {kind_of(mode)}, not a regular file")
    return files


# -- model and data ------------------------------------------------------------------------------
def load_model(cfg, checkpoint, device, use_ema=True):
    from .engine.checkpoint import load_checkpoint
    from .weights import load_weights
    from .engine.checkpoint_fit import load_fitting_weights
    from .tasks.net import build_model

    model = build_model(cfg["net"])
    try:
        ckpt = load_checkpoint(checkpoint)
        weights = ckpt["model"]
        if use_ema and isinstance(ckpt.get("ema"), dict) and isinstance(ckpt["ema"].get("model"), dict):
            weights = ckpt["ema"]["model"]
    except CheckpointError:
        weights = load_weights(checkpoint)
    load_fitting_weights(model, weights, checkpoint)
    return model.to(device).eval()


def test_dataset(cfg):
    """The config's test dataset (for its transform, classes, color mode), or None."""
    from .engine.builder import build_dataset

    entry = cfg["dataset"].get("test") or cfg["dataset"].get("train")
    if entry is None:
        return None
    try:
        return build_dataset(entry, "dataset.test")
    except DataError as exc:  # the data set itself need not exist where we predict
        log.warning("predict: test dataset unavailable (%s); no transforms, numeric class names", exc)
        return None


def _class_names(ds, model):
    names = getattr(ds, "classes", None)
    if names:
        return list(names)
    n = getattr(model, "num_classes", 0)
    return [str(i) for i in range(1, n + 1)]


def _load_for_cls(path, size, in_channels, exif_transpose=True):
    """The image as uint8 CxHxW, as the dataset would hand it to its pipeline."""
    from .data.readers import decode_image

    # a dataset that resized at load time (digits' ``size``) gets the same size here
    array = torch.from_numpy(decode_image(path, "L" if in_channels == 1 else "RGB", resize=(size, size)
                                          if isinstance(size, int) else None, exif_transpose=exif_transpose))
    return array[None] if array.dim() == 2 else array.permute(2, 0, 1)


def _preprocessing(ds):
    """(the test dataset's pipeline before its conversion, the conversion, whether EXIF
    orientation is applied)."""
    from .data.model_input import ModelInput

    reader = getattr(ds, "reader", None)
    exif = getattr(reader, "exif_transpose", getattr(ds, "exif_transpose", True))
    return getattr(ds, "transform", None), getattr(ds, "model_input", None) or ModelInput(), exif


def drawing_name(path):
    """The drawn PNG's file name for the input image ``path``: its whole file name plus
    ``.png`` (``a.jpg`` -> ``a.jpg.png``), so two inputs that differ only in their extension
    never write the same file, and the name says which input it shows."""
    return os.path.basename(path) + ".png"


def predict(cfg, checkpoint, inputs, out_dir, score_thr=0.3, device="cpu", use_ema=True, config_files=()):
    """Predict every input image; returns the list of JSON records written. ``out_dir`` is
    checked by the output guard (paths.py) first: it may hold none of the inputs (images,
    checkpoint, ``config_files``)."""
    from .engine.builder import pick_device
    from .tasks.det.datasets import apply_transform, load_rgb

    if not 0.0 <= score_thr <= 1.0:
        raise ConfigError("--score-thr", f"must be in [0, 1], got {score_thr}")
    from .data.readers import set_max_image_pixels

    files = list_inputs(inputs)
    guard_output_dir(out_dir, "--out", inputs=[*files, checkpoint, *config_files])
    device = pick_device(device, cfg["runtime"])
    set_max_image_pixels(cfg["runtime"]["max_image_pixels"])
    model = load_model(cfg, checkpoint, device, use_ema)
    ds = test_dataset(cfg)
    classes = _class_names(ds, model)
    preprocessing = _preprocessing(ds)
    # torchvision detectors, YOLOX, the UP-mapped RetinaNet variants, FCOS and two-stage nets
    is_det = hasattr(model, "detector") or getattr(model, "kind", None) in ("yolox", "retina_plus", "up_fcos",
                                                                            "up_rcnn")
    os.makedirs(out_dir, exist_ok=True)
    records = []
    with torch.no_grad(), open(os.path.join(out_dir, "predictions.jsonl"), "w", encoding="utf-8") as jf:
        for path in files:
            if is_det:
                rec, drawn = _predict_det(model, path, preprocessing, classes, score_thr, device, load_rgb,
                                          apply_transform)
            else:
                entry = cfg["dataset"].get("test") or cfg["dataset"].get("train") or {}
                size = (entry.get("kwargs") or {}).get("size")
                rec, drawn = _predict_cls(model, path, size, preprocessing, classes, device)
            png = os.path.join(out_dir, drawing_name(path))
            save_png(drawn, png)
            rec["png"] = png
            jf.write(json.dumps(rec) + "\n")
            records.append(rec)
    log.info("predict: %d image(s) -> %s", len(records), out_dir)
    return records


def _predict_det(model, path, preprocessing, classes, score_thr, device, load_rgb, apply_transform):
    transform, model_input, exif = preprocessing
    image = load_rgb(path, path, exif)
    h, w = image.shape[-2:]
    size = torch.tensor([h, w])
    target = {"boxes": torch.zeros(0, 4), "ignore_boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64),
              "orig_size": size, "img_size": size.clone()}
    inp = image
    if transform is not None:
        inp, target = apply_transform(transform, image, target)
    det = model({"image": [model_input(inp.to(device))]})["detections"][0]
    ih, iw = (int(v) for v in target["img_size"])
    keep = det["scores"] >= score_thr
    boxes = det["boxes"][keep].cpu().clone()
    boxes[:, 0::2] *= w / iw
    boxes[:, 1::2] *= h / ih
    scores, labels = det["scores"][keep].cpu(), det["labels"][keep].cpu()
    rec = {"file": path, "width": int(w), "height": int(h), "boxes": [[round(v, 2) for v in b] for b in boxes.tolist()],
           "scores": [round(s, 4) for s in scores.tolist()], "labels": labels.tolist(),
           "classes": [classes[i - 1] if 1 <= i <= len(classes) else str(i) for i in labels.tolist()]}
    canvas, factor = enlarge(to_uint8(image))
    return rec, draw_boxes(canvas, boxes * factor, labels, classes, scores)


def _predict_cls(model, path, size, preprocessing, classes, device):
    transform, model_input, exif = preprocessing
    in_channels = getattr(model, "in_channels", 3)
    image = _load_for_cls(path, size, in_channels, exif)
    inp = transform(image) if transform is not None else image
    out = model({"image": model_input(inp[None].to(device))})
    scores = out["scores"][0].float().cpu() if "scores" in out else out["logits"][0].float().softmax(0).cpu()
    top = scores.topk(min(5, len(scores)))
    label = int(top.indices[0])
    name = classes[label] if label < len(classes) else str(label)
    rec = {"file": path, "label": label, "class": name, "score": round(float(top.values[0]), 4),
           "topk": top.indices.tolist()}
    canvas, _ = enlarge(to_uint8(image))
    return rec, draw_caption(canvas, f"{name} {rec['score']:.2f}")
