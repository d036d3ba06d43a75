"""UP's YOLOX transforms that mix in other samples of the same dataset (no OpenCV), on uint8
or float [0, 1] CxHxW images: the result has the dtype of the sample's own image (the images
drawn from the dataset are converted to it), uint8 results rounded to the nearest level.

- ``mosaic`` {extra_input, tar_size, fill_color, mosaic_prob, mosaic_self, clip_box}: this
  image and three others, each resized to fit ``tar_size``, around a random centre of a
  2 x tar_size canvas; boxes shifted and clipped, empty ones dropped.
- ``yolox_mixup_cv2`` {extra_input, input_size, mixup_scale, flip_prob, fill_color,
  clip_box}: blend (0.5 / 0.5) with another image, letterboxed into ``input_size``, scaled,
  maybe flipped and randomly cropped to this image's size.

``extra_input: true`` is UP's request for the dataset: the detection dataset binds itself to
these transforms when it builds its pipeline (``bind``) and hands them other records, loaded
and untransformed, through ``load_for_mix(index)``. Which records, where and how much: all drawn
from torch's global generator, which the loader seeds per batch, so workers and resumed runs
draw the same.
"""
from typing import Optional

import torch
import torch.nn.functional as F
from torchvision import tv_tensors

from ...data import buffer_pool
from ...errors import ConfigError
from ...registry import TRANSFORMS
from .transforms import PER_BOX_KEYS
from .transform_ops import MosaicCanvas, box_candidates, check_fill, fill_of, row_bands, to_uint8, uniform


def _pair(value, name):
    pair = [value, value] if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(pair, (list, tuple)) or len(pair) != 2 or \
            any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in pair):
        raise ConfigError(name, f"expected a positive integer or [h, w], got {value!r}")
    return [int(v) for v in pair]


def _resized(image, h, w):
    """Bilinear resize (no antialiasing, as OpenCV's INTER_LINEAR) of a CxHxW tensor. uint8 goes
    through torch's uint8 kernel (it rounds after each axis: within a level of the float
    result); float through :func:`_linear_resize`, because torch's float kernel gives results
    that differ in the last bit with the thread count, and the main process must draw what a
    worker draws."""
    if tuple(image.shape[-2:]) == (h, w):
        return image
    if image.dtype == torch.uint8:
        return F.interpolate(image[None], size=(h, w), mode="bilinear", align_corners=False)[0]
    return _linear_resize(_linear_resize(image, h, 1), w, 2)


def _linear_resize(image, size, dim):
    """``image`` resized to ``size`` along ``dim`` by linear interpolation between pixel centres
    (torch's align_corners=False), in element-wise steps, which round alike on every thread."""
    n = image.shape[dim]
    if n == size:
        return image
    source = ((torch.arange(size, dtype=torch.float64) + 0.5) * (n / size) - 0.5).clamp_(min=0.0)
    low = source.floor().to(torch.int64).clamp_(max=n - 1)
    high = (low + 1).clamp_(max=n - 1)
    shape = [1, 1, 1]
    shape[dim] = size
    frac = (source - low).to(image.dtype).view(shape)
    return image.index_select(dim, low).mul_(1.0 - frac).add_(image.index_select(dim, high).mul_(frac))


def _canvas(fill_color, channels, h, w, dtype):
    """A CxHxW image of UP's fill colour. A uint8 canvas is laid out channels-last (a CxHxW view
    of HxWxC memory), as decoded images are: copying them in moves whole rows, and torch's uint8
    resize runs about 2.5x faster on it. Its memory is a reused buffer (data/buffer_pool.py):
    a fresh 1280 x 1280 mosaic canvas cost 0.33 ms in page faults and zeroing, a reused one 0.07."""
    fill = fill_of(fill_color, channels, dtype=dtype)
    if dtype == torch.uint8:
        memory = buffer_pool.empty((h, w, channels), dtype)
        if bool(fill.any()):
            memory.copy_(fill.view(1, 1, channels).expand(h, w, channels))
        else:
            memory.zero_()
        return memory.permute(2, 0, 1)
    if not bool(fill.any()):
        return torch.zeros(channels, h, w, dtype=dtype)
    return fill.expand(channels, h, w).clone()


