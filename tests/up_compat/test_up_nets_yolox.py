"""UP's YOLOX net lists mapped onto the YOLOX model package: UP's files build with UP's
settings (sizes, per-part depthwise, BatchNorm defaults, SimOTA and predictor options), the
FPGA variant and every kwarg we do not honour are refused in one line naming it, and the
mapped net trains and predicts."""
import copy
import os

import pytest
import torch
import yaml
from torch import nn

from up_trainer.errors import ConfigError
from up_trainer.tasks.det.yolox.layers import DWConv
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from conftest import UP_FIXTURES  # noqa: E402

UP_YOLOX = os.path.join(UP_FIXTURES, "det", "yolox")


def up_net(name):
    with open(os.path.join(UP_YOLOX, name)) as f:
        return yaml.safe_load(f)["net"]


def n_params(model):
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name, params", [
    # 80 classes; YOLOX-s/m/l/x: the published counts (8.97M, 25.3M, 54.2M, 99.1M). UP's nano file
    # makes only the backbone depthwise (published nano, depthwise throughout: 0.91M).
    ("yolox_nano.yaml", 1_660_287), ("yolox_tiny.yaml", 5_055_855), ("yolox_small.yaml", 8_968_255),
    ("yolox_medium.yaml", 25_326_495), ("yolox_large.yaml", 54_208_895), ("yolox_x.yaml", 99_071_455),
    ("yolox_small_res18.yaml", 15_932_095),
])
def test_up_files_build_with_ups_sizes(name, params):
    with torch.device("meta"):
        model = build_model(up_net(name))
    assert n_params(model) == params
    assert [n for n, _ in model.named_children()][:3] == ["backbone", "neck", "roi_head"]
    assert model.num_classes == 80 and model.num_classes_path == "net[2].kwargs.num_classes"
    assert model.strides == [8, 16, 32] and model.use_l1 is False and model.kind == "yolox"


def test_nano_is_depthwise_in_the_backbone_only_and_bn_starts_as_torchs():
    model = build_model(up_net("yolox_nano.yaml"))
    assert isinstance(model.backbone.dark2[0], DWConv)
    assert not any(isinstance(m, DWConv) for m in model.neck.modules())
    assert not any(isinstance(m, DWConv) for m in model.roi_head.modules())
    assert model.roi_head.stems[0].conv.out_channels == 64  # int(256 * width 0.25)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert {(m.eps, m.momentum) for m in bns} == {(1e-5, 0.1)}  # runtime.special_bn_init makes 1e-3 / 0.03
    neck_csp = model.neck.C3_p4.m[0]
    assert neck_csp.use_add  # UP's neck keeps its residual adds


def test_post_settings_are_mapped():
    net = up_net("yolox_small.yaml")
    post = net[3]["kwargs"]
    post["use_l1"] = True
    post["cfg"]["roi_supervisor"]["kwargs"]["matcher"]["kwargs"].update(candidate_k=7, radius=1.5)
    post["cfg"]["roi_predictor"]["kwargs"].update(pre_nms_score_thresh=0.2,
                                                 nms={"type": "naive", "nms_iou_thresh": 0.4})
    post["cfg"]["loc_loss"]["kwargs"].update(loss_type="giou", loss_weight=2.0)
    with torch.device("meta"):
        model = build_model(net)
    crit, pp = model.criterion, model.postprocess
    assert model.use_l1 is True
    assert (crit.num_classes, crit.iou_kind, crit.iou_weight) == (80, "giou", 2.0)
    assert (crit.assigner.candidate_k, crit.assigner.center_radius) == (7, 1.5)
    assert (pp.score_thresh, pp.nms_thresh, pp.detections_per_img) == (0.2, 0.4, 300)


def test_the_fpga_variant_builds_its_stem_and_dilated_spp():
    """yolox_fpga.yaml: UP's stem_focus (three 3x3 convs, no space-to-depth) and SPP_dila (3x3
    conv-BN-ReLU of dilation 1, 3, 5 for the max pools), counted by hand against the same net
    with the Focus stem and pooling SPP (UP's yolox_dyn)."""
    from up_trainer.tasks.det.yolox.backbone import DilatedSPP

    with torch.device("meta"):
        fpga = build_model(up_net("yolox_fpga.yaml"))
    net = up_net("yolox_fpga.yaml")
    for key in ("focus_type", "use_spp_pool"):
        del net[0]["kwargs"][key]
    with torch.device("meta"):
        model = build_model(net)
    assert model.backbone.stem.conv.conv.in_channels == 4  # input_channels 1, space-to-depth
    assert isinstance(model.backbone.stem.conv.act, nn.ReLU)
    stem = fpga.backbone.stem
    assert [m.conv.stride[0] for m in stem] == [2, 1, 1] and stem[0].conv.in_channels == 1
    assert isinstance(stem[2].act, nn.ReLU) and stem[2].conv.out_channels == 24  # 64 x wid_mul 0.375
    spp = fpga.backbone.dark5[1]
    assert isinstance(spp, DilatedSPP) and [b.conv.dilation[0] for b in spp.pooling_blocks] == [1, 3, 5]
    n = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    ch, hidden = 24, 24 * 16 // 2
    stem_diff = (1 * 12 * 9 + 2 * 12) + (12 * 12 * 9 + 2 * 12) + (12 * 24 * 9 + 2 * 24) - (4 * 1 * 24 * 9 + 2 * ch)
    spp_diff = 3 * (hidden * hidden * 9 + 2 * hidden)  # the dilated blocks; max pools have no parameters
    assert n(fpga) - n(model) == stem_diff + spp_diff
    x = torch.rand(1, 1, 64, 64)
    with torch.no_grad():
        outs = build_model(up_net("yolox_fpga.yaml")).backbone.eval()(x)
    assert [o.shape[-1] for o in outs] == [8, 4, 2]


