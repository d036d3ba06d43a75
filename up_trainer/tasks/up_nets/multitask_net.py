"""UP's multitask net: one trunk (resnet + ``FPN``) shared by task branches, each branch a run
of net entries wrapped in ``multitask_wrapper`` with the task indices (``idxs``) it runs for.

Mapped shape: resnet + ``FPN`` (no wrapper: every task runs them), then one ATSS detection
branch (``RetinaHeadWithBN``-family head + ``retina_post``, entries 2 and 3, as in
:mod:`.atss_net`) and any number of classification branches (``fpn_cls_head`` +
``base_cls_postprocess``). A branch is named by its first entry (``roi_head``, ``cls_head``);
``multitask.tasks[i].heads`` says which branches task i runs (the UP translation derives it
from the ``idxs``).

The model keeps UP's entry names as its children (``backbone``, ``neck``, ``roi_head``,
``cls_head``, ``post_process``), so a single-task ATSS checkpoint's keys fit and UP-named
weights load through the ATSS name map. ``forward`` runs the current task's branches on one
batch (evaluation), or every task in turn on a :class:`~up_trainer.multitask.batches.TaskBatches`
(training), returning each task's outputs prefixed ``{task}.`` with its losses weighted.
A task that runs both a detection and a classification branch computes the trunk once per
branch (no file of UP does that).
"""
import torch
from torch import nn

from ...errors import ConfigError, join_path
from ...config.up_multitask_branches import split_branches, stripped

CLS_BRANCH = ("fpn_cls_head", "base_cls_postprocess")


class FPNClsHead(nn.Module):
    """UP's ``fpn_cls_head``: each FPN level average-pooled and embedded (Linear + ReLU), the
    embeddings summed over levels (``sum_feature``) or one level's taken, then a linear
    classifier. Parameter names are UP's."""

    def __init__(self, inplanes, feat_planes, num_classes, sum_feature=True, feature_idx=-1):
        super().__init__()
        self.sum_feature, self.feature_idx = sum_feature, feature_idx
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.relu = nn.ReLU(inplace=True)
        self.classification_fc_embeding = nn.Linear(inplanes, feat_planes)
        self.classifier = nn.Linear(feat_planes, num_classes)

    def _embed(self, feature):
        return self.relu(self.classification_fc_embeding(self.pool(feature).flatten(1)))

    def forward(self, features):
        if not self.sum_feature:
            return self.classifier(self._embed(features[self.feature_idx]))
        total = None
        for feature in features:
            e = self._embed(feature)
            total = e if total is None else total + e
        return self.classifier(total)


