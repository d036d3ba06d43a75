"""``predict`` and ``export`` from Python: ``up predict``'s and ``up export``'s code, with
images given as files, PIL images or tensors and the predictions returned instead of written."""
import os

from ..errors import ConfigError, DataError, join_path, short_repr
from .config import as_config
from .isolation import api_call
from .training import checked_device


def predict(config, checkpoint, images, *, device=None, use_ema=True, score_thr=0.0, opts=()):
    """Predictions for ``images``: one image or a list of them, each a file path, a PIL image
    or a tensor (uint8 CxHxW or HxW, or float in [0, 1], as torchvision reads images).

    Returns one dict per image, in order. Detection: ``boxes`` (Nx4 float tensor, xyxy in the
    image's pixels), ``scores`` (N), ``labels`` (N, 1..C), ``classes`` (names); detections
    scoring below ``score_thr`` are left out. Classification: ``probabilities`` (a tensor of
    one score per class), ``label``, ``class``, ``score``, ``topk`` (the five best labels).
    Each is preprocessed as the config's test dataset preprocesses its images, as
    ``up predict`` does: a file gives the same numbers as ``up predict`` writes (there
    rounded), and a PIL image or tensor of the same pixels gives the same numbers as the file."""
    from ..predict import Predictor, check_score_thr

    check_score_thr(score_thr, "score_thr")
    cfg = as_config(config, opts)
    checkpoint = _checkpoint_path(checkpoint)
    single = not isinstance(images, (list, tuple))
    items = [images] if single else list(images)
    for i, item in enumerate(items):
        _check_image_arg(item, "images" if single else join_path("images", i))
    with api_call("predict"):
        predictor = Predictor(cfg.to_dict(), checkpoint, checked_device(device), bool(use_ema))
        out = []
        for i, item in enumerate(items):
            image = _decoded(predictor, item, "images" if single else join_path("images", i))
            prediction = predictor.predict(image)
            if "boxes" in prediction and score_thr > 0:
                keep = prediction["scores"] >= score_thr
                prediction = {"boxes": prediction["boxes"][keep], "scores": prediction["scores"][keep],
                              "labels": prediction["labels"][keep],
                              "classes": [c for c, k in zip(prediction["classes"], keep.tolist()) if k]}
            out.append(prediction)
    return out[0] if single else out


def export(config, checkpoint, format, out=None, *, input_size=None, use_ema=True, tolerance=1e-4, opset=17,
           opts=(), form="raw", dynamic_size=False):
    """``up export``: the model as ONNX, pt2 or TorchScript (``format``; detectors in the ``raw``
    or, for ONNX, ``end2end`` ``form``; ``dynamic_size``: a classifier's height and width free),
    verified against PyTorch;
    writes ``out`` (default: the checkpoint's name with .onnx / .pt) and ``out.json``, and
    returns that JSON record (file, inputs, outputs, weights, measured error). A verification
    beyond ``tolerance`` raises ``ExportMismatch``, the file kept for inspection."""
    from ..export import export_model

    cfg = as_config(config, opts)
    checkpoint = _checkpoint_path(checkpoint)
    if out is not None:
        out = os.fspath(out)
    if isinstance(input_size, (list, tuple)):
        input_size = ",".join(str(v) for v in input_size)
    with api_call("export"):
        return export_model(cfg.to_dict(), checkpoint, format, out, input_size=input_size, use_ema=bool(use_ema),
                            tolerance=tolerance, opset=opset, config_files=cfg.files, form=form,
                            dynamic_size=bool(dynamic_size))


def _checkpoint_path(checkpoint):
    if not isinstance(checkpoint, (str, os.PathLike)) or isinstance(os.fspath(checkpoint), bytes):
        raise ConfigError("checkpoint", f"expected a file path, got {type(checkpoint).__name__}")
    path = os.fspath(checkpoint)
    if not path or "\0" in path:
        raise ConfigError("checkpoint", f"expected a file path, got {short_repr(path)}")
    return path


def _check_image_arg(item, where):
    import torch
    from PIL import Image

    if isinstance(item, (str, os.PathLike, Image.Image, torch.Tensor)):
        return
    raise DataError(f"{where}: expected an image file path, a PIL image or a tensor, got {type(item).__name__}")


def _decoded(predictor, item, where):
    """``item`` as the uint8 CxHxW tensor :meth:`Predictor.load` makes of a file. A PIL image
    goes through the decoder's own last steps (EXIF orientation, mode, resize); a tensor is
    turned into the PIL image of its pixels first, so it meets the same resize."""
    import torch
    from PIL import Image

    from ..data.readers import decode_pillow
    from ..predict import list_inputs

    if isinstance(item, (str, os.PathLike)):
        path = os.fspath(item)
        if os.path.isdir(path):
            raise DataError(f"{where}: {path} is a directory (give its image files as a list)")
        return predictor.load(list_inputs(path)[0])  # a regular file, or one line saying why not
    if isinstance(item, torch.Tensor):
        item, exif = _tensor_to_pil(item, where), False
    else:
        exif = predictor.exif_transpose
    _check_size(item, where, predictor.context.max_pixels)
    array = torch.from_numpy(decode_pillow(item, predictor.pil_mode(), predictor.resize(), exif, None))
    return array[None] if array.dim() == 2 else array.permute(2, 0, 1).contiguous()


def _check_size(image, where, max_pixels):
    """An in-memory image against the predictor's ``runtime.max_image_pixels`` (``max_pixels``)."""
    w, h = image.size
    if w < 1 or h < 1:
        raise DataError(f"{where}: the image is empty ({w} x {h})")
    if max_pixels is not None and w * h > max_pixels:
        raise DataError(f"{where}: the image has {w} x {h} pixels, more than runtime.max_image_pixels "
                        f"({max_pixels})")


def _tensor_to_pil(tensor, where):
    import torch
    from PIL import Image

    t = tensor.detach().cpu()
    if t.dim() == 2:
        t = t[None]
    if t.dim() != 3 or t.shape[0] not in (1, 3):
        raise DataError(f"{where}: expected a CxHxW tensor with 1 or 3 channels (or HxW), got shape "
                        f"{tuple(tensor.shape)}")
    if t.dtype.is_floating_point:
        if not bool(torch.isfinite(t).all()) or float(t.min()) < 0 or float(t.max()) > 1:
            raise DataError(f"{where}: a float image tensor holds values in [0, 1] (NaN and infinity are no "
                            "pixels)")
        t = (t * 255).round().to(torch.uint8)
    elif t.dtype != torch.uint8:
        raise DataError(f"{where}: expected a uint8 or float tensor, got {t.dtype}")
    if t.shape[1] < 1 or t.shape[2] < 1:
        raise DataError(f"{where}: the image is empty ({t.shape[2]} x {t.shape[1]})")
    array = t.permute(1, 2, 0).numpy()
    return Image.fromarray(array[:, :, 0], "L") if array.shape[2] == 1 else Image.fromarray(array, "RGB")
