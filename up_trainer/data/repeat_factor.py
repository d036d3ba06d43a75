"""Repeat-factor sampling (Gupta et al., LVIS 2019; UP's ``repeat_factor`` sampler).

Each class c gets r_c = max(1, (t / f_c) ** pn), f_c the fraction of training images holding
c; each image is repeated r_i times per epoch, r_i = max over its classes of r_c, rounded by
``ri_mode`` (floor, round, ceil), ``ri_if_empty`` times for an image without classes. The
repeated list is shuffled, padded and sharded by :class:`ResumableSampler`'s rules, so the
epoch is a function of (seed, epoch) and a resumed run skips straight to its batch.
"""
import math

from ..config.repeat_factor import check_repeat_factor  # noqa: F401  (its home before the config layer had it)
from ..errors import ConfigError
from .sampler import ResumableSampler

RI_MODES = {"floor": math.floor, "round": round, "ceil": math.ceil}  # the names config/repeat_factor.py accepts


def image_classes_of(dataset, path="dataset.repeat_factor"):
    """The set of classes of every training image, read from the annotations (no image is
    loaded): detection records' labels, or a classification record's label."""
    classes = getattr(dataset, "image_classes", None)
    if classes is None:
        raise ConfigError(path, f"the training dataset ({type(dataset).__name__}) lists no classes per image",
                          "repeat-factor sampling needs a cls, coco or custom dataset")
    return classes()


def repeat_factors(image_classes, t=0.001, pn=0.5, ri_mode="ceil", ri_if_empty=1):
    """Repeats per image (a list of ints) from the classes of every image."""
    n = len(image_classes)
    images_with = {}
    for classes in image_classes:
        for c in set(classes):
            images_with[c] = images_with.get(c, 0) + 1
    class_factor = {c: max(1.0, (t / (k / n)) ** pn) for c, k in images_with.items()}
    rounding = RI_MODES[ri_mode]
    return [int(rounding(max(class_factor[c] for c in classes))) if classes else ri_if_empty
            for classes in image_classes]


class RepeatFactorSampler(ResumableSampler):
    """A :class:`ResumableSampler` over the repeated index list (image i appears repeats[i] times)."""

    def __init__(self, repeats, **kwargs):
        self.pool = [i for i, r in enumerate(repeats) for _ in range(r)]
        super().__init__(len(self.pool), **kwargs)

    def indices(self):
        return [self.pool[j] for j in super().indices()]
