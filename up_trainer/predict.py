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

from . import atomic
from .errors import ConfigError, DataError
from .paths import guard_output_dir, kind_of
from .protocols import FusesForInference
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
def load_model(cfg, checkpoint, device, use_ema=True, weights=None):
    """The config's net with the checkpoint's inference weights (``weights``: those already
    chosen by inference_weights, else chosen here), on ``device``, in eval mode; its
    ``recorded_classes`` are the label map the checkpoint was trained on (None: older files,
    bare weights)."""
    from .engine.checkpoint_fit import load_fitting_weights
    from .engine.checkpoint_load import inference_weights
    from .quant import apply_quant
    from .registry import import_user_modules
    from .tasks.net import build_model

    import_user_modules(cfg["runtime"]["imports"])  # a plugin's net is registered by its module
    model = apply_quant(build_model(cfg["net"]), cfg)  # a QAT checkpoint holds its quantizers' state
    if weights is None:
        weights = inference_weights(checkpoint, use_ema)
    load_fitting_weights(model, weights.state, checkpoint)
    model.recorded_classes = weights.classes
    model = model.to(device).eval()
    if isinstance(model, FusesForInference):  # re-parameterised nets (YOLOv6) run their fused form
        model.fuse_for_inference()
    return model


def test_dataset(cfg, context=None):
    """The config's test dataset (for its transform, classes, color mode), or None."""
    from .engine.builder import build_dataset

    entry = cfg["dataset"].get("test") or cfg["dataset"].get("train")
    if entry is None:
        return None
    try:
        return build_dataset(entry, "dataset.test", context)
    except DataError as exc:  # the data set itself need not exist where we predict
        log.warning("predict: test dataset unavailable (%s); no transforms, numeric class names", exc)
        return None


def _class_names(ds, model):
    names = getattr(model, "recorded_classes", None) or getattr(ds, "classes", None)
    if names:
        return list(names)
    n = getattr(model, "num_classes", 0)
    return [str(i) for i in range(1, n + 1)]


def _load_for_cls(path, size, in_channels, exif_transpose=True, context=None):
    """The image as uint8 CxHxW, as the dataset would hand it to its pipeline."""
    from .data.readers import decode_image

    # a dataset that resized at load time (digits' ``size``) gets the same size here
    array = torch.from_numpy(decode_image(path, "L" if in_channels == 1 else "RGB", resize=(size, size)
                                          if isinstance(size, int) else None, exif_transpose=exif_transpose,
                                          context=context))
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


class Predictor:
    """A model and the test dataset's preprocessing, ready to predict decoded images: what
    ``up predict`` runs per file, and what the Python API runs on paths, PIL images and
    tensors. Decodes under the config's ``runtime.max_image_pixels`` (its ``context``)."""

    def __init__(self, cfg, checkpoint, device="cpu", use_ema=True, tta=None):
        from .data.context import DataContext
        from .engine.builder import pick_device

        self.device = pick_device(device, cfg["runtime"])
        self.context = DataContext(max_pixels=cfg["runtime"]["max_image_pixels"])
        if is_exported(checkpoint):  # an up export file (``--model``): run by its runtime
            from .export.evaluate import check_matches, load_exported

            self.device = torch.device("cpu")
            self.model = load_exported(checkpoint)
            check_matches(cfg, self.model)
        else:
            self.model = load_model(cfg, checkpoint, self.device, use_ema)
        if tta:  # {"scales": [...], "flip": bool} (tta.py)
            from .tta import with_tta

            self.model = with_tta(self.model, **tta)
        heads = getattr(getattr(self.model, "model", self.model), "num_classes", None)
        if isinstance(heads, list):  # UP's multi-head classification: one classifier per head
            raise ConfigError("net", f"up predict reads one classifier; this net has {len(heads)} heads (UP's "
                              "multi-head form)", "evaluate it with up eval: top-k per head")
        ds = test_dataset(cfg, self.context)
        self.classes = _class_names(ds, getattr(self.model, "model", self.model))
        self.preprocessing = _preprocessing(ds)
        # torchvision detectors, YOLOX, the UP-mapped RetinaNet variants, FCOS and two-stage nets
        self.is_det = hasattr(self.model, "detector") or getattr(self.model, "kind", None) in (
            "yolox", "retina_plus", "up_fcos", "up_rcnn") or getattr(self.model, "task", None) == "det"
        entry = cfg["dataset"].get("test") or cfg["dataset"].get("train") or {}
        self.size = (entry.get("kwargs") or {}).get("size")  # a classifier's load-time resize
        net_kwargs = cfg["net"].get("kwargs") if isinstance(cfg["net"], dict) else None
        # the model's own count, else what its config asked for (a plugin net need not keep it)
        self.in_channels = getattr(self.model, "in_channels", None) or (net_kwargs or {}).get("in_channels", 3)

    @property
    def exif_transpose(self):
        return self.preprocessing[2]

    def pil_mode(self):
        """The Pillow mode an image is decoded to: RGB for detectors, the classifier's channels."""
        return "RGB" if self.is_det or self.in_channels != 1 else "L"

    def resize(self):
        """(w, h) a classifier's images are resized to at decoding (its dataset's ``size``), or None."""
        return (self.size, self.size) if not self.is_det and isinstance(self.size, int) else None

    def load(self, path):
        """The image file as a uint8 CxHxW tensor, decoded as the dataset decodes it."""
        from .tasks.det.datasets import load_rgb

        if self.is_det:
            return load_rgb(path, path, self.exif_transpose, self.context)
        return _load_for_cls(path, self.size, self.in_channels, self.exif_transpose, self.context)

    @torch.no_grad()
    def predict(self, image):
        """The prediction for a decoded uint8 CxHxW image (as :meth:`load` returns it), unrounded:
        detection {boxes (xyxy, the image's pixels), scores, labels (1..C), classes}; classification
        {probabilities, label, class, score, topk}. Tensors are on the CPU."""
        if self.is_det:
            return self._detect(image)
        return self._classify(image)

    def _detect(self, image):
        from .tasks.det.datasets import apply_transform

        transform, model_input, _ = self.preprocessing
        h, w = image.shape[-2:]
        size = torch.tensor([h, w])
        target = {"boxes": torch.zeros(0, 4), "ignore_boxes": torch.zeros(0, 4),
                  "labels": torch.zeros(0, dtype=torch.int64), "orig_size": size, "img_size": size.clone()}
        inp = image
        if transform is not None:
            inp, target = apply_transform(transform, image, target)
        det = self.model({"image": [model_input(inp.to(self.device))]})["detections"][0]
        ih, iw = (int(v) for v in target["img_size"])
        boxes = det["boxes"].float().cpu().clone()
        boxes[:, 0::2] *= w / iw
        boxes[:, 1::2] *= h / ih
        labels = det["labels"].cpu()
        return {"boxes": boxes, "scores": det["scores"].float().cpu(), "labels": labels,
                "classes": [self.class_name(i, offset=1) for i in labels.tolist()]}

    def _classify(self, image):
        transform, model_input, _ = self.preprocessing
        inp = transform(image) if transform is not None else image
        out = self.model({"image": model_input(inp[None].to(self.device))})
        scores = out["scores"][0].float().cpu() if "scores" in out else out["logits"][0].float().softmax(0).cpu()
        top = scores.topk(min(5, len(scores)))
        label = int(top.indices[0])
        return {"probabilities": scores, "label": label, "class": self.class_name(label),
                "score": float(top.values[0]), "topk": top.indices.tolist()}

    def class_name(self, label, offset=0):
        i = label - offset
        return self.classes[i] if 0 <= i < len(self.classes) else str(label)


