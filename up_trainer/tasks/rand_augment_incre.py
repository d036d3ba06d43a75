"""UP's ``torch_random_augmentationIncre``: RandAugment whose every op grows stronger with the
magnitude (UP's "increasing" op list), with UP's draws.

Per image: ``n`` ops drawn with replacement from the 15 below; each is skipped with
probability 1/2; the magnitude is ``m`` (or a draw from N(m, magnitude_std)), clipped to
[0, 10], and mapped linearly onto the op's range. Shears, translations, rotation and the
enhance factors take a random sign. Every draw comes from torch's global generator, which the
data loader seeds per batch, so a run and its resumed copy augment alike.

The ops act on uint8 images as Pillow does: posterize to 4 - int(v) bits, solarize above
256 - v, solarize-add (add v, clip, truncate, solarize above 128), enhance factors
1 +/- 0.9 (v - 0.1) / 1.8 (at least 0.1), affine maps sampled at pixel centres with nearest
neighbour and zero fill.
"""
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as F

from ..errors import ConfigError
from ..registry import TRANSFORMS


def _sign(v):
    return -v if float(torch.rand(())) > 0.5 else v


def _affine_nearest(img, a, b, c, d, e, f):
    """Output pixel (x, y) takes the input pixel under (a x + b y + c, d x + e y + f), both at
    pixel centres (Pillow's AFFINE transform with NEAREST resampling); outside: 0."""
    h, w = img.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5, torch.arange(w, dtype=torch.float64) + 0.5,
                            indexing="ij")
    src_x = torch.floor(a * xs + b * ys + c).long()
    src_y = torch.floor(d * xs + e * ys + f).long()
    inside = (src_x >= 0) & (src_x < w) & (src_y >= 0) & (src_y < h)
    out = img[..., src_y.clamp(0, h - 1), src_x.clamp(0, w - 1)]
    return out * inside.to(img.dtype)


def _enhance_factor(v):
    level = (v - 0.1) / 1.8 * 0.9
    return max(0.1, 1.0 + _sign(level))


def _solarize_add(img, v):
    added = torch.floor((img.double() + v).clamp(0, 255)).to(torch.uint8)
    return F.solarize(added, 128)


def _solarize_increasing(img, v):
    threshold = 256 - v
    return img if threshold > 255 else F.solarize(img, threshold)


# (name, op(img, value), low, high): the value is low + magnitude / 10 x (high - low)
OPS = [
    ("auto_contrast", lambda img, v: F.autocontrast(img), 0, 1),
    ("equalize", lambda img, v: F.equalize(img), 0, 1),
    ("invert", lambda img, v: F.invert(img), 0, 1),
    ("rotate", lambda img, v: F.rotate(img, _sign(v), InterpolationMode.NEAREST, fill=0), 0, 30),
    ("posterize", lambda img, v: F.posterize(img, 4 - int(v)), 0, 4),
    ("solarize", _solarize_increasing, 0, 256),
    ("solarize_add", _solarize_add, 0, 110),
    ("color", lambda img, v: F.adjust_saturation(img, _enhance_factor(v)), 0.1, 1.9),
    ("contrast", lambda img, v: F.adjust_contrast(img, _enhance_factor(v)), 0.1, 1.9),
    ("brightness", lambda img, v: F.adjust_brightness(img, _enhance_factor(v)), 0.1, 1.9),
    ("sharpness", lambda img, v: F.adjust_sharpness(img, _enhance_factor(v)), 0.1, 1.9),
    ("shear_x", lambda img, v: _affine_nearest(img, 1, _sign(v), 0, 0, 1, 0), 0.0, 0.3),
    ("shear_y", lambda img, v: _affine_nearest(img, 1, 0, 0, _sign(v), 1, 0), 0.0, 0.3),
    ("translate_x", lambda img, v: _affine_nearest(img, 1, 0, _sign(v), 0, 1, 0), 0.0, 100),
    ("translate_y", lambda img, v: _affine_nearest(img, 1, 0, 0, 0, 1, _sign(v)), 0.0, 100),
]


@TRANSFORMS.register("torch_random_augmentationIncre")
class RandAugIncre:
    """UP's ``torch_random_augmentationIncre`` {n, m, magnitude_std} (see the module docstring)."""

    def __init__(self, n: int = 2, m: float = 9, magnitude_std: float = 0.0):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ConfigError("n", f"expected an integer >= 1, got {n!r}")
        if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 10:
            raise ConfigError("m", f"expected a magnitude in [0, 10], got {m!r}")
        if isinstance(magnitude_std, bool) or not isinstance(magnitude_std, (int, float)) or magnitude_std < 0:
            raise ConfigError("magnitude_std", f"expected a number >= 0, got {magnitude_std!r}")
        self.n, self.m, self.std = n, float(m), float(magnitude_std)

    def plan(self):
        """The ops this image gets, as (name, value), drawing from torch's global generator."""
        chosen = torch.randint(len(OPS), (self.n,)).tolist()
        out = []
        for i in chosen:
            name, op, low, high = OPS[i]
            if float(torch.rand(())) > 0.5:
                continue
            magnitude = self.m + self.std * float(torch.randn(())) if self.std else self.m
            magnitude = min(max(magnitude, 0.0), 10.0)
            out.append((name, op, magnitude / 10 * (high - low) + low))
        return out

    def __call__(self, image):
        as_float = image.dtype != torch.uint8
        img = (image.clamp(0, 1) * 255).round().to(torch.uint8) if as_float else image
        for _, op, value in self.plan():
            img = op(img, value)
        return img.float().div_(255.0) if as_float else img

    def __repr__(self):
        return f"RandAugIncre(n={self.n}, m={self.m}, magnitude_std={self.std})"
