"""The run's one schedule: how long it trains and when its periodic work falls due.

:class:`Schedule` is built once, by :func:`up_trainer.engine.builder.build_trainer`, from the
trainer section, ``runtime.iter_base`` and the training loader's epoch length. The LR schedule
(engine/optim.py), the loop (engine/trainer.py), the checkpoint policy, the loaders (persistent
workers) and hooks (``trainer.schedule``) all read this one object.

Positions are counted in the schedule's ``unit``: ``"epoch"`` (1-based epochs; the work is
checked at each epoch's end) or, under UP's ``runtime.iter_base``, ``"iter"`` (global
iterations, checked after every iteration). ``final`` is the last position in that unit. With
``final``, ``start`` and ``freq`` in one unit, a position ``p`` is due when
``p == final or (p >= start and p % freq == 0)``:

- evaluate: test_start / test_freq (never with ``is_eval: false``);
- ``ckpt_e{e}.pth``: save_start / save_freq (none under only_save_latest);
- ``ckpt_latest.pth``: save_cur_start > 0 and every save_cur_freq from it (not at ``final``
  unless the frequency says so); under only_save_latest every save_latest_freq and at ``final``.

When to save under which name, and which files are kept: :mod:`.checkpoint_policy`.
"""
from .run_length import RunLength

# The trainer section's defaults (config/schema.py), for sections built by hand (tests, tools).
_DEFAULTS = dict(is_eval=True, test_freq=1, test_start=1, save_freq=1, save_start=1, save_cur_start=-1,
                 save_cur_freq=1, only_save_latest=False, save_latest_freq=1)


def due(position, final, start, freq):
    """The periodic rule: at the final position, and every ``freq`` from ``start``."""
    return position == final or (position >= start and position % freq == 0)


def latest_due(position, final, *, save_cur_start, save_cur_freq, only_save_latest, save_latest_freq):
    if only_save_latest:
        return position == final or position % save_latest_freq == 0
    return save_cur_start > 0 and position >= save_cur_start and position % save_cur_freq == 0


class Schedule:
    """The run's length (:class:`~.run_length.RunLength`) and its evaluation / save frequencies.

    unit: "epoch" or "iter" (runtime.iter_base); final: the last position in that unit;
    max_epoch: the last epoch (a run given in iterations stops inside it); iterations: the
    run's iterations; epoch_len: iterations per epoch the run was sized with. The frequencies
    change only through :meth:`set_frequencies` (yolox_noaug's last epochs)."""

    def __init__(self, trainer_cfg, epoch_len, iter_base=False):
        self.length = RunLength(trainer_cfg, epoch_len, iter_base)
        self.unit = "iter" if self.length.iter_base else "epoch"
        self.final = self.length.iterations if self.length.iter_base else self.length.max_epoch
        given = {k: trainer_cfg.get(k) for k in _DEFAULTS}
        f = {k: _DEFAULTS[k] if v is None else v for k, v in given.items()}
        self.is_eval = bool(f["is_eval"])
        self.test_freq, self.test_start = f["test_freq"], f["test_start"]
        self.save_freq, self.save_start = f["save_freq"], f["save_start"]
        self.save_cur_start, self.save_cur_freq = f["save_cur_start"], f["save_cur_freq"]
        self.only_save_latest, self.save_latest_freq = bool(f["only_save_latest"]), f["save_latest_freq"]

    @classmethod
    def of_run(cls, cfg, epoch_len):
        """The schedule of a validated config whose training epoch has ``epoch_len`` batches."""
        return cls(cfg["trainer"], epoch_len, cfg["runtime"].get("iter_base", False))

    # -- the run's length ---------------------------------------------------------------------
    @property
    def iter_base(self):
        return self.length.iter_base

    @property
    def max_epoch(self):
        return self.length.max_epoch

    @property
    def iterations(self):
        return self.length.iterations

    @property
    def epoch_len(self):
        return self.length.epoch_len

    def epoch_batches(self, iters_before, epoch_len):
        return self.length.epoch_batches(iters_before, epoch_len)

    def resume_point(self, position):
        return self.length.resume_point(position)

    def describe(self):
        return self.length.describe()

    def lr_span(self, updates_per_epoch):
        """(updates per "epoch", the run's length in those "epochs") for the LR schedule. Under
        UP's iter_base its epoch-valued kwargs count updates: an "epoch" of one update."""
        if self.iter_base:
            return 1, self.length.epochs * updates_per_epoch
        return updates_per_epoch, self.length.epochs

    # -- periodic work ------------------------------------------------------------------------
    def position(self, state):
        """Where a TrainState stands in this schedule's unit."""
        return state.iter if self.iter_base else state.epoch

    def eval_due(self, position):
        return self.is_eval and due(position, self.final, self.test_start, self.test_freq)

    def save_due(self, position):
        """``ckpt_e{e}.pth`` (or the interrupt-style name of an iteration) is due."""
        return not self.only_save_latest and due(position, self.final, self.save_start, self.save_freq)

    def latest_due(self, position):
        """``ckpt_latest.pth`` is due as a name of its own (every save points it at itself too)."""
        return latest_due(position, self.final, save_cur_start=self.save_cur_start, save_cur_freq=self.save_cur_freq,
                          only_save_latest=self.only_save_latest, save_latest_freq=self.save_latest_freq)

    def set_frequencies(self, test_freq=None, save_freq=None):
        """Evaluate every ``test_freq`` and save every ``save_freq`` positions from now on; None
        keeps the current one."""
        if test_freq is not None:
            self.test_freq = test_freq
        if save_freq is not None:
            self.save_freq = save_freq


# The rules over a trainer section counted in epochs (``t["max_epoch"]`` the last epoch), kept
# importable from here for scripts written against them; the run itself asks its Schedule.
def should_eval(epoch, t):
    return due(epoch, t["max_epoch"], t.get("test_start", 1), t.get("test_freq", 1))


def should_save(epoch, t):
    return not t.get("only_save_latest") and due(epoch, t["max_epoch"], t.get("save_start", 1), t.get("save_freq", 1))


def should_save_cur(epoch, t):
    return latest_due(epoch, t["max_epoch"], save_cur_start=t.get("save_cur_start", -1),
                      save_cur_freq=t.get("save_cur_freq", 1), only_save_latest=t.get("only_save_latest"),
                      save_latest_freq=t.get("save_latest_freq", 1))
