"""UP's classification net: backbone + ``base_cls_head`` + ``base_cls_postprocess``.

The model's children carry the UP entry names (``backbone``, ``head``, ``post_process``), the
head keeps UP's parameter names (``classifier``), and forward follows the project's contract:
``batch["image"]`` and ``batch["label"]`` in; ``{logits, loss}`` in training and ``{logits,
scores, preds}`` (plus ``loss`` with labels) in eval. A list ``num_classes`` makes one
classifier per entry (UP's multi-head form): logits, scores and preds become lists and the
labels an N x heads tensor.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import ConfigError, DataError
from .options import Options, sub_options

LOSSES = ("ce", "label_smooth_ce", "bce", "softmax_eql", "softmax_eqlv2")
HEADS = ("base_cls_head", "vit_head", "convnext_head")


class ClsHead(nn.Module):
    """Average pool, optional tanh pre-logits layer (``representation_size``: ``pre_logits``
    Linear + ``tanh``, as UP's vit_head), optional dropout, a linear classifier (a ModuleList
    for several heads); ``make_classifier(in, out)`` builds another classifier (UP's
    ``classifier_cfg``)."""

    def __init__(self, in_plane, num_classes, feature_idx=-1, dropout=None, make_classifier=nn.Linear,
                 representation_size=None):
        super().__init__()
        self.feature_idx = feature_idx
        self.multi = isinstance(num_classes, list)
        self.pool = nn.AdaptiveAvgPool2d(1)
        if representation_size is not None:
            self.pre_logits, self.tanh = nn.Linear(in_plane, representation_size), nn.Tanh()
            in_plane = representation_size
        if dropout is not None:
            self.drop = nn.Dropout(dropout)
        self.classifier = (nn.ModuleList(make_classifier(in_plane, n) for n in num_classes) if self.multi
                           else make_classifier(in_plane, num_classes))
        for m in self.modules():
            if isinstance(m, nn.Linear):  # UP: truncated normal (std 0.02), zero bias
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, features):
        x = self.pool(features[self.feature_idx]).flatten(1)
        if hasattr(self, "pre_logits"):
            x = self.tanh(self.pre_logits(x))
        if hasattr(self, "drop"):
            x = self.drop(x)
        return [c(x) for c in self.classifier] if self.multi else self.classifier(x)


class ClsLoss(nn.Module):
    """UP's ``ce``, ``label_smooth_ce`` and ``bce`` on hard (N) or soft (N x C) labels."""

    def __init__(self, kind, weight=1.0, smooth=0.0, num_classes=None, bias=False):
        super().__init__()
        self.kind, self.weight, self.smooth, self.num_classes, self.bias = kind, weight, smooth, num_classes, bias

    def forward(self, logits, label):
        if self.kind == "ce":
            loss = F.cross_entropy(logits, label)
        elif self.kind == "label_smooth_ce":
            off = self.smooth / self.num_classes
            if label.dim() == 1:  # (1 - e + e/K) on the true class, e/K elsewhere
                loss = F.cross_entropy(logits, label, label_smoothing=self.smooth)
            else:  # UP's soft-label rule: scale the mass by (1 - e + e/K), give zeros e/K
                target = label * (1 - self.smooth + off)
                target = torch.where(label == 0, torch.full_like(target, off), target)
                loss = -(F.log_softmax(logits, 1) * target).sum() / logits.shape[0]
        else:
            if label.dim() == 1:
                loss = F.binary_cross_entropy_with_logits(logits, F.one_hot(label, logits.shape[1]).to(logits.dtype))
            else:
                c = logits.shape[1] if self.bias else 1
                loss = F.binary_cross_entropy_with_logits(logits - math.log(c), label.to(logits.dtype)) * c
        return loss * self.weight


def _read_loss(kind, kw, path, num_classes):
    if kind not in LOSSES:
        raise ConfigError(path, f"UP classification loss {kind!r} is not mapped", f"supported: {', '.join(LOSSES)}")
    if kind.startswith("softmax_eql"):
        from .cls_plus import read_eql

        return read_eql(kind, kw, num_classes)
    weight = kw.take("loss_weight", 1.0, types=float)
    if kind == "label_smooth_ce":
        smooth = kw.take("smooth_ratio", types=float, check=lambda v: None if 0 <= v < 1 else "must be in [0, 1)")
        n = kw.take("num_classes", num_classes, types=int)
        if n != num_classes:
            raise ConfigError(kw.at("num_classes"), f"{n} but the head has {num_classes} classes")
        kw.done()
        return ClsLoss(kind, weight, smooth, n)
    bias = kw.take("bias", False, types=bool) if kind == "bce" else False
    kw.done()
    return ClsLoss(kind, weight, bias=bias)


