"""Optimizer, LR schedule, AMP and gradient accumulation: everything between loss and step.

The precision (fp32, or autocast in float16/bfloat16) is decided in precision.py.
The trainer calls, per micro-batch: ``with optim.step_context(model, is_update):`` around
forward+backward, ``optim.backward(loss, group_size)``, and ``optim.step()`` when
``is_update``. Hooks that touch gradients (grad_clipper) call ``optim.unscale_()`` first.
"""
import contextlib
import logging
import warnings

import torch

from ..errors import ConfigError, did_you_mean
from .precision import decide_precision, log_plan, requested

log = logging.getLogger("up")


def optimizer_class(name, path):
    if name == "LAMB":  # UP's pure-PyTorch LAMB
        from .lamb import LAMB

        return LAMB
    if name == "LARS":  # UP's LARS
        from .lars import LARS

        return LARS
    if name == "FusedFP16AdamW":  # UP's (linklink's) fused AdamW: torch's AdamW, fused where it can be
        return torch.optim.AdamW
    cls = getattr(torch.optim, name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        names = sorted(n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)
                       and issubclass(getattr(torch.optim, n), torch.optim.Optimizer) and n != "Optimizer")
        names += ["LAMB", "LARS", "FusedFP16AdamW"]
        raise ConfigError(path, f"unknown optimizer {name!r}", did_you_mean(name, names) or f"known: {', '.join(names)}")
    return cls


def build_optimizer(model, cfg, path="trainer.optimizer"):
    from ..registry import check_kwargs
    from .numbers import check_numbers
    from .param_groups import build_param_groups

    if "type" not in cfg:
        raise ConfigError(path, "missing 'type' (e.g. SGD, AdamW)")
    keys = ["type", "kwargs", "paramwise_cfg", "pconfig", "register_type"]
    keys.append("special_param_group")  # UP: parameters grouped by name (engine/up_param_groups.py)
    extra = set(cfg) - set(keys)
    if extra:
        key = sorted(extra)[0]
        raise ConfigError(f"{path}.{key}", "unknown key", did_you_mean(key, keys))
    register = cfg.get("register_type", "base")
    if register == "qat_weights":  # UP's QAT YOLOX groups: exactly yolov5_except's three, with no except_keys
        register = "yolov5_except"
    if register not in ("base", "yolov5", "yolov5_except"):
        raise ConfigError(f"{path}.register_type", f"unknown {register!r}",
                          "base (groups from pconfig / paramwise_cfg), yolov5 (YOLOv5's four groups) or "
                          "yolov5_except (YOLOv5's groups, except_keys modules' biases decayed; UP's qat_weights is it "
                          "without except_keys)")
    cls = optimizer_class(cfg["type"], f"{path}.type")
    kwargs = dict(cfg.get("kwargs") or {})
    if register == "yolov5_except":
        from .up_param_groups import yolov5_except_param_groups

        if cfg.get("pconfig") or cfg.get("paramwise_cfg"):
            raise ConfigError(f"{path}.register_type", "yolov5_except makes its own groups",
                              "remove pconfig / paramwise_cfg, or use register_type: base")
        groups = yolov5_except_param_groups(model, kwargs, f"{path}.kwargs")  # pops except_keys
    check_numbers(kwargs, f"{path}.kwargs")
    check_numbers(cfg.get("paramwise_cfg"), f"{path}.paramwise_cfg")
    pconfig = cfg.get("pconfig")
    if isinstance(pconfig, dict):  # nodecay holds name substrings, not numbers
        check_numbers({k: v for k, v in pconfig.items() if k != "nodecay"}, f"{path}.pconfig")
    check_kwargs(cls, kwargs, f"{path}.kwargs", provided={"params"})
    if register == "yolov5_except":
        pass
    elif register == "yolov5":
        from .up_param_groups import yolov5_param_groups

        if cfg.get("pconfig") or cfg.get("paramwise_cfg"):
            raise ConfigError(f"{path}.register_type", "yolov5 makes its own groups",
                              "remove pconfig / paramwise_cfg, or use register_type: base")
        groups = yolov5_param_groups(model, kwargs, f"{path}.kwargs")
    else:
        groups = build_param_groups(model, kwargs, cfg.get("paramwise_cfg"), f"{path}.paramwise_cfg",
                                    optimizer_cls=cls, pconfig=cfg.get("pconfig"),
                                    special=cfg.get("special_param_group"))
    if cfg["type"] == "FusedFP16AdamW":
        kwargs.setdefault("fused", fused_adamw_possible(model))  # a fused given in kwargs is kept
    try:
        return cls(groups, **kwargs)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}.kwargs", str(exc)) from None


