"""What happens to a batch between the dataset and the model: padding to an alignment, mixing
(UP's cls_base ``batch_fn``), and batches grouped by aspect ratio (UP's ``aspect_ratio_group``).

Every random choice here is drawn from torch's generator seeded by (seed, epoch, first sample
of the batch), as the dataset's augmentations are, so a batch is mixed the same way in a worker,
in the main process and after a mid-epoch resume.
"""
import bisect
import math

import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from ..errors import ConfigError
from ..registry import BATCH_FNS
from .model_input import convert_batch
from .sampler import ResumableSampler

MIX_SALT = 7_919  # keeps the mixing stream apart from the batch's augmentation stream


# -- padding --------------------------------------------------------------------------------------
def pad_images(images, alignment, pad_value):
    """Pad each CxHxW image right/bottom to the batch's largest size rounded up to ``alignment``.
    Boxes keep their coordinates: the origin does not move."""
    height = max(img.shape[-2] for img in images)
    width = max(img.shape[-1] for img in images)
    height = math.ceil(height / alignment) * alignment
    width = math.ceil(width / alignment) * alignment
    return [img if img.shape[-2:] == (height, width) else
            F.pad(img, (0, width - img.shape[-1], 0, height - img.shape[-2]), value=float(pad_value))
            for img in images]


class PadCollate:
    """UP's ``base`` dataloader padding (``alignment``, ``pad_value``) before the dataset's collate."""

    def __init__(self, collate, alignment, pad_value):
        self.collate, self.alignment, self.pad_value = collate, alignment, pad_value

    def __call__(self, samples):
        images = [s["image"] for s in samples]
        if images[0].dtype != torch.uint8:
            padded = pad_images(images, self.alignment, self.pad_value)
            return self.collate([dict(s, image=img) for s, img in zip(samples, padded)])
        # uint8 images converted on the device (dataset.normalize_on): pad_value is a value of the
        # converted images, so pad with 0 here and let the conversion write pad_value in its space
        padded = pad_images(images, self.alignment, 0)
        batch = self.collate([dict(s, image=img) for s, img in zip(samples, padded)])
        if batch.get("model_input") is not None:
            batch["model_input"] = batch["model_input"].padded([img.shape[-2:] for img in images], self.pad_value)
        return batch


# -- mixing ---------------------------------------------------------------------------------------
class _Mixing:
    """A classification batch ``{image: NxCxHxW, label: N}`` -> mixed images and soft labels NxK
    (cross-entropy takes class probabilities as targets)."""

    def __init__(self, num_classes):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
            raise ConfigError("num_classes", f"expected an integer >= 2, got {num_classes!r}")
        self.num_classes = num_classes

    def transform(self):
        raise NotImplementedError

    def __call__(self, batch):
        batch = convert_batch(batch)  # mixed in the model's input space, as before the device conversion
        label = batch["label"]
        if label.dim() != 1:
            raise ValueError("batch_fn needs integer class labels (one per image)")
        if int(label.max()) >= self.num_classes:
            raise ConfigError("dataset.batch_fn.kwargs.num_classes",
                              f"{self.num_classes} classes but a label is {int(label.max())}",
                              "set num_classes to the data set's class count")
        image, soft = self.transform()(batch["image"], label)
        return dict(batch, image=image, label=soft)