def test_fpga_backbone_reads_up_names():
    """UP's names of the FPGA parts (stem.i.bn1, dark5.1.conv_block1, pooling_blocks.i.bn) load."""
    model = build_model(up_net("yolox_fpga.yaml"))
    state = model.state_dict()
    up_state = {}
    for key, value in state.items():
        if key.startswith("backbone."):
            key = key.replace(".bn.", ".bn1.") if ".pooling_blocks." not in key else key
            for ours in ("conv1", "conv2"):
                key = key.replace(f"dark5.1.{ours}.", f"dark5.1.conv_block{ours[-1]}.")
        up_state[key] = value
    assert set(model.translate_up_weights(up_state)) == set(state)


def _edit(net, index, path, value):
    net = copy.deepcopy(net)
    node = net[index]["kwargs"]
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return net


@pytest.mark.parametrize("index, path, value, message", [
    (0, "out_layers", [2, 3], "net[0].kwargs.out_layers: YoloxPAFPN takes three increasing stages"),
    (0, "out_strides", [4, 8, 16], "net[0].kwargs.out_strides: [4, 8, 16] is not supported for UP's yolox_s"),
    (0, "act_fn", {"type": "GELU"}, "net[0].kwargs.act_fn.type: UP activation 'GELU' is not mapped for YOLOX"),
    (0, "normalize", {"type": "gn", "kwargs": {"num_groups": 8}},
     "net[0].kwargs.normalize.type: YOLOX parts are built with BatchNorm2d or a frozen one"),
    (0, "focus_type", "v4_focus", "net[0].kwargs.focus_type: 'v4_focus' is not mapped"),
    (0, "depthwize", True, "net[0].kwargs.depthwize: UP kwarg not supported by our yolox_s (did you mean"),
    (1, "out_strides", [8, 16, 32, 64], "net[1].kwargs.out_strides: [8, 16, 32, 64] is not supported"),
    (1, "upsample", "bilinear", "net[1].kwargs.upsample: 'bilinear' is not supported for UP's YoloxPAFPN"),
    (1, "normalize", {"type": "sync_bn"}, "net[1].kwargs.normalize: differs from the backbone's normalize"),
    (2, "num_point", 2, "net[2].kwargs.num_point: 2 is not supported for UP's YoloXHead; only 1"),
    (2, "class_activation", "softmax", "net[2].kwargs.class_activation: 'softmax' is not supported"),
    (2, "num_classes", 1, "net[2].kwargs.num_classes: counts the background too"),
    (3, "num_classes", 11, "net[3].kwargs.num_classes: 11 is not supported for UP's yolox_post; only 81"),
    (3, "cfg.anchor_generator.kwargs.center", True, "net[3].kwargs.cfg.anchor_generator.kwargs.center: True is not"),
    (3, "cfg.cls_loss.type", "focal_loss", "net[3].kwargs.cfg.cls_loss.type: UP loss 'focal_loss' is not mapped"),
    (3, "cfg.loc_loss.kwargs.loss_type", "diou", "net[3].kwargs.cfg.loc_loss.kwargs.loss_type: expected one of"),
    (3, "cfg.roi_predictor.kwargs.nms", {"type": "soft"}, "net[3].kwargs.cfg.roi_predictor.kwargs.nms: {'type'"),
    (3, "cfg.roi_supervisor.kwargs.matcher.kwargs.center_sample", False,
     "net[3].kwargs.cfg.roi_supervisor.kwargs.matcher.kwargs.center_sample: False is not supported"),
    (3, "cfg.test", {"roi_predictor": {}}, "net[3].kwargs.cfg.test: {'roi_predictor': {}} is not supported"),
])
def test_kwargs_not_honoured_are_named_in_one_line(index, path, value, message):
    with pytest.raises(ConfigError) as err:
        check_up_net(_edit(up_net("yolox_small.yaml"), index, path, value))
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_a_backbone_not_for_yolox_is_refused():
    net = up_net("yolox_small.yaml")
    net[0]["type"] = "mobilenetv2"
    with pytest.raises(ConfigError, match=r"^net\[0\].type: 'mobilenetv2' is not a mapped YOLOX backbone"):
        check_up_net(net)


