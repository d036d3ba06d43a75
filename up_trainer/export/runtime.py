"""An exported file run as the model it came from: ``batch -> {"logits", "scores"}`` or
``batch -> {"detections": [...]}``, so ``up eval --model``, ``up predict --model``, ``up
benchmark`` and the export's own verification feed it the same batches as the PyTorch model.

The record written beside the file (``<file>.json``) says what the graph takes and how its
outputs become detections:

* ``preprocess`` ``torchvision``: each image resized as the torchvision detector resizes it
  (``min_size``/``max_size``/``fixed_size``), batched and zero-padded to the export size; boxes
  scaled back to each image's pixels afterwards;
* ``preprocess`` ``pad``: images (the model's own input) zero-padded bottom/right to the
  export size, their sizes passed as ``image_sizes`` (boxes are clipped to them);
* ``form`` ``end2end``: the graph's outputs are the detections (:mod:`.select`); ``dense``:
  boxes and scores, selected here by the same :class:`.select.Select`; ``heads``: RetinaNet /
  FCOS raw heads and anchors, decoded by :mod:`.decode`.
"""
import json
import os

import torch

from ..data.label_map import recorded_classes
from ..errors import ConfigError

RUNTIME_FORMATS = {".onnx": "onnx", ".pt2": "pt2", ".pt": "torchscript"}


def file_runner(path, fmt, threads=None):
    """(callable: input tensors -> list of output tensors) for an exported file; a file its
    runtime cannot read is one line naming it."""
    try:
        return _file_runner(path, fmt, threads)
    except ConfigError:
        raise
    except Exception as exc:  # onnxruntime, torch.export and torch.jit each raise their own types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError("--model", f"{path}: {fmt} cannot load it ({first[:200]})") from None