def _alpha(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ConfigError(name, f"expected a number > 0, got {value!r}")
    return float(value)


@BATCH_FNS.register("batch_mixup")
class BatchMixup(_Mixing):
    """UP's ``batch_mixup``: torchvision v2 MixUp, mixing ratio from Beta(alpha, alpha)."""

    def __init__(self, alpha: float = 1.0, num_classes: int = 1000):
        super().__init__(num_classes)
        self.alpha = _alpha(alpha, "alpha")
        self._t = v2.MixUp(alpha=self.alpha, num_classes=num_classes)

    def transform(self):
        return self._t


@BATCH_FNS.register("batch_cutmix")
class BatchCutMix(_Mixing):
    """UP's ``batch_cutmix``: torchvision v2 CutMix."""

    def __init__(self, alpha: float = 1.0, num_classes: int = 1000):
        super().__init__(num_classes)
        self.alpha = _alpha(alpha, "alpha")
        self._t = v2.CutMix(alpha=self.alpha, num_classes=num_classes)

    def transform(self):
        return self._t


@BATCH_FNS.register("batch_cutmixup")
class BatchCutMixup(_Mixing):
    """UP's ``batch_cutmixup``: CutMix with probability switch_prob, else MixUp."""

    def __init__(self, mixup_alpha: float = 1.0, cutmix_alpha: float = 1.0, switch_prob: float = 0.5,
                 num_classes: int = 1000):
        super().__init__(num_classes)
        if isinstance(switch_prob, bool) or not isinstance(switch_prob, (int, float)) or not 0 <= switch_prob <= 1:
            raise ConfigError("switch_prob", f"expected a probability in [0, 1], got {switch_prob!r}")
        self.switch_prob = float(switch_prob)
        self._cutmix = v2.CutMix(alpha=_alpha(cutmix_alpha, "cutmix_alpha"), num_classes=num_classes)
        self._mixup = v2.MixUp(alpha=_alpha(mixup_alpha, "mixup_alpha"), num_classes=num_classes)

    def transform(self):
        return self._cutmix if float(torch.rand(())) < self.switch_prob else self._mixup


def build_batch_fn(cfg, path="dataset.batch_fn"):
    return None if cfg is None else BATCH_FNS.build(cfg, path)


class MixCollate:
    """Collate, then mix the batch with torch's generator seeded by (seed, epoch, first index)."""

    def __init__(self, collate, batch_fn, seeded):
        self.collate, self.batch_fn, self.seeded = collate, batch_fn, seeded

    def __call__(self, samples):
        batch = self.collate(samples)
        first = int(samples[0]["index"]) + MIX_SALT
        return self.seeded._seeded(first, lambda: self.batch_fn(batch))


# -- aspect-ratio groups ----------------------------------------------------------------------------
class AspectRatioBatchSampler:
    """Batches whose images share an aspect-ratio group (height / width split at ``boundaries``).

    The order follows the seeded, sharded sampler: walking it, each image joins its group's open
    batch, and a batch is emitted when full; leftovers follow at the end. As in UP the list is
    cut to the ungrouped batch count (ceil, or floor with drop_last), so an epoch has the same
    length on every rank and in every epoch. The batch list is a function of (seed, epoch) only,
    so a resumed run skips whole batches without loading them.
    """

    def __init__(self, sampler: ResumableSampler, aspect_ratios, boundaries, batch_size, drop_last=False):
        self.sampler = sampler
        bounds = sorted(float(b) for b in boundaries)
        self.group_of = [bisect.bisect_right(bounds, r) for r in aspect_ratios]
        self.batch_size, self.drop_last = batch_size, drop_last
        self.start_batch = 0

    def batches(self):
        open_batches, out = {}, []
        for index in self.sampler.indices():
            batch = open_batches.setdefault(self.group_of[index], [])
            batch.append(index)
            if len(batch) == self.batch_size:
                out.append(batch)
                open_batches[self.group_of[index]] = []
        out += [b for b in open_batches.values() if b]
        n = self.sampler.shard_len()
        target = n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
        return out[:target]

    def __iter__(self):
        return iter(self.batches()[self.start_batch:])

    def __len__(self):
        return max(len(self.batches()) - self.start_batch, 0)


def aspect_ratios_of(dataset, path="dataset.aspect_ratio_groups"):
    ratios = getattr(dataset, "aspect_ratios", None)
    if ratios is None:
        raise ConfigError(path, f"the training dataset ({type(dataset).__name__}) has no image sizes to group by",
                          "aspect-ratio groups need a detection dataset (coco, custom)")
    return ratios() if callable(ratios) else ratios


