"""UP's region proposal stage on torchvision's RegionProposalNetwork: UP's smooth-L1 ``sigma``
(beta = 1 / sigma^2), UP's normalisation (both losses over the sampled anchors for rpn_post,
over the positive ones for retina_post), anchors
crossing the image border by more than ``allowed_border`` pixels left out of training (UP's
rule; -1 keeps all), and the losses computed whenever targets are given (the validation loss
too), with the phase's top-n settings."""
import torch
import torch.nn.functional as F
from torchvision.models.detection.rpn import RegionProposalNetwork, concat_box_prediction_layers


class UPRegionProposals(RegionProposalNetwork):
    def __init__(self, *args, beta=1 / 9, allowed_border=-1, cls_weight=1.0, loc_weight=1.0,
                 per_positive=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.beta, self.allowed_border, self.per_positive = float(beta), allowed_border, per_positive
        self.cls_weight, self.loc_weight = cls_weight, loc_weight

    def forward(self, images, features, targets=None):
        maps = list(features.values())
        objectness, deltas = self.head(maps)
        anchors = self.anchor_generator(images, maps)
        per_level = [o[0].numel() for o in objectness]
        objectness, deltas = concat_box_prediction_layers(objectness, deltas)
        proposals = self.box_coder.decode(deltas.detach(), anchors).view(len(anchors), -1, 4)
        boxes, _ = self.filter_proposals(proposals, objectness, images.image_sizes, per_level)
        losses = {}
        if targets is not None:
            labels, matched = self.assign_targets_to_anchors(anchors, targets)
            self._drop_border_anchors(labels, anchors, images.image_sizes)
            wanted = self.box_coder.encode(matched, anchors)
            cls_loss, loc_loss = self.compute_loss(objectness, deltas, labels, wanted)
            losses = {"loss_rpn_cls": self.cls_weight * cls_loss, "loss_rpn_loc": self.loc_weight * loc_loss}
        return boxes, losses

    def _drop_border_anchors(self, labels, anchors, sizes):
        if self.allowed_border < 0:
            return
        b = self.allowed_border
        for lab, anc, (h, w) in zip(labels, anchors, sizes):
            outside = (anc[:, 0] < -b) | (anc[:, 1] < -b) | (anc[:, 2] >= w + b) | (anc[:, 3] >= h + b)
            lab[outside] = -1.0  # neither positive nor negative: never sampled

    def compute_loss(self, objectness, deltas, labels, wanted):
        pos, neg = self.fg_bg_sampler(labels)
        pos = torch.where(torch.cat(pos))[0]
        sampled = torch.cat([pos, torch.where(torch.cat(neg))[0]])
        labels, wanted = torch.cat(labels), torch.cat(wanted)
        # both losses summed and divided by the sampled anchors (UP's rpn_post, torchvision) or by the
        # positive ones (UP's retina_post); a two-way softmax's cross-entropy is this BCE on the
        # logits' difference
        count = max(pos.numel() if self.per_positive else sampled.numel(), 1)
        loc = F.smooth_l1_loss(deltas[pos], wanted[pos], beta=self.beta, reduction="sum") / count
        cls = F.binary_cross_entropy_with_logits(objectness.flatten()[sampled], labels[sampled], reduction="sum")
        return cls / count, loc


class UPRPNHead(torch.nn.Module):
    """UP's NaiveRPN: a 3x3 conv to ``feat_planes`` + ReLU, then per anchor one objectness
    logit (UP's two-way softmax is a sigmoid of the two logits' difference: one logit
    carries it) and four deltas; shared over levels."""

    def __init__(self, in_channels, feat_planes, num_anchors, std=0.01):
        super().__init__()
        self.conv3x3 = torch.nn.Conv2d(in_channels, feat_planes, 3, 1, 1)
        self.conv_cls = torch.nn.Conv2d(feat_planes, num_anchors, 1)
        self.conv_loc = torch.nn.Conv2d(feat_planes, 4 * num_anchors, 1)
        for m in (self.conv3x3, self.conv_cls, self.conv_loc):
            torch.nn.init.normal_(m.weight, std=std)
            torch.nn.init.zeros_(m.bias)

    def forward(self, maps):
        logits, deltas = [], []
        for x in maps:
            x = F.relu(self.conv3x3(x))
            logits.append(self.conv_cls(x))
            deltas.append(self.conv_loc(x))
        return logits, deltas
