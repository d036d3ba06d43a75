"""UP's ``torch_cutmix_mixup`` training transform, run as the ``batch_cutmixup`` batch_fn.

In UP (before 52aaeb9, which dropped the type and left two downstream files naming it) the
transform, last in the training pipeline, mixed each sample with another image drawn at random
from the dataset and put through the same pipeline: with probability ``switch_prob`` CutMix
(a box of the partner pasted in, the label mixed by the box's area), else MixUp (pixels and
labels mixed by ``lam ~ Beta(mixup_alpha, mixup_alpha)``); the label becomes a soft N-class
vector. Here the mixing moves to the batch, as UP's own ``batch_cutmixup`` does it: each image's
partner is another image of its (randomly drawn) batch, already through the same pipeline. The
deviations, written into ``up config``'s notes: the partner comes from the batch rather than the
whole dataset, and one mixing ratio (one box) and one CutMix-or-MixUp draw serve the batch
instead of one per sample. Mixing ratios, probabilities and soft labels follow UP's formulas.
"""
from ..errors import ConfigError, join_path

TYPE = "torch_cutmix_mixup"
KWARGS = {"mixup_alpha": 1.0, "cutmix_alpha": 1.0, "switch_prob": 0.5, "num_classes": 1000}
MECHANICS = ("extra_input", "transform")  # UP's flags for "pass the dataset / the pipeline in": always so here


def _pipeline(entry):
    kwargs = entry.get("kwargs") if isinstance(entry, dict) else None
    if not isinstance(kwargs, dict):
        return None, None
    for key in ("transformer", "transforms"):
        if isinstance(kwargs.get(key), list):
            return key, kwargs[key]
    return None, None


def cutmix_mixup_to_batch_fn(cfg, notes):
    """Move a training pipeline's ``torch_cutmix_mixup`` to ``dataset.batch_fn``; refuse it where
    the batch form cannot stand in (not last, an evaluation pipeline, a batch_fn already set)."""
    ds = cfg.get("dataset")
    if not isinstance(ds, dict):
        return
    for split in ("train", "test"):
        key, transforms = _pipeline(ds.get(split))
        found = [i for i, t in enumerate(transforms or []) if isinstance(t, dict) and t.get("type") == TYPE]
        if not found:
            continue
        path = f"dataset.{split}.kwargs.{key}[{found[0]}]"
        if split != "train":
            raise ConfigError(f"{path}.type", f"{TYPE} mixes training images; an evaluation pipeline cannot take it")
        if found != [len(transforms) - 1]:
            raise ConfigError(f"{path}.type", f"{TYPE} runs here as a batch_fn on the finished images, so it must be "
                              "the last transform (and given once)", "move it to the end of the pipeline")
        if ds.get("batch_fn") is not None:
            raise ConfigError(f"{path}.type", f"{TYPE} and a batch_fn would both mix the batch", "keep one of them")
        kwargs = dict(transforms[-1].get("kwargs") or {})
        for flag in MECHANICS:
            if kwargs.pop(flag, True) is not True:
                raise ConfigError(join_path(f"{path}.kwargs", flag), "only true: the partner image always comes "
                                  "from the training data, through the same pipeline")
        for extra in sorted(set(kwargs) - set(KWARGS)):
            raise ConfigError(join_path(f"{path}.kwargs", extra), f"unknown kwarg of {TYPE}",
                              f"it takes: {', '.join(list(KWARGS) + list(MECHANICS))}")
        ds["batch_fn"] = {"type": "batch_cutmixup", "kwargs": {k: kwargs.get(k, v) for k, v in KWARGS.items()}}
        del transforms[-1]
        notes.append(f"{path}: {TYPE} (UP: per sample, the partner drawn from the dataset) runs as dataset.batch_fn "
                     "batch_cutmixup: partners from the same batch, one ratio and one CutMix/MixUp draw per batch")
