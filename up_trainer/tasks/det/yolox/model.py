"""YoloxModel: CSPDarknet + YoloxPAFPN + YoloXHead, SimOTA losses, decode and NMS, with the
forward contract of the project's other detectors (:class:`..models.DetectionModel`)."""
import torch
from torch import nn

from ....errors import ConfigError
from ....pretrained import weights_path
from ....weights import load_fitting, load_weights
from ..box_ops import batch_images
from ..simota import SimOTAAssigner
from .backbone import CSPDarknet
from .head import YoloXHead
from .layers import BN_MOMENTUM, check_act
from .losses import YoloxCriterion
from .megvii_weights import from_megvii, is_megvii_layout
from .neck import YoloxPAFPN
from .postprocess import YoloxPostprocess, flatten_outputs

# size -> (depth multiplier, width multiplier, depthwise convolutions), as published
SIZES = {"nano": (0.33, 0.25, True), "tiny": (0.33, 0.375, False), "s": (0.33, 0.50, False),
         "m": (0.67, 0.75, False), "l": (1.0, 1.0, False), "x": (1.33, 1.25, False)}


class YoloxModel(nn.Module):
    """YOLOX taking and returning dicts.

    forward(batch): ``batch["image"]`` a list of float CxHxW in [0, 1] (or an NxCxHxW tensor,
    or the bare tensor), padded here bottom/right with 0 to a multiple of 32 and multiplied by
    ``pixel_scale`` (YOLOX sees 0-255 pixels). Training: ``{loss_cls, loss_obj, loss_iou}``
    plus ``loss_l1`` while ``use_l1`` is on (the last no-augmentation epochs). Eval:
    ``{"detections": [{boxes xyxy in the input image's pixels, scores, labels 1..C}, ...]}``
    and, when the batch has targets, the same losses (the validation loss).
    """

    kind = "yolox"

    def __init__(self, backbone, neck, roi_head, criterion, postprocess, strides=(8, 16, 32),
                 pixel_scale=255.0, use_l1=False):
        super().__init__()
        self.backbone, self.neck, self.roi_head = backbone, neck, roi_head
        self.num_classes = roi_head.num_classes
        self.strides = list(strides)
        self.criterion, self.postprocess = criterion, postprocess
        self.pixel_scale, self.use_l1 = float(pixel_scale), bool(use_l1)

    def batch_images(self, images):
        """(N x C x H' x W' padded batch scaled by ``pixel_scale``, [(h, w)] of each image before padding)."""
        x, sizes = batch_images(images)
        return x * self.pixel_scale, sizes

    def forward(self, batch):
        if isinstance(batch, torch.Tensor):  # a bare NxCxHxW tensor (flops counting, tracing)
            batch = {"image": batch}
        x, sizes = self.batch_images(batch["image"])
        outputs = flatten_outputs(self.roi_head(self.neck(self.backbone(x))), self.strides)
        targets = batch.get("target")
        if self.training:
            if targets is None:
                raise ValueError("YoloxModel in training mode needs batch['target']")
            return self.criterion(outputs, targets, self.use_l1, sizes)
        result = {"detections": self.postprocess(outputs, sizes)}
        if targets is not None:
            result.update(self.criterion(outputs, targets, self.use_l1, sizes))
        return result

    def load_pretrained(self, path):
        """Load what fits from a local file (``module.`` prefixes dropped; Megvii's layout
        mapped, :mod:`.megvii_weights`); report the rest."""
        state = {(k[len("module."):] if k.startswith("module.") else k): v for k, v in load_weights(path).items()}
        if is_megvii_layout(state):
            state = from_megvii(state)
        return load_fitting(self, state, f"pretrained {path}")


def build_yolox(num_classes, size="s", depth=None, width=None, depthwise=None, act="silu",
                iou_loss="square_iou", iou_weight=5.0, use_l1=False, center_radius=2.5, candidate_k=10,
                score_thresh=0.01, nms_thresh=0.65, pre_nms_top_n=1000, detections_per_img=100,
                pixel_scale=255.0, prior_prob=0.01, neck_shortcut=False, pretrained=None, min_k=1,
                bn_momentum=BN_MOMENTUM):
    """A YoloxModel of a published ``size``; ``depth``/``width``/``depthwise`` override it."""
    if size not in SIZES:
        raise ConfigError("size", f"{size!r} is not one of {', '.join(SIZES)}")
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError("num_classes", f"must be an integer >= 1 (foreground classes), got {num_classes!r}")
    d, w, dw = SIZES[size]
    depth, width = d if depth is None else depth, w if width is None else width
    depthwise = dw if depthwise is None else depthwise
    for name, value in (("depth", depth), ("width", width)):
        if not value > 0:
            raise ConfigError(name, f"must be > 0, got {value}")
    if int(width * 64) < 2:
        raise ConfigError("width", f"{width} leaves {int(width * 64)} stem channels (needs >= 2)")
    if not isinstance(min_k, int) or min_k < 1:
        raise ConfigError("min_k", f"must be an integer >= 1, got {min_k!r}")
    if not 0 < bn_momentum <= 1:
        raise ConfigError("bn_momentum", f"must be in (0, 1], got {bn_momentum!r}")
    act = check_act(act)
    backbone = CSPDarknet(depth, width, depthwise=depthwise, act=act)
    neck = YoloxPAFPN(backbone.out_channels, depth, depthwise=depthwise, act=act, shortcut=neck_shortcut)
    head = YoloXHead(num_classes, neck.out_channels, int(256 * width), depthwise=depthwise, act=act,
                     prior_prob=prior_prob)
    criterion = YoloxCriterion(num_classes, iou_loss, iou_weight,
                               SimOTAAssigner(center_radius=center_radius, candidate_k=candidate_k, min_k=min_k))
    post = YoloxPostprocess(score_thresh, nms_thresh, pre_nms_top_n, detections_per_img)
    model = YoloxModel(backbone, neck, head, criterion, post, backbone.out_strides, pixel_scale, use_l1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.momentum = float(bn_momentum)
    pretrained = weights_path(pretrained, "pretrained", imagenet="YOLOX's CSPDarknet has no published ImageNet "
                              "weights; coco is Megvii's release", coco=f"yolox_{size}")
    if pretrained:
        model.load_pretrained(pretrained)
    return model
