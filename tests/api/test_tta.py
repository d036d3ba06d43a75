"""Test-time augmentation: views, how they are undone, how they are merged."""
import pytest
import torch
from torch import nn

from up_trainer.errors import ConfigError
from up_trainer.tta import TTAModel, parse_scales, with_tta


class BrightestPixel(nn.Module):
    """A fake detector: one 4x4 box, label 1, around the brightest pixel of each image; its score
    is the pixel value; an image wider than 20 px adds a second, weaker box at its left edge."""

    kind = "yolox"

    def forward(self, batch):
        out = []
        for im in batch["image"]:
            flat = im[0].flatten().argmax()
            y, x = divmod(int(flat), im.shape[-1])
            boxes = [[x - 2.0, y - 2.0, x + 2.0, y + 2.0]]
            if im.shape[-1] > 20:
                boxes.append([0.0, 0.0, 4.0, 4.0])
            out.append({"boxes": torch.tensor(boxes), "scores": torch.tensor([1.0, 0.1][: len(boxes)]),
                        "labels": torch.ones(len(boxes), dtype=torch.int64)})
        return {"detections": out}


def test_flipped_view_boxes_are_mapped_back_and_merged():
    image = torch.zeros(3, 16, 24)
    image[:, 5, 3] = 1.0  # left part of the image: the flipped view sees it on the right
    model = with_tta(BrightestPixel(), scales=[1.0], flip=True)
    assert model.task == "det" and len(model.views) == 2
    det = model({"image": [image]})["detections"][0]
    # the plain and the flipped view's box coincide once the flip is undone: NMS keeps one
    assert torch.allclose(det["boxes"][0], torch.tensor([1.0, 3.0, 5.0, 7.0])), det
    # the flipped view's left-edge box lands on the right edge (24 - 4 .. 24): a second box
    assert any(torch.allclose(b, torch.tensor([20.0, 0.0, 24.0, 4.0])) for b in det["boxes"])


def test_scaled_view_boxes_are_divided_by_the_scale():
    image = torch.zeros(3, 16, 16)
    image[:, 8, 8] = 1.0
    det = TTAModel(BrightestPixel(), "det", scales=[2.0], flip=False)({"image": [image]})["detections"][0]
    assert torch.allclose(det["boxes"][1], torch.tensor([0.0, 0.0, 2.0, 2.0]))  # the 32-px view's edge box, halved
    centre = (det["boxes"][0, :2] + det["boxes"][0, 2:]) / 2
    assert torch.allclose(centre, torch.tensor([8.0, 8.0]), atol=0.6)  # bilinear upsampling moves the peak < 1 px


def test_classification_averages_the_views_probabilities():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

    class Classifier(nn.Module):
        def forward(self, batch):
            return {"logits": net(batch["image"])}

    x = torch.rand(2, 1, 4, 4)
    out = with_tta(Classifier(), scales=[1.0], flip=True)({"image": x})
    want = (net(x).softmax(1) + net(x.flip(-1)).softmax(1)) / 2
    assert torch.allclose(out["scores"], want, atol=1e-6) and torch.allclose(out["logits"].exp(), want, atol=1e-6)


@pytest.mark.parametrize("text", ["", "a,b", "0.1", "1,9"])
def test_bad_scales_are_a_config_error(text):
    with pytest.raises(ConfigError, match="--tta-scales"):
        parse_scales(text)