def test_the_mapped_nano_trains_and_predicts():
    net = _edit(_edit(up_net("yolox_nano.yaml"), 2, "num_classes", 11), 3, "num_classes", 11)
    for key in ("roi_supervisor", "roi_predictor"):
        net[3]["kwargs"]["cfg"][key]["kwargs"]["num_classes"] = 11
    net[3]["kwargs"]["cfg"]["roi_supervisor"]["kwargs"]["matcher"]["kwargs"]["num_classes"] = 11
    torch.manual_seed(0)
    model = build_model(net)
    images = [torch.rand(3, 64, 80), torch.rand(3, 48, 64)]
    targets = [{"boxes": torch.tensor([[4.0, 6, 40, 50]]), "labels": torch.tensor([3])},
               {"boxes": torch.tensor([[10.0, 8, 30, 40], [2, 2, 20, 20]]), "labels": torch.tensor([10, 1])}]
    model.train()
    losses = model({"image": images, "target": targets})
    assert set(losses) == {"loss_cls", "loss_obj", "loss_iou"} and all(torch.isfinite(v) for v in losses.values())
    sum(losses.values()).backward()
    model.use_l1 = True
    assert "loss_l1" in model({"image": images, "target": targets})
    model.eval()
    with torch.no_grad():
        dets = model({"image": images})["detections"]
    assert len(dets) == 2 and all(d["labels"].min() >= 1 and d["labels"].max() <= 10 for d in dets if len(d["labels"]))


def up_named(model):
    """Our YOLOX state dict in UP's names and stem layout, written out from UP's modules."""
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith(("backbone.", "neck.", "roi_head.")):
            key = key.replace(".bn.", ".bn1.").replace("backbone.stem.conv.", "backbone.stem.conv_block.")
            key = key.replace("backbone.dark5.1.conv1.", "backbone.dark5.1.conv_block1.")
            key = key.replace("backbone.dark5.1.conv2.", "backbone.dark5.1.conv_block2.")
            state[key] = value.clone()
    w = state["backbone.stem.conv_block.conv.weight"]
    tl, bl, tr, br = w.chunk(4, dim=1)  # our Focus: top-left, bottom-left, top-right, bottom-right
    state["backbone.stem.conv_block.conv.weight"] = torch.cat((tl, tr, bl, br), 1)  # UP's order
    return state


def ups_space_to_depth(x, bs=2):
    """UP's Space2Depth (yolov5 components), as UP defines it."""
    n, c, h, w = x.shape
    x = x.view(n, c, h // bs, bs, w // bs, bs).permute(0, 3, 5, 1, 2, 4).contiguous()
    return x.view(n, c * bs * bs, h // bs, w // bs)


def test_up_named_weights_load_with_the_stem_channels_permuted(tmp_path):
    import torch.nn.functional as F

    from up_trainer.engine.builder import load_pretrained

    net = up_net("yolox_nano.yaml")
    torch.manual_seed(0)
    source = build_model(net).eval()
    for m in source.modules():  # non-trivial statistics, so a misplaced BN shows
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1), m.running_var.uniform_(0.5, 2)
    up_state = up_named(source)
    assert not any(".bn." in k or ".stem.conv.conv." in k for k in up_state)  # in UP's names
    # UP's stem (space-to-depth, then its conv) on UP's weights computes what ours does
    x = torch.rand(1, 3, 16, 16)
    stem = source.backbone.stem.conv
    up_out = stem.act(stem.bn(F.conv2d(ups_space_to_depth(x), up_state["backbone.stem.conv_block.conv.weight"],
                                       padding=1)))
    assert torch.allclose(source.backbone.stem(x), up_out, atol=1e-6)

    torch.save({"model": {f"module.{k}": v for k, v in up_state.items()}}, tmp_path / "up.pth")
    torch.manual_seed(1)
    target = build_model(net).eval()
    load_pretrained(target, str(tmp_path / "up.pth"))
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
    # our own names pass unchanged
    own = source.state_dict()
    assert all(torch.equal(v, own[k]) for k, v in source.translate_up_weights(own).items())


def test_other_entry_names_map_to_the_models_children():
    net = up_net("yolox_small_res18.yaml")
    for entry, name in zip(net, ("trunk", "fpn", "head", "post")):
        entry["name"] = name
    net[1]["prev"], net[2]["prev"], net[3]["prev"] = "trunk", "fpn", "head"
    with torch.device("meta"):
        model = build_model(net)
    state = {"trunk.layer0.0.weight": 1, "fpn.C3_p4.conv1.bn1.weight": 2, "head.stems.0.conv.weight": 3}
    assert model.translate_up_weights(state) == {"backbone.conv1.weight": 1, "neck.C3_p4.conv1.bn.weight": 2,
                                                 "roi_head.stems.0.conv.weight": 3}
