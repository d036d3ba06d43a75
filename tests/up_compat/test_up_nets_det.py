"""UP's RetinaNet and Faster R-CNN net lists mapped onto torchvision: UP's files build, the
mapped settings land where torchvision reads them, UP's own rules (anchors, matcher, extra
pyramid levels, foreground-only class channels) hold, and UP-named weights load."""
import copy
import os

import pytest
import torch
import yaml

from up_trainer.errors import ConfigError
from up_trainer.tasks.net import build_model
from up_trainer.tasks.up_nets import check_up_net
from up_trainer.tasks.up_nets.det_parts import UPMatcher
from conftest import UP_FIXTURES  # noqa: E402

UP_DET = os.path.join(UP_FIXTURES, "det")


def up_net(name, backbone="resnet18"):
    with open(os.path.join(UP_DET, name)) as f:
        net = yaml.safe_load(f)["net"]
    net[0]["type"] = backbone  # resnet18 keeps the tests fast; resnet50 is checked on "meta" below
    return net


RETINA, FASTER = "retinanet-r50_1x.yaml", "faster_rcnn_r50_fpn_1x.yaml"
TARGETS = [{"boxes": torch.tensor([[10.0, 20, 60, 90], [30, 30, 100, 120]]), "labels": torch.tensor([1, 80])},
           {"boxes": torch.zeros(0, 4), "labels": torch.zeros(0, dtype=torch.long)}]


@pytest.mark.parametrize("name", [RETINA, FASTER])
def test_up_files_check_unchanged(name):
    check_up_net(up_net(name, "resnet50"))


def test_retinanet_settings_are_mapped():
    torch.manual_seed(0)
    model = build_model(up_net(RETINA))
    det = model.detector
    assert [n for n, _ in model.named_children()] == ["backbone", "neck", "roi_head"]
    assert model.num_classes == 80 and model.num_classes_path == "net[3].kwargs.num_classes"
    assert model.roi_head.classification_head.cls_logits.out_channels == 9 * 80  # no background channel
    head = model.roi_head.classification_head
    assert (head.alpha, head.gamma) == (0.25, 2.0)
    assert torch.allclose(head.cls_logits.bias, torch.full((720,), -torch.log(torch.tensor(99.0))))
    m = det.proposal_matcher
    assert (m.pos, m.neg, m.low_quality) == (0.5, 0.4, True)
    assert (det.score_thresh, det.topk_candidates, det.nms_thresh, det.detections_per_img) == (0.05, 1000, 0.5, 100)
    gen = det.anchor_generator
    assert gen.up_strides == [8, 16, 32, 64, 128] and gen.num_anchors_per_location() == [9] * 5
    # UP's rule at stride 8, ratio 0.5, scale 4: w = round(sqrt(64 / 0.5)) = 11, h = round(5.5) = 6,
    # scaled to 44 x 24 around the window centre 3.5
    assert gen.cell_anchors[0][0].tolist() == [-18.0, -8.0, 25.0, 15.0]


def test_retinanet_levels_follow_up_fpn():
    model = build_model(up_net(RETINA)).eval()
    x = torch.randn(1, 3, 128, 128)
    with torch.no_grad():
        feats = model.backbone(x)
        levels = list(model.neck({str(i): f for i, f in enumerate(feats)}).values())
        # P6 = conv(lateral(C5)), P7 = conv(P6) with no activation between (UP's downsample: conv)
        lateral = model.neck.inner_blocks[-1](feats[-1])
        p6 = model.neck.extra_blocks.convs[0](lateral)
        assert torch.allclose(levels[3], p6, atol=1e-6)
        assert torch.allclose(levels[4], model.neck.extra_blocks.convs[1](p6), atol=1e-6)
    assert [f.shape[-1] for f in levels] == [16, 8, 4, 2, 1]


