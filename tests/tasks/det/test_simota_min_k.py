"""SimOTA's ``min_k`` floor: with random predictions (every IoU small) YOLOX's k is 1, one
positive point per box; ``min_k`` gives each box at least that many (its cheapest
candidates), never more than it has; the default keeps YOLOX's assignment."""
import pytest
import torch

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.simota import SimOTAAssigner
from up_trainer.tasks.det.yolox import build_yolox


def _random_predictions():
    """A 64x64 image, stride-8 points, predictions of one stride-sized box each (IoU ~0.1)."""
    ys, xs = torch.meshgrid(torch.arange(8.0), torch.arange(8.0), indexing="ij")
    centers = torch.stack((xs, ys), -1).reshape(-1, 2) * 8 + 4
    strides = torch.full((64,), 8.0)
    boxes = torch.cat((centers, torch.full((64, 2), 8.0)), 1)  # cx, cy, w, h: exp(0) * stride
    cls, obj = torch.zeros(64, 2), torch.zeros(64, 1)
    gt = torch.tensor([[4.0, 4.0, 36.0, 36.0], [40.0, 40.0, 60.0, 60.0]])
    return centers, strides, cls, boxes, obj, gt, torch.tensor([1, 2])


@pytest.mark.parametrize("min_k, expected", [(1, [1, 1]), (3, [3, 3]), (100, None)])
def test_min_k_floors_the_positives_per_box(min_k, expected):
    a = SimOTAAssigner(min_k=min_k).assign(*_random_predictions())
    counts = torch.bincount(a.matched_gt, minlength=2).tolist()
    if min_k == 100:  # capped by the candidates; a point wanted by both boxes keeps one
        assert sum(counts) == int(a.fg_mask.sum()) and all(c >= 3 for c in counts)
    else:
        assert counts == expected


def test_yolox_kwargs_reach_the_assigner_and_batchnorms():
    model = build_yolox(num_classes=2, size="nano", width=0.125, min_k=3, bn_momentum=0.1)
    assert model.criterion.assigner.min_k == 3
    assert {m.momentum for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)} == {0.1}
    default = build_yolox(num_classes=2, size="nano", width=0.125)
    assert default.criterion.assigner.min_k == 1
    assert {m.momentum for m in default.modules() if isinstance(m, torch.nn.BatchNorm2d)} == {0.03}
    for kwargs in ({"min_k": 0}, {"bn_momentum": 0.0}):
        with pytest.raises(ConfigError, match=next(iter(kwargs))):
            build_yolox(num_classes=2, size="nano", width=0.125, **kwargs)