def file_record(path, image, prediction, score_thr, classes):
    """The predictions.jsonl record of one file (rounded as the file keeps them) and the
    drawing of it; detections below ``score_thr`` are left out of both."""
    if "boxes" in prediction:
        keep = prediction["scores"] >= score_thr
        boxes, scores, labels = prediction["boxes"][keep], prediction["scores"][keep], prediction["labels"][keep]
        h, w = image.shape[-2:]
        rec = {"file": path, "width": int(w), "height": int(h),
               "boxes": [[round(v, 2) for v in b] for b in boxes.tolist()],
               "scores": [round(s, 4) for s in scores.tolist()], "labels": labels.tolist(),
               "classes": [c for c, k in zip(prediction["classes"], keep.tolist()) if k]}
        canvas, factor = enlarge(to_uint8(image))
        return rec, draw_boxes(canvas, boxes * factor, labels, classes, scores)
    rec = {"file": path, "label": prediction["label"], "class": prediction["class"],
           "score": round(prediction["score"], 4), "topk": prediction["topk"]}
    canvas, _ = enlarge(to_uint8(image))
    return rec, draw_caption(canvas, f"{rec['class']} {rec['score']:.2f}")


def is_exported(path):
    """Whether ``path`` names an exported model (``up export``'s suffixes) rather than a checkpoint."""
    return isinstance(path, str) and os.path.splitext(path)[1] in (".onnx", ".pt2")


def predict(cfg, checkpoint, inputs, out_dir, score_thr=0.3, device="cpu", use_ema=True, config_files=(), tta=None):
    """Predict every input image; returns the list of JSON records written. ``out_dir`` is
    checked by the output guard (paths.py) first: it may hold none of the inputs (images,
    checkpoint, ``config_files``)."""
    check_score_thr(score_thr)
    files = list_inputs(inputs)
    guard_output_dir(out_dir, "--out", inputs=[*files, checkpoint, *config_files])
    predictor = Predictor(cfg, checkpoint, device, use_ema, tta)
    os.makedirs(out_dir, exist_ok=True)
    records = []
    with atomic.opened(os.path.join(out_dir, "predictions.jsonl")) as jf:  # no half file after a crash
        for path in files:
            image = predictor.load(path)
            rec, drawn = file_record(path, image, predictor.predict(image), score_thr, predictor.classes)
            png = os.path.join(out_dir, drawing_name(path))
            save_png(drawn, png)
            rec["png"] = png
            jf.write(json.dumps(rec) + "\n")
            records.append(rec)
    log.info("predict: %d image(s) -> %s", len(records), out_dir)
    return records


def check_score_thr(score_thr, name="--score-thr"):
    if isinstance(score_thr, bool) or not isinstance(score_thr, (int, float)) or not 0.0 <= score_thr <= 1.0:
        raise ConfigError(name, f"must be a number in [0, 1], got {score_thr!r}")