def _as_dtype(image, dtype):
    """A drawn image in the sample's dtype (a pipeline may have turned the sample to float
    before mixing in raw uint8 images, or the reverse)."""
    if image.dtype == dtype:
        return image
    if dtype == torch.uint8:
        return to_uint8(image * 255.0)
    return image.to(dtype).div_(255.0) if image.dtype == torch.uint8 else image.to(dtype)


def _in_layout_of(image, like):
    """``image`` (CxHxW) laid out in memory as ``like`` is: channels last (HxWxC memory) or not."""
    if like.shape[0] > 1 and like.stride(0) == 1:
        return image.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    return image.contiguous()


def _randint(n):
    return int(torch.randint(n, ()))


class _DrawsSamples:
    """What mosaic and mixup share: the dataset they draw from, bound by the dataset."""

    dataset = None

    def bind(self, dataset):
        self.dataset = dataset

    def _other(self):
        if self.dataset is None:
            raise ConfigError(type(self).name, "needs a detection dataset to draw other images from "
                              "(it is bound when a detection dataset builds its transforms)")
        image, target = self.dataset.load_for_mix(_randint(len(self.dataset.records)))
        return image.as_subclass(torch.Tensor), target

    def _others(self, count, dtype):
        """``count`` images drawn from the dataset (in ``dtype``) with their targets."""
        drawn = [self._other() for _ in range(count)]
        return [(_as_dtype(image, dtype), target) for image, target in drawn]


def _with_boxes(target, boxes, per_box, canvas_size):
    target = dict(target)
    target.update(per_box)
    target["area"] = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    target["boxes"] = tv_tensors.BoundingBoxes(boxes.to(torch.float32), format="XYXY", canvas_size=canvas_size)
    return target


@TRANSFORMS.register("mosaic")
class Mosaic(_DrawsSamples):
    """UP's ``mosaic``: with probability ``mosaic_prob`` (else the sample passes unchanged and a
    following random_perspective_yolox leaves it alone, as in UP), four images (this one, then
    three drawn at random; ``mosaic_self``: this one four times) each resized to fit
    ``tar_size`` (h, w) keeping their ratio, placed top-left, top-right, bottom-left and
    bottom-right of a centre drawn in the middle half of a 2*h x 2*w canvas of ``fill_color``
    (UP's 0-255 units). Boxes move with their image and are clipped to the canvas; boxes left
    empty are dropped."""

    name = "mosaic"

    def __init__(self, extra_input: bool = True, tar_size: object = 640, fill_color: object = 0,
                 mosaic_prob: float = 1.0, mosaic_self: bool = False, clip_box: bool = True,
                 memcached: Optional[dict] = None):
        if extra_input is not True:
            raise ConfigError("extra_input", "mosaic draws other images of the dataset; it needs extra_input: true")
        if memcached is not None:
            raise ConfigError("memcached", "UP's memcached cache of resized images is not mapped", "leave it out")
        if isinstance(mosaic_prob, bool) or not isinstance(mosaic_prob, (int, float)) or not 0 <= mosaic_prob <= 1:
            raise ConfigError("mosaic_prob", f"expected a probability in [0, 1], got {mosaic_prob!r}")
        self.tar_size, self.fill_color = _pair(tar_size, "tar_size"), check_fill(fill_color)
        self.mosaic_prob, self.mosaic_self, self.clip_box = float(mosaic_prob), bool(mosaic_self), bool(clip_box)

    def __call__(self, image, target):
        if not self.mosaic_self and float(torch.rand(())) >= self.mosaic_prob:
            target["_mosaic"] = False
            return image, target
        th, tw = self.tar_size
        yc, xc = int(uniform(th / 2, 1.5 * th)), int(uniform(tw / 2, 1.5 * tw))
        first = (image.as_subclass(torch.Tensor), target)
        samples = [first] * 4 if self.mosaic_self else [first] + self._others(3, first[0].dtype)
        channels = first[0].shape[0]
        canvas = _canvas(self.fill_color, channels, 2 * th, 2 * tw, first[0].dtype)
        boxes, per_box, pictures = [], {key: [] for key in PER_BOX_KEYS if key in target}, []
        for quarter, (img, tgt) in enumerate(samples):
            h0, w0 = img.shape[-2:]
            ratio = min(th / h0, tw / w0)
            h, w = (int(h0 * ratio), int(w0 * ratio)) if ratio != 1 else (h0, w0)
            img = _resized(img, max(h, 1), max(w, 1))
            h, w = img.shape[-2:]
            # (x1, y1, x2, y2) of the part placed on the canvas, then of the image it comes from
            if quarter == 0:
                xa1, ya1, xa2, ya2 = max(xc - w, 0), max(yc - h, 0), xc, yc
                xb1, yb1 = w - (xa2 - xa1), h - (ya2 - ya1)
            elif quarter == 1:
                xa1, ya1, xa2, ya2 = xc, max(yc - h, 0), min(xc + w, 2 * tw), yc
                xb1, yb1 = 0, h - (ya2 - ya1)
            elif quarter == 2:
                xa1, ya1, xa2, ya2 = max(xc - w, 0), yc, xc, min(2 * th, yc + h)
                xb1, yb1 = w - (xa2 - xa1), 0
            else:
                xa1, ya1, xa2, ya2 = xc, yc, min(xc + w, 2 * tw), min(2 * th, yc + h)
                xb1, yb1 = 0, 0
            canvas[:, ya1:ya2, xa1:xa2] = img[:, yb1:yb1 + (ya2 - ya1), xb1:xb1 + (xa2 - xa1)]
            pictures.append((xa1, ya1, xa2, ya2))
            b = tgt["boxes"].as_subclass(torch.Tensor).clone()
            b[:, 0::2] = b[:, 0::2] * (w / w0) + (xa1 - xb1)
            b[:, 1::2] = b[:, 1::2] * (h / h0) + (ya1 - yb1)
            boxes.append(b)
            for key in per_box:
                per_box[key].append(tgt[key])
        boxes = torch.cat(boxes)
        per_box = {key: torch.cat(values) for key, values in per_box.items()}
        if self.clip_box:
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, 2 * tw)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, 2 * th)
        keep = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
        target = _with_boxes(target, boxes[keep], {k: v[keep] for k, v in per_box.items()}, (2 * th, 2 * tw))
        canvas = tv_tensors.Image(canvas)
        # where the canvas is fill, for the warp that follows (any value but False means "mosaic ran")
        target["_mosaic"] = MosaicCanvas(canvas, canvas._version, tuple(pictures),
                                         fill_of(self.fill_color, channels, dtype=canvas.dtype))
        return canvas, target

    def __repr__(self):
        return f"Mosaic(tar_size={self.tar_size}, mosaic_prob={self.mosaic_prob})"


