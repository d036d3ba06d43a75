"""UP's "improve" augmentations (stitch_expand, crop, fix_output_resize, color_jitter): boxes
stay inside the image and never degenerate; the image is a window of the (tiled) source and the
boxes are exactly the source boxes whose centre lies in that window, clipped; the same seed draws
the same samples in the main process and in workers."""
import glob
import os

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from conftest import loader_cfg
from test_yolox_transforms import FAST, NUM_LABELS, PaintedBoxes, check_boxes, colour_of, sample, scenes

from up_trainer.data.loader import LoaderFactory
from up_trainer.errors import ConfigError
from up_trainer.tasks.det.digits_det import DigitsDetection
from up_trainer.tasks.transforms import build_transforms
from conftest import UP_FIXTURES  # noqa: E402

STITCH = {"type": "stitch_expand", "kwargs": {"expand_ratios": 2.0, "expand_prob": 0.5}}
CROP = {"type": "crop", "kwargs": {"means": [123.675, 116.28, 103.53], "scale": 1024, "crop_prob": 0.5}}
JITTER = {"type": "color_jitter", "kwargs": {"brightness": [0.7, 1.3], "contrast": [0.5, 1.5],
                                             "saturation": [0.5, 1.5], "hue": 0.05, "brightness_delta": 16,
                                             "hue_delta": 18, "channel_shuffle": True, "prob": 0.5}}
FIXED = {"type": "fix_output_resize", "kwargs": {"scales": [48, 40], "max_size": 1400}}
FLIP = {"type": "flip", "kwargs": {"flip_p": 0.5}}
IMPROVE = [STITCH, CROP, FLIP, JITTER, FIXED]  # UP's improve order
COORD = 1000.0  # coordinates written into pixels are divided by this (exact in float32)


class CoordinateBoxes(PaintedBoxes):
    """Channel 0 holds each pixel's source column, channel 1 its row (/ COORD), channel 2 the
    painted boxes: where a window of the source lands is read off the output's pixels."""

    def _image(self, record):
        painted = super()._image(record)
        h, w = record["height"], record["width"]
        cols = torch.arange(w, dtype=torch.float32).expand(h, w) / COORD
        rows = torch.arange(h, dtype=torch.float32)[:, None].expand(h, w) / COORD
        return torch.stack([cols, rows, painted[0]])


def expected_window_boxes(record, left, top, h, w, tiles):
    """The source boxes (tiled tiles x tiles) with centre strictly inside the window, clipped to
    it, in window coordinates, sorted; and their labels."""
    out = []
    boxes = [(b, label) for b, label in zip(record["boxes"], record["labels"])] + [(b, 0) for b in record["ignore"]]
    for j in range(tiles):
        for i in range(tiles):
            for (x1, y1, x2, y2), label in boxes:
                x1, x2 = x1 + i * record["width"], x2 + i * record["width"]
                y1, y2 = y1 + j * record["height"], y2 + j * record["height"]
                cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
                if left < cx < left + w and top < cy < top + h:
                    out.append((max(x1, left) - left, max(y1, top) - top, min(x2, left + w) - left,
                                min(y2, top + h) - top, label))
    return sorted(out)


def output_boxes(s):
    target = s["target"]
    rows = [tuple(b) + (int(label),) for b, label in zip(target["boxes"].tolist(), target["labels"].tolist())]
    rows += [tuple(b) + (0,) for b in target["ignore_boxes"].tolist()]
    return sorted(rows)


@pytest.mark.parametrize("pipeline", [[STITCH], [CROP], [JITTER], [FIXED], IMPROVE],
                         ids=lambda p: "+".join(t["type"] for t in p))
@FAST
@given(data=scenes(), seed=st.integers(0, 2**31 - 1))
def test_boxes_stay_inside_and_never_degenerate(pipeline, data, seed):
    ds = PaintedBoxes(data, pipeline)
    for index in range(len(ds)):
        check_boxes(sample(ds, index, seed + index))