def test_retinanet_trains_on_foreground_labels_and_predicts_1_to_c():
    torch.manual_seed(0)
    model = build_model(up_net(RETINA)).train()
    losses = model({"image": torch.randn(2, 3, 128, 160), "target": TARGETS})
    assert set(losses) == {"loss_classification", "loss_bbox_regression"}
    sum(losses.values()).backward()
    with torch.no_grad():
        model.roi_head.classification_head.cls_logits.bias.fill_(2.0)  # every score above the threshold
        out = model.eval()({"image": torch.randn(1, 3, 128, 160)})["detections"][0]
    assert out["labels"].numel() == 100 and out["labels"].min() >= 1 and out["labels"].max() <= 80


def test_faster_rcnn_settings_are_mapped():
    model = build_model(up_net(FASTER))
    det = model.detector
    rpn, roi = model.roi_head, model.bbox_head
    assert [n for n, _ in model.named_children()] == ["backbone", "neck", "roi_head", "bbox_head"]
    assert model.num_classes == 80 and roi.box_predictor.cls_score.out_features == 81
    assert (rpn.proposal_matcher.pos, rpn.proposal_matcher.neg, rpn.proposal_matcher.low_thresh) == (0.7, 0.3, 0.3)
    assert rpn._pre_nms_top_n == {"training": 2000, "testing": 1000}
    assert rpn._post_nms_top_n == {"training": 1000, "testing": 1000} and rpn.nms_thresh == 0.7
    assert (rpn.fg_bg_sampler.batch_size_per_image, rpn.fg_bg_sampler.positive_fraction) == (256, 0.5)
    assert (roi.proposal_matcher.pos, roi.proposal_matcher.neg, roi.proposal_matcher.low_quality) == (0.5, 0.5, False)
    assert (roi.fg_bg_sampler.batch_size_per_image, roi.fg_bg_sampler.positive_fraction) == (512, 0.25)
    assert roi.box_coder.weights == (10.0, 10.0, 5.0, 5.0)  # 1 / UP's bbox_normalize stds
    assert (roi.score_thresh, roi.nms_thresh, roi.detections_per_img) == (0.0, 0.5, 100)
    assert roi.box_roi_pool.featmap_names == ["0", "1", "2", "3"] and roi.box_roi_pool.sampling_ratio == 0
    assert det.rpn.anchor_generator.up_strides == [4, 8, 16, 32, 64]
    losses = model.train()({"image": torch.randn(2, 3, 128, 160), "target": TARGETS})
    assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}


def test_faster_rcnn_loss_weights_multiply_torchvision_losses():
    # UP's faster_rcnn_r50_fpn_improve.yaml weighs bbox_post's losses 4.0 (cls) and 4.5 (loc)
    with open(os.path.join(UP_DET, "faster_rcnn", "faster_rcnn_r50_fpn_improve.yaml")) as f:
        post = yaml.safe_load(f)["net"][6]
    weighted = up_net(FASTER)
    weighted[6]["kwargs"]["cfg"]["cls_loss"] = post["kwargs"]["cfg"]["cls_loss"]
    weighted[6]["kwargs"]["cfg"]["loc_loss"] = post["kwargs"]["cfg"]["loc_loss"]
    weighted[3]["kwargs"]["cfg"]["loc_loss"]["kwargs"] = {"loss_weight": 2.0}  # the RPN's too
    losses = {}
    for name, net in (("plain", up_net(FASTER)), ("weighted", weighted)):
        torch.manual_seed(0)
        model = build_model(net).train()
        torch.manual_seed(1)  # the same samplers' draws in both runs
        losses[name] = model({"image": torch.randn(2, 3, 128, 160), "target": TARGETS})
    ratio = {k: (losses["weighted"][k] / losses["plain"][k]).item() for k in losses["plain"]}
    assert ratio == pytest.approx({"loss_classifier": 4.0, "loss_box_reg": 4.5, "loss_objectness": 1.0,
                                   "loss_rpn_box_reg": 2.0}, rel=1e-6)


