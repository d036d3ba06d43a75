"""nan_guard: catch a non-finite loss or gradient before the optimizer step applies it.

The loss of every micro-batch is checked in after_backward; the gradients in before_step,
once per update, when they are complete. Policies:

- skip: drop this update. Gradients are set to None, which every torch optimizer treats as
  "no update for this parameter" (no momentum/Adam moment change, no weight decay); the LR
  schedule still advances, as it does when AMP's GradScaler skips a step. With a GradScaler
  (fp16) overflowing gradients are the scaler's business: it skips the step and lowers the
  scale itself, so only the loss is checked and the scaler does the skipping.
- abort: raise NonFiniteLossError naming the epoch, iteration and what was non-finite.
- rollback: reload the newest valid checkpoint in save_dir (what auto_resume would pick) and
  continue from its position; at most ``max_rollbacks`` times, then abort. A rollback replays
  the same data with the same RNG, so it helps with non-deterministic blow-ups (GPU kernels,
  flaky hardware); a deterministic NaN comes back and exhausts the budget.

Skip drops the step but not BatchNorm running statistics the bad forward pass may have
touched; rollback restores them too.

Under DDP the ranks agree (MAX all-reduce of the flag, once per update) so that every rank
skips, rolls back or aborts at the same iteration.
"""
import logging
import math

import torch

from ..errors import ConfigError
from ..registry import HOOKS
from .auto_checkpoint import max_over_ranks
from .base import Hook

log = logging.getLogger("up")
POLICIES = ("skip", "abort", "rollback")


class NonFiniteLossError(RuntimeError):
    """Training produced a NaN/Inf loss or gradient and nan_guard's policy is abort."""


def grads_finite(params):
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return True
    # One fused reduction per device instead of a host sync per tensor.
    norms = torch._foreach_norm(grads) if hasattr(torch, "_foreach_norm") else [g.norm() for g in grads]
    return bool(torch.isfinite(torch.stack([n.float() for n in norms])).all())


@HOOKS.register("nan_guard")
class NanGuard(Hook):
    """Skip, abort or roll back when the loss or a gradient is NaN/Inf (checked before every step).

    policy: skip (drop the update), abort (raise) or rollback (reload the newest checkpoint
    and continue). max_rollbacks: rollbacks allowed in the whole run before aborting.
    """

    priority = "VERY_HIGH"  # before grad clipping or anything else that reads the gradients

    def __init__(self, policy: str = "skip", max_rollbacks: int = 3):
        super().__init__()
        if policy not in POLICIES:
            raise ConfigError("policy", f"{policy!r} is not one of {', '.join(POLICIES)}")
        if max_rollbacks < 0:
            raise ConfigError("max_rollbacks", f"must be >= 0, got {max_rollbacks}")
        self.policy = policy
        self.max_rollbacks = max_rollbacks
        self.skipped = 0
        self.rollbacks = 0
        self._bad = None  # what was non-finite in the current accumulation group
        self._rollback_due = False

    def after_backward(self, trainer, iteration, loss):
        value = float(loss.detach())
        if not math.isfinite(value) and self._bad is None:
            self._bad = f"loss={value}"

    def before_step(self, trainer, iteration):
        st, optim = trainer.state, trainer.optim
        if self._bad is None and optim.scaler is None and not grads_finite(trainer.module.parameters()):
            self._bad = "gradient"
        bad, self._bad = self._bad, None
        if not max_over_ranks(trainer, int(bad is not None)):
            return
        bad = bad or "on another rank"
        where = f"epoch {st.epoch} iteration {iteration}"
        if self.policy == "abort" or (self.policy == "rollback" and self.rollbacks >= self.max_rollbacks):
            extra = f" after {self.rollbacks} rollbacks" if self.policy == "rollback" else ""
            raise NonFiniteLossError(f"non-finite {bad} at {where}{extra} (nan_guard policy {self.policy}); "
                                     "lower the learning rate, add a grad_clipper hook or check the data")
        if optim.scaler is None:
            optim.optimizer.zero_grad(set_to_none=True)  # the step becomes a no-op
        self.skipped += 1
        if self.policy == "skip":
            log.warning("nan_guard: non-finite %s at %s: update skipped (%d so far)", bad, where, self.skipped)
        else:
            self._rollback_due = True  # after the trainer finishes this iteration's bookkeeping

    def after_update(self, trainer, iteration):
        if not self._rollback_due:
            return
        self._rollback_due = False
        self.rollbacks += 1
        path, ckpt = trainer.store.find_resumable() if trainer.dist.is_main else (None, None)
        path = trainer.dist.broadcast_object(path)
        if path is None:
            raise NonFiniteLossError(f"non-finite loss/gradient at iteration {iteration} and no checkpoint in "
                                     f"{trainer.store.save_dir} to roll back to (nan_guard policy rollback)")
        if ckpt is None:  # other ranks read the file rank 0 chose
            from ..engine.checkpoint import load_checkpoint

            ckpt = load_checkpoint(path)
        log.warning("nan_guard: non-finite values at iteration %d: rolling back to %s (rollback %d of %d)",
                    iteration, path, self.rollbacks, self.max_rollbacks)
        counts = self.skipped, self.rollbacks
        trainer.load_checkpoint(ckpt, path)  # also rewinds the epoch loop (trainer.rewound)
        self.skipped, self.rollbacks = counts  # the budget is for the whole run, not per checkpoint

    def state_dict(self):
        return {"skipped": self.skipped, "rollbacks": self.rollbacks}

    def load_state_dict(self, state):
        self.skipped = int(state.get("skipped", 0))
        self.rollbacks = int(state.get("rollbacks", 0))