@pytest.mark.parametrize("transform", [STITCH, CROP], ids=lambda t: t["type"])
@FAST
@given(data=scenes(), seed=st.integers(0, 2**31 - 1))
def test_output_is_a_window_of_the_source_with_exactly_its_boxes(transform, data, seed):
    ds = CoordinateBoxes(data, [transform])
    plain = CoordinateBoxes(data, None)
    for index, record in enumerate(ds.records):
        s, source = sample(ds, index, seed + index), plain[index]["image"]
        _, h, w = s["image"].shape
        left, top = (int(round(float(v) * COORD)) for v in s["image"][:2, 0, 0])
        padded = transform is CROP and (h, w) == (max(source.shape[1:]),) * 2 and h > min(source.shape[1:])
        if padded:  # no window held a whole box: the source at the top left of a square of means
            sh, sw = source.shape[1:]
            assert (left, top) == (0, 0) and torch.equal(s["image"][:, :sh, :sw], source)
            fill = torch.tensor(CROP["kwargs"]["means"]) / 255
            assert torch.allclose(s["image"][:, sh:, :].permute(1, 2, 0), fill.expand(h - sh, w, 3)) and \
                torch.allclose(s["image"][:, :, sw:].permute(1, 2, 0), fill.expand(h, w - sw, 3))
            assert output_boxes(s) == expected_window_boxes(record, 0, 0, h, w, 1)
            continue
        tiles = 2 if transform is STITCH else 1
        tiled = source.repeat(1, tiles, tiles)
        assert torch.equal(s["image"], tiled[:, top:top + h, left:left + w]), (left, top, h, w)
        if (h, w) == tuple(source.shape[1:]) and transform is STITCH:
            assert output_boxes(s) == output_boxes(plain[index])  # not expanded: unchanged
            continue
        if transform is CROP:
            assert h == w
        assert output_boxes(s) == expected_window_boxes(record, left, top, h, w, tiles)
        sources = record["boxes"] + record["ignore"]
        whole = {(x1 + i * record["width"] - left, y1 + j * record["height"] - top, x2 + i * record["width"] - left,
                  y2 + j * record["height"] - top) for x1, y1, x2, y2 in sources for j in range(tiles)
                 for i in range(tiles)}
        assert not sources or any(b[:4] in whole for b in output_boxes(s)), "the window holds a whole box"
        for x1, y1, x2, y2, label in output_boxes(s):  # each box sits on its own painted pixels
            painted = s["image"][2, int(y1):int(y2), int(x1):int(x2)]
            value = colour_of(label)[0] if label else 0.3
            assert torch.allclose(painted, torch.full_like(painted, float(value))), (label, x1, y1)


def test_expand_and_crop_pass_or_cut_images_without_boxes():
    data = [(30, 50, [], [], [])]
    torch.manual_seed(0)
    always = {"type": "stitch_expand", "kwargs": {"expand_ratios": 2.0, "expand_prob": 1.0}}
    s = sample(PaintedBoxes(data, [always]), 0, 0)
    assert s["image"].shape == (3, 30, 50)  # nothing to keep whole: unchanged, as in UP
    s = sample(PaintedBoxes(data, [CROP]), 0, 0)
    assert s["image"].shape == (3, 30, 30) and len(s["target"]["boxes"]) == 0  # a square of the short side


def test_fix_output_resize_scales_boxes_apart_and_records_the_size():
    data = [(20, 40, [[4, 2, 20, 10]], [1], [])]
    s = sample(PaintedBoxes(data, [FIXED]), 0, 0)
    assert s["image"].shape == (3, 48, 40) and s["target"]["img_size"].tolist() == [48, 40]
    assert s["target"]["boxes"].tolist() == [pytest.approx([4.0, 4.8, 20.0, 24.0])]  # x by 40/40, y by 48/20
    with pytest.raises(ConfigError, match="scales"):
        build_transforms([{"type": "fix_output_resize", "kwargs": {"scales": [1024]}}])


