"""Two views of every image, for the contrastive pretraining models.

``{type: two_views, kwargs: {transforms: [...], second: [...]}}`` runs ``transforms`` twice on
the same image (or ``transforms`` for the first view and ``second`` for the other) and stacks
the results: the sample's image becomes 2 x C x H x W, the batch N x 2 x C x H x W. Each view
draws its own random crop, jitter and flip from torch's global RNG (which the loader seeds per
sample), so the two differ and a resumed run draws the same ones.

UP's recipes keep their names: ``torch_mocov1``, ``torch_mocov2``, ``torch_mocov3`` (two
different pipelines: blur always on the first view, solarize only on the second) and
``torch_simclrv1``, each ending in to_tensor + ImageNet normalize as in UP. ``size`` (224 in UP,
where it is fixed) sets the crop size for small images. Differences from UP (docs/ssl.rst): the
views are torchvision v2 ops on tensors, not PIL ops; the Gaussian blur has a 13-pixel kernel
(3 sigma of UP's largest sigma, 2) where Pillow's has none.
"""

from typing import Optional

import torch
from torchvision.transforms import v2

from ...errors import ConfigError
from ...registry import TRANSFORMS
from ..transforms import ColorJitter, Normalize, ToTensor

IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BLUR_KERNEL = 13  # covers 3 sigma of UP's largest blur sigma (2.0) on each side


@TRANSFORMS.register("two_views")
class TwoViews:
    """Two augmented views of one image, stacked (see the module docstring)."""

    def __init__(self, transforms: list, second: Optional[list] = None):
        if not transforms:
            raise ConfigError("transforms", "needs the view pipeline (a list of {type, kwargs})")
        from ..transforms import _build_list

        first = v2.Compose(transforms)
        self.views = (first, v2.Compose(_build_list(second, "second")) if second else first)

    def __call__(self, image):
        one, two = (view(image) for view in self.views)
        if one.dtype != two.dtype or one.shape != two.shape:
            raise ConfigError("dataset.train.kwargs.transforms", f"the two views differ in size or type "
                              f"({tuple(one.shape)} {one.dtype} vs {tuple(two.shape)} {two.dtype})",
                              "end both view pipelines with the same crop size and conversion")
        return torch.stack([one.as_subclass(torch.Tensor), two.as_subclass(torch.Tensor)])

    def __repr__(self):
        return f"TwoViews({self.views[0]!r}, {self.views[1]!r})"


class GaussianBlurUP:
    """UP's blur: sigma uniform in [low, high], drawn per image."""

    def __init__(self, sigma=(0.1, 2.0)):
        self.sigma = sigma

    def __call__(self, image):
        sigma = self.sigma[0] + (self.sigma[1] - self.sigma[0]) * float(torch.rand(()))
        # reflect padding needs the kernel's half width below the image side (tiny images)
        kernel = min(BLUR_KERNEL, 2 * min(image.shape[-2:]) - 1)
        kernel -= 1 - kernel % 2
        return v2.functional.gaussian_blur(image, [kernel, kernel], [sigma, sigma])


class Solarize:
    """BYOL's solarize (UP's torch_solarize): pixels at or above mid-grey inverted; uint8 or float."""

    def __call__(self, image):
        if image.dtype == torch.uint8:
            return torch.where(image >= 128, 255 - image, image)
        return torch.where(image >= 0.5, 1.0 - image, image)


def _crop(size, scale):
    return v2.RandomResizedCrop(size, scale=scale, antialias=True)


def _tail():
    return [ToTensor(), Normalize(IMAGENET_MEAN, IMAGENET_STD)]


def _jitter(b, c, s, h, p):
    return v2.RandomApply([ColorJitter(b, c, s, h)], p=p)


def _check_size(size):
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ConfigError("size", f"expected a positive integer, got {size!r}")


class _Recipe(TwoViews):
    """A fixed UP view recipe; subclasses give ``views(size)``."""

    def __init__(self, size: int = 224):
        _check_size(size)
        first, second = self.recipe(size)
        self.views = (v2.Compose(first), v2.Compose(second))


@TRANSFORMS.register("torch_mocov1")
class MocoV1Views(_Recipe):
    """UP's torch_mocov1: crop (scale 0.2-1), grayscale 0.2, jitter 0.4, flip; both views alike."""

    @staticmethod
    def recipe(size):
        ops = [_crop(size, (0.2, 1.0)), v2.RandomGrayscale(0.2), ColorJitter(0.4, 0.4, 0.4, 0.4),
               v2.RandomHorizontalFlip()] + _tail()
        return ops, ops


@TRANSFORMS.register("torch_mocov2")
class MocoV2Views(_Recipe):
    """UP's torch_mocov2: crop (0.2-1), jitter 0.4/0.1 with p 0.8, grayscale 0.2, blur p 0.5, flip."""

    @staticmethod
    def recipe(size):
        ops = [_crop(size, (0.2, 1.0)), _jitter(0.4, 0.4, 0.4, 0.1, 0.8), v2.RandomGrayscale(0.2),
               v2.RandomApply([GaussianBlurUP()], p=0.5), v2.RandomHorizontalFlip()] + _tail()
        return ops, ops


@TRANSFORMS.register("torch_mocov3")
class MocoV3Views(_Recipe):
    """UP's torch_mocov3 (BYOL's asymmetric pair): blur always on view 1, p 0.1 and solarize p 0.2 on view 2."""

    @staticmethod
    def recipe(size):
        head = [_crop(size, (0.2, 1.0)), _jitter(0.4, 0.4, 0.2, 0.1, 0.8), v2.RandomGrayscale(0.2)]
        first = head + [GaussianBlurUP(), v2.RandomHorizontalFlip()] + _tail()
        second = head + [v2.RandomApply([GaussianBlurUP()], p=0.1), v2.RandomApply([Solarize()], p=0.2),
                         v2.RandomHorizontalFlip()] + _tail()
        return first, second


@TRANSFORMS.register("torch_simclrv1")
class SimclrViews(_Recipe):
    """UP's torch_simclrv1: crop (0.08-1), flip, jitter 0.8/0.2 with p 0.8, grayscale 0.2, blur."""

    @staticmethod
    def recipe(size):
        ops = [_crop(size, (0.08, 1.0)), v2.RandomHorizontalFlip(), _jitter(0.8, 0.8, 0.8, 0.2, 0.8),
               v2.RandomGrayscale(0.2), GaussianBlurUP()] + _tail()
        return ops, ops


TRANSFORMS.register("torch_gaussian_blur")(GaussianBlurUP)
TRANSFORMS.register("torch_solarize")(Solarize)
