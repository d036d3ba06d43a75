"""UP's image readers: ``image_reader: {type: fs_pillow|fs_opencv, kwargs: {image_dir, color_mode}}``.

Both read with Pillow (no OpenCV dependency) and return what every dataset here hands its
transforms: a float32 CxHxW tensor in [0, 1]. ``color_mode`` keeps UP's meaning: RGB, BGR
(channels in OpenCV's order, for models trained on it) or GRAY (one channel; Pillow's
name L is accepted too). The name
``fs_opencv`` stays because UP files use it; pixel values equal OpenCV's for PNG and for JPEG up
to the decoder's rounding.
"""
import os

import numpy as np
import torch

from ..errors import ConfigError, DataError, did_you_mean
from ..registry import IMAGE_READERS

PIL_MODE = {"RGB": "RGB", "BGR": "RGB", "GRAY": "L", "L": "L"}  # L: Pillow's name for GRAY


DEFAULT_MAX_PIXELS = 89478485  # Pillow's own default guard
_max_pixels = DEFAULT_MAX_PIXELS


def set_max_image_pixels(limit):
    """``runtime.max_image_pixels``: the largest width x height decoded (None: no limit). Set
    before the loaders start; forked DataLoader workers inherit it."""
    global _max_pixels
    _max_pixels = limit


_image_cache = None  # dataset.cache (data/image_cache.py): installed by the run before its loaders start


def set_image_cache(cache):
    """Route :func:`decode_image` through ``cache`` (None: decode every time). Set in the main
    process before the DataLoader workers are forked; they inherit it and share its arena."""
    global _image_cache
    _image_cache = cache


def decode_image(path, pil_mode, where=None, resize=None):
    """The one decode entry point: :func:`decode_file`, through the image cache when one is set."""
    if _image_cache is not None and resize is None:
        return _image_cache.decode(path, pil_mode, where, decode_file)
    return decode_file(path, pil_mode, where, resize)


def decode_file(path, pil_mode, where=None, resize=None):
    """A uint8 HxW or HxWxC array of the image at ``path`` in Pillow mode ``pil_mode``
    (optionally resized to ``resize`` (w, h)); every failure is one DataError line.

    An image above ``runtime.max_image_pixels`` is refused from its header, before any pixel
    is decoded (a 20000 x 20000 PNG of a few KB would otherwise take 1.2 GB)."""
    import warnings

    from PIL import Image, UnidentifiedImageError

    where = where or path
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # Pillow only warns below 2x the limit
            Image.MAX_IMAGE_PIXELS = _max_pixels
            with Image.open(path) as img:
                img = img.convert(pil_mode)
                if resize is not None:
                    img = img.resize(resize, Image.BILINEAR)
                return np.asarray(img, dtype=np.uint8).copy()
    except FileNotFoundError:
        raise DataError(f"{where}: image not found: {path}") from None
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(f"{where}: image {path} has {_pixels_of(path)} pixels, more than runtime.max_image_pixels "
                        f"({_max_pixels}); raise that limit (or set it to null) if the file is trusted") from None
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"{where}: cannot read image {path}: {exc}") from None


def _pixels_of(path):
    """'W x H' from the header alone (the guard is off while reading it)."""
    from PIL import Image

    limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None
    try:
        with Image.open(path) as img:
            return f"{img.width} x {img.height}"
    except Exception:
        return "too many"
    finally:
        Image.MAX_IMAGE_PIXELS = limit


def read_image(path, color_mode="RGB", where=None):
    """A float32 CxHxW tensor in [0, 1]; unreadable files become one DataError line."""
    array = decode_image(path, PIL_MODE[color_mode], where)
    if array.ndim == 2:
        array = array[:, :, None]
    elif color_mode == "BGR":
        array = array[:, :, ::-1]
    return torch.from_numpy(array.copy()).permute(2, 0, 1).float().div_(255.0)


class FileReader:
    """``image_dir/filename`` -> tensor. ``memcached`` (a cluster cache in UP) changes where
    bytes come from, never the pixels; files are read from disk here."""

    COLOR_MODES = ("RGB", "BGR", "GRAY", "L")

    def __init__(self, image_dir: str = "", color_mode: str = "RGB", memcached: bool = False):
        if not isinstance(image_dir, str):
            raise ConfigError("image_dir", f"expected one directory, got {type(image_dir).__name__} {image_dir!r}")
        if color_mode not in self.COLOR_MODES:
            raise ConfigError("color_mode", f"{color_mode!r} is not one of {', '.join(self.COLOR_MODES)}",
                              did_you_mean(str(color_mode).upper(), self.COLOR_MODES))
        self.image_dir = "" if image_dir in ("/", "//") else image_dir  # UP: '/' means absolute names
        self.color_mode = color_mode
        self.channels = 1 if color_mode in ("GRAY", "L") else 3

    def path_of(self, filename):
        if filename.startswith("//"):
            filename = filename[1:]
        return os.path.join(self.image_dir, filename)

    def __call__(self, filename, where=None):
        return read_image(self.path_of(filename), self.color_mode, where)


@IMAGE_READERS.register("fs_opencv")
class FileSystemOpenCVReader(FileReader):
    """UP's ``fs_opencv``: color_mode RGB, BGR or GRAY."""


@IMAGE_READERS.register("fs_pillow")
class FileSystemPillowReader(FileReader):
    """UP's ``fs_pillow``: color_mode RGB or GRAY (UP's Pillow reader itself takes only RGB)."""

    COLOR_MODES = ("RGB", "GRAY", "L")


def build_reader(cfg, path="image_reader"):
    """An image reader from UP's ``{type, kwargs}``; kwargs errors name the reader's key path."""
    return IMAGE_READERS.build(cfg, path)