def read_fpn_cls_head(opts, channels, levels):
    opts.take("inplanes", channels, types=(int, list), check=lambda v: None if v == channels or (
        isinstance(v, list) and v and all(c == channels for c in v)) else f"the FPN gives {channels} channels")
    feat = opts.take("feat_planes", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    num_classes = opts.take("num_classes", types=int, check=lambda v: None if v >= 1 else "must be >= 1")
    sum_feature = opts.take("sum_feature", True, types=bool)
    idx = opts.take("input_feature_idx", -1, types=int, check=lambda v: None if -levels <= v < levels else
                    f"the FPN gives {levels} levels")
    opts.take("use_pool", True, types=bool, only=True, why="the head pools each level")
    opts.take("dropout", None, only=None, why="UP's fpn_cls_head builds a dropout it never applies")
    opts.done()
    return FPNClsHead(channels, feat, num_classes, sum_feature, idx), num_classes


class MultiTaskNet(nn.Module):
    """A detector's trunk, neck and head plus classification branches; see the module docstring."""

    def __init__(self, detector, det_branch, cls_branches):
        super().__init__()
        self.__dict__["detector"] = detector  # its children are registered here, under their own names
        for name, child in detector.named_children():
            self.add_module(name, child)
        self.det_branch = det_branch
        self.cls_branches = {}  # branch name -> (head name, post-process name)
        for head_name, head, post_name, post in cls_branches:
            for name, module in ((head_name, head), (post_name, post)):
                if hasattr(self, name):
                    raise ConfigError(f"net: {name}", "two parts of the net carry this name")
                self.add_module(name, module)
            self.cls_branches[head_name] = (head_name, post_name)
        self.head_names = [det_branch, *self.cls_branches]
        self.num_classes = detector.num_classes  # the detection data's classes are checked against it
        self.task_names, self.task_heads, self.loss_weights = ["default"], [list(self.head_names)], [1.0]
        self.task_idx = 0
        from .task_norm import TaskBatchNorm2d

        counts = [m.task_num for m in self.modules() if isinstance(m, TaskBatchNorm2d)]
        self.norm_task_count = min(counts) if counts else None

    def use_tasks(self, names, heads, loss_weights):
        """Task i (named names[i]) runs the branches heads[i]; its losses are scaled by loss_weights[i]."""
        self.task_names, self.task_heads, self.loss_weights = list(names), [list(h) for h in heads], list(loss_weights)

    def set_task(self, idx):
        """The branches and the per-task norm statistics (task_sync_bn) of task ``idx``."""
        from .task_norm import TaskBatchNorm2d

        self.task_idx = idx
        for m in self.modules():
            if isinstance(m, TaskBatchNorm2d):
                m.set_task(idx)

    def translate_up_weights(self, state):
        return self.detector.translate_up_weights(state)

    def forward(self, batch):
        from ...data.task_batches import TaskBatches

        self.detector.training = self.training  # its forward reads its own flag
        if not isinstance(batch, TaskBatches):
            return self._forward_task(batch)
        out = {}
        for idx, task_batch in enumerate(batch):
            self.set_task(idx)
            name, weight = self.task_names[idx], self.loss_weights[idx]
            for key, value in self._forward_task(task_batch).items():
                scale = weight != 1.0 and "loss" in key and isinstance(value, torch.Tensor)
                out[f"{name}.{key}"] = value * weight if scale else value
        return out

    def _forward_task(self, batch):
        if isinstance(batch, torch.Tensor):
            batch = {"image": batch}
        heads = self.task_heads[self.task_idx]
        out = self.detector(batch) if self.det_branch in heads else {}
        for name, (head_name, post_name) in self.cls_branches.items():
            if name not in heads:
                continue
            x, _ = self.detector.batch_images(batch["image"])
            logits = getattr(self, head_name)(self.detector.features(x))
            label = batch.get("label")
            if label is None and self.training:
                raise ValueError(f"the {name} branch trains on labelled images: its batch has no 'label'")
            out.update({"logits": logits, **getattr(self, post_name)(logits, label)})
        return out


def build_multitask_net(net_cfg, path):
    from .atss_net import build_retina_plus_net
    from .cls import build_postprocess
    from .options import entry_options
    from .atss_net import HEADS, POSTS

    shared, branches = split_branches(net_cfg, path)
    types = [e["type"] for e in net_cfg]
    det = [b for b in branches if types[b[1][0]] in HEADS and types[b[1][0]] != "RetinaSubNet"]
    if shared != [0, 1] or types[1] != "FPN" or len(det) != 1 or det[0][1] != [2, 3] or types[3] not in POSTS:
        raise ConfigError(path, f"the UP multitask parts {' + '.join(types)} do not form a mapped net",
                          "mapped: resnet + FPN + an ATSS branch (RetinaHeadWithBN|... + retina_post|retina_post_iou "
                          "in multitask_wrapper) + fpn_cls_head + base_cls_postprocess branches")
    detector = build_retina_plus_net([stripped(e) for e in net_cfg[:4]], path)
    fpn = detector.neck
    opts = entry_options(net_cfg, path)
    cls = []
    for name, entries, _ in branches:
        if entries == [2, 3]:
            continue
        parts = tuple(types[i] for i in entries)
        if parts != CLS_BRANCH:
            raise ConfigError(join_path(join_path(path, entries[0]), "type"), f"the task branch {' + '.join(parts)} "
                              "is not mapped", f"a classification branch is {' + '.join(CLS_BRANCH)}")
        head_at, post_at = entries
        if net_cfg[head_at].get("prev") not in (None, net_cfg[1]["name"]):
            raise ConfigError(join_path(join_path(path, head_at), "prev"), "a classification branch reads the FPN",
                              f"prev: {net_cfg[1]['name']}")
        head, num_classes = read_fpn_cls_head(opts[head_at], fpn.out_channels, len(fpn.out_strides))
        post = build_postprocess(opts[post_at], num_classes)
        post.heads_path = join_path(join_path(path, head_at), "kwargs.num_classes")
        head.num_classes = num_classes
        cls.append((net_cfg[head_at]["name"], head, net_cfg[post_at]["name"], post))
    model = MultiTaskNet(detector, net_cfg[2]["name"], cls)
    for attr in ("num_classes_counts_background", "num_classes_path", "sync_bn_group_size", "up_part_names"):
        setattr(model, attr, getattr(detector, attr, None))
    model.branch_tasks = {name: idxs for name, _, idxs in branches}  # UP's idxs, for the translation's check
    return model
