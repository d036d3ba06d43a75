"""Image decoding and UP's image readers (``image_reader: {type: fs_pillow|fs_opencv, kwargs:
{image_dir, color_mode, exif_transpose}}``).

Every reader returns what every dataset here hands its transforms: a **uint8 CxHxW tensor**.
``color_mode`` keeps UP's meaning: RGB, BGR (channels in OpenCV's order, for models trained on
it) or GRAY (one channel; Pillow's name L is accepted too). The name ``fs_opencv`` stays because
UP files use it; pixel values equal OpenCV's for PNG and for JPEG up to the decoder's rounding.

Decoding (:func:`decode_file`):

- EXIF orientation is applied (as Pillow's ``ImageOps.exif_transpose``: a phone photo taken
  upright comes out upright) unless ``exif_transpose: false``; boxes in annotation files refer
  to the upright image, as COCO tools and labelling programs show it.
- 16-bit images (PNG, TIFF) are scaled to 8 bits, ``round(v * 255 / 65535)``, never clipped.
- JPEG and PNG whose stored colours are what the config asks for (RGB as RGB, gray as gray or
  RGB) are decoded by ``torchvision.io`` (libjpeg-turbo / libpng, measured faster than Pillow
  for JPEG and identical pixel for pixel); everything else by Pillow, and everything where a
  torchvision without image decoding is installed (deprecated there since 0.29).
- ``draft`` (JPEG only; a dataset's ``decode_draft``): the least size the pipeline needs, a short
  side or (h, w) of the upright picture; the decoder may then shrink the image by 1/2, 1/4 or
  1/8 while it stays at least that large: a cheap decode for photos a pipeline downsizes a lot.
  Its pixels are the decoder's DCT-domain reduction, not a full decode followed by a resize.

Every read takes the reading data set's DataContext (``context=``, data/context.py): the run's
``runtime.max_image_pixels`` and its image cache; without one, the defaults (Pillow's limit, no
cache). Nothing here holds a setting between calls.
"""
import functools
import os

import numpy as np
import torch

from ..errors import ConfigError, DataError, did_you_mean
from ..paths import open_input
from ..registry import IMAGE_READERS
from .context import DEFAULT_MAX_PIXELS, DataContext

PIL_MODE = {"RGB": "RGB", "BGR": "RGB", "GRAY": "L", "L": "L"}  # L: Pillow's name for GRAY


def decode_image(path, pil_mode, where=None, resize=None, exif_transpose=True, draft=None, context=None):
    """The one decode entry point: :func:`decode_file` under the ``context``'s pixel limit,
    through its image cache when it has one (the cache holds images decoded the default way:
    upright, full size). ``context``: the reading data set's DataContext (data/context.py);
    None: the defaults (no cache, Pillow's default limit)."""
    context = context if context is not None else DataContext()
    cache = context.image_cache
    if cache is not None and resize is None and exif_transpose and draft is None:
        return cache.decode(path, pil_mode, where, functools.partial(decode_file, max_pixels=context.max_pixels))
    return decode_file(path, pil_mode, where, resize, exif_transpose, draft, context.max_pixels)


