"""grad_cam (UP): Grad-CAM heatmaps of training images, written as PNG files.

Before every ``freq``-th training iteration, the batch's images go through the model once more
(eval mode, no autocast): the class score of each image's label is differentiated with respect
to the activation of ``layer_name`` (default: the model's last Conv2d), the channel-averaged
gradients weigh the activation channels, and the ReLU of the sum, scaled to [0, 1] and
upsampled to the image, is drawn over the image in a jet colour map (Selvaraju et al., 2017).

Unlike UP's hook it does not step the optimizer and does not touch the parameters' gradients
(``torch.autograd.grad`` on the activation only), BatchNorm statistics (eval mode) or random
streams: training goes on exactly as without the hook. Main process only. Classification nets
(a ``logits`` output) with ``label`` in the batch.

Files: ``{save_dir}/i{iteration}_{sample}_{label}.png``, where ``sample`` is the batch's
``index`` (or the position in the batch) and ``label`` the class name from ``class_names`` when
given. ``class_names``: a JSON file mapping the label (as a string) to a name; UP's
``"name|prefix"`` values put the prefix in front of the file name, as UP does.
"""
import json
import logging
import os
import re

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook
from .gradient_collector import find_module

log = logging.getLogger("up")
CAM_PNG = re.compile(r"([\w.-]+_)?i\d+_\d+_[\w.-]*\.png")  # what save_png below names: [prefix_]i{iter}_{sample}_{name}.png


def jet(x):
    """Jet colour map of values in [0, 1]: HxW -> 3xHxW in [0, 1]."""
    four = 4.0 * x
    return torch.stack([(1.5 - (four - c).abs()).clamp(0, 1) for c in (3.0, 2.0, 1.0)])


def cam_maps(feature, grad, size):
    """Grad-CAM per sample: NxCxhxw activations and gradients -> NxHxW maps in [0, 1]."""
    weights = grad.mean(dim=(2, 3), keepdim=True)
    cam = torch.relu((weights * feature).sum(dim=1, keepdim=True))
    cam = torch.nn.functional.interpolate(cam, size=size, mode="bilinear", align_corners=False)[:, 0]
    low = cam.flatten(1).min(dim=1).values[:, None, None]
    high = cam.flatten(1).max(dim=1).values[:, None, None]
    return (cam - low) / (high - low).clamp_min(1e-12)


@HOOKS.register("grad_cam")
class GradCAM(Hook):
    """Grad-CAM heatmaps of the training images' labels, every `freq` iterations (no optimizer step).

    layer_name: module whose activation is explained (dotted name; default: the last Conv2d).
    class_names: JSON file {label: name} (UP's "name|prefix" values accepted). save_dir: output
    folder (relative to --work-dir). freq: every freq-th iteration (1: every one, as UP).
    """

    priority = "LOWEST"

    def __init__(self, layer_name: str = None, class_names: str = None, save_dir: str = "grad_cam", freq: int = 1):
        super().__init__()
        if freq < 1:
            raise ConfigError("freq", f"must be >= 1, got {freq}")
        self.layer_name = layer_name
        self.class_names_file = class_names
        self.save_dir = save_dir
        self.freq = freq
        self.class_names = {}
        self._feature = None
        self._capture = False
        self._handle = None
        self.written = 0

    @classmethod
    def output_dirs(cls, kwargs):
        return [("save_dir", cls.configured(kwargs, "save_dir"), lambda name: CAM_PNG.fullmatch(name) is not None)]

    def before_train(self, trainer):
        model, base = trainer.module, f"hooks.{self.name}.kwargs"
        if self.layer_name:
            layer = find_module(model, self.layer_name, f"{base}.layer_name")
        else:
            convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
            if not convs:
                raise ConfigError(f"{base}.layer_name", "the model has no Conv2d", "name the layer to explain")
            layer = convs[-1]
        if self.class_names_file:
            self.class_names = self._load_names(self.class_names_file, f"{base}.class_names")
        if not os.path.isabs(self.save_dir):
            self.save_dir = os.path.join(trainer.run_dir, self.save_dir)

        def keep_output(module, inputs, output):
            if self._capture:
                self._feature = output

        if self._handle is not None:
            self._handle.remove()
        self._handle = layer.register_forward_hook(keep_output)

    @staticmethod
    def _load_names(path, where):
        try:
            with open(path, encoding="utf-8") as f:
                names = json.load(f)
        except (OSError, ValueError) as exc:
            raise ConfigError(where, f"cannot read {path}: {exc}") from None
        if not isinstance(names, dict):
            raise ConfigError(where, f"{path} must hold a JSON object {{label: name}}")
        return {str(k): str(v) for k, v in names.items()}

    def before_forward(self, trainer, iteration, batch):
        if iteration % self.freq or not trainer.dist.is_main:
            return
        if not isinstance(batch, dict) or "image" not in batch or "label" not in batch:
            raise ConfigError(f"hooks.{self.name}", "grad_cam needs classification batches (image and label)")
        from ..data.model_input import batch_to_model

        data = batch_to_model({"image": batch["image"], "model_input": batch.get("model_input")}, trainer.device,
                              non_blocking=False)
        labels = batch["label"].to(trainer.device)
        model = trainer.module
        was_training = model.training
        model.eval()
        self._capture, self._feature = True, None
        try:
            with torch.enable_grad():
                outputs = model(data)
                feature = self._feature
                if not isinstance(outputs, dict) or not isinstance(outputs.get("logits"), torch.Tensor):
                    raise ConfigError(f"hooks.{self.name}", "grad_cam needs a single-head classification net "
                                      "(one logits tensor)")
                if feature is None or not feature.requires_grad:
                    log.warning("grad_cam: the layer's activation has no gradient (frozen?); nothing drawn")
                    return
                # Samples are independent in eval mode, so one backward of the summed scores gives
                # each sample the gradient of its own label's score.
                score = outputs["logits"].gather(1, labels[:, None]).sum()
                (grad,) = torch.autograd.grad(score, feature)
        finally:
            self._capture, self._feature = False, None
            model.train(was_training)
        self._draw(iteration, batch, feature.detach(), grad.detach())

    def _draw(self, iteration, batch, feature, grad):
        from ..render import save_png, to_uint8

        images = batch["image"]
        maps = cam_maps(feature.float(), grad.float(), images.shape[-2:]).cpu()
        index = batch.get("index")
        for b in range(images.shape[0]):
            label = str(int(batch["label"][b]))
            name, prefix = self.class_names.get(label, label), ""
            if "|" in name:
                name, prefix = (part.strip() for part in name.split("|", 1))
            sample = int(index[b]) if index is not None else b
            stem = re.sub(r"[^\w.-]+", "_", f"{prefix + '_' if prefix else ''}i{iteration}_{sample}_{name}")
            picture = to_uint8(images[b]).float() / 255
            overlay = 0.5 * picture + 0.5 * jet(maps[b])
            save_png((overlay.clamp(0, 1) * 255).round().to(torch.uint8), os.path.join(self.save_dir, stem + ".png"))
            self.written += 1

    def after_train(self, trainer):
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
