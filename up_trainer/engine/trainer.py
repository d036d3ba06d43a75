"""The epoch loop and event dispatch, nothing else: every feature is a hook.

Order at the end of epoch e: after_epoch(e) -> [evaluate] -> one checkpoint state written
under every name the checkpoint policy says is due (ckpt_e{e}.pth, ckpt_latest.pth, names
hooks requested such as ckpt_best.pth; see :mod:`.checkpoint_policy`). Interrupt snapshots
come from hooks via :meth:`save_checkpoint`.
Under ``runtime.iter_base`` the same work is checked after every iteration, by iteration
number; mid-epoch checkpoints are named ckpt_e{e}-i{iter}.pth (docs/schedule.rst, Run length).
"""
import logging
import os

import torch

from ..data.model_input import batch_to_model
from ..data.worker_death import worker_death
from ..config.redact import redact
from ..errors import CheckpointError, TrainingInterrupted
from ..protocols import EvaluatesTasks
from ..writers.run_files import storage_error
from .checkpoint import LATEST, epoch_name, interrupt_name
from .checkpoint_fit import check_resumable, describe_position
from .checkpoint_policy import CheckpointPolicy
from .rng import rng_state, set_rng_state
from .run_length import check_epoch_len
from .scalars import Scalars
from .speed import batch_memory_format
from .state import TrainState

log = logging.getLogger("up")


def sum_losses(outputs):
    losses = [v for k, v in outputs.items() if "loss" in k and isinstance(v, torch.Tensor)]
    if not losses:
        raise RuntimeError(f"the model returned no '*loss*' output in training mode (keys: {sorted(outputs)})")
    return sum(losses)


