"""UP's YOLOX transforms on the uint8 images readers decode to give what they give on float
[0, 1] images: the same boxes and labels (no random draw depends on the dtype), the same
sizes, and pixels within one level (within half a level where only one rounding happens), for
fixed seeds, on images with and without boxes. Each keeps its input's dtype."""
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from up_trainer.data.model_input import ModelInput, split_model_input
from up_trainer.tasks.det.pipeline import to_pipeline
from up_trainer.tasks.det.yolox.transforms import hsv_gains_uint8, hsv_to_rgb, rgb_to_hsv
from up_trainer.tasks.transforms import build_transforms

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
SLACK = 1e-3  # float32 coordinates and weights, on top of the rounding


@st.composite
def pictures(draw, low=16, high=48):
    """A uint8 3xHxW picture: gradients plus noise (photo-like), or noise of every colour."""
    h, w = draw(st.integers(low, high)), draw(st.integers(low, high))
    g = torch.Generator().manual_seed(draw(st.integers(0, 10_000)))
    if draw(st.booleans()):
        return torch.randint(0, 256, (3, h, w), generator=g, dtype=torch.uint8)
    y, x = torch.meshgrid(torch.linspace(0, 1, h), torch.linspace(0, 1, w), indexing="ij")
    base = torch.stack([x, y, (x + y) / 2]) * 200 + 20 + torch.randn(3, h, w, generator=g) * 12
    return base.round().clamp(0, 255).to(torch.uint8)


@st.composite
def samples(draw, low=16, high=48):
    """(uint8 picture, target with 0-4 boxes inside it)."""
    image = draw(pictures(low, high))
    _, h, w = image.shape
    boxes = []
    for _ in range(draw(st.integers(0, 4))):
        x1, y1 = draw(st.integers(0, w - 6)), draw(st.integers(0, h - 6))
        boxes.append([x1, y1, draw(st.integers(x1 + 4, w)), draw(st.integers(y1 + 4, h))])
    b = torch.tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    size = torch.tensor([h, w])
    return image, {"boxes": b, "labels": torch.randint(1, 5, (len(b),)), "ignore_boxes": torch.zeros(0, 4),
                   "area": (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1]), "image_id": 0, "orig_size": size,
                   "img_size": size.clone()}


class Pool:
    """What mosaic and mixup draw other samples from (a detection dataset's ``load_for_mix``),
    its images in one dtype: uint8 as decoded, or float [0, 1] as datasets used to hold them."""

    def __init__(self, items, dtype):
        self.items, self.dtype, self.records = items, dtype, list(range(len(items)))

    def load_for_mix(self, index):
        image, target = self.items[index]
        image = image.clone() if self.dtype == torch.uint8 else image.float() / 255
        return to_pipeline(image, {k: v.clone() if torch.is_tensor(v) else v for k, v in target.items()})


def run_both(entries, items, seed):
    """The pipeline ``entries`` on sample 0 of ``items``, uint8 and float, from the same seed:
    ((image, target) uint8, (image, target) float)."""
    results = []
    for dtype in (torch.uint8, torch.float32):
        pipeline = build_transforms(entries)
        pool = Pool(items, dtype)
        for op in pipeline.transforms:
            if hasattr(op, "bind"):
                op.bind(pool)
        torch.manual_seed(seed)
        image, target = pipeline(*pool.load_for_mix(0))
        results.append((image.as_subclass(torch.Tensor), target))
    return results


def assert_matches(u8, f32, levels):
    (image8, target8), (imagef, targetf) = u8, f32
    assert image8.dtype == torch.uint8 and imagef.dtype == torch.float32
    assert image8.shape == imagef.shape
    diff = (image8.float() - imagef * 255).abs()
    assert float(diff.max()) <= levels + SLACK, float(diff.max())
    assert float(diff.mean()) <= 0.5, float(diff.mean())  # rounding, not a drift
    assert torch.equal(target8["labels"], targetf["labels"])
    assert torch.allclose(target8["boxes"], targetf["boxes"], atol=1e-4)
    assert target8["boxes"].canvas_size == targetf["boxes"].canvas_size


MOSAIC = {"type": "mosaic", "kwargs": {"tar_size": [40, 36], "fill_color": 114}}  # resizes most pictures
PERSPECTIVE = {"type": "random_perspective_yolox", "kwargs": {"degrees": 20.0, "translate": 0.2, "scale": [0.3, 1.8],
                                                               "shear": 5.0, "fill_color": [114, 0, 255],
                                                               "border": [-4, -6]}}
MIXUP = {"type": "yolox_mixup_cv2", "kwargs": {"input_size": [40, 44], "mixup_scale": [0.5, 1.6], "flip_prob": 0.5,
                                               "fill_color": 114}}
