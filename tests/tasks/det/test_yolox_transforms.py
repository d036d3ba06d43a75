"""UP's YOLOX augmentations: boxes stay inside the image, never degenerate, and under the pixels
they were painted on; mosaic and mixup are deterministic by torch's seed; a digits pipeline with
all of them gives the same batches twice through 2 DataLoader workers."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from conftest import loader_cfg

from up_trainer.data.loader import LoaderFactory
from up_trainer.errors import ConfigError
from up_trainer.tasks.det.datasets import DetDataset
from up_trainer.tasks.det.digits_det import DigitsDetection
from up_trainer.tasks.det.yolox.transforms import hsv_to_rgb, rgb_to_hsv
from up_trainer.tasks.transforms import build_transforms
from conftest import UP_FIXTURES  # noqa: E402

NUM_LABELS = 60
FAST = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])  # the same examples every run


def colour_of(label):
    """Each label paints its own colour: channel 0 encodes it, channels 1 and 2 mark 'a box'."""
    return torch.tensor([label / (NUM_LABELS + 1), 1.0, 0.5])


class PaintedBoxes(DetDataset):
    """Images of the given sizes with non-overlapping boxes, each painted in its label's colour
    on a black background; ignore regions (label 0 inside the pipeline) painted grey."""

    def __init__(self, scenes, transforms):
        super().__init__(transforms, "error", [str(k) for k in range(1, NUM_LABELS + 1)])
        self.records = [{"image_id": i + 1, "height": h, "width": w, "boxes": boxes, "labels": labels,
                         "ignore": ignore, "source": f"scene {i}"} for i, (h, w, boxes, labels, ignore) in
                        enumerate(scenes)]

    def _image(self, record):
        image = torch.zeros(3, record["height"], record["width"])
        for (x1, y1, x2, y2), label in zip(record["boxes"], record["labels"]):
            image[:, y1:y2, x1:x2] = colour_of(label)[:, None, None]
        for x1, y1, x2, y2 in record["ignore"]:
            image[:, y1:y2, x1:x2] = 0.3
        return image


@st.composite
def scenes(draw, count=4):
    """Images 24..96 px with up to 5 boxes, at least 4 px, in separate cells of a 3x3 grid."""
    out, next_label = [], 1
    for _ in range(count):
        h, w = draw(st.integers(24, 96)), draw(st.integers(24, 96))
        boxes, labels, ignore = [], [], []
        for cell in draw(st.lists(st.integers(0, 8), min_size=0, max_size=5, unique=True)):
            cy, cx = divmod(cell, 3)
            ch, cw = h // 3, w // 3
            bw, bh = draw(st.integers(4, cw)), draw(st.integers(4, ch))
            x1, y1 = cx * cw + draw(st.integers(0, cw - bw)), cy * ch + draw(st.integers(0, ch - bh))
            if draw(st.booleans()) and len(ignore) < 1:
                ignore.append([x1, y1, x1 + bw, y1 + bh])
            else:
                boxes.append([x1, y1, x1 + bw, y1 + bh])
                labels.append(next_label)
                next_label = next_label % NUM_LABELS + 1
        out.append((h, w, boxes, labels, ignore))
    return out


MOSAIC = {"type": "mosaic", "kwargs": {"extra_input": True, "tar_size": 64, "fill_color": 0}}
PERSPECTIVE = {"type": "random_perspective_yolox", "kwargs": {"degrees": 10.0, "translate": 0.1, "scale": [0.5, 1.5],
                                                               "shear": 2.0, "perspective": 0.0, "fill_color": 0,
                                                               "border": [-32, -32]}}
MIXUP = {"type": "yolox_mixup_cv2", "kwargs": {"extra_input": True, "input_size": [64, 64],
                                               "mixup_scale": [0.8, 1.6], "fill_color": 0, "flip_prob": 0.5}}
HSV = {"type": "augment_hsv", "kwargs": {"hgain": 0.015, "sgain": 0.7, "vgain": 0.4, "color_mode": "BGR"}}
FLIP = {"type": "flip", "kwargs": {"flip_p": 0.5}}
RESIZE = {"type": "keep_ar_resize_max", "kwargs": {"random_size": [2, 4], "scale_step": 16,
                                                   "padding_type": "left_top", "padding_val": 0}}
TO_TENSOR = {"type": "custom_to_tensor"}
FULL = [MOSAIC, PERSPECTIVE, MIXUP, HSV, FLIP, RESIZE, TO_TENSOR]


def sample(ds, index, seed):
    torch.manual_seed(seed)
    return ds[index]


def check_boxes(s):
    """Inside the image content (img_size, before padding), positive width and height."""
    boxes = torch.cat([s["target"]["boxes"], s["target"]["ignore_boxes"]])
    h, w = s["target"]["img_size"].tolist()
    assert h <= s["image"].shape[1] and w <= s["image"].shape[2]
    assert (boxes[:, 0] >= 0).all() and (boxes[:, 1] >= 0).all(), boxes
    assert (boxes[:, 2] <= w + 1e-4).all() and (boxes[:, 3] <= h + 1e-4).all(), (boxes, h, w)
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all(), boxes
    assert len(s["target"]["labels"]) == len(s["target"]["boxes"]) == len(s["target"]["area"])
    assert ((s["target"]["labels"] >= 1) & (s["target"]["labels"] <= NUM_LABELS)).all()


def centre_colours(image, boxes, min_side=6.0):
    """(colour at the centre, box) for boxes big enough and not cut by the image edge (an
    affine map takes a box's centre to the centre of the box around its image)."""
    _, h, w = image.shape
    for box in boxes:
        x1, y1, x2, y2 = box.tolist()
        if x2 - x1 < min_side or y2 - y1 < min_side or x1 <= 0 or y1 <= 0 or x2 >= w or y2 >= h:
            continue
        yield image[:, int((y1 + y2) / 2), int((x1 + x2) / 2)], box


@pytest.mark.parametrize("pipeline", [[PERSPECTIVE], [RESIZE], [HSV], [MOSAIC], [MIXUP], [MOSAIC, PERSPECTIVE],
                                      FULL], ids=lambda p: "+".join(t["type"] for t in p))
@FAST
@given(data=scenes(), seed=st.integers(0, 2**31 - 1))
def test_boxes_stay_inside_and_never_degenerate(pipeline, data, seed):
    if pipeline == [PERSPECTIVE]:  # alone it warps the plain image, so no mosaic-sized border
        pipeline = [{**PERSPECTIVE, "kwargs": {**PERSPECTIVE["kwargs"], "border": [0, 0]}}]
    ds = PaintedBoxes(data, pipeline)
    for index in range(len(ds)):
        check_boxes(sample(ds, index, seed + index))


@FAST
@given(data=scenes(), seed=st.integers(0, 2**31 - 1))
def test_box_pixels_follow_mosaic_warp_flip_and_resize(data, seed):
    ds = PaintedBoxes(data, [MOSAIC, PERSPECTIVE, FLIP, RESIZE])
    s = sample(ds, 0, seed)
    for pixel, box in centre_colours(s["image"], s["target"]["boxes"]):
        label = int(s["target"]["labels"][(s["target"]["boxes"] == box).all(1)][0])
        assert torch.allclose(pixel, colour_of(label), atol=2e-3), (label, pixel, box)
    for pixel, _ in centre_colours(s["image"], s["target"]["ignore_boxes"]):
        assert torch.allclose(pixel, torch.full((3,), 0.3), atol=2e-3)


@FAST
@given(data=scenes(), seed=st.integers(0, 2**31 - 1))
def test_mixed_in_boxes_sit_on_the_other_images_pixels(data, seed):
    """The same seed draws the same mosaic and warp with or without the mixup that follows, so
    mixed = (before + other) / 2 reveals the other image's pixels under the boxes mixup added."""
    before = sample(PaintedBoxes(data, [MOSAIC, PERSPECTIVE]), 0, seed)
    mixed = sample(PaintedBoxes(data, [MOSAIC, PERSPECTIVE, MIXUP]), 0, seed)
    n = len(before["target"]["boxes"])
    assert torch.equal(mixed["target"]["boxes"][:n], before["target"]["boxes"])
    if len(mixed["target"]["boxes"]) == n and len(mixed["target"]["ignore_boxes"]) == \
            len(before["target"]["ignore_boxes"]):
        assert torch.equal(mixed["image"], before["image"])  # nothing survived: no mixing, as in UP
        return
    other = 2 * mixed["image"] - before["image"]
    added, labels = mixed["target"]["boxes"][n:], mixed["target"]["labels"][n:]
    for pixel, box in centre_colours(other, added):
        label = int(labels[(added == box).all(1)][0])
        assert torch.allclose(pixel, colour_of(label), atol=5e-3), (label, pixel, box)


def test_perspective_keeps_unwarped_samples_and_filters_like_up():
    data = [(40, 40, [[4, 4, 20, 20], [30, 30, 33, 33]], [1, 2], [])]
    identity = {"type": "random_perspective_yolox", "kwargs": {"degrees": 0.0, "translate": 0.0, "scale": [1.0, 1.0]}}
    s = sample(PaintedBoxes(data, [identity]), 0, 0)
    assert s["target"]["boxes"].tolist() == [[4, 4, 20, 20], [30, 30, 33, 33]]
    assert torch.equal(s["image"], PaintedBoxes(data, None)[0]["image"])
    half = {"type": "random_perspective_yolox", "kwargs": {"degrees": 0.0, "translate": 0.0, "scale": [0.5, 0.5]}}
    s = sample(PaintedBoxes(data, [half]), 0, 0)
    # about the centre (20, 20): the 3-px box becomes 1.5 px, under YOLOv5's 2-px minimum, and is dropped
    assert s["target"]["boxes"].tolist() == [[12, 12, 20, 20]] and s["target"]["labels"].tolist() == [1]
    # a skipped mosaic leaves the warp out too (UP's random_perspective only warps mosaics)
    skipped = {**MOSAIC, "kwargs": {**MOSAIC["kwargs"], "mosaic_prob": 0.0}}
    s = sample(PaintedBoxes(data, [skipped, PERSPECTIVE]), 0, 0)
    assert s["image"].shape == (3, 40, 40) and s["target"]["boxes"].tolist() == data[0][2]


def test_ups_yolov5_random_perspective_is_the_same_warp_with_one_scale_number():
    """random_perspective (UP's YOLOv5 affine, its YOLOX one's parent in UP): scale s draws from
    U(1 - s, 1 + s); with s = 0 and no other motion the sample is unchanged."""
    data = [(40, 40, [[4, 4, 20, 20], [30, 30, 33, 33]], [1, 2], [])]
    still = {"type": "random_perspective", "kwargs": {"degrees": 0.0, "translate": 0.0, "scale": 0.0}}
    s = sample(PaintedBoxes(data, [still]), 0, 0)
    assert s["target"]["boxes"].tolist() == data[0][2]
    assert torch.equal(s["image"], PaintedBoxes(data, None)[0]["image"])
    warp = build_transforms([{"type": "random_perspective", "kwargs": {"scale": 0.25}}]).transforms[0]
    torch.manual_seed(0)
    scales = [warp.matrix(40, 40, 40, 40)[1] for _ in range(200)]
    assert 0.75 <= min(scales) < 0.8 and 1.2 < max(scales) <= 1.25


def test_mosaic_and_mixup_are_deterministic_by_torch_seed():
    ds = DigitsDetection(num_images=8, canvas_size=48, transforms=[MOSAIC, PERSPECTIVE, MIXUP])
    a, b, c = sample(ds, 3, 11), sample(ds, 3, 11), sample(ds, 3, 12)
    assert torch.equal(a["image"], b["image"]) and torch.equal(a["target"]["boxes"], b["target"]["boxes"])
    assert not torch.equal(a["image"], c["image"])
    assert a["image"].shape == (3, 64, 64)


def test_hsv_round_trip_and_gains():
    image = torch.rand(3, 16, 16)
    assert torch.allclose(hsv_to_rgb(*rgb_to_hsv(image)), image, atol=1e-5)
    still = build_transforms([{"type": "augment_hsv", "kwargs": {"hgain": 0, "sgain": 0, "vgain": 0}}])
    assert torch.allclose(still(image), image, atol=1e-5)
    darker = build_transforms([{"type": "augment_hsv", "kwargs": {"hgain": 0, "sgain": 0, "vgain": 0.5}}])
    torch.manual_seed(0)
    out = darker(image)
    ratio = out.max(0).values / image.max(0).values  # value = max channel, scaled by one gain
    assert torch.allclose(ratio, ratio.flatten()[0].expand_as(ratio), atol=1e-4) and 0.5 <= ratio[0, 0] <= 1.5


def test_resize_forms():
    up_form = build_transforms([{"type": "keep_ar_resize_max", "kwargs": {"max_size": 64, "padding_type": "left_top",
                                                                          "padding_val": 255}}])
    image = torch.rand(3, 20, 40)
    out = up_form(image)
    assert out.shape == (3, 64, 64) and (out[:, 32:] == 1.0).all()  # long side to 64, padded to a square
    native = build_transforms([{"type": "keep_ar_resize_max", "kwargs": {"scales": [30], "max_size": 100}}])
    assert native(image).shape == (3, 30, 60)
    with pytest.raises(ConfigError, match="random_size"):
        build_transforms([{"type": "keep_ar_resize_max", "kwargs": {"random_size": [5, 2]}}])
    with pytest.raises(ConfigError, match="padding_type"):
        build_transforms([{"type": "keep_ar_resize_max", "kwargs": {"padding_type": "center"}}])
    with pytest.raises(ConfigError, match="padding_type: .*not with scales"):
        build_transforms([{"type": "keep_ar_resize_max", "kwargs": {"scales": [32], "padding_type": "left_top"}}])
    with pytest.raises(ConfigError, match="extra_input"):
        build_transforms([{"type": "mosaic", "kwargs": {"extra_input": False}}])
    scaled = build_transforms([{"type": "custom_to_tensor", "kwargs": {"norm_image": True}}])
    assert torch.allclose(scaled(image), image / 255)


def test_digits_yolox_pipeline_through_two_workers_twice():
    """One random size per batch, the same batches from 2 workers as from the main process,
    twice (resume draws what an uninterrupted run draws)."""
    transforms = [{**MOSAIC, "kwargs": {**MOSAIC["kwargs"], "tar_size": 48}},
                  {**PERSPECTIVE, "kwargs": {**PERSPECTIVE["kwargs"], "border": [-24, -24]}},
                  {**MIXUP, "kwargs": {**MIXUP["kwargs"], "input_size": [48, 48]}}, HSV, FLIP, RESIZE, TO_TENSOR]
    ds = DigitsDetection(num_images=16, canvas_size=48, transforms=transforms)
    runs = [list(LoaderFactory(loader_cfg(num_workers=workers), ds, None, seed=5).train_loader(1))
            for workers in (2, 2, 0)]
    sizes = set()
    for batches in zip(*runs):
        for batch in batches:
            assert len({tuple(image.shape) for image in batch["image"]}) == 1  # one size per batch
            assert all(torch.equal(x, y) for x, y in zip(batch["image"], batches[0]["image"]))
            assert all(torch.equal(x["boxes"], y["boxes"]) for x, y in zip(batch["target"], batches[0]["target"]))
        sizes.add(batches[0]["image"][0].shape[-1])
    assert len(runs[0]) == 4 and sizes <= {32, 48, 64}
    resumed = list(LoaderFactory(loader_cfg(num_workers=0), ds, None, seed=5).train_loader(1, start_batch=2))
    assert all(torch.equal(x, y) for x, y in zip(resumed[0]["image"], runs[0][2]["image"]))


def test_up_yolox_files_pipelines_build_after_the_dataset_translation():
    """Every transformer list in UP's YOLOX files (training, test, the no-aug hook's) builds
    with its kwargs as written, once UP's dataset section is translated."""
    import glob
    import os

    import yaml

    from up_trainer.config.up_dataset import translate_dataset

    files = sorted(glob.glob(os.path.join(UP_FIXTURES, "det", "yolox", "*.yaml")))
    assert len(files) == 8
    for path in files:
        with open(path) as f:
            cfg = yaml.safe_load(f)
        translate_dataset(cfg, [])
        lists = [cfg["dataset"][split]["kwargs"]["transformer"] for split in ("train", "test")]
        lists += [hook["kwargs"]["transformer"] for hook in cfg.get("hooks", []) if hook["type"] == "yolox_noaug"]
        for k, transforms in enumerate(lists):
            names = [type(op).__name__ for op in build_transforms(transforms, f"{path}[{k}]").transforms]
            assert len(names) == len(transforms)


def test_hsv_reads_the_channel_order_it_is_told():
    """A hue-only gain on a BGR image equals the same gain on the RGB image, channels swapped."""
    image = torch.rand(3, 8, 8)
    hue = [{"type": "augment_hsv", "kwargs": {"hgain": 0.5, "sgain": 0, "vgain": 0, "color_mode": mode}}
           for mode in ("RGB", "BGR")]
    torch.manual_seed(3)
    rgb = build_transforms(hue[:1])(image)
    torch.manual_seed(3)
    bgr = build_transforms(hue[1:])(image.flip(0))
    assert torch.allclose(bgr.flip(0), rgb, atol=1e-5) and not torch.allclose(rgb, image, atol=1e-3)
