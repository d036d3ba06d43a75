"""visualize: after an evaluation, draw the first N test images' predictions next to the truth."""
import logging
import os
import re

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook
from .train_val_logger import send_images

log = logging.getLogger("up")
EPOCH_PNG = re.compile(r"epoch_\d{3,}\.png")  # the grids' names: epoch_001.png, ...


@HOOKS.register("visualize")
class Visualize(Hook):
    """Draw predictions vs ground truth of the first N test images (PNG in run_dir/vis, TensorBoard).

    Every ``interval`` evaluations the hook runs the (eval-mode) model on test images 0..N-1
    and writes one grid: detection shows ground truth (left) and predictions with
    score >= score_thr (right) per image; classification shows each image captioned
    ``pred score / true`` (green frame when right, red when wrong). The grid goes to
    ``run_dir/<out_dir>/epoch_XXX.png`` and, with ``tensorboard: true``, to TensorBoard as
    image ``vis/predictions`` under ``run_dir/<logdir>`` at the current iteration.
    """

    priority = "LOW"
    allow_multiple = True  # each instance draws into its own out_dir

    def __init__(self, num_images: int = 8, interval: int = 1, score_thr: float = 0.3, out_dir: str = "vis",
                 logdir: str = "log", tensorboard: bool = True, min_side: int = 128):
        super().__init__()
        for key, value, low in (("num_images", num_images, 1), ("interval", interval, 1), ("min_side", min_side, 8)):
            if value < low:
                raise ConfigError(key, f"must be >= {low}, got {value}")
        if not 0.0 <= score_thr <= 1.0:
            raise ConfigError("score_thr", f"must be in [0, 1], got {score_thr}")
        self.num_images, self.interval, self.score_thr = num_images, interval, score_thr
        self.out_dir, self.logdir, self.tensorboard, self.min_side = out_dir, logdir, tensorboard, min_side
        self.evals = 0  # evaluations seen, so the interval survives a resume
        self._writer = None

    @classmethod
    def output_dirs(cls, kwargs):
        dirs = [("out_dir", cls.configured(kwargs, "out_dir"), lambda name: EPOCH_PNG.fullmatch(name) is not None)]
        if cls.configured(kwargs, "tensorboard"):
            dirs.append(("logdir", cls.configured(kwargs, "logdir"), lambda name: name.startswith("events.out.tfevents.")))
        return dirs

    def after_eval(self, trainer, metrics):
        self.evals += 1
        if self.evals % self.interval or not trainer.dist.is_main or trainer.loaders.test_set is None:
            return
        grid = self.render(trainer)
        if grid is None:
            return
        epoch = trainer.state.epoch
        path = os.path.join(trainer.run_dir, self.out_dir, f"epoch_{epoch:03d}.png")
        from ..render import save_png

        save_png(grid, path)
        if self.tensorboard:
            self._tb(trainer).add_image("vis/predictions", grid.numpy(), trainer.state.iter)
            self._writer.flush()
        send_images(trainer, {"vis/predictions": grid}, trainer.state.iter)
        log.info("visualize: %s", path)

    def _tb(self, trainer):
        if self._writer is None:  # lazy: tensorboardX is heavy, and only rank 0 writes
            from ..writers.tensorboard import TensorboardWriter

            self._writer = TensorboardWriter.extra_file(os.path.join(trainer.run_dir, self.logdir), ".visualize")
        return self._writer

    @torch.no_grad()
    def render(self, trainer):
        """uint8 3xHxW grid of the first N test images, or None for an empty test set."""
        from ..data.loader import collate_fn_of
        from ..data.model_input import batch_to_model
        from ..render import draw_boxes, draw_caption, enlarge, to_uint8

        ds = trainer.loaders.test_set
        n = min(self.num_images, len(ds))
        if n == 0:
            return None
        batch = collate_fn_of(ds)([ds[i] for i in range(n)])
        module, was = trainer.module, trainer.module.training
        module.eval()
        try:
            outputs = module(batch_to_model(batch, trainer.device, non_blocking=False))
        finally:
            module.train(was)
        classes = list(getattr(ds, "classes", None) or [])
        panels = []
        if "detections" in outputs:
            for image, target, det in zip(batch["image"], batch["target"], outputs["detections"]):
                base, f = enlarge(to_uint8(image), self.min_side)
                keep = det["scores"].cpu() >= self.score_thr
                gt = draw_boxes(base, target["boxes"] * f, target["labels"], classes)
                pred = draw_boxes(base, det["boxes"].cpu()[keep] * f, det["labels"].cpu()[keep], classes,
                                  det["scores"].cpu()[keep])
                sep = torch.full((3, base.shape[1], 4), 255, dtype=torch.uint8)
                panels.append(torch.cat([gt, sep, pred], dim=2))
        else:
            preds = outputs.get("preds")
            if preds is None:
                preds = outputs["logits"].argmax(dim=1)
            scores = outputs["scores"] if "scores" in outputs else outputs["logits"].float().softmax(1)
            labels = batch.get("label")
            for i, image in enumerate(batch["image"]):
                p = int(preds[i])
                name = classes[p] if p < len(classes) else str(p)
                text = f"{name} {float(scores[i, p]):.2f}"
                color = "#3cb44b"
                if labels is not None:
                    t = int(labels[i])
                    text += f" / {classes[t] if t < len(classes) else t}"
                    color = "#3cb44b" if t == p else "#e6194b"
                base, _ = enlarge(to_uint8(image), self.min_side)
                panels.append(draw_caption(base, text, color))
        return _grid(panels)

    def after_train(self, trainer):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def state_dict(self):
        return {"evals": self.evals}

    def load_state_dict(self, state):
        self.evals = int(state.get("evals", 0))


def _grid(panels, ncol=4, pad=4):
    from ..render import grid

    return grid(panels, ncol, pad)
