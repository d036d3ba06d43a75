"""The sparsity hook: weight masks computed from the run's ``sparsity`` section and kept through
training.

Attached by the builder when the config has a ``sparsity`` section (UP's ``runtime.runner:
sparse`` translates into one), never listed under ``hooks``. From ``start_epoch`` on, every
masked layer's weight is multiplied by its mask after each optimizer update and its gradient
before it (so momentum and Adam moments stay zero there too): the weights are sparse after
every step, in every checkpoint and in every export. The masks are this hook's checkpoint
state; a resume checks them against the model and the section and applies them again.
"""
import logging

from ..engine.hooks import Hook
from ..errors import CheckpointError
from .masks import apply_masks, compute_masks, mask_gradients, mask_misfit, maskable_layers, sparsity_report

log = logging.getLogger("up")


class SparsityHook(Hook):
    """Masks the weights of the spec's layers from ``start_epoch`` to the end of training."""

    priority = "HIGH"  # gradients masked before grad_clipper measures them; weights before EMA/checkpoints read them

    def __init__(self, spec, model):
        super().__init__()
        self.spec = spec
        self.model = model  # the bare model (not its DDP wrapper), as the builder attaches it
        self.masks = None  # {layer name: bool tensor}; None until start_epoch
        self.stage = 0  # levels: index of the level the masks were computed at
        self._layers = None

    # -- what is masked, and at which level ------------------------------------------------
    def layers(self):
        if self._layers is None:
            self._layers = maskable_layers(self.model, self.spec)
        return self._layers

    def _start_iter(self, trainer):
        return (self.spec.start_epoch - 1) * trainer.schedule.epoch_len

    def stage_at(self, trainer, iteration):
        """levels: the stage of the iteration after ``iteration`` finished ones; stages share the
        iterations from start_epoch to the end evenly (UP: total_iters // len(sparsity_table))."""
        if self.spec.scheduler != "levels":
            return 0
        start, total, count = self._start_iter(trainer), trainer.total_iters, len(self.spec.levels)
        span = max(total - start, 1)
        return min(max(iteration - start, 0) * count // span, count - 1)

    def level(self):
        return self.spec.levels[self.stage] if self.spec.scheduler == "levels" else None

    def _compute(self, trainer, why):
        layers = self.layers()
        self.masks = compute_masks(layers, self.spec, self.level())
        apply_masks(layers, self.masks)
        zeros, total, per_layer = sparsity_report(layers)
        log.info("sparsity: %s at iteration %d: %d layers masked, %d of %d weights zero (%.2f%%)", why,
                 trainer.state.iter, len(layers), zeros, total, 100.0 * zeros / max(total, 1))
        if self.spec.verbose:
            for name, module in layers:
                log.info("sparsity:   %s %s %.2f%% zero", name, tuple(module.weight.shape), 100 * per_layer[name])

    # -- events ------------------------------------------------------------------------------
    def before_train(self, trainer):
        log.info("sparsity: %s, %d layers", self.spec.describe(), len(self.layers()))

    def before_epoch(self, trainer, epoch):
        if self.masks is None and epoch >= self.spec.start_epoch:
            self.stage = self.stage_at(trainer, trainer.state.iter)
            self._compute(trainer, "masks computed" if self.level() is None else f"level {self.level():g}")

    def before_forward(self, trainer, iteration, batch):
        # levels: the first iteration of a stage computes its masks from the weights trained so far,
        # so each end-of-epoch evaluation and checkpoint holds the level that was trained
        if self.masks is not None and self.spec.scheduler == "levels":
            stage = self.stage_at(trainer, iteration - 1)
            if stage > self.stage:
                self.stage = stage
                self._compute(trainer, f"level {self.level():g}")

    def before_step(self, trainer, iteration):
        if self.masks is not None:
            mask_gradients(self.layers(), self.masks)

    def after_update(self, trainer, iteration):
        if self.masks is None or not trainer.did_update:
            return
        apply_masks(self.layers(), self.masks)

    def after_train(self, trainer):
        if self.masks is not None:
            zeros, total, _ = sparsity_report(self.layers())
            log.info("sparsity: %d of %d weights of the masked layers are zero (%.2f%%)", zeros, total,
                     100.0 * zeros / max(total, 1))

    # -- checkpoints -------------------------------------------------------------------------
    def state_dict(self):
        return {"scheduler": self.spec.scheduler, "stage": self.stage,
                "masks": None if self.masks is None else {k: v.cpu() for k, v in self.masks.items()}}

    def load_state_dict(self, state):
        """A resume's masks, checked against the model (its weights already loaded) and the
        section before they are used; a misfit stops the resume in one line."""
        where = "hooks.sparsity"
        if state.get("scheduler") != self.spec.scheduler:
            raise CheckpointError(f"{where}: the masks were made by scheduler {state.get('scheduler')!r}, the "
                                  f"config's sparsity.scheduler is {self.spec.scheduler!r}")
        masks = state.get("masks")
        if masks is None:  # saved before start_epoch
            self.masks, self.stage = None, 0
            return
        stage = state.get("stage")
        if self.spec.scheduler == "levels" and (not isinstance(stage, int) or not 0 <= stage < len(self.spec.levels)):
            raise CheckpointError(f"{where}: the saved stage {stage!r} is not one of the "
                                  f"{len(self.spec.levels)} sparsity.levels")
        self.stage = stage if isinstance(stage, int) else 0
        layers = self.layers()
        why = mask_misfit(layers, masks, self.spec, self.level()) if isinstance(masks, dict) else "not a mapping"
        if why is None:
            why = next((f"the weight of {name!r} is not zero where its mask is" for name, m in layers
                        if bool((m.weight.detach().cpu()[~masks[name]] != 0).any())), None)
        if why is not None:
            raise CheckpointError(f"{where}: the saved masks do not fit this model and sparsity section: {why}")
        self.masks = {name: masks[name].to(m.weight.device) for name, m in layers}
