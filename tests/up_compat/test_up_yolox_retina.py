"""UP's YOLOX backbones and neck under the ATSS RetinaNet's ``retina_post_iou``
(configs/det/retinanet/yolox_*_ret_a*_comloc*.yaml): the nets are YOLOX's parts (same sizes,
same UP weight names) with ``num_point`` anchors per point, the IoU branch on the objectness
conv, and the model sees 0-255 pixels; what does not fit is one line naming the kwarg."""
import copy
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.atss import RetinaPlusModel
from up_trainer.tasks.det.yolox import CSPDarknet, YoloxPAFPN
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402

UP_RET = os.path.join(UP_FIXTURES, "det", "retinanet")


def up_net(name, num_classes=None):
    with open(os.path.join(UP_RET, name)) as f:
        net = yaml.safe_load(f)["net"]
    if num_classes is not None:
        for entry in net[2:]:
            entry["kwargs"]["num_classes"] = num_classes
    return net


def n_params(module):
    return sum(p.numel() for p in module.parameters())


# YOLOX-s with UP's 81 classes (YOLOX's own head: 8,968,255 parameters, tests/up_compat/test_up_nets_yolox.py).
YOLOX_S = 8_968_255


@pytest.mark.parametrize("name, points", [("yolox_s_ret_a1_comloc.yaml", 1), ("yolox_s_ret_a2_comloc.yaml", 2)])
def test_yolox_s_parts_with_points_per_grid_cell(name, points):
    with torch.device("meta"):
        model = build_model(up_net(name))
    assert isinstance(model, RetinaPlusModel) and model.kind == "retina_plus"
    assert isinstance(model.backbone, CSPDarknet) and isinstance(model.neck, YoloxPAFPN)
    assert model.roi_head.num_point == points and model.num_classes == 80 and model.strides == [8, 16, 32]
    # Hand count: one point is YOLOX-s exactly; each extra point adds, per level, the 1x1 prediction
    # convs' 80 class + 4 box + 1 IoU outputs over the head's 128 (= 256 x width 0.5) channels + bias.
    assert n_params(model) == YOLOX_S + (points - 1) * 3 * (80 + 4 + 1) * (128 + 1)
    assert model.class_first and model.criterion.iou_branch and model.criterion.assigner.top_k == 9 * points


def test_model_sees_0_255_pixels_like_ups_yolox():
    model = build_model(up_net("yolox_n_ret_a1_comloc.yaml", num_classes=3)).eval()
    image = torch.rand(3, 64, 64)
    x, sizes = model.batch_images([image])
    assert sizes == [(64, 64)] and torch.allclose(x[0], image * 255, rtol=1e-6, atol=1e-4)


def test_trains_and_predicts_with_two_anchors_per_point():
    torch.manual_seed(0)
    model = build_model(up_net("yolox_n_ret_a2_comloc.yaml", num_classes=3))
    batch = {"image": [torch.rand(3, 64, 64), torch.rand(3, 64, 64)],
             "target": [{"boxes": torch.tensor([[4.0, 6.0, 30.0, 40.0]]), "labels": torch.tensor([1])},
                        {"boxes": torch.tensor([[20.0, 20.0, 60.0, 50.0], [2.0, 2.0, 12.0, 14.0]]),
                         "labels": torch.tensor([2, 1])}]}
    losses = model.train()(batch)
    assert set(losses) == {"loss_cls", "loss_loc", "loss_iou"}
    sum(losses.values()).backward()
    assert all(torch.isfinite(v) for v in losses.values())
    assert model.roi_head.obj_preds[0].weight.grad.abs().sum() > 0  # the IoU branch learns
    with torch.no_grad():
        out = model.eval()({"image": batch["image"]})
    assert len(out["detections"]) == 2
    labels = torch.cat([det["labels"] for det in out["detections"]])
    assert labels.numel() and labels.min() >= 1 and labels.max() <= 2  # 3 with background: labels 1..2


def test_up_named_weights_load():
    """UP's names (``bn1``, ``conv_block``) and entry names map onto the model's, as for UP's YOLOX."""
    model = build_model(up_net("yolox_n_ret_a2_comloc.yaml", num_classes=3))
    state = model.state_dict()
    up_state = {}
    for key, value in state.items():
        key = key.replace(".bn.", ".bn1.").replace("stem.conv.", "stem.conv_block.")
        up_state[key] = value.clone()
    translated = model.translate_up_weights(up_state)
    assert set(translated) == set(state)


@pytest.mark.parametrize("edit, where, message", [
    (lambda n: n[2]["kwargs"].update(num_point=3), "net[2].kwargs.num_point",
     "3 but anchor_ratios x anchor_scales give 2"),
    (lambda n: n[3].update(type="retina_post"), "net[3].type", "retina_post with a head with an IoU branch"),
    (lambda n: n[2]["kwargs"].update(num_point=0), "net[2].kwargs.num_point", "must be >= 1"),
    (lambda n: n[3]["kwargs"]["cfg"]["roi_supervisor"]["kwargs"].update(use_iou=False),
     "net[3].kwargs.cfg.roi_supervisor.kwargs.use_iou", ""),
    (lambda n: n[2]["kwargs"].update(share_head=True), "net[2].kwargs.share_head", ""),
])
def test_what_does_not_fit_is_one_line_naming_the_kwarg(edit, where, message):
    net = copy.deepcopy(up_net("yolox_t_ret_a2_comloc.yaml", num_classes=3))
    edit(net)
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert str(err.value).startswith(where) and message in str(err.value) and "\n" not in str(err.value)