def _file_runner(path, fmt, threads):
    if fmt == "onnx":
        from .verify import onnx_runner

        return onnx_runner(path, threads=threads)
    if fmt == "pt2":
        from .pt2 import pt2_runner

        return pt2_runner(path)
    import warnings

    import torchvision  # noqa: F401  (registers the ops a scripted detector calls)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit announces its deprecation
        module = torch.jit.load(path)

    def run(*inputs):
        with torch.no_grad():
            out = module(*inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    return run


def _check_dynamic_record(path, record):
    """A dynamic-size detector's record: ``input.size_divisible`` a positive int, ``size_range``
    (pt2) per axis a [lo, hi] of non-negative ints (hi may be null); else one line."""
    divisible = record["input"].get("size_divisible", 32)
    if type(divisible) is not int or not 1 <= divisible <= 4096:
        raise ConfigError("--model", f"{path}.json: input.size_divisible must be a positive integer, got {divisible!r}")
    ranges = record.get("size_range", {})
    ok = isinstance(ranges, dict) and all(
        isinstance(ranges.get(axis, [0, None]), list) and len(ranges.get(axis, [0, None])) == 2
        and type(ranges.get(axis, [0, None])[0]) is int and 0 <= ranges.get(axis, [0, None])[0] <= 65536
        for axis in ("height", "width"))
    if not ok:
        raise ConfigError("--model", f"{path}.json: size_range must give height and width as [lo, hi] pixel "
                          f"counts, got {ranges!r}"[:300])


class ExportedModel:
    """The exported file ``path`` (its record ``path.json`` beside it) behind the model's forward."""

    def __init__(self, path, record=None, threads=None):
        if record is None:
            meta = path + ".json"
            if not os.path.isfile(meta):  # missing, or a FIFO / device that would block its reader
                raise ConfigError("--model", f"{meta} is missing or not a regular file: an exported model is "
                                  "read with the record up export writes beside it")
            try:
                with open(meta, encoding="utf-8") as f:
                    record = json.load(f)
            except (OSError, ValueError) as exc:
                raise ConfigError("--model", f"{meta} is not a readable export record ({exc})") from None
        if (not isinstance(record, dict) or record.get("format") not in ("onnx", "pt2", "torchscript")
                or record.get("task") not in ("cls", "det") or not isinstance(record.get("input"), dict)):
            raise ConfigError("--model", f"{path}.json is not an up export record (format, task, input)")
        self.path, self.record = path, record
        self.task, self.format = record["task"], record["format"]
        self.kind = record.get("kind")
        self.num_classes = record.get("num_classes")
        self.recorded_classes = recorded_classes(record)  # the label map trained on (predict names classes by it)
        if self.format == "torchscript" and record.get("post_processing") == "included":
            self.form = "scripted"
        else:
            self.form = record.get("form", "heads" if self.task == "det" else "tensors")
        if record.get("dynamic_size") and self.task == "det":
            _check_dynamic_record(path, record)
        self.run = file_runner(path, self.format, threads)
        self.training = False

    def eval(self):
        return self

    def train(self, mode=True):  # an exported graph has no training mode
        return self

    def to(self, *args, **kwargs):
        return self

    def __call__(self, batch):
        images = batch["image"] if isinstance(batch, dict) else batch
        if self.task == "cls":
            logits, scores = self.run(images.float().cpu().contiguous())[:2]
            return {"logits": logits, "scores": scores}
        if isinstance(images, torch.Tensor) and images.dim() == 4:
            images = list(images)
        images = [im.float().cpu() for im in images]
        return {"detections": self.detect(images)}

    # -- detection ------------------------------------------------------------------------------
    def detect(self, images):
        if self.form == "scripted":
            return self.run(images)
        pre = self.record["preprocess"]
        if pre["type"] == "torchvision":
            return self._detect_torchvision(images, pre)
        x, sizes = self._pad(images, fill=pre.get("image_mean"))
        return self._decode(x, sizes)

    def _size(self):
        return tuple(self.record["input"]["shape"][-2:])

    def _pad(self, images, fill=None):
        """The images in one batch of the export size (a dynamic-size export: of the largest
        image rounded up to the record's ``size_divisible``, as the model pads, and at least the
        smallest size a pt2 program's ``size_range`` accepts), bottom/right padded with ``fill``
        per channel (default 0), and their sizes."""
        sizes = [tuple(int(v) for v in im.shape[-2:]) for im in images]
        if self.record.get("dynamic_size"):
            d = int(self.record["input"].get("size_divisible", 32))
            least = self.record.get("size_range", {})
            h, w = (-(-max(max(s[i] for s in sizes), int(least.get(axis, [0])[0])) // d) * d
                    for i, axis in ((0, "height"), (1, "width")))
        else:
            h, w = self._size()
        too_big = [s for s in sizes if s[0] > h or s[1] > w]
        if too_big:
            raise ConfigError("--model", f"an image of {too_big[0][0]}x{too_big[0][1]} is larger than the export "
                              f"size {h}x{w}; export with --input-size to fit the data")
        x = torch.zeros((len(images), images[0].shape[0], h, w))
        if fill is not None:
            x += torch.tensor(fill, dtype=x.dtype).view(1, -1, 1, 1)
        for i, im in enumerate(images):
            x[i, :, : im.shape[-2], : im.shape[-1]] = im
        return x, torch.tensor(sizes, dtype=torch.int64).view(-1, 2)

    def _decode(self, x, sizes):
        from .select import Select, unpad
        from .dense import DenseSpec

        if self.form == "end2end":
            return unpad(*self.run(x, sizes))
        dynamic = bool(self.record.get("dynamic_size"))
        if self.form == "two_stage":  # proposals, num_proposals, boxes per class, scores
            outputs = self.run(x, sizes)
            counts = [int(outputs[2].shape[1])] if dynamic else None  # every proposal row: one group
            with torch.no_grad():
                select = Select(DenseSpec.from_json(self.record["decode"]))
                return unpad(*select(outputs[2], outputs[3], sizes, counts))
        outputs = self.run(x)
        counts = [int(c) for c in outputs[-1]] if dynamic else None  # level_sizes / anchors_per_level
        if self.form == "dense":
            with torch.no_grad():
                return unpad(*Select(DenseSpec.from_json(self.record["decode"]))(outputs[0], outputs[1], sizes, counts))
        from .decode import decode_detections

        if dynamic:
            dets = decode_detections(outputs[:-1], self.record["decode"], tuple(x.shape[-2:]), split=counts)
        else:
            dets = decode_detections(outputs, self.record["decode"], self._size())
        for d, (h, w) in zip(dets, sizes.tolist()):  # clipped to each image, as the model clips
            d["boxes"][:, 0::2] = d["boxes"][:, 0::2].clamp(0, w)
            d["boxes"][:, 1::2] = d["boxes"][:, 1::2].clamp(0, h)
        return dets

    def _detect_torchvision(self, images, pre):
        from torchvision.models.detection.transform import GeneralizedRCNNTransform

        transform = GeneralizedRCNNTransform(pre["min_size"], pre["max_size"], [0.0] * 3, [1.0] * 3,
                                             size_divisible=pre["size_divisible"],
                                             fixed_size=tuple(pre["fixed_size"]) if pre.get("fixed_size") else None)
        transform.eval()
        original = [tuple(im.shape[-2:]) for im in images]
        with torch.no_grad():
            resized = [transform.resize(im, None)[0] for im in images]
        # padded with the mean: 0 once the graph normalises, as torchvision pads after normalising
        x, sizes = self._pad(resized, fill=pre["image_mean"])
        dets = self._decode(x, sizes)
        return transform.postprocess(dets, [tuple(s) for s in sizes.tolist()], original)
