"""UP's ``net:`` list (``[{name, type, kwargs, prev}, ...]``) mapped onto torchvision.

Three shapes are mapped:

* classification: a UP backbone (:data:`.backbones.BACKBONES`) + ``base_cls_head`` +
  ``base_cls_postprocess`` -> :class:`.cls.UPClassifier`;
* RetinaNet: resnet + ``FPN`` + ``RetinaSubNet`` + ``retina_post`` -> torchvision RetinaNet;
* Faster R-CNN: resnet + ``FPN`` + ``NaiveRPN`` + ``rpn_post`` + ``BboxFC_Pre`` + ``BboxFC``
  + ``bbox_post`` -> torchvision Faster R-CNN;
* FCOS: resnet + ``FPN`` + ``FcosHead`` + ``fcos_post`` -> :class:`up_trainer.tasks.det.fcos.FcosModel`
  (:mod:`.rcnn_net`);
* the ATSS RetinaNet (UP's "improve" files): resnet + ``FPN`` + ``RetinaHeadWithBN`` /
  ``RetinaHeadWithBNSep`` / ``RetinaHeadWithIOU`` / ``RetinaHeadWithBNIOU`` + ``retina_post`` /
  ``retina_post_iou`` ->
  :class:`up_trainer.tasks.det.atss.RetinaPlusModel` (:mod:`.atss_net`);
* Faster R-CNN C4 (``BboxRes5_Pre`` + ``BboxRes5``), R-FCN (``BboxRFCN_Pre`` + ``BboxRFCN``),
  Cascade R-CNN (``FPN`` + ``CascadeFC``) -> :class:`up_trainer.tasks.det.rcnn.TwoStageModel`
  (:mod:`.rcnn_net`);
* YOLOX: ``yolox_nano|tiny|s|m|l|x`` / ``yolox`` / resnet + ``YoloxPAFPN`` + ``YoloXHead`` +
  ``yolox_post`` -> :class:`up_trainer.tasks.det.yolox.YoloxModel` (:mod:`.yolox_net`);
* the same backbone, neck and head + ``retina_post_iou`` (UP's ``yolox_*_ret_*`` files) ->
  :class:`up_trainer.tasks.det.atss.RetinaPlusModel` (:mod:`.yolox_retina_net`).
* YOLOv5: ``DarkNetv5`` + ``DarknetPAFPN`` + ``YoloV5Head`` + ``yolov5_post`` ->
  :class:`up_trainer.tasks.det.yolov5.YoloV5Model` (:mod:`.yolov5_net`);
* YOLOv6: ``EfficientRep`` + ``RepPANNeck`` + ``Effidehead`` + ``retina_post_iou`` ->
  :class:`up_trainer.tasks.det.atss.RetinaPlusModel` on :mod:`up_trainer.tasks.det.yolov6`
  (:mod:`.yolov6_net`).

Every kwarg is honoured or refused in one line; UP types we do not map are refused with what
to use instead (:mod:`.refused`). :func:`check_up_net` does all of this without building
(``up config``); :func:`build_up_net` builds (``up train``). Both read the same code, so what
passes the check builds.
"""
from ...errors import ConfigError, join_path
from .refused import refusal, refuse