def _window(copy, y_off, x_off, th, tw, flip):
    """The th x tw window at (y_off, x_off) of ``copy`` (flipped left-right first when ``flip``)
    zero-padded to at least th x tw, read without building the flipped or padded copy."""
    ch, cw = copy.shape[-2:]
    rh, rw = min(ch - y_off, th), min(cw - x_off, tw)  # the rows and columns that come from the copy
    part = copy[:, y_off:y_off + rh, cw - x_off - rw:cw - x_off].flip(-1) if flip else \
        copy[:, y_off:y_off + rh, x_off:x_off + rw]
    if (rh, rw) == (th, tw):
        return part
    window = torch.zeros(copy.shape[0], th, tw, dtype=copy.dtype)
    window[:, :rh, :rw] = part
    return window


def _taps(positions, n, size):
    """(low, high, weight of high) of output ``positions`` of a length-``n`` axis resized to
    ``size``, as :func:`_linear_resize` draws them."""
    source = ((positions.to(torch.float64) + 0.5) * (n / size) - 0.5).clamp_(min=0.0)
    low = source.floor().to(torch.int64).clamp_(max=n - 1)
    return low, (low + 1).clamp_(max=n - 1), (source - low).to(torch.float32)


def mix_resized_window(pixels, image, scaled, offsets, flip, height=None, fill=None):
    """uint8 ``pixels`` (C x th x tw) averaged with the th x tw window at ``offsets`` (y, x) of
    ``image`` resized to ``scaled`` (h, w) (flipped left-right first when ``flip``; zero beyond
    the resized image), rounded half up once. The window is what ``_window(_resized(image,
    *scaled), ...)`` gives on float images, with the same taps (rows, then columns; the columns'
    weights in float32), computed only for the window and band by band of rows (each band's float
    temporaries stay in the CPU cache; a whole-window float image would be written into fresh
    pages). ``image``: uint8, or float on the 0-255 scale.

    With ``height``, ``image`` is the top of a ``height``-row image whose other rows are the
    colour ``fill`` (C levels; a letterbox below its picture): those rows are never built, the
    taps that read them get the fill's values, and where the fill is black the window's rows
    that read only fill rows add nothing (exactly: every value there is 0) and are skipped."""
    channels, th, tw = pixels.shape
    n_h, n_w = image.shape[-2:]
    rows_given, n_h = n_h, height or n_h
    (ch, cw), (y_off, x_off) = scaled, offsets
    rh, rw = min(ch - y_off, th), min(cw - x_off, tw)  # the window's part inside the resized image
    row_low, row_high, row_frac = _taps(torch.arange(y_off, y_off + rh), n_h, ch)
    fill_row = None
    if rows_given < n_h:
        fill_row = fill.to(torch.float32).view(1, 1, channels).expand(1, n_w, channels).reshape(1, n_w * channels)
        if not bool(fill.any()):  # the taps are in order: the rows past the first all-fill one read only fill
            rh = min(rh, int(torch.searchsorted(row_low, rows_given)))
    # per band: the two source rows of each output row (whole rows of the channels-last image,
    # plain copies), blended in float; then torch's 1-D linear interpolation of those rows to
    # the resized width (the taps of _taps with float32 weights: within 1e-4 of a level; the
    # same bits on any number of threads; twice as fast as gathering the columns), and the
    # window's columns of it
    rows_of = image.permute(1, 2, 0).reshape(rows_given, n_w * channels)
    out = buffer_pool.empty((channels, th, tw), torch.uint8)
    for y0, y1 in row_bands(th, tw):
        band = pixels[:, y0:y1].to(torch.float32)
        r1 = min(y1, rh)
        if r1 > y0:
            b = r1 - y0
            taps = torch.cat([row_low[y0:r1], row_high[y0:r1]])
            beyond = fill_row is not None and int(row_high[r1 - 1]) >= rows_given
            two = rows_of.index_select(0, taps.clamp(max=rows_given - 1) if beyond else taps).to(torch.float32)
            if beyond:  # the fill's rows, as the whole image would hold them
                two[taps >= rows_given] = fill_row
            frac = row_frac[y0:r1].view(b, 1)
            rows = two[:b].mul_(1.0 - frac).add_(two[b:].mul_(frac)).view(b, n_w, channels)
            lines = F.interpolate(rows.permute(0, 2, 1), size=cw, mode="linear", align_corners=False) \
                if cw != n_w else rows.permute(0, 2, 1)
            window = lines[..., cw - x_off - rw:cw - x_off].flip(-1) if flip else lines[..., x_off:x_off + rw]
            band[:, :b, :rw].add_(window.permute(1, 0, 2))
        # (a + b) / 2 + 0.5, truncated: rounded half up (the sum is >= 0)
        out[:, y0:y1] = band.mul_(0.5).add_(0.5).to(torch.int16)
    return out


