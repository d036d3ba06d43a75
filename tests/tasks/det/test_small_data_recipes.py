"""The small-data regime (clutter_scenes) and the recipes for one's own small data set
(configs/det/small_data_*.yaml): the scenes are deterministic and hold what the docs say
(sizes, classes, overlaps, held-out handwriting), their COCO export gives back the same boxes,
and every recipe resolves (``up config``) and runs two iterations and two eval batches on the
export (``up train --dry-run``)."""
import json
import os

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from torchvision.ops import box_iou

from up_trainer.cli import main
from up_trainer.errors import ConfigError
from up_trainer.tasks.det.clutter_scenes import ClutterScenes, export_clutter_coco

from conftest import REPO  # noqa: E402

RECIPES = ("fcos", "atss", "yolox")
SMALL = dict(canvas_size=96, object_size=(8, 40), objects_per_image=(2, 5))


@pytest.fixture(scope="module")
def regime(tmp_path_factory):
    out = tmp_path_factory.mktemp("clutter")
    export_clutter_coco(str(out), num_images=4, num_val_images=2, **SMALL)
    return out


def _opts(data):
    ann, img = data / "annotations", data / "images"
    return [f"dataset.train.kwargs.ann_file={ann / 'instances_train.json'}",
            f"dataset.train.kwargs.img_dir={img / 'train'}",
            f"dataset.test.kwargs.ann_file={ann / 'instances_val.json'}", f"dataset.test.kwargs.img_dir={img / 'val'}",
            "dataset.batch_size=2", "dataset.test_batch_size=2"]


def test_scenes_are_seeded_and_hold_sizes_classes_and_bounded_overlaps():
    scenes = ClutterScenes("train", 3, seed=3)
    again = ClutterScenes("train", 3, seed=3)
    sizes = []
    for i in range(3):
        canvas, boxes, labels = scenes.scene(i)
        canvas2, boxes2, labels2 = again.scene(i)
        assert np.array_equal(canvas, canvas2) and boxes == boxes2 and labels == labels2
        assert canvas.shape == (288, 288) and 0.0 <= canvas.min() and canvas.max() <= 1.0
        assert all(1 <= lab <= 4 for lab in labels)
        b = torch.tensor(boxes)
        assert (b[:, :2] >= 0).all() and (b[:, 2:] <= 288).all()
        sizes += (b[:, 2:] - b[:, :2]).max(1).values.tolist()
        iou = box_iou(b, b) - torch.eye(len(b))
        assert iou.max() <= 0.3 + 1e-6
    assert 8 <= min(sizes) and max(sizes) <= 120
    assert not np.array_equal(scenes.scene(0)[0], ClutterScenes("train", 1, seed=4).scene(0)[0])
    # val draws its objects from handwriting train never shows
    assert not set(ClutterScenes("val", 1).objects) & set(scenes.objects)


def test_bad_arguments_name_the_key():
    with pytest.raises(ConfigError, match="num_classes"):
        ClutterScenes(num_classes=10)
    with pytest.raises(ConfigError, match="object_size"):
        ClutterScenes(canvas_size=64, object_size=(8, 120))


def test_export_gives_back_the_scene_boxes(regime):
    with open(regime / "annotations" / "instances_val.json", encoding="utf-8") as f:
        coco = json.load(f)
    scenes = ClutterScenes("val", 2, **SMALL)
    for image in coco["images"]:
        _, boxes, labels = scenes.scene(image["id"] - 1)
        anns = [a for a in coco["annotations"] if a["image_id"] == image["id"]]
        assert [a["category_id"] for a in anns] == labels
        assert [[x, y, x + w, y + h] for x, y, w, h in (a["bbox"] for a in anns)] == boxes
    assert [c["name"] for c in coco["categories"]] == ["0", "1", "2", "3"]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_resolves_and_dry_runs_on_the_export(recipe, regime, tmp_path):
    config = os.path.join(REPO, "configs", "det", f"small_data_{recipe}.yaml")
    runner = CliRunner()
    res = runner.invoke(main, ["config", "--config", config])
    assert res.exit_code == 0, res.output + repr(res.exception)
    res = runner.invoke(main, ["train", "--config", config, "--dry-run", "--work-dir", str(tmp_path),
                               "--opts", *_opts(regime)])
    assert res.exit_code == 0, res.output + repr(res.exception)