ENTRY_KEYS = ("name", "type", "kwargs", "prev")
CLS_PARTS = ("base_cls_head", "base_cls_postprocess")
RETINA_PARTS = ("FPN", "RetinaSubNet", "retina_post")
FASTER_PARTS = ("FPN", "NaiveRPN", "rpn_post", "BboxFC_Pre", "BboxFC", "bbox_post")
YOLOX_PARTS = ("YoloxPAFPN", "YoloXHead", "yolox_post")
YOLOV6_PARTS = ("EfficientRep", "RepPANNeck", "Effidehead", "retina_post_iou")
YOLOV5_PARTS = ("DarkNetv5", "DarknetPAFPN", "YoloV5Head", "yolov5_post")
FCOS_PARTS = ("FPN", "FcosHead", "fcos_post")
CLS_HEADS = ("base_cls_head", "vit_head", "convnext_head")
PLUS_HEADS = ("RetinaHeadWithBN", "RetinaHeadWithIOU", "RetinaHeadWithBNIOU")
PLUS_HEADS += ("RetinaHeadWithBNSep",)  # per-level convs (UP's quantization files)
PLUS_POSTS = ("retina_post", "retina_post_iou")
ONENET_POST = "onenet_post"
BIGNAS_PARTS = ("bignas_resnet_basic", "bignas_fpn", "BignasRetinaHeadWithBN",  # a fixed BigNAS subnet
                "big_resnet_basic", "big_fpn", "BigRetinaHeadWithBN")  # and its supernet
BIGNAS_CLS_PARTS = ("big_regnet", "BigClsHead")  # the RegNet classification supernet: bignas_regnet.py
TWO_STAGE_TYPES = ("BboxRes5_Pre", "BboxRes5", "BboxRFCN_Pre", "BboxRFCN", "CascadeFC")
UP_ONLY_TYPES = set(("fpn_cls_head",) + CLS_PARTS + CLS_HEADS + RETINA_PARTS + FASTER_PARTS + YOLOX_PARTS + FCOS_PARTS
                    + PLUS_HEADS + PLUS_POSTS + TWO_STAGE_TYPES + YOLOV6_PARTS + YOLOV5_PARTS + (ONENET_POST,)
                    + BIGNAS_PARTS + BIGNAS_CLS_PARTS)


def _up_backbones():
    from .backbones import BACKBONES

    return BACKBONES


def is_up_net(net_cfg):
    """True when a ``net`` list is UP's form: any UP-only or refused UP type, a ``prev`` link,
    or a UP backbone type followed by other parts."""
    if not isinstance(net_cfg, list):
        return False
    entries = [e for e in net_cfg if isinstance(e, dict)]
    types = [e.get("type") for e in entries]
    if any(t in UP_ONLY_TYPES or refusal(t) for t in types if isinstance(t, str)):
        return True
    if any(k in e for e in entries for k in ("prev", "wrappers", "multi_model")):
        return True
    return False


def _check_entries(net_cfg, path):
    names = []
    for i, entry in enumerate(net_cfg):
        p = join_path(path, i)
        if not isinstance(entry, dict):
            raise ConfigError(p, f"expected a mapping {{name, type, kwargs}}, got {type(entry).__name__}")
        if "wrappers" in entry:
            raise ConfigError(join_path(p, "wrappers"), "UP's module wrappers (quantization, sparsity, "
                              "distillation) are not mapped", "remove wrappers")
        if "multi_model" in entry:
            raise ConfigError(join_path(p, "multi_model"), "UP's multi_model parts (teacher/student "
                              "distillation) are not mapped", "train one model")
        for key in entry:
            if key not in ENTRY_KEYS:
                raise ConfigError(join_path(p, key), "unknown key", f"a UP net entry has {', '.join(ENTRY_KEYS)}")
        for key in ("name", "type"):
            if not isinstance(entry.get(key), str):
                raise ConfigError(join_path(p, key), "required string is missing",
                                  "each entry is {name: backbone, type: resnet18, kwargs: {...}}")
        if not entry["name"].isidentifier() or entry["name"] in names:
            raise ConfigError(join_path(p, "name"), f"{entry['name']!r} is not a unique python identifier")
        if refusal(entry["type"]):
            refuse(entry["type"], p)
        prev = entry.get("prev")
        if prev is not None and prev not in names:
            raise ConfigError(join_path(p, "prev"), f"{prev!r} names no earlier entry",
                              f"earlier entries: {', '.join(names) or 'none'}")
        names.append(entry["name"])