@TRANSFORMS.register("yolox_mixup_cv2")
class YoloxMixUp(_DrawsSamples):
    """UP's ``yolox_mixup_cv2``: another image, resized to fit ``input_size`` (h, w) at the
    top-left of a ``fill_color`` canvas, scaled by U(mixup_scale), flipped when a uniform draw
    exceeds ``flip_prob`` (UP's reading: the default 1 never flips), zero-padded to at least
    this image's size and cropped at a random offset to it; its boxes that keep more than 5
    pixels a side, 20% of their area and an aspect ratio under 20 join this sample's, and the
    pixels are averaged. When none survives, the sample passes unchanged (as in UP)."""

    name = "yolox_mixup_cv2"

    def __init__(self, input_size: object, mixup_scale: list, extra_input: bool = True, flip_prob: float = 1.0,
                 fill_color: object = 0, clip_box: bool = True):
        if extra_input is not True:
            raise ConfigError("extra_input", "yolox_mixup_cv2 draws other images of the dataset; "
                              "it needs extra_input: true")
        if not isinstance(mixup_scale, (list, tuple)) or len(mixup_scale) != 2 or \
                any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in mixup_scale) or \
                not 0 < mixup_scale[0] <= mixup_scale[1]:
            raise ConfigError("mixup_scale", f"expected [min, max] with 0 < min <= max, got {mixup_scale!r}")
        self.input_size, self.mixup_scale = _pair(input_size, "input_size"), [float(v) for v in mixup_scale]
        self.flip_prob, self.fill_color, self.clip_box = float(flip_prob), check_fill(fill_color), bool(clip_box)

    def __call__(self, image, target):
        jitter = uniform(*self.mixup_scale)
        flip = float(torch.rand(())) > self.flip_prob
        pixels = image.as_subclass(torch.Tensor)
        (other, other_target), = self._others(1, pixels.dtype)
        channels, th, tw = pixels.shape
        ih, iw = self.input_size
        h0, w0 = other.shape[-2:]
        ratio = min(ih / h0, iw / w0)
        ch, cw = max(int(ih * jitter), 1), max(int(iw * jitter), 1)  # the letterbox scaled by jitter
        # UP's offsets into the copy zero-padded to at least this image's size: 0 .. (excess - 1),
        # none when the copy is not larger than this image
        y_off = _randint(ch - th) if ch > th else 0
        x_off = _randint(cw - tw) if cw > tw else 0

        placed = other_target["boxes"].as_subclass(torch.Tensor).to(torch.float64) * (ratio * jitter)
        if self.clip_box:
            placed[:, 0::2] = placed[:, 0::2].clamp(0, cw)
            placed[:, 1::2] = placed[:, 1::2].clamp(0, ch)
        if flip:
            placed[:, [0, 2]] = cw - placed[:, [2, 0]]
        moved = placed - torch.tensor([x_off, y_off, x_off, y_off], dtype=torch.float64)
        if self.clip_box:
            moved[:, 0::2] = moved[:, 0::2].clamp(0, tw)
            moved[:, 1::2] = moved[:, 1::2].clamp(0, th)
        keep = box_candidates(placed, moved, wh_thr=5.0)
        if not bool((keep & (other_target["labels"] > 0)).any()):
            return image, target  # the pixels are only made for a sample that mixes

        h, w = int(h0 * ratio), int(w0 * ratio)
        if pixels.dtype == torch.uint8:
            mixed = self._mixed_uint8(pixels, other, (h, w), (ch, cw), (y_off, x_off), flip)
        else:
            letterbox = _canvas(self.fill_color, channels, ih, iw, pixels.dtype)
            letterbox[:, :h, :w] = _resized(other, max(h, 1), max(w, 1))[:, :h, :w]
            crop = _window(_resized(letterbox, ch, cw), y_off, x_off, th, tw, flip)
            mixed = 0.5 * pixels + 0.5 * crop
        own = target["boxes"].as_subclass(torch.Tensor)
        per_box = {key: torch.cat([target[key], other_target[key][keep].to(target[key].dtype)])
                   for key in PER_BOX_KEYS if key in target and key in other_target}
        boxes = torch.cat([own.to(torch.float64), moved[keep]])
        return tv_tensors.Image(mixed), _with_boxes(target, boxes, per_box, (th, tw))

    def _mixed_uint8(self, pixels, other, size, scaled, offsets, flip):
        """The float path's pixels (letterbox, jitter resize, window, average) rounded once: the
        letterbox stays uint8 when the drawn image fits as it is (exact), else it is resized in
        float on the 0-255 scale; only the window's pixels of the jitter resize are computed
        (:func:`mix_resized_window`), and their average with ``pixels`` is rounded half up."""
        channels, th, tw = pixels.shape
        ih, iw = self.input_size
        h, w = size
        fill = fill_of(self.fill_color, channels, dtype=torch.uint8)
        fits = (h, w) == tuple(other.shape[-2:])
        # only the letterbox's rows that hold the picture are built (its rows below are the fill)
        if fits and w == iw:  # the drawn image is those rows as it is
            return mix_resized_window(pixels, other, scaled, offsets, flip, ih, fill)
        rows = min(max(h, 1), ih)
        if fits:
            letterbox = _canvas(self.fill_color, channels, rows, iw, torch.uint8)
            letterbox[:, :h, :w] = other
        else:  # the fill's level on the 0-255 scale, the drawn image resized without rounding
            letterbox = fill.view(1, 1, channels).to(torch.float32).expand(rows, iw, channels).clone()
            letterbox = letterbox.permute(2, 0, 1)
            letterbox[:, :h, :w] = _resized(other.to(torch.float32), max(h, 1), max(w, 1))[:, :h, :w]
        return mix_resized_window(pixels, letterbox, scaled, offsets, flip, ih, fill)

    def __repr__(self):
        return f"YoloxMixUp(input_size={self.input_size}, mixup_scale={self.mixup_scale})"