def fused_adamw_possible(model):
    """UP's FusedFP16AdamW (linklink's fp16 fused AdamW) is torch's AdamW, with ``fused=True``
    where every parameter sits on a device torch's fused kernel serves (CUDA), else plain."""
    devices = {p.device.type for p in model.parameters()}
    fused = bool(devices) and devices <= {"cuda"}
    log.info("optimizer FusedFP16AdamW: torch.optim.AdamW %s", "fused=True" if fused else
             f"(not fused: parameters on {', '.join(sorted(devices)) or 'no device'})")
    return fused


class Optimization:
    """Everything between loss and step. ``schedule``: the run's
    :class:`~up_trainer.engine.schedule.Schedule` (its epoch length and length size the LR
    schedule). ``batch_size`` / ``world_size`` only matter for UP's lr scaling
    (``trainer.lr_scheduler.warmup_register_type: base``)."""

    def __init__(self, model, trainer_cfg, runtime_cfg, device, schedule, *, batch_size=1, world_size=None):
        from .lr_schedulers import build_lr_scheduler

        self.optimizer = build_optimizer(model, trainer_cfg["optimizer"])
        self.accumulate = trainer_cfg["accumulate"]
        # Schedules count optimizer updates; the last, short accumulation group is one too.
        self.updates_per_epoch = -(-schedule.epoch_len // self.accumulate)
        if world_size is None:
            world_size = torch.distributed.get_world_size() if torch.distributed.is_initialized() else 1
        sched_upe, sched_epochs = schedule.lr_span(self.updates_per_epoch)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, trainer_cfg.get("lr_scheduler"), sched_upe,
                                               sched_epochs, world_size=world_size,
                                               batch_size=batch_size * self.accumulate)
        self.device_type = device.type
        self.precision = decide_precision(runtime_cfg, device)
        log_plan(self.precision)
        self.amp_dtype = self.precision.runs
        self.scaler = torch.amp.GradScaler(self.device_type) if self.precision.scaler else None
        self._unscaled = False

    def autocast(self):
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.amp_dtype)

    @staticmethod
    def step_context(model, is_update):
        """DDP: skip the gradient all-reduce on micro-steps that do not update."""
        if not is_update and hasattr(model, "no_sync"):
            return model.no_sync()
        return contextlib.nullcontext()

    def is_update(self, epoch_iter, epoch_len):
        """Micro-batch ``epoch_iter`` (0-based) closes an accumulation group."""
        return (epoch_iter + 1) % self.accumulate == 0 or epoch_iter + 1 == epoch_len

    def group_size(self, epoch_iter, epoch_len):
        """Real size of the accumulation group holding ``epoch_iter``: the last one may be short."""
        start = epoch_iter - epoch_iter % self.accumulate
        return min(self.accumulate, epoch_len - start)

    def backward(self, loss, group_size=1):
        loss = loss / group_size if group_size > 1 else loss
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        loss.backward()

    def unscale_(self):
        """Bring gradients to their true scale (idempotent within one update)."""
        if self.scaler is not None and not self._unscaled:
            self.scaler.unscale_(self.optimizer)
            self._unscaled = True

    def grad_norm(self):
        """Total 2-norm of the gradients (true scale under fp16) as a 0-dim tensor, or None
        without gradients. One fused ``torch._foreach_norm`` and one small reduction: no
        per-tensor kernel launches and no host sync (the caller converts when it logs)."""
        grads = [p.grad for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        if not grads:
            return None
        self.unscale_()
        norms = torch._foreach_norm(grads)
        device = norms[0].device
        return torch.linalg.vector_norm(torch.stack([n.to(device, torch.float32) for n in norms]))

    def step(self):
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self._unscaled = False
        self.optimizer.zero_grad(set_to_none=True)
        if self.lr_scheduler is None:
            return
        if self.scaler is None:
            self.lr_scheduler.step()
            return
        # The schedule counts updates, skipped ones included (as the unscaled run would); when the
        # scaler skipped the very first step torch warns that the scheduler stepped before the
        # optimizer, which is what is meant here.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
            self.lr_scheduler.step()

    def lr(self):
        return self.optimizer.param_groups[0]["lr"]

    def state_dict(self):
        return {
            "optimizer": self.optimizer.state_dict(),
            "optimizer_type": type(self.optimizer).__name__,  # checked before a resume loads the state
            "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
        }

    def load_state_dict(self, ckpt):
        self.optimizer.load_state_dict(ckpt["optimizer"])
        if self.lr_scheduler is not None and ckpt.get("lr_scheduler") is not None:
            self.lr_scheduler.load_state_dict(ckpt["lr_scheduler"])
        if self.scaler is not None and ckpt.get("scaler"):
            self.scaler.load_state_dict(ckpt["scaler"])


def amp_dtype(runtime_cfg):
    """The dtype ``runtime.fp16`` / ``runtime.amp`` asks for (None: fp32), before the hardware
    check of :func:`~.precision.decide_precision`."""
    return requested(runtime_cfg)[0]