def test_up_matcher_rules():
    iou = torch.tensor([[0.9, 0.45, 0.2, 0.5, 0.299],
                        [0.1, 0.0, 0.3, 0.51, 0.2985]])
    # anchor 0: >0.5 -> gt 0; 1: between -> ignored; 2: below 0.4 -> negative; 3: best 0.51 > 0.5 -> gt 1;
    # 4: within 1e-3 of gt 1's best? no (gt 1's best is 0.51); negative
    assert UPMatcher(0.5, 0.4, False)(iou).tolist() == [0, -2, -1, 1, -1]
    iou[1] = torch.tensor([0.1, 0.0, 0.3, 0.2, 0.2995])  # gt 1's best is anchor 2 (0.3), anchor 4 within 1e-3
    assert UPMatcher(0.5, 0.4, True)(iou).tolist() == [0, -2, 1, -2, 1]
    assert UPMatcher(0.5, 0.4, True, low_thresh=0.2999)(iou).tolist() == [0, -2, 1, -2, -1]


def up_det_names(shape):
    """Parameter names of UP's resnet18 + FPN + heads as UP's source builds them."""
    from test_up_nets_cls import up_resnet18_names

    names = [f"backbone.{n}" for n in up_resnet18_names()]
    start, n_in = (3, 3) if shape == "retina" else (2, 4)
    for i in range(n_in):
        names += [f"neck.c{start + i}_lateral.{t}" for t in ("weight", "bias")]
        names += [f"neck.p{start + i}_conv.{t}" for t in ("weight", "bias")]
    if shape == "retina":
        names += [f"neck.p{lvl}_conv.{t}" for lvl in (6, 7) for t in ("weight", "bias")]
        for branch in ("cls_subnet", "box_subnet"):
            names += [f"roi_head.{branch}.{i}.{t}" for i in (0, 2, 4, 6) for t in ("weight", "bias")]
            names += [f"roi_head.{branch}_pred.{t}" for t in ("weight", "bias")]
    else:
        names += [f"roi_head.{m}.{t}" for m in ("conv3x3", "conv_cls", "conv_loc") for t in ("weight", "bias")]
        names += [f"bbox_head.{m}.{t}" for m in ("fc6", "fc7", "fc_rcnn_cls", "fc_rcnn_loc") for t in ("weight", "bias")]
    return names


@pytest.mark.parametrize("name, shape", [(RETINA, "retina"), (FASTER, "faster")])
def test_up_checkpoint_names_load(tmp_path, name, shape):
    from up_trainer.engine.builder import load_pretrained

    model = build_model(up_net(name))
    own = model.state_dict()
    names = up_det_names(shape)
    translated = list(model.translate_up_weights({n: torch.zeros(1) for n in names}))
    renamed = dict(zip(translated, names))
    assert sorted(own) == sorted(renamed)
    state = {renamed[k]: torch.randn(v.shape).to(v.dtype) for k, v in own.items()}
    torch.save({"model": state}, tmp_path / "up.pth")
    fresh = build_model(up_net(name))
    report = load_pretrained(fresh, str(tmp_path / "up.pth"))
    assert report["missing"] == [] and report["unexpected"] == [] and report["mismatched"] == []
    assert all(torch.equal(v, state[renamed[k]]) for k, v in fresh.state_dict().items())
    # our own checkpoint keeps its names
    assert list(fresh.translate_up_weights(fresh.state_dict())) == list(own)


def _edit(net, index, path, value):
    net = copy.deepcopy(net)
    node = net[index]["kwargs"]
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return net