class Trainer:
    """Built by :func:`up_trainer.engine.builder.build_trainer`; see its docstring for fields."""

    def __init__(self, *, cfg, model, optim, loaders, schedule, evaluator, hooks, store, device, dist, run_dir,
                 results_dir, ema=None):
        self.cfg = cfg
        self.trainer_cfg = cfg["trainer"]
        self.model = model  # possibly DDP-wrapped; `self.module` is the bare model
        self.optim = optim
        self.loaders = loaders
        self.evaluator = evaluator
        self.hooks = hooks
        self.store = store
        self.device = device
        self.dist = dist
        self.run_dir = run_dir
        self.results_dir = results_dir
        self.ema = ema  # an object with state_dict/load_state_dict, set by the EMA feature
        self.class_names = None  # the run's label map (data/label_map.py), recorded in every checkpoint
        self.state = TrainState()
        self.schedule = schedule  # the run's length and frequencies (engine/schedule.py), built once
        self.state.epoch_len = loaders.epoch_len() if loaders.train_set is not None else 0
        self.checkpoints = CheckpointPolicy(schedule)  # which names are due, which files kept
        self.did_update = False  # whether the last iteration stepped the optimizer
        # Whether the in-memory state is one a snapshot resumes exactly: a completed optimizer
        # update, an epoch start or a loaded checkpoint; not mid accumulation group, not mid step.
        self.at_update_boundary = True
        self.outputs = {}  # last training outputs (losses), for logging hooks
        self.scalars = Scalars()  # what hooks measure for other hooks (grad_norm, ...): see engine/scalars.py
        self.display = None  # --display N: log every N iterations, overriding the logger's freq
        # Whether hooks may install signal handlers (auto_checkpoint): the CLI's process belongs to
        # the run; a Python caller's (a notebook kernel) does not, and gets KeyboardInterrupt instead.
        self.handle_signals = True
        self.last_results = None  # the evaluator's raw per-sample results of the latest evaluate()
        self.stop_training = False  # a hook (early_stopping) ends the run after this epoch's end work
        self.rewound = False  # load_checkpoint moved the position: the epoch loop restarts from it
        self.interrupted = None  # set by on_exception hooks: the TrainingInterrupted to end with instead
        self.resumed_from = None  # the checkpoint path load_checkpoint last loaded
        self.memory_format = batch_memory_format(cfg["runtime"])  # runtime.channels_last

    @property
    def module(self):
        return getattr(self.model, "module", self.model)

    # -- what hooks change, through these only (tests/hooks/test_hook_channels.py) -----------------
    def set_epoch_length(self, batches):
        """The training epoch about to run has ``batches`` batches (reload's mini-epoch slice,
        a rebuilt training set). The run's length was sized at start and stays as it is."""
        self.state.epoch_len = batches

    def set_frequencies(self, test_freq=None, save_freq=None):
        """Evaluate every ``test_freq`` and save ``ckpt_e{e}.pth`` every ``save_freq`` positions
        from now on (yolox_noaug's last epochs); None keeps the current one."""
        self.schedule.set_frequencies(test_freq=test_freq, save_freq=save_freq)

    def set_model_option(self, name, value):
        """Switch an option of the model (an attribute it has, e.g. YOLOX's ``use_l1``), under
        DDP and runtime.compile too; False, with nothing changed, when it has none of that name."""
        model = getattr(self.module, "_orig_mod", self.module)
        if not hasattr(model, name):
            return False
        setattr(model, name, value)
        return True

    @property
    def pending_saves(self):
        """Names hooks requested for this epoch's end (prefer ``trainer.checkpoints.request``)."""
        return self.checkpoints.requested

    @property
    def max_epoch(self):
        """The last epoch (a run given in iterations ends inside it)."""
        return self.schedule.max_epoch

    @property
    def total_iters(self):
        return self.schedule.iterations

    # -- the loop -------------------------------------------------------------------------
    def train(self):
        st = self.state
        if self._already_complete():
            return
        log.info(self.schedule.describe())
        log.info("hook order per event:\n%s", self.hooks.order_table())
        self.hooks.call("before_train", self)
        try:
            while not (st.epoch_done and st.epoch >= self.max_epoch) and not self.stop_training:
                if st.epoch_done:
                    st.next_epoch()
                self._rotate()  # the previous epoch's checkpoint is saved: keep-N may delete older ones
                if self.train_epoch():
                    self.finish_epoch()
            self._rotate()
            self.store.flush()  # the last checkpoint is on disk (or its failure raised) before the end-of-run hooks
            self.hooks.call("after_train", self)
        except TrainingInterrupted:
            self._flush_stopping()  # the interrupt snapshot is on disk before the process exits
            raise
        except BaseException as exc:
            self._call_on_exception(exc)
            self._flush_quietly()
            if self.interrupted is not None:  # a hook traced the failure to a stop request
                raise self.interrupted from exc
            failed_write = storage_error(exc)  # a run file on a full disk: one line, after the snapshot
            if failed_write is not None:
                raise failed_write.noted(self._where_to_resume()) from None
            died = worker_death(exc)  # a DataLoader worker killed (out of memory): one line, after the snapshot
            if died is not None:
                died = died.noted(self._where_to_resume(after="resume"))
                log.error("%s", died)
                raise died from None
            raise
        self.store.flush()

    def _where_to_resume(self, after="make room, then resume"):
        st, latest = self.state, self.store.path(LATEST)
        if not os.path.exists(latest):
            return f"training stopped at epoch {st.epoch} iteration {st.iter}, no checkpoint was written"
        return (f"training stopped at epoch {st.epoch} iteration {st.iter}; the newest checkpoint is {latest} "
                f"({after}: saver.auto_resume or --resume)")

    def _already_complete(self):
        """A resumed checkpoint at the very end of this run (its last epoch and the work after
        it done): nothing is trained, run or written, and one line says so. A checkpoint past
        the end was refused when it was checked (checkpoint_fit.check_within_run)."""
        if self.resumed_from is None or self.schedule.resume_point(self.state.state_dict()) != "end":
            return False
        key = self.schedule.length.length_key(self.trainer_cfg)
        log.info("nothing to train: %s is at %s and %s is %s, so the run is already complete "
                 "(raise %s to train further)", self.resumed_from, describe_position(self.state.state_dict()), key,
                 self.trainer_cfg["max_iter" if key == "trainer.max_iter" else "max_epoch"], key)
        return True

    def _rotate(self):
        if self.dist.is_main:
            self.checkpoints.rotate(self.store)

    def _call_on_exception(self, exc):
        """Every hook's on_exception runs, whatever an earlier one raised: a logger that cannot
        close its files on a full disk must not keep auto_checkpoint from writing the snapshot."""
        for handler in self.hooks.handlers("on_exception"):
            try:
                handler(self, exc)
            except Exception as hook_exc:
                log.error("on_exception of %s failed as well: %s", handler.__self__.name, hook_exc)

    def _flush_stopping(self):
        """Finish a write in flight while the run stops on a signal. A further stop signal
        during the write (held until it completes) adds nothing: the run is stopping already."""
        try:
            self.store.flush()
        except (TrainingInterrupted, KeyboardInterrupt):
            pass

    def _flush_quietly(self):
        """Finish a write in flight while another error propagates; that error matters more."""
        try:
            self.store.flush()
        except (TrainingInterrupted, KeyboardInterrupt):
            log.warning("stop signal during the last checkpoint write: the write completed; the run ends with "
                        "its error")
        except BaseException as exc:
            log.error("checkpoint write failed as well: %s", exc)

    def train_epoch(self):
        st = self.state
        self.hooks.call("before_train_loader", self, st.epoch)  # reload, yolox_noaug: this epoch's data
        loader = self.loaders.train_loader(st.epoch, start_batch=st.epoch_iter)
        self.model.train()
        self.hooks.call("before_epoch", self, st.epoch)
        # a run given in iterations (max_iter, fractional max_epoch) stops inside its last epoch
        st.epoch_len = self.schedule.epoch_batches(st.iter - st.epoch_iter, st.epoch_len)
        batches = iter(loader)
        self.rewound = False
        while st.epoch_iter < st.epoch_len:
            self.hooks.call("before_data", self, st.iter + 1)
            batch = next(batches)
            self.train_iter(batch)
            if self.rewound:  # a hook reloaded a checkpoint (nan_guard rollback): continue from there
                return False
            if self.schedule.iter_base and st.epoch_iter < st.epoch_len:
                self.periodic_work(epoch_end=False)
        del batches
        return True

    def train_iter(self, batch):
        st, optim, it = self.state, self.optim, self.state.iter + 1
        is_update = optim.is_update(st.epoch_iter, st.epoch_len)
        self.hooks.call("before_forward", self, it, batch)
        batch = batch_to_model(batch, self.device, self.memory_format)  # moved, converted (dataset.normalize_on)
        with optim.step_context(self.model, is_update):
            with optim.autocast():
                outputs = self.model(batch)
            self.hooks.call("after_forward", self, it, outputs)
            loss = sum_losses(outputs)
            optim.backward(loss, optim.group_size(st.epoch_iter, st.epoch_len))
        self.outputs = outputs
        self.hooks.call("after_backward", self, it, loss)
        if is_update:
            self.scalars.new_step()
            self.hooks.call("before_step", self, it)
            self.at_update_boundary = False  # until the step is complete
            optim.step()
        self.did_update = is_update
        self.at_update_boundary = is_update
        st.iter, st.epoch_iter = it, st.epoch_iter + 1
        self.hooks.call("after_update", self, it)

    def finish_epoch(self):
        self.hooks.call("after_epoch", self, self.state.epoch)
        self.periodic_work(epoch_end=True)

    def periodic_work(self, epoch_end):
        """Evaluate and save as the schedule says, at an epoch's end (or, under iter_base,
        after any iteration: positions are then iteration numbers)."""
        st = self.state
        pos = self.schedule.position(st)
        if self.loaders.test_set is not None and self.schedule.eval_due(pos):
            self.evaluate()
        name = epoch_name(st.epoch) if epoch_end else interrupt_name(st.epoch, st.iter)
        names = self.checkpoints.names_due(pos, periodic_name=name)
        if epoch_end:
            st.epoch_done = True
        if names:
            self.save_checkpoint(names)

    # -- evaluation -------------------------------------------------------------------------
    @torch.no_grad()
    def evaluate(self):
        self.hooks.call("before_eval", self)
        was_training = self.model.training
        self.model.eval()
        if isinstance(self.evaluator, EvaluatesTasks):  # a multitask run: each task on its own data
            metrics, results = self.evaluator.evaluate_tasks(self, self.loaders)
        else:
            metrics, results = self.evaluate_on(self.loaders.test_loader(), self.evaluator)
        self.state.metrics = metrics
        self.last_results = results
        self.model.train(was_training)
        self.hooks.call("after_eval", self, metrics)
        return metrics

    @torch.no_grad()
    def evaluate_on(self, loader, evaluator, max_batches=None):
        """(metrics, gathered per-sample results) of ``evaluator`` over ``loader``'s batches
        (the first ``max_batches`` of them when given: a dry run)."""
        evaluator.reset()
        for i, batch in enumerate(loader):
            if i == max_batches:
                break
            batch = batch_to_model(batch, self.device, self.memory_format)
            with self.optim.autocast() if self.optim else torch.autocast("cpu", enabled=False):
                outputs = self.module(batch)
            evaluator.process(batch, outputs)
        results = self.dist.gather_results(evaluator.results())
        metrics = evaluator.evaluate(results) if self.dist.is_main else {}
        return self.dist.broadcast_object(metrics), results

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_dict(self):
        ckpt = {
            "model": self.module.state_dict(),
            **(self.optim.state_dict() if self.optim else {}),
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "epoch": self.state.epoch,
            "iter": self.state.iter,
            "state": self.state.state_dict(),
            "hooks": self.hooks.state_dict(),
            "rng": rng_state(),
            "metric_val": None,
            "config": redact(self.cfg),  # tokens and passwords stay out of checkpoint files
            "classes": self.class_names,  # label k of the net is classes[k - 1] (detection) / classes[k]
        }
        self.hooks.call("before_save_checkpoint", self, ckpt)
        return ckpt

    def save_checkpoint(self, names):
        """Write the current state under ``names`` (rank 0 only; every rank waits)."""
        paths = []
        # Each rank's RNG (seeded seed + rank), so a DDP resume continues every rank's stream.
        rank_rngs = self.dist.gather_object(rng_state()) if self.dist.enabled else None
        if self.dist.is_main:
            ckpt = self.checkpoint_dict()
            if rank_rngs is not None:
                ckpt["rng_ranks"] = rank_rngs
            paths = self.store.save(ckpt, list(names))  # the store logs each write once it is complete
        self.dist.barrier()
        self.checkpoints.saved_iter = self.state.iter
        return paths

    def load_checkpoint(self, ckpt, path="checkpoint"):
        """Full resume: model, optimizer, schedule, scaler, EMA, position, hooks, RNG; all of
        it is checked against this trainer first, so a misfit loads nothing."""
        check_resumable(self, ckpt, path)
        self.module.load_state_dict(ckpt["model"])
        if self.optim is not None and ckpt.get("optimizer") is not None:
            self.optim.load_state_dict(ckpt)
        if self.ema is not None and ckpt.get("ema") is not None:
            self.ema.load_state_dict(ckpt["ema"])
        self.state.load_state_dict(ckpt.get("state") or {"epoch": ckpt["epoch"], "iter": ckpt["iter"]})
        try:
            self.hooks.load_state_dict(ckpt.get("hooks") or {})
        except CheckpointError as exc:
            raise CheckpointError(f"{path}: {exc}") from None
        if ckpt.get("rng") is not None:
            ranks = ckpt.get("rng_ranks")  # present when saved under DDP; usable at the same world size
            same_world = ranks is not None and len(ranks) == self.dist.world_size
            set_rng_state(ranks[self.dist.rank] if same_world else ckpt["rng"])
        self.checkpoints.saved_iter = None  # e.g. a nan_guard rollback: latest no longer names "now"
        self.hooks.call("after_load_checkpoint", self, ckpt)
        self.rewound = True
        self.at_update_boundary = True
        self.resumed_from = path
        st = self.state
        where = "end of epoch" if st.epoch_done else f"epoch {st.epoch} batch {st.epoch_iter}/{st.epoch_len} of"
        log.info("resumed from %s at %s %d (iteration %d)", path, where, st.epoch, st.iter)
        saved_world = len(ckpt.get("rng_ranks") or [None])
        if saved_world != self.dist.world_size and not st.epoch_done:
            log.warning("%s was saved inside epoch %d by %d process(es) and resumes on %d: the rest of the epoch "
                        "is sharded anew, so some of its samples are seen twice or not at all; an end-of-epoch "
                        "checkpoint (ckpt_e%d.pth) resumes exactly on any number of processes", path, st.epoch,
                        saved_world, self.dist.world_size, st.epoch - 1)
