"""memory_checkpoint: UP's static / dynamic activation checkpointing (docs/memory_checkpoint.rst)."""
import logging
from typing import Optional

from ..errors import ConfigError
from ..registry import HOOKS
from .base import Hook

log = logging.getLogger("up")


@HOOKS.register("memory_checkpoint")
class MemoryCheckpoint(Hook):
    """Trade recomputation for activation memory: checkpoint candidates always (static) or per input size under max_memory (dc_cfg)."""

    priority = "NORMAL"

    def __init__(self, enable: bool = True, checkpoint_patterns: Optional[dict] = None,
                 dc_cfg: Optional[dict] = None):
        super().__init__()
        from ..memckpt import candidates, planner  # light: no torch work at import

        self.enable = enable
        self.patterns = None
        self.dc = None
        if enable:
            if checkpoint_patterns is None:
                raise ConfigError("checkpoint_patterns", "required when enable is true",
                                  "e.g. {backbone: {patterns_mode: level, level: {num: 2}}}")
            self.patterns = candidates.parse_patterns(checkpoint_patterns)
            self.dc = planner.parse_dc_cfg(dc_cfg) if dc_cfg is not None else None
        self.ctrl = None
        self.planner = None
        self.samples = []  # warmup profile samples (plain types: saved in state_dict)
        self.excluded = None  # name -> reason, from the dry run (kept across resume)
        self.plan = None
        self.key = None
        self.last_bytes = None  # measured activation bytes of the last forward (dynamic mode)
        self.last_peak = None  # torch.cuda.max_memory_allocated of the last iteration (CUDA)
        self._recorder = None

    @property
    def dynamic(self):
        return self.dc is not None

    @property
    def profiling(self):
        return self.dynamic and self.planner is None

    # -- lifecycle -----------------------------------------------------------------------
    def before_train(self, trainer):
        if not self.enable:
            return
        from ..memckpt import candidates, wrap

        path = f"hooks.{self.name}.kwargs.checkpoint_patterns"
        found, skipped = candidates.find_candidates(trainer.module, self.patterns, path)
        if not found:
            raise ConfigError(path, "no candidate module left to checkpoint",
                              "; ".join(f"{k}: {v}" for k, v in skipped.items())[:300])
        for name, why in skipped.items():
            log.info("memory_checkpoint: not a candidate: %s (%s)", name, why)
        self.ctrl = wrap.Controller(trainer.module, found)
        if self.excluded:
            self.ctrl.excluded.update(self.excluded)
        wrap.install(self.ctrl)
        self._cuda = trainer.device is not None and str(trainer.device).startswith("cuda")
        log.info("memory_checkpoint: %s mode, %d candidate unit(s): %s",
                 "dynamic" if self.dynamic else "static", len(self.ctrl.units), ", ".join(self.ctrl.units))
        if self.dynamic and len(self.samples) >= self.dc["warmup_iters"]:
            self._fit()  # resumed with a complete profile: no re-profiling

    def before_forward(self, trainer, it, batch):
        if self.ctrl is None:
            return
        from ..memckpt import profiler, wrap

        if self.excluded is None:
            from ..data.model_input import batch_to_model

            self.excluded = wrap.dry_run(self.ctrl, batch_to_model(batch, trainer.device, non_blocking=False))
            for name, why in self.excluded.items():
                log.warning("memory_checkpoint: %s excluded: %s", name, why)
        if not self.dynamic:
            self.ctrl.active = frozenset(self.ctrl.units)
            return
        image = batch["image"] if isinstance(batch, dict) else batch
        self.key, self.n = profiler.size_key(image, self.dc["bucket"])
        if self._cuda:
            import torch

            torch.cuda.reset_peak_memory_stats(trainer.device)
        sync = None
        if self._cuda and self.profiling:
            import torch

            sync = torch.cuda.synchronize
        self._recorder = profiler.Recorder(trainer.module, detail=self.profiling, sync=sync)
        self.ctrl.recorder = self._recorder  # the root forward records under it
        if self.profiling:
            self.ctrl.active = frozenset()
            self.n = profiler.input_elements(image)  # exact size for fitting
        else:
            self.plan = self.planner.plan_for(self.key, self.n)
            self.ctrl.active = self.plan.units

    def after_update(self, trainer, it):
        if self.ctrl is None or not self.dynamic or self._recorder is None:
            return
        rec, self._recorder = self._recorder, None
        self.ctrl.recorder = None
        self.last_bytes = rec.total_bytes
        if self._cuda:
            import torch

            self.last_peak = torch.cuda.max_memory_allocated(trainer.device)
        if self.profiling:
            self.samples.append({
                "n": int(self.n), "total": int(rec.total_bytes), "groups": {k: int(v) for k, v in rec.groups().items()},
                "times": {k: float(v) for k, v in rec.times.items()},
                "overhead": float(self.last_peak - rec.total_bytes) if self._cuda else None})
            if len(self.samples) >= self.dc["warmup_iters"]:
                self._fit()
            return
        if it % self.dc["debug_freq"] == 0:
            peak = f", cuda peak {self.last_peak / 2**20:.2f} MiB" if self.last_peak is not None else ""
            log.info("memory_checkpoint iter %d: input %s -> %s; measured activations %.2f MiB%s; plan cache "
                     "%d hit(s) / %d miss(es)", it, "x".join(map(str, self.key)), self.plan.describe(),
                     self.last_bytes / 2**20, peak, self.planner.hits, self.planner.misses)

    def after_train(self, trainer):
        self._restore()

    def on_exception(self, trainer, exc):
        self._restore()

    def _restore(self):
        if self.ctrl is not None:
            from ..memckpt import wrap

            wrap.uninstall(self.ctrl)
            self.ctrl = None

    def _fit(self):
        from ..memckpt import planner, profiler

        prof = profiler.FittedProfile(self.samples, self.name or "memory_checkpoint")
        unknown = set(prof.units) - set(self.ctrl.units)
        if unknown:
            log.warning("memory_checkpoint: the saved profile names units this model does not have (%s); "
                        "profiling again", ", ".join(sorted(unknown))[:200])
            self.samples = []
            return
        self.planner = planner.Planner(prof, self.ctrl.units, self.dc["max_memory"], self.dc["strategy"],
                                       cuda=self._cuda)
        log.info("memory_checkpoint: profiled %d iteration(s); memory R^2=%.3f, time R^2=%.3f, margin %.3f; "
                 "budget %.4g GB (%s)", len(self.samples), prof.memory_fit.r2, prof.time_fit.r2, prof.margin,
                 self.dc["max_memory"], self.dc["strategy"])

    # -- resume ----------------------------------------------------------------------------
    def state_dict(self):
        # The warmup samples, not the fits: a resumed run refits them (cheap) and skips
        # profiling; plans are re-derived per bucket on demand.
        return {"samples": self.samples, "excluded": dict(self.excluded or {})} if self.enable else {}

    def load_state_dict(self, state):
        if not self.enable or not state:
            return
        self.samples = list(state.get("samples", []))
        self.excluded = dict(state.get("excluded", {}))
        if self.ctrl is not None:
            self.ctrl.excluded.update(self.excluded)
            if self.dynamic and self.planner is None and len(self.samples) >= self.dc["warmup_iters"]:
                self._fit()
