"""Drawing on images as uint8 3xHxW tensors: boxes with class and score, captions, PNG files.

Used by ``up predict``, the visualize hook and the evaluation insight, so a prediction looks
the same in all of them.
"""
import os

import torch

from .atomic import replacing

PALETTE = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#bfef45",
           "#fabed4", "#469990", "#dcbeff", "#9a6324", "#fffac8", "#800000", "#aaffc3", "#808000"]


def to_uint8(image):
    """uint8 CxHxW, or float CxHxW in [0, 1] (1 or 3 channels) -> uint8 3xHxW."""
    if image.dtype == torch.uint8:  # a decoded image before its conversion: its own pixels
        image = image.detach().cpu()
        return image[:3].clone() if image.shape[0] >= 3 else image[:1].repeat(3, 1, 1)
    image = image.detach().float().cpu()
    if image.min() < -0.01 or image.max() > 1.01:  # normalized: stretch back into view
        image = (image - image.min()) / (image.max() - image.min() + 1e-6)
    image = image[:3] if image.shape[0] >= 3 else image[:1].repeat(3, 1, 1)
    return (image.clamp(0, 1) * 255).round().to(torch.uint8)


def enlarge(image, min_side=256):
    """Nearest-neighbour integer enlargement so tiny images stay readable; returns (image, factor)."""
    factor = max(1, min_side // max(1, min(image.shape[-2:])))
    if factor > 1:
        image = image.repeat_interleave(factor, dim=-2).repeat_interleave(factor, dim=-1)
    return image, factor


def draw_boxes(image, boxes, labels, classes, scores=None, width=2):
    """uint8 3xHxW with boxes drawn; color by label; text 'class score'."""
    from torchvision.utils import draw_bounding_boxes

    boxes = torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4)
    if len(boxes) == 0:
        return image
    names = [classes[int(lab) - 1] if classes and 1 <= int(lab) <= len(classes) else str(int(lab)) for lab in labels]
    if scores is not None:
        names = [f"{n} {float(s):.2f}" for n, s in zip(names, scores)]
    colors = [PALETTE[int(lab) % len(PALETTE)] for lab in labels]
    return draw_bounding_boxes(image, boxes, labels=names, colors=colors, width=width)


def draw_caption(image, text, color="#3cb44b"):
    """Classification: the image framed, the caption written in the frame's corner."""
    h, w = image.shape[-2:]
    from torchvision.utils import draw_bounding_boxes

    if not text:
        return image
    return draw_bounding_boxes(image, torch.tensor([[0.0, 0.0, w - 1.0, h - 1.0]]), labels=[text], colors=[color],
                               width=3)


def save_png(image, path):
    from PIL import Image

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with replacing(path) as tmp:  # the temp name keeps .png: PIL picks the format by it
        Image.fromarray(image.permute(1, 2, 0).numpy()).save(tmp)


def grid(panels, ncol=4, pad=4):
    """uint8 3xHxW panels of different sizes on one white canvas, ``ncol`` per row."""
    rows = [panels[i:i + ncol] for i in range(0, len(panels), ncol)]
    cell_h = max(p.shape[1] for p in panels)
    cell_w = max(p.shape[2] for p in panels)
    ncols = min(ncol, len(panels))
    canvas = torch.full((3, len(rows) * (cell_h + pad) + pad, ncols * (cell_w + pad) + pad), 255, dtype=torch.uint8)
    for r, row in enumerate(rows):
        for c, p in enumerate(row):
            y, x = pad + r * (cell_h + pad), pad + c * (cell_w + pad)
            canvas[:, y:y + p.shape[1], x:x + p.shape[2]] = p
    return canvas


def figure_to_uint8(fig):
    """A matplotlib Figure rendered by Agg as uint8 3xHxW (for TensorBoard's add_image)."""
    import numpy as np
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    rgba = np.asarray(canvas.buffer_rgba())
    return torch.from_numpy(rgba[..., :3].copy()).permute(2, 0, 1)