def _shape(net_cfg, path):
    types = tuple(e["type"] for e in net_cfg)
    if types[0] in (BIGNAS_PARTS[0], BIGNAS_PARTS[3]):
        return "bignas"  # its parts are checked by the BigNAS reader
    if types[0] == BIGNAS_CLS_PARTS[0]:
        return "bignas_cls"  # its parts are checked by the BigNAS RegNet reader
    if types[0] == YOLOV5_PARTS[0]:
        if types == YOLOV5_PARTS:
            return "yolov5"
        raise ConfigError(path, f"the UP parts {' + '.join(types)} do not form a mapped net",
                          f"YOLOv5 is mapped as {' + '.join(YOLOV5_PARTS)}")
    if types[0] == YOLOV6_PARTS[0]:
        if len(types) == 4 and types[1:3] == YOLOV6_PARTS[1:3] and types[3] in PLUS_POSTS:
            return "yolov6"  # retina_post is refused in one line by the post-process reader
        raise ConfigError(path, f"the UP parts {' + '.join(types)} do not form a mapped net",
                          f"YOLOv6 is mapped as {' + '.join(YOLOV6_PARTS)}")
    yolox_retina = len(types) == 4 and types[1:3] == YOLOX_PARTS[:2] and types[3] in PLUS_POSTS
    if types[1:] == YOLOX_PARTS or yolox_retina:
        from .yolox_net import RESNETS, backbone_types

        if types[0] not in backbone_types() + RESNETS:
            raise ConfigError(join_path(join_path(path, 0), "type"), f"{types[0]!r} is not a mapped YOLOX backbone",
                              f"mapped: {', '.join(backbone_types() + RESNETS)}")
        return "yolox_retina" if yolox_retina else "yolox"
    backbones = _up_backbones()
    if types[0] not in backbones:
        raise ConfigError(join_path(join_path(path, 0), "type"), f"{types[0]!r} is not a mapped UP backbone",
                          f"mapped: {', '.join(backbones)}")
    if len(types) == 3 and types[1] in CLS_HEADS and types[2] == CLS_PARTS[1]:
        return "cls"
    from .rcnn_net import two_stage_shape

    two_stage = two_stage_shape(types[1:])
    if two_stage:
        if types[0] not in ("resnet18", "resnet34", "resnet50", "resnet101"):
            raise ConfigError(join_path(join_path(path, 0), "type"), f"{types[0]} is not mapped for "
                              f"{two_stage}", "detection backbones: resnet18/34/50/101")
        return two_stage
    plus = len(types) == 4 and types[1] == "FPN" and types[2] in PLUS_HEADS and types[3] in PLUS_POSTS
    if len(types) == 4 and types[1] == "FPN" and types[3] == ONENET_POST:
        if not types[0].startswith("resnet") or types[0].endswith("_D"):
            raise ConfigError(join_path(join_path(path, 0), "type"), f"{types[0]} is not mapped for OneNet",
                              "detection backbones: resnet18/34/50/101")
        return "onenet"  # the head's type is checked by the OneNet reader
    for shape, parts in (("retinanet", RETINA_PARTS), ("faster_rcnn", FASTER_PARTS), ("fcos", FCOS_PARTS),
                         ("retina_plus", types[1:] if plus else None)):
        if types[1:] == parts:
            if not types[0].startswith("resnet") or types[0].endswith("_D"):
                raise ConfigError(join_path(join_path(path, 0), "type"), f"{types[0]} is mapped as a "
                                  "classification backbone only", "detection backbones: resnet18/34/50/101")
            return shape
    raise ConfigError(path, f"the UP parts {' + '.join(types)} do not form a mapped net",
                      "mapped: backbone + base_cls_head|vit_head + base_cls_postprocess; resnet + FPN + RetinaSubNet + "
                      "retina_post; resnet + FPN + FcosHead + fcos_post; resnet + FPN + RetinaHeadWithBN|"
                      "RetinaHeadWithBNSep|RetinaHeadWithIOU|RetinaHeadWithBNIOU + retina_post|retina_post_iou (ATSS); resnet + FPN + "
                      "NaiveRPN + rpn_post + BboxFC_Pre + BboxFC + bbox_post; resnet + NaiveRPN + rpn_post + "
                      "BboxRes5_Pre + BboxRes5 + bbox_post; resnet + NaiveRPN + retina_post + BboxRFCN_Pre + "
                      "BboxRFCN + bbox_post; resnet + FPN + NaiveRPN + rpn_post + CascadeFC; "
                      "yolox_* + YoloxPAFPN + YoloXHead + yolox_post|retina_post_iou; EfficientRep + RepPANNeck + "
                      "Effidehead + retina_post_iou; resnet + FPN + RetinaHeadWithBN + onenet_post (OneNet)")


