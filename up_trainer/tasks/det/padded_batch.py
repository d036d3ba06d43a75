"""One padded input tensor from a detection batch's images (the detectors of our own that take
no torchvision transform: YOLOX, the ATSS RetinaNet, UP's FCOS and two-stage nets)."""
import torch
import torch.nn.functional as F

SIZE_DIVISOR = 32  # the coarsest stride of these nets: the padded input divides into every level


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