HSV_BGR = {"type": "augment_hsv", "kwargs": {"hgain": 0.9, "sgain": 0.9, "vgain": 0.9, "color_mode": "BGR"}}
HSV_RGB = {"type": "augment_hsv", "kwargs": {"hgain": 0.015, "sgain": 0.7, "vgain": 0.4}}
RESIZE = {"type": "keep_ar_resize_max", "kwargs": {"random_size": [1, 4], "scale_step": 16,
                                                   "padding_type": "left_top", "padding_val": 114}}
# torch's uint8 resize rounds twice (after each axis): within a level of the float resize
CASES = {  # name: (pipeline, levels)
    "mosaic": ([MOSAIC], 1),
    "perspective": ([PERSPECTIVE], 0.5),
    "mixup": ([MIXUP], 0.5),  # computed in float (the resizes, the average) and rounded once
    "hsv_bgr": ([HSV_BGR], 0.5),
    "hsv_rgb": ([HSV_RGB], 0.5),
    "flip+resize+pad": ([{"type": "flip", "kwargs": {"flip_p": 0.5}}, RESIZE], 1),
}


@pytest.mark.parametrize("name", sorted(CASES))
@SETTINGS
@given(items=st.lists(samples(), min_size=2, max_size=4), seed=st.integers(0, 2**31 - 1))
def test_each_yolox_transform_on_uint8_matches_float(name, items, seed):
    pipeline, levels = CASES[name]
    assert_matches(*run_both(pipeline, items, seed), levels)


@SETTINGS
@given(items=st.lists(samples(32, 32), min_size=2, max_size=3), seed=st.integers(0, 2**31 - 1),
       flip=st.booleans())
def test_mixup_of_an_image_that_fits_its_letterbox_rounds_once(items, seed, flip):
    """A drawn image of exactly ``input_size`` (COCO's 640-pixel images into 640) is copied into
    the letterbox as it is; the jitter resize, the window and the average round once."""
    mixup = {**MIXUP, "kwargs": {**MIXUP["kwargs"], "input_size": [32, 32], "flip_prob": 0.0 if flip else 1.0}}
    assert_matches(*run_both([mixup], items, seed), 0.5)


def test_uint8_mixup_window_is_the_same_on_any_number_of_threads():
    """DataLoader workers run one thread, the main process several: a sample must not depend on it."""
    from up_trainer.tasks.det.mix_transforms import mix_resized_window

    g = torch.Generator().manual_seed(0)
    pixels = torch.randint(0, 256, (3, 320, 320), generator=g, dtype=torch.uint8)
    letterbox = torch.randint(0, 256, (320, 320, 3), generator=g, dtype=torch.uint8).permute(2, 0, 1)
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2):
            torch.set_num_threads(n)
            results.append(mix_resized_window(pixels, letterbox, (500, 470), (37, 61), True))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(*results)


@pytest.mark.parametrize("fill", [0, [114, 0, 255]])
def test_uint8_mixup_window_of_the_letterbox_rows_alone_is_the_same(fill):
    """Given only the letterbox's picture rows (its rows below are the fill), the window is the
    one of the whole letterbox, bit for bit; with a black fill, rows reading only fill are skipped."""
    from up_trainer.tasks.det.mix_transforms import mix_resized_window
    from up_trainer.tasks.det.transform_ops import fill_of

    g = torch.Generator().manual_seed(1)
    pixels = torch.randint(0, 256, (3, 96, 96), generator=g, dtype=torch.uint8)
    fill8 = fill_of(fill, 3, dtype=torch.uint8)
    letterbox = fill8.view(1, 1, 3).expand(120, 120, 3).clone()
    letterbox[:90] = torch.randint(0, 256, (90, 120, 3), generator=g, dtype=torch.uint8)
    letterbox = letterbox.permute(2, 0, 1)
    for scaled, offsets, flip in (((150, 140), (30, 20), False), ((120, 120), (24, 0), True), ((100, 100), (4, 4), False)):
        whole = mix_resized_window(pixels, letterbox, scaled, offsets, flip).clone()
        assert torch.equal(whole, mix_resized_window(pixels, letterbox[:, :90], scaled, offsets, flip, 120, fill8))


