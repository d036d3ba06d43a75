"""safetensors_export: the model weights as ``<name>.safetensors`` beside every checkpoint.

For serving and sharing: a .safetensors file holds only tensors (no pickle), loads without
torch (``safetensors.safe_open``) and memory-maps. ``ckpt_e3.pth`` gets ``ckpt_e3.safetensors``;
names written as links of one checkpoint (ckpt_best.pth, ckpt_latest.pth) get links of one
export. Metadata: epoch, iter, and which weights (model or ema).

Mechanism: before_save_checkpoint runs before the names are known and before the .pth is on
disk, so at before_train the hook asks the store to call it after every save
(``trainer.store.add_after_save``): the store hands the checkpoint over (written atomically,
on a background thread with saver.async_write), then the export is written from the same
state dict, atomically too, before training moves on. Only rank 0 saves, so only
rank 0 exports. auto_save_best's max_keep_ckpts rotation removes a rotated file's export with it.

safetensors is an optional dependency: ``pip install safetensors``.
"""
import logging
import os

from ..engine.checkpoint import LATEST, atomic_link, atomic_write_bytes
from ..engine.checkpoint_load import inference_weights
from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


def export_name(path):
    return os.path.splitext(path)[0] + ".safetensors"


def tensors_for_export(state_dict):
    """CPU, contiguous, no two entries sharing storage (safetensors refuses shared tensors)."""
    import torch

    out, seen = {}, set()
    for key, value in state_dict.items():
        if not isinstance(value, torch.Tensor):
            continue  # e.g. a module's _extra_state: not weights
        t = value.detach().to("cpu").contiguous()
        ptr = (t.untyped_storage().data_ptr(), t.storage_offset()) if t.numel() else None
        if ptr in seen:
            t = t.clone()  # tied weights: stored twice, loaded back as equal tensors
        seen.add(ptr)
        out[key] = t
    return out


@HOOKS.register("safetensors_export")
class SafetensorsExport(Hook):
    """Write the model weights as .safetensors beside each saved checkpoint (needs `pip install safetensors`).

    use_ema: export the EMA weights instead of the raw ones when the checkpoint holds them.
    """

    priority = "NORMAL"

    def __init__(self, use_ema: bool = False):
        super().__init__()
        try:
            import safetensors.torch  # noqa: F401
        except ImportError:
            raise ConfigError("", "safetensors_export needs the optional safetensors package",
                              "install it with `pip install safetensors`, or remove the hook") from None
        self.use_ema = use_ema
        self.written = []  # export paths, in order (diagnostics and tests)

    def before_train(self, trainer):
        trainer.store.add_after_save(self._export_saved)

    def _export_saved(self, ckpt, paths):
        if paths:
            self.export(ckpt, paths, os.path.join(os.path.dirname(paths[0]), LATEST))

    def export(self, ckpt, paths, latest_path):
        from safetensors.torch import save as to_bytes

        weights, kind, _ = inference_weights(ckpt, self.use_ema)
        meta = {"format": "pt", "weights": kind, "epoch": str(ckpt.get("epoch")), "iter": str(ckpt.get("iter"))}
        data = to_bytes(tensors_for_export(weights), metadata=meta)
        first = export_name(paths[0])
        atomic_write_bytes(first, lambda f: f.write(data))
        targets = list(paths[1:]) + ([] if latest_path in paths else [latest_path])
        for p in targets:
            atomic_link(first, export_name(p))
        self.written.append(first)
        log.info("exported %s weights to %s", kind, ", ".join(os.path.basename(export_name(p))
                                                              for p in [paths[0]] + targets))