def test_color_jitter_draws_as_up():
    image = torch.rand(3, 8, 8)
    off = build_transforms([{"type": "color_jitter", "kwargs": {"brightness": 32, "contrast": [0.5, 1.5],
                                                                "saturation": [0.5, 1.5], "hue": 18}}])
    assert torch.equal(off(image), image)  # UP's files leave prob at its default 0: no jitter
    brighter = build_transforms([{"type": "color_jitter", "kwargs": {"brightness": [2.0, 2.0], "prob": 1.0}}])
    assert torch.allclose(brighter(image), (image * 2).clamp(0, 1))
    delta = build_transforms([{"type": "color_jitter", "kwargs": {"brightness_delta": [51, 51], "prob": 1.0}}])
    assert torch.allclose(delta(image), (image + 0.2).clamp(0, 1))
    turn = build_transforms([{"type": "color_jitter", "kwargs": {"hue_delta": [360, 360], "prob": 1.0}}])
    assert torch.allclose(turn(image), image, atol=1e-5)  # a full turn of the hue
    shuffle = build_transforms([{"type": "color_jitter", "kwargs": {"channel_shuffle": True, "prob": 1.0}}])
    out = shuffle(image)
    assert sorted(out.sum((1, 2)).tolist()) == pytest.approx(sorted(image.sum((1, 2)).tolist()))
    gray = torch.rand(1, 8, 8)
    torch.manual_seed(1)
    assert build_transforms([JITTER])(gray).shape == (1, 8, 8)
    with pytest.raises(ConfigError, match="hue: a hue turn"):
        build_transforms([{"type": "color_jitter", "kwargs": {"hue": 18, "prob": 0.5}}])
    with pytest.raises(ConfigError, match="contrast"):
        build_transforms([{"type": "color_jitter", "kwargs": {"contrast": [1.5, 0.5]}}])
    with pytest.raises(ConfigError, match="expand_ratios"):
        build_transforms([{"type": "stitch_expand", "kwargs": {"expand_ratios": 3.0}}])
    with pytest.raises(ConfigError, match="crop_prob"):
        build_transforms([{"type": "crop", "kwargs": {"crop_prob": 2}}])


def test_digits_improve_pipeline_through_two_workers_as_in_the_main_process_and_on_resume():
    ds = DigitsDetection(num_images=12, canvas_size=48, transforms=IMPROVE)
    runs = [list(LoaderFactory(loader_cfg(num_workers=workers), ds, None, seed=5).train_loader(1))
            for workers in (2, 0)]
    for a, b in zip(*runs):
        assert all(torch.equal(x, y) for x, y in zip(a["image"], b["image"]))
        assert all(torch.equal(x["boxes"], y["boxes"]) for x, y in zip(a["target"], b["target"]))
        assert all(image.shape == (3, 48, 40) for image in a["image"])
    assert len(runs[0]) == 3
    resumed = list(LoaderFactory(loader_cfg(num_workers=0), ds, None, seed=5).train_loader(1, start_batch=2))
    assert all(torch.equal(x, y) for x, y in zip(resumed[0]["image"], runs[0][2]["image"]))  # resume draws the same


def test_up_improve_files_pipelines_build_after_the_dataset_translation():
    import yaml

    from up_trainer.config.up_dataset import translate_dataset

    pattern = os.path.join(UP_FIXTURES, "det", "retinanet", "*improve*.yaml")
    files = sorted(glob.glob(pattern))
    assert len(files) == 4
    for path in files:
        with open(path) as f:
            cfg = yaml.safe_load(f)
        translate_dataset(cfg, [])
        for split in ("train", "test"):
            transforms = cfg["dataset"][split]["kwargs"]["transformer"]
            assert len(build_transforms(transforms, f"{path}:{split}").transforms) == len(transforms)


assert NUM_LABELS < COORD  # the painted channel and the coordinates stay apart
