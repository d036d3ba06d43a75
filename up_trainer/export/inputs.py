"""What an exported detector is verified on, and at which score threshold.

Images: the config's val set (``dataset.test``) when it has one that can be read, the first
images in order (a barely trained model's scores on seeded noise are often all saturated at
1.0 or all below the threshold: neither says whether the export computes what the model does);
otherwise seeded random images. An image larger than the export size is cropped to it (top
left) where the graph takes images up to that size. The last image of a batch of several is cut
to 3/4 of its width, so padding and clipping are exercised.

Threshold: when the images give no detection at the model's own score threshold, the threshold
is lowered (the model's and the decode step's alike, for the forms that decode outside the graph)
step by step until some detection exists: comparing nothing verifies nothing. The end-to-end
form has its threshold inside the graph; there nothing can be lowered.
"""
import copy
import logging

import torch

log = logging.getLogger("up")
LOWERED = (10.0, 100.0, 1000.0, None)  # threshold divided by these; None: threshold 0


class Sample:
    """One verification image and what it is called in a message."""

    def __init__(self, image, name):
        self.image, self.name = image, name


def val_samples(cfg, count):
    """Up to ``count`` Samples from the config's val set, or None where it has none or it cannot
    be read (then random images are used; the record says which)."""
    from ..engine.builder import build_dataset
    from ..errors import UserError

    entry = (cfg.get("dataset") or {}).get("test")
    if not entry:
        return None
    try:
        dataset = build_dataset(entry, "dataset.test")
        samples = []
        for i in range(min(count, len(dataset))):
            image = dataset[i]["image"]
            if not isinstance(image, torch.Tensor) or image.dim() != 3:
                return None
            records = getattr(dataset, "records", None)
            file = records[i].get("file") if isinstance(records, list) and isinstance(records[i], dict) else None
            name = f"val image #{i}" + (f" ({file})" if isinstance(file, str) else "")
            samples.append(Sample(image.float(), name))
    except UserError as exc:
        log.info("export verification: the val set (dataset.test) cannot be read (%s); random images instead",
                 str(exc).splitlines()[0][:200])
        return None
    return samples or None


def random_samples(size, count, seed):
    g = torch.Generator().manual_seed(seed)
    return [Sample(im, f"random image #{i} (seed {seed})") for i, im in enumerate(torch.rand((count, *size), generator=g))]


def batch_images(samples, size, crop):
    """The images of one verification batch: cropped to ``size`` where ``crop``, the last of several
    cut to 3/4 of its width (see the module docstring)."""
    images = []
    for s in samples:
        im = s.image
        if crop:
            im = im[:, : size[1], : size[2]]
        images.append(im.contiguous())
    if len(images) > 1:
        images[-1] = images[-1][:, :, : max(1, images[-1].shape[-1] * 3 // 4)].contiguous()
    return images


def threshold_holder(model):
    """The part of ``model`` whose ``score_thresh`` its post-processing applies, or None (its
    family's exporter says which part that is)."""
    from ..registry import EXPORTERS

    kind = getattr(model, "kind", None)
    part = EXPORTERS.get(kind).threshold_part(model) if isinstance(kind, str) and kind in EXPORTERS else None
    value = getattr(part, "score_thresh", None)
    return part if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def lowered_record(record, thresh):
    """A copy of the export record whose decode step applies ``thresh``; None where the threshold
    is inside the graph (end-to-end) or the record has no decode step."""
    decode = record.get("decode")
    if record.get("form") == "end2end" or not isinstance(decode, dict):
        return None
    out = copy.deepcopy(record)
    if isinstance(decode.get("levels"), list):
        for level in out["decode"]["levels"]:
            level["thresh"] = thresh
    elif "score_thresh" in decode:
        out["decode"]["score_thresh"] = thresh
    else:
        return None
    return out


def lower_thresholds(thresh):
    """The thresholds tried after ``thresh`` gave nothing to compare, highest first."""
    return [thresh / f if f else 0.0 for f in LOWERED if thresh > 0]