@pytest.mark.parametrize("fill", [0, [114, 0, 255]])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_warp_that_knows_the_mosaic_fill_gives_the_same_pixels(fill, dtype, monkeypatch):
    """Bands and tiles that read only a mosaic canvas's fill are not sampled: the same bits as
    sampling them, for warps that shrink (tiles) and enlarge (bands) the canvas (small bands and
    tiles here, so that many of them read only fill)."""
    from torchvision import tv_tensors

    from up_trainer.tasks.det import transform_ops
    from up_trainer.tasks.det.transform_ops import MosaicCanvas, fill_of
    from up_trainer.tasks.det.yolox import warp as warp_module
    from up_trainer.tasks.det.yolox.transforms import RandomPerspectiveYolox, warp_image

    monkeypatch.setattr(transform_ops, "BAND_PIXELS", 1000)
    monkeypatch.setattr(warp_module, "TILE_OUTPUT_PIXELS", 1000)
    monkeypatch.setattr(warp_module, "TILE_SOURCE_PIXELS", 4000)

    g = torch.Generator().manual_seed(2)
    fill_t = fill_of(fill, 3, dtype=dtype)
    canvas = fill_t.view(1, 1, 3).expand(256, 256, 3).clone()
    pictures = ((70, 60, 128, 128), (128, 80, 190, 128), (80, 128, 128, 180), (128, 128, 170, 200))
    for x1, y1, x2, y2 in pictures:
        part = torch.randint(0, 256, (y2 - y1, x2 - x1, 3), generator=g, dtype=torch.uint8)
        canvas[y1:y2, x1:x2] = part if dtype == torch.uint8 else part / 255.0
    canvas = tv_tensors.Image(canvas.permute(2, 0, 1))
    known = MosaicCanvas(canvas, canvas._version, pictures, fill_t)
    assert known.describes(canvas)
    warp = RandomPerspectiveYolox(degrees=30.0, translate=0.2, scale=[0.2, 2.0], shear=2.0, border=[-64, -64])
    torch.manual_seed(4)
    for _ in range(16):
        matrix, _ = warp.matrix(256, 256, 128, 128)
        plain = warp_image(canvas.as_subclass(torch.Tensor), matrix, 128, 128, fill_t).clone()
        assert torch.equal(plain, warp_image(canvas.as_subclass(torch.Tensor), matrix, 128, 128, fill_t, known))
    canvas.add_(0)  # changed in place: what mosaic knew no longer holds
    assert not known.describes(canvas)


def _exact_warp(image, matrix, out_h, out_w, fill):
    """The warp in float64 (bilinear, zeros beyond the image shifted onto the fill), 0-255."""
    import torch.nn.functional as F

    _, h, w = image.shape
    ys, xs = torch.meshgrid(torch.arange(out_h, dtype=torch.float64) + 0.5,
                            torch.arange(out_w, dtype=torch.float64) + 0.5, indexing="ij")
    points = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ torch.linalg.inv(matrix).T
    grid = torch.stack([points[..., 0] / points[..., 2] * 2 / w - 1, points[..., 1] / points[..., 2] * 2 / h - 1], -1)
    shift = fill.double()
    return F.grid_sample((image.double() - shift)[None], grid[None], mode="bilinear", padding_mode="zeros",
                         align_corners=False)[0] + shift


@pytest.mark.parametrize("fill", [0, [114, 0, 255]])
def test_uint8_warp_of_a_large_image_is_the_exact_warp_rounded(fill):
    """A warp that shrinks a large image samples it tile by tile (each tile's part converted
    to float on its own): the exact bilinear warp rounded, whatever the tiles; a channels-last
    image (as mosaic builds them) gives the same."""
    from up_trainer.tasks.det.transform_ops import fill_of
    from up_trainer.tasks.det.yolox.transforms import RandomPerspectiveYolox, warp_image

    g = torch.Generator().manual_seed(0)
    image = torch.randint(0, 256, (3, 300, 360), generator=g, dtype=torch.uint8)
    image[:, 100:140] = 0  # sharp edges
    warp = RandomPerspectiveYolox(degrees=10.0, translate=0.1, scale=[0.2, 1.2], shear=2.0, border=[-60, -60])
    torch.manual_seed(3)
    fill8 = fill_of(fill, 3, dtype=torch.uint8)
    for _ in range(6):
        matrix, _ = warp.matrix(300, 360, 180, 240)
        out = warp_image(image, matrix, 180, 240, fill8)
        assert torch.equal(out, warp_image(image.permute(1, 2, 0).contiguous().permute(2, 0, 1), matrix, 180, 240,
                                           fill8))
        diff = (out.double() - _exact_warp(image, matrix, 180, 240, fill8)).abs()
        # grid_sample's float32 arithmetic on noise with 255-level steps: measured <= 0.503 (the
        # float path itself is up to 0.017 from the exact warp here)
        assert float(diff.max()) <= 0.505, float(diff.max())
        assert float(diff.mean()) <= 0.26, float(diff.mean())