def build_up_net(net_cfg, path="net"):
    """The nn.Module for a UP net list (raises ConfigError on anything not mapped)."""
    from .freeze import build_with_self_entry, has_self_entry

    if has_self_entry(net_cfg):  # UP's whole-model options (freeze_patterns): freeze.py
        return build_with_self_entry(net_cfg, path, build_up_net)
    from ...config.up_multitask_branches import is_multitask_net

    if is_multitask_net(net_cfg):  # task branches in multitask_wrapper (multitask_net.py)
        from ...config.up_multitask_branches import stripped
        from .multitask_net import build_multitask_net

        _check_entries([stripped(e) if isinstance(e, dict) else e for e in net_cfg], path)
        return build_multitask_net(net_cfg, path)
    _check_entries(net_cfg, path)
    for i, entry in enumerate(net_cfg):
        if entry["type"] == "fpn_cls_head":
            raise ConfigError(join_path(join_path(path, i), "type"), "fpn_cls_head is UP's classification head on FPN "
                              "levels, mapped in a multitask net only", "wrap the task heads in multitask_wrapper "
                              "(docs/up/multitask.rst), or use base_cls_head")
    shape = _shape(net_cfg, path)
    if shape == "cls":
        from .cls import build_classifier

        return build_classifier(net_cfg, path)
    if shape == "bignas":
        from .bignas_net import build_bignas_net

        return build_bignas_net(net_cfg, path)
    if shape == "bignas_cls":
        from .bignas_regnet import build_bignas_classifier

        return build_bignas_classifier(net_cfg, path)
    if shape == "yolox":
        from .yolox_net import build_yolox_net

        return build_yolox_net(net_cfg, path)
    if shape == "yolox_retina":
        from .yolox_retina_net import build_yolox_retina_net

        return build_yolox_retina_net(net_cfg, path)
    if shape == "yolov5":
        from .yolov5_net import build_yolov5_net

        return build_yolov5_net(net_cfg, path)
    if shape == "yolov6":
        from .yolov6_net import build_yolov6_net

        return build_yolov6_net(net_cfg, path)
    if shape == "fcos":
        from .fcos_net import build_fcos_net

        return build_fcos_net(net_cfg, path)
    if shape == "onenet":
        from .onenet_net import build_onenet_net

        return build_onenet_net(net_cfg, path)
    if shape == "retina_plus":
        from .atss_net import build_retina_plus_net

        return build_retina_plus_net(net_cfg, path)
    if shape in ("c4", "rfcn", "cascade"):
        from .rcnn_net import build_two_stage_net

        return build_two_stage_net(shape, net_cfg, path)
    from .det_net import build_detector

    return build_detector(shape, net_cfg, path)


def check_up_net(net_cfg, path="net"):
    """Everything :func:`build_up_net` checks, for ``up config``. Building these nets takes
    well under a second at the configs' sizes, so the check builds and drops the model: one
    code path, no second copy of the rules to drift."""
    import torch

    with torch.device("meta"):
        build_up_net(net_cfg, path)