def decode_file(path, pil_mode, where=None, resize=None, exif_transpose=True, draft=None,
                max_pixels=DEFAULT_MAX_PIXELS):
    """A uint8 HxW or HxWxC array of the image at ``path`` in Pillow mode ``pil_mode`` (RGB or
    L), EXIF orientation applied unless ``exif_transpose`` is false, optionally resized to
    ``resize`` (w, h) or decoded at a JPEG ``draft`` size (see the module docstring); every
    failure is one DataError line.

    An image above ``max_pixels`` (``runtime.max_image_pixels``; None: no limit) is refused
    from its header, before any pixel is decoded (a 20000 x 20000 PNG of a few KB would
    otherwise take 1.2 GB)."""
    import io
    import warnings

    from PIL import Image, UnidentifiedImageError

    where = where or path
    try:
        # Through the one opener for user-named inputs: a FIFO or device named as an image
        # would otherwise block a DataLoader worker forever.
        with open_input(path, "image", error=lambda msg: DataError(f"{where}: {msg}")) as f:
            data = bytearray(os.fstat(f.fileno()).st_size)  # read once, straight into the buffer decoded
            del data[f.readinto(data):]
        header = sniff_header(data)  # JPEG / PNG: format, size and stored colours, without Pillow
        if header is not None:
            check_pixels(header[1] * header[2], f"{header[1]} x {header[2]}", path, where, max_pixels)
            if resize is None and draft is None and _TV is not None and \
                    header[3] in _TORCHVISION_MODES.get((header[0], pil_mode), ()):
                return _decode_torchvision(data, pil_mode, exif_transpose)
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)  # Pillow only warns below 2x the limit
            Image.MAX_IMAGE_PIXELS = max_pixels
            with Image.open(io.BytesIO(data)) as img:
                return decode_pillow(img, pil_mode, resize, exif_transpose, draft)
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise _too_many_pixels(_pixels_of(path), path, where, max_pixels) from None
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(f"{where}: cannot read image {path}: {exc}") from None
    except RuntimeError as exc:  # torchvision.io: "<function>, <source>:<line>, <what went wrong>"
        raise DataError(f"{where}: cannot read image {path}: {str(exc).split(', ')[-1]}") from None


def check_pixels(pixels, size, path, where, max_pixels):
    """``runtime.max_image_pixels`` against the header's width x height (Pillow's own guard
    only warns between the limit and twice the limit; here that is refused too)."""
    if max_pixels is not None and pixels > max_pixels:
        raise _too_many_pixels(size, path, where, max_pixels)


def _too_many_pixels(size, path, where, max_pixels):
    return DataError(f"{where}: image {path} has {size} pixels, more than runtime.max_image_pixels "
                     f"({max_pixels}); raise that limit (or set it to null) if the file is trusted")


# Stored colours torchvision.io decodes to exactly Pillow's pixels, per (format, wanted mode):
# colour to colour, gray to gray or to gray replicated in three channels, 8 or 16 bits. Colour
# to gray differs (libpng / libjpeg weigh the channels unlike Pillow's ITU-R 601-2); CMYK,
# palette, alpha and 12-bit JPEG go to Pillow.
_TORCHVISION_MODES = {
    ("JPEG", "RGB"): ("RGB", "L"), ("JPEG", "L"): ("L",),
    ("PNG", "RGB"): ("RGB", "RGB16", "L", "L16"), ("PNG", "L"): ("L", "L16"),
}
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def sniff_header(data):
    """(format, width, height, stored colours) of a JPEG or PNG from its first bytes, None for
    anything else or anything unusual (Pillow then reads it). Reading the header here costs a
    few microseconds; Pillow's parse of a JPEG header took 0.7 ms, 10 % of a small image's
    whole pipeline."""
    if data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) >= 26:
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        depth, colour = data[24], data[25]
        stored = {(8, 0): "L", (16, 0): "L16", (8, 2): "RGB", (16, 2): "RGB16"}.get((depth, colour))
        return "PNG", width, height, stored
    if data[:2] != b"\xff\xd8":
        return None
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # no length
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker in _JPEG_SOF:
            if i + 10 > n:
                return None
            precision, components = data[i + 4], data[i + 9]
            height, width = int.from_bytes(data[i + 5:i + 7], "big"), int.from_bytes(data[i + 7:i + 9], "big")
            stored = {1: "L", 3: "RGB"}.get(components) if precision == 8 else None
            return ("JPEG", width, height, stored) if width and height else None
        if marker == 0xDA or length < 2:  # scan data before any frame header: not a JPEG we read here
            return None
        i += 2 + length
    return None


def _torchvision_decode():
    """torchvision.io's decode_image, or None where torchvision has none (its image decoding is
    deprecated since 0.29 in favour of TorchCodec; Pillow then decodes all, the same pixels)."""
    try:
        from torchvision.io import ImageReadMode, decode_image

        return ImageReadMode, decode_image
    except ImportError:
        return None


_TV = _torchvision_decode()