class PostProcess(nn.Module):
    """UP's ``base_cls_postprocess``: the loss(es) in training, softmax scores and argmax
    predictions in evaluation. The loss sits under UP's name ``cls_loss`` (a ModuleList for a
    list of losses), the name UP's gradient_collector files give."""

    def __init__(self, losses, prefix=None, as_list=False):
        super().__init__()
        self.cls_loss = nn.ModuleList(losses) if as_list else losses[0]
        self.prefix = prefix

    def _key(self, idx, multi):
        base = f"{self.prefix}." if self.prefix else ""
        return f"{base}loss_head{idx}" if multi else f"{base}loss"

    def forward(self, logits, label):
        out = {}
        multi = isinstance(logits, list)
        if multi and label is not None and (label.dim() != 2 or label.shape[1] != len(logits)):
            raise DataError(f"{self.heads_path}: {len(logits)} classifier heads (UP's multi-head form) need "
                            f"{len(logits)} labels per image; the batch's labels have shape {tuple(label.shape)}")
        if label is not None:
            for idx, logit in enumerate(logits if multi else [logits]):
                loss_fn = self.cls_loss[idx] if isinstance(self.cls_loss, nn.ModuleList) else self.cls_loss
                out[self._key(idx, multi)] = loss_fn(logit, label[:, idx] if multi else label)
        if not self.training:
            scores = [x.softmax(1) for x in logits] if multi else logits.softmax(1)
            out["scores"] = scores
            out["preds"] = [s.argmax(1) for s in scores] if multi else scores.argmax(1)
        return out


class UPClassifier(nn.Module):
    """backbone -> head -> post-process, each under its UP entry name."""

    def __init__(self, parts, num_classes):
        super().__init__()
        self.part_names = [name for name, _ in parts]
        for name, module in parts:
            self.add_module(name, module)
        self.num_classes = num_classes

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):
            batch = {"image": batch}
        label = batch.get("label")
        if label is None and self.training:
            raise DataError("the training images have no labels (an inference_only meta file?): "
                            "training needs a label per image")
        backbone, head, post = (getattr(self, n) for n in self.part_names)
        logits = head(backbone(batch["image"]))
        return {"logits": logits, **post(logits, label)}


def build_head(opts, in_planes, head_type="base_cls_head"):
    """The head from ``base_cls_head`` / ``vit_head`` kwargs; ``in_plane`` must match the
    backbone."""
    num_classes = opts.take("num_classes", types=(int, list))
    heads = num_classes if isinstance(num_classes, list) else [num_classes]
    if not heads or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in heads):
        raise ConfigError(opts.at("num_classes"), f"expected a positive integer or a list of them, got {num_classes!r}")
    idx = opts.take("input_feature_idx", -1, types=int)
    if not -len(in_planes) <= idx < len(in_planes):
        raise ConfigError(opts.at("input_feature_idx"), f"{idx} but the backbone gives {len(in_planes)} feature maps")
    in_plane = opts.take("in_plane", in_planes[idx], types=int)
    if in_plane != in_planes[idx]:
        raise ConfigError(opts.at("in_plane"), f"{in_plane} but the backbone's feature {idx} has "
                          f"{in_planes[idx]} channels", f"set in_plane: {in_planes[idx]}")
    if head_type == "vit_head":
        from .vit import read_vit_head

        return read_vit_head(opts, in_plane, idx, num_classes), num_classes
    if head_type == "convnext_head":
        from .convnext import read_convnext_head

        return read_convnext_head(opts, in_plane, idx, num_classes), num_classes
    opts.take("use_pool", True, only=True, why="the head pools the backbone's feature map")
    dropout = opts.take("dropout", None, types=(float, type(None)),
                        check=lambda v: None if v is None or 0 <= v < 1 else "must be in [0, 1)")
    # Not a kwarg of UP's base_cls_head (UP: TypeError), but UP's file res50_strikes_100e_bce
    # gives it: honoured as vit_head's pre-logits layer.
    representation = opts.take("representation_size", None, types=(int, type(None)),
                               check=lambda v: None if v is None or v > 0 else "must be > 0")
    width = representation or in_plane
    make_classifier = nn.Linear
    kind, kw = sub_options(opts, "classifier_cfg", "classifier")
    if kind == "norm_linear":
        from .cls_plus import read_norm_linear

        make_classifier = read_norm_linear(kw, width, heads[0] if len(heads) == 1 else None)
    elif kind is not None:
        if kind != "linear":
            raise ConfigError(opts.at("classifier_cfg.type"), f"UP classifier {kind!r} is not mapped",
                              "supported: linear (the default), norm_linear")
        kw.take("in_features", width, only=width)
        kw.done()
    opts.done()
    return ClsHead(in_plane, num_classes, idx, dropout, make_classifier, representation), num_classes


