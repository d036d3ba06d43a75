"""UP's ``torch_cutmix_mixup`` (per-sample CutMix/MixUp, last in the training pipeline of UP's
downstream *_strikes files) runs as the batch_cutmixup batch_fn with its kwargs, the deviation
in up config's notes; where the batch form cannot stand in, one line."""
import copy
import os

import pytest
import yaml

from conftest import UP_FIXTURES
from up_trainer.config.up_form import translate
from up_trainer.errors import ConfigError

CAR = os.path.join(UP_FIXTURES, "cls", "resnet", "downstream", "res50_car_strikes.yaml")


def car():
    with open(CAR, encoding="utf-8") as f:
        return yaml.safe_load(f)


def test_strikes_file_mixes_its_batches_with_the_transforms_kwargs():
    cfg = translate(car())
    assert cfg["dataset"]["batch_fn"] == {"type": "batch_cutmixup", "kwargs": {
        "mixup_alpha": 0.1, "cutmix_alpha": 1.0, "switch_prob": 0.5, "num_classes": 196}}
    types = [t["type"] for t in cfg["dataset"]["train"]["kwargs"]["transforms"]]
    assert "torch_cutmix_mixup" not in types and types[-1] == "normalize"
    note = [n for n in cfg["origin"]["notes"] if n.startswith("dataset.train.kwargs.transformer[5]: torch_cutmix")]
    assert note and "partners from the same batch, one ratio and one CutMix/MixUp draw per batch" in note[0]


def pipeline(cfg, split="train"):
    return cfg["dataset"][split]["dataset"]["kwargs"]["transformer"]


def _moved_first(cfg):
    pipe = pipeline(cfg)
    pipe.insert(0, pipe.pop())


def _in_test(cfg):
    pipeline(cfg, "test").append(copy.deepcopy(pipeline(cfg)[-1]))


def _with_batch_fn(cfg):
    cfg["dataset"]["train"]["dataloader"]["kwargs"]["batch_fn"] = {"type": "batch_mixup", "kwargs": {}}


def _flag_off(cfg):
    pipeline(cfg)[-1]["kwargs"]["extra_input"] = False


def _unknown(cfg):
    pipeline(cfg)[-1]["kwargs"]["label_smoothing"] = 0.1


@pytest.mark.parametrize("change, message", [
    (_moved_first, "dataset.train.kwargs.transformer[0].type: torch_cutmix_mixup runs here as a batch_fn on the "
                   "finished images, so it must be the last transform"),
    (_in_test, "dataset.test.kwargs.transformer[4].type: torch_cutmix_mixup mixes training images"),
    (_with_batch_fn, "torch_cutmix_mixup and a batch_fn would both mix the batch"),
    (_flag_off, "dataset.train.kwargs.transformer[5].kwargs.extra_input: only true"),
    (_unknown, "dataset.train.kwargs.transformer[5].kwargs.label_smoothing: unknown kwarg of torch_cutmix_mixup"),
])
def test_where_the_batch_form_cannot_stand_in(change, message):
    cfg = car()
    change(cfg)
    with pytest.raises(ConfigError) as err:
        translate(cfg)
    assert message in str(err.value) and "\n" not in str(err.value)