def _decode_torchvision(data, pil_mode, exif_transpose):
    import warnings

    read_mode, tv_decode = _TV
    mode = read_mode.RGB if pil_mode == "RGB" else read_mode.GRAY
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # see _torchvision_decode
        image = tv_decode(torch.frombuffer(data, dtype=torch.uint8), mode=mode,
                          apply_exif_orientation=exif_transpose)
    if image.dtype == torch.uint16:
        image = _to_8bit(image.to(torch.int32))
    image = image.permute(1, 2, 0)  # HxWxC: a view; read_image's permute back is free
    return (image[:, :, 0] if pil_mode == "L" else image).numpy()


def _to_8bit(values):
    """16-bit values (int32 tensor or array) -> uint8, round(v * 255 / 65535), no clipping."""
    if isinstance(values, np.ndarray):
        return ((values.astype(np.int64).clip(0, 65535) * 255 + 32767) // 65535).astype(np.uint8)
    return ((values.clamp(0, 65535) * 255 + 32767) // 65535).to(torch.uint8)


def _draft_request(img, least, exif_transpose):
    """Pillow's draft size (stored orientation) for an upright result at least ``least`` (a
    short side, or (h, w)); None when no reduction is possible."""
    import math

    width, height = img.size
    turned = exif_transpose and img.getexif().get(0x0112, 1) in (5, 6, 7, 8)
    up_w, up_h = (height, width) if turned else (width, height)
    if isinstance(least, int):
        factor = least / min(up_w, up_h)
    else:
        factor = max(least[0] / up_h, least[1] / up_w)
    if factor >= 0.5:  # the smallest reduction, 1/2, would go below it
        return None
    return math.ceil(width * factor), math.ceil(height * factor)


def decode_pillow(img, pil_mode, resize, exif_transpose, draft):
    """An opened Pillow image as :func:`decode_file` hands it on (uint8 HxW or HxWxC)."""
    from PIL import Image, ImageOps

    if draft is not None and img.format == "JPEG":
        request = _draft_request(img, draft, exif_transpose)
        if request is not None:
            img.draft(pil_mode, request)  # before any pixel is read
    if exif_transpose:
        img = ImageOps.exif_transpose(img)
    if img.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I"):  # 16-bit gray (Pillow would clip it to 255)
        img = Image.fromarray(_to_8bit(np.asarray(img)), "L")
    img = img.convert(pil_mode)
    if resize is not None:
        img = img.resize(resize, Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8).copy()


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


def read_image(path, color_mode="RGB", where=None, exif_transpose=True, draft=None, context=None):
    """A uint8 CxHxW tensor; unreadable files become one DataError line. ``context``: the
    reading data set's DataContext (pixel limit, image cache); None: the defaults."""
    array = decode_image(path, PIL_MODE[color_mode], where, exif_transpose=exif_transpose, draft=draft,
                         context=context)
    image = torch.from_numpy(array)
    if image.dim() == 2:
        return image[None]
    image = image.permute(2, 0, 1)
    return image.flip(0) if color_mode == "BGR" else image


class FileReader:
    """``image_dir/filename`` -> uint8 CxHxW tensor. ``memcached`` (a cluster cache in UP) changes
    where bytes come from, never the pixels; files are read from disk here. ``exif_transpose``:
    apply the EXIF orientation (default; false keeps the stored pixel layout)."""

    COLOR_MODES = ("RGB", "BGR", "GRAY", "L")

    def __init__(self, image_dir: str = "", color_mode: str = "RGB", memcached: bool = False,
                 exif_transpose: bool = True):
        if not isinstance(exif_transpose, bool):
            raise ConfigError("exif_transpose", f"expected true or false, got {exif_transpose!r}")
        self.exif_transpose = exif_transpose
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

    def __call__(self, filename, where=None, context=None):
        return self.read(self.path_of(filename), where, context=context)

    def read(self, path, where=None, draft=None, context=None):
        """The image at ``path`` (already joined) as this reader decodes it, under ``context``
        (the reading data set's DataContext; None: the defaults)."""
        return read_image(path, self.color_mode, where, self.exif_transpose, draft, context)


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