def build_postprocess(opts, num_classes):
    losses_cfg = opts.take("cls_loss", types=(dict, list))
    heads = num_classes if isinstance(num_classes, list) else [num_classes]
    entries = losses_cfg if isinstance(losses_cfg, list) else [losses_cfg]
    if isinstance(losses_cfg, list) and len(entries) != len(heads):
        raise ConfigError(opts.at("cls_loss"), f"{len(entries)} losses for {len(heads)} classifier heads")
    losses = []
    for i, entry in enumerate(entries):
        if isinstance(losses_cfg, list):
            holder, key = Options({i: entry}, opts.at("cls_loss"), "post-process"), i
        else:
            holder, key = Options({"cls_loss": entry}, opts.path, "post-process"), "cls_loss"
        kind, kw = sub_options(holder, key, "loss")
        path = holder.at(key) + ".type"
        losses.append(_read_loss(kind, kw, path, heads[i] if len(entries) > 1 else heads[0]))
    prefix = opts.take("prefix", None, types=(str, type(None)))
    opts.take("multilabel", False, only=False, why="multi-label accuracy is not mapped")
    opts.done()
    return PostProcess(losses, prefix, as_list=isinstance(losses_cfg, list))


def build_classifier(net_cfg, path):
    """A :class:`UPClassifier` from the checked three-entry list."""
    from ...errors import join_path
    from .backbones import build_backbone

    parts, opts = [], [Options(e.get("kwargs"), join_path(join_path(path, i), "kwargs"), f"{e['type']}")
                       for i, e in enumerate(net_cfg)]
    from .vit import VITS

    if (net_cfg[1]["type"] == "vit_head") != (net_cfg[0]["type"] in VITS):
        raise ConfigError(join_path(join_path(path, 1), "type"), f"{net_cfg[1]['type']} does not fit the "
                          f"{net_cfg[0]['type']} backbone", "vit_head goes with a ViT backbone (it reads the class "
                          "token), base_cls_head with the others")
    backbone, sync_group = build_backbone(net_cfg[0]["type"], opts[0])
    opts[1].ignore("inplanes", "UP fills it from prev; in_plane is what the head reads")
    head, num_classes = build_head(opts[1], backbone.out_planes, net_cfg[1]["type"])
    post = build_postprocess(opts[2], num_classes)
    post.heads_path = join_path(join_path(path, 1), "kwargs.num_classes")
    parts = [(net_cfg[0]["name"], backbone), (net_cfg[1]["name"], head), (net_cfg[2]["name"], post)]
    model = UPClassifier(parts, num_classes)
    model.sync_bn_group_size = sync_group
    model.up_backbone_type = net_cfg[0]["type"]
    model.num_classes_path = join_path(join_path(path, 1), "kwargs.num_classes")
    return model


def _translate_up_weights(self, state):
    """UP-named weights (a UP checkpoint or ``pretrain_model``) renamed to ours."""
    from ..ssl.encoder import up_online_encoder_keys
    from .keymap import backbone_rules, family, translate

    state = up_online_encoder_keys(state, self.part_names[0], self.state_dict())  # a UP ssl checkpoint (linear probe)
    state = translate(state, {self.part_names[0]: backbone_rules(self.up_backbone_type)})
    if family(self.up_backbone_type) == "convnext":
        from .convnext import reshape_layer_scales

        state = reshape_layer_scales(state, self.part_names[0])
    return state


UPClassifier.translate_up_weights = _translate_up_weights