@pytest.mark.parametrize("name, index, path, value, message", [
    (RETINA, 1, "upsample", "bilinear", "net[1].kwargs.upsample: expected nearest or deconv"),
    (RETINA, 3, "cfg.cls_loss.type", "quality_focal_loss",
     "net[3].kwargs.cfg.cls_loss.type: UP classification loss 'quality_focal_loss' is not mapped here"),
    (RETINA, 3, "cfg.roi_supervisor.kwargs.matcher.kwargs.positive_iou", 0.5,
     "net[3].kwargs.cfg.roi_supervisor.kwargs.matcher.kwargs.positive_iou: UP kwarg not supported"),
    (RETINA, 2, "num_anchors", 3, "net[2].kwargs.num_anchors: 3 but anchor_ratios x anchor_scales give 9"),
    (FASTER, 6, "cfg.bbox_predictor.kwargs.top_n", "100", "net[6].kwargs.cfg.bbox_predictor.kwargs.top_n: expected"),
    (FASTER, 5, "cfg.share_location", True, "net[5].kwargs.cfg.share_location: True is not supported"),
])
def test_kwargs_not_honoured_are_named_in_one_line(name, index, path, value, message):
    with pytest.raises(ConfigError) as err:
        check_up_net(_edit(up_net(name), index, path, value))
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("types, message", [
    (["xmnet", "FPN", "RetinaSubNet", "retina_post"], "net[0].type: xmnet is UP's XMNet backbone"),
    (["resnet50", "FPN", "CondinstHead", "condinst_post"], "net[2].type: CondinstHead is UP's CondInst"),
    (["mobilenetv2", "FPN", "RetinaSubNet", "retina_post"], "net[0].type: mobilenetv2 is mapped as a "
                                                             "classification backbone only"),
])
def test_unmapped_detection_types_are_refused(types, message):
    net = [{"name": f"part{i}", "type": t, "kwargs": {}} for i, t in enumerate(types)]
    with pytest.raises(ConfigError) as err:
        check_up_net(net)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("name", [RETINA, FASTER])
def test_up_file_trains_an_epoch_with_up_named_pretrain_weights(tmp_path, name):
    """UP's file as it is (resnet50 included), with only data paths and image size given by
    --opts, trains an epoch on digit scenes and evaluates; its ``pretrain_model`` is a file
    in UP's names (a UP ImageNet classifier's backbone), renamed part by part on load."""
    import torchvision

    from conftest import invoke
    from up_trainer.tasks.det.export import export_digits_coco

    data = export_digits_coco(str(tmp_path / "data"), num_images=4, num_val_images=2)
    (train_ann, train_dir), (val_ann, val_dir) = data["train"], data["val"]
    state = {(f"backbone.layer0.{0 if k.startswith('conv1') else 1}.{k.split('.', 1)[1]}"
              if k.startswith(("conv1.", "bn1.")) else f"backbone.{k}"): v
             for k, v in torchvision.models.resnet50().state_dict().items()}
    torch.save({"model": state}, tmp_path / "resnet50-19c8e357.pth")  # the file's pretrain_model name
    split = "dataset.{}.dataset.kwargs."
    result = invoke(["train", "--config", os.path.join(UP_DET, name), "--work-dir", tmp_path, "--opts",
                     split.format("train") + f"meta_file={train_ann}",
                     split.format("train") + f"image_reader.kwargs.image_dir={train_dir}",
                     split.format("test") + f"meta_file={val_ann}",
                     split.format("test") + f"image_reader.kwargs.image_dir={val_dir}",
                     split.format("test") + f"evaluator.kwargs.gt_file={val_ann}",
                     split.format("train") + "transformer.1.kwargs.scales=[64]",
                     split.format("test") + "transformer.0.kwargs.scales=[64]",
                     "trainer.max_epoch=1", "dataset.dataloader.kwargs.num_workers=0"])
    assert result.exit_code == 0, result.stderr
    with open(tmp_path / "train.log") as f:
        log = f.read()
    assert "resnet50-19c8e357.pth: loaded 318/" in log  # every backbone tensor, conv1/bn1 renamed from layer0
    assert "eval epoch 1" in log
