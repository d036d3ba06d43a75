"""Box code shared by the detection families of our own (YOLOX, the ATSS RetinaNet, FCOS, the
two-stage nets): one padded input tensor from a batch, the targets a forward reads, the paired
IoU with one eps convention, UP's box coder, the positive count averaged over processes, and
Quality Focal Loss (the ATSS RetinaNet's and OneNet's class loss)."""
import torch
import torch.nn.functional as F
from torchvision.models.detection._utils import BoxCoder

SIZE_DIVISOR = 32  # the coarsest stride of these nets: the padded input divides into every level
IOU_EPS = 1e-7  # added to every IoU's union: a degenerate pair gives 0, never nan


def batch_images(images, divisor=SIZE_DIVISOR):
    """(N x C x H' x W' zero-padded bottom/right to a multiple of ``divisor``, [(h, w)] of each
    image before padding). ``images``: a list of C x H x W tensors, one such tensor, or N x C x H x W."""
    if isinstance(images, torch.Tensor) and images.dim() == 3:
        images = [images]
    sizes = [tuple(int(v) for v in im.shape[-2:]) for im in images]
    ph = -(-max(h for h, _ in sizes) // divisor) * divisor
    pw = -(-max(w for _, w in sizes) // divisor) * divisor
    if isinstance(images, torch.Tensor):
        return F.pad(images, (0, pw - images.shape[-1], 0, ph - images.shape[-2])), sizes
    x = images[0].new_zeros((len(images), images[0].shape[0], ph, pw))
    for i, im in enumerate(images):
        x[i, :, : im.shape[-2], : im.shape[-1]] = im
    return x, sizes


def batch_targets(batch, training):
    """The ``[{boxes xyxy, labels 1..C}]`` of ``batch["target"]`` (None in eval without targets)."""
    targets = batch.get("target")
    if training and targets is None:
        raise ValueError("a detector in training mode needs batch['target']")
    return None if targets is None else [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets]


def paired_iou(a, b, eps=IOU_EPS):
    """IoU of a[i] with b[i] (xyxy, [N, 4] each) -> [N]."""
    wh = (torch.min(a[:, 2:], b[:, 2:]) - torch.max(a[:, :2], b[:, :2])).clamp(min=0)
    inter = wh[:, 0] * wh[:, 1]
    area_a = (a[:, 2] - a[:, 0]).clamp(min=0) * (a[:, 3] - a[:, 1]).clamp(min=0)
    area_b = (b[:, 2] - b[:, 0]).clamp(min=0) * (b[:, 3] - b[:, 1]).clamp(min=0)
    return inter / (area_a + area_b - inter + eps)


def box_coder(stds=(1.0, 1.0, 1.0, 1.0)):
    """UP's offsets (dx, dy, dw, dh) divided by ``stds`` (torchvision's weights are their
    inverses); sizes clipped at exp(log(1000 / 16)), torchvision's and UP's bound."""
    return BoxCoder(tuple(1.0 / s for s in stds))


def mean_over_processes(value):
    """``value`` (a 0-d tensor, e.g. the positives of this process) summed over data-parallel
    processes / their number, at least 1: every process divides its losses by the same number."""
    import torch.distributed as dist

    value = value.detach().float()
    if dist.is_available() and dist.is_initialized():
        value = value.clone()
        dist.all_reduce(value)
        value = value / dist.get_world_size()
    return max(float(value), 1.0)


def quality_focal_loss(logits, labels, quality, beta=2.0):
    """Summed QFL. ``logits`` [N, C]; ``labels`` [N] (0 background, 1..C, -1 ignored);
    ``quality`` [N] the soft target of each positive at its class (read only where labels > 0)."""
    keep = labels >= 0
    logits, labels, quality = logits[keep], labels[keep], quality[keep]
    target = torch.zeros_like(logits)
    pos = (labels > 0).nonzero()[:, 0]
    target[pos, labels[pos] - 1] = quality[pos].to(logits.dtype)
    modulator = (target - logits.sigmoid()).abs().pow(beta)
    return (F.binary_cross_entropy_with_logits(logits, target, reduction="none") * modulator).sum()