def test_uint8_warp_does_not_depend_on_what_its_reused_buffer_held():
    """A turned image's box covers the output while tiles at its corners see none of the image:
    those get the fill, not the old pixels of the reused output buffer."""
    from up_trainer.data import buffer_pool
    from up_trainer.tasks.det.transform_ops import fill_of
    from up_trainer.tasks.det.yolox.transforms import RandomPerspectiveYolox, warp_image

    image = torch.randint(0, 256, (3, 240, 240), generator=torch.Generator().manual_seed(0), dtype=torch.uint8)
    warp = RandomPerspectiveYolox(degrees=45.0, translate=0.0, scale=[0.4, 0.8], border=[-60, -60])
    fill = fill_of(0, 3, dtype=torch.uint8)
    torch.manual_seed(0)
    for _ in range(20):
        matrix, _ = warp.matrix(240, 240, 120, 120)
        outs = []
        for level in (0, 255):
            buffer_pool.empty((3, 120, 120), torch.uint8).fill_(level)  # a pooled buffer with old pixels
            outs.append(warp_image(image, matrix, 120, 120, fill).clone())
        assert torch.equal(*outs)


@SETTINGS
@given(items=st.lists(samples(), min_size=2, max_size=3), seed=st.integers(0, 2**31 - 1))
def test_whole_yolox_pipeline_draws_the_same_boxes_on_uint8(items, seed):
    """UP's yolox training order: boxes and labels identical, pixels close on average (each
    step rounds once more)."""
    pipeline = [MOSAIC, {**PERSPECTIVE, "kwargs": {**PERSPECTIVE["kwargs"], "border": [-20, -18]}}, MIXUP, HSV_BGR,
                {"type": "flip", "kwargs": {"flip_p": 0.5}}, RESIZE]
    (image8, target8), (imagef, targetf) = run_both(pipeline, items, seed)
    assert image8.dtype == torch.uint8 and image8.shape == imagef.shape
    assert torch.equal(target8["labels"], targetf["labels"])
    assert torch.allclose(target8["boxes"], targetf["boxes"], atol=1e-4)
    assert float((image8.float() - imagef * 255).abs().mean()) <= 1.0


@SETTINGS
@given(image=pictures(4, 24), gains=st.tuples(*[st.floats(0.0, 2.0)] * 3), bgr=st.booleans())
def test_uint8_hsv_is_the_float_hsv_rounded(image, gains, bgr):
    """The uint8 arithmetic against the float path's own functions, any gains (hue wrapping
    around included), greys and ties between channels included."""
    image[:, :2] = image[:1, :2]  # greys
    image[1, 2:4] = image[0, 2:4]  # red = green
    gains = torch.tensor(gains, dtype=torch.float32)
    x = image.float() / 255
    x = x.flip(0) if bgr else x
    hue, saturation, value = rgb_to_hsv(x)
    ref = hsv_to_rgb(hue.mul_(gains[0]).remainder_(1.0), saturation.mul_(gains[1]).clamp_(0.0, 1.0),
                     value.mul_(gains[2]).clamp_(0.0, 1.0))
    ref = (ref.flip(0) if bgr else ref) * 255
    assert float((hsv_gains_uint8(image, gains, bgr).float() - ref).abs().max()) <= 0.5 + SLACK


def test_custom_to_tensor_is_the_final_conversion():
    """Folded into the model input at the end of a pipeline; called on an image it converts the
    same way: without norm_image the model receives [0, 1] (YOLOX scales by 255 itself)."""
    image = torch.randint(0, 256, (3, 5, 6), dtype=torch.uint8)
    for norm_image, divisor in ((False, 255.0), (True, 255.0 * 255.0)):
        steps = build_transforms([{"type": "flip"}, {"type": "custom_to_tensor", "kwargs": {"norm_image": norm_image}}])
        rest, model_input = split_model_input(steps)
        assert len(rest.transforms) == 1 and model_input == ModelInput(1 / divisor)
        to_tensor = steps.transforms[-1]
        assert torch.equal(to_tensor(image), image.float() / divisor)
        assert torch.allclose(to_tensor(image.float() / 255), image.float() / divisor)


def test_uint8_canvases_take_the_nearest_level_of_the_fill():
    """fill_color / padding_val are UP's 0-255 values: uint8 images get the nearest level,
    float images the value / 255."""
    blank = [{"type": "random_perspective_yolox", "kwargs": {"degrees": 0.0, "translate": 0.0, "scale": [0.5, 0.5],
                                                             "fill_color": 114.4}}]
    for dtype, expected in ((torch.uint8, 114), (torch.float32, 114.4 / 255)):
        image = torch.zeros(3, 16, 16, dtype=dtype)
        target = {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.int64),
                  "ignore_boxes": torch.zeros(0, 4), "area": torch.zeros(0)}
        out, _ = build_transforms(blank)(*to_pipeline(image, target))
        assert out.dtype == dtype and float(out[0, 0, 0]) == pytest.approx(expected)
