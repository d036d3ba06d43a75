"""Hook base class, priorities and the ordered hook list the trainer dispatches to.

The dispatcher belongs to the engine: the trainer and the builder use it, and every hook
(built-in in :mod:`up_trainer.hooks` or a plugin) derives from :class:`Hook` here.
"""
import inspect

from ..errors import CheckpointError, ConfigError, did_you_mean, short_repr

# Lower runs first. Names as MMEngine's, so its users can write them in YAML.
PRIORITIES = {
    "HIGHEST": 0,
    "VERY_HIGH": 10,
    "HIGH": 30,
    "ABOVE_NORMAL": 40,
    "NORMAL": 50,
    "BELOW_NORMAL": 60,
    "LOW": 70,
    "VERY_LOW": 90,
    "LOWEST": 100,
}

EVENTS = (
    "before_train",
    "before_train_loader",
    "before_epoch",
    "before_data",
    "before_forward",
    "after_forward",
    "after_backward",
    "before_step",
    "after_update",
    "after_epoch",
    "before_eval",
    "after_eval",
    "after_train",
    "before_save_checkpoint",
    "after_load_checkpoint",
    "on_exception",
)


def parse_priority(value, path="priority"):
    if isinstance(value, bool):
        raise ConfigError(path, f"expected a priority name or an int 0-100, got {short_repr(value)}")
    if isinstance(value, int):
        if not 0 <= value <= 100:
            raise ConfigError(path, f"priority {value} is outside 0-100")
        return value
    if isinstance(value, str) and value.upper() in PRIORITIES:
        return PRIORITIES[value.upper()]
    raise ConfigError(path, f"unknown priority {short_repr(value)}",
                      did_you_mean(str(value).upper(), PRIORITIES) or f"use one of {', '.join(PRIORITIES)} or 0-100")


class Hook:
    """Base of every hook. Override the events you need; each gets the trainer first.

    Events (docs/hooks.rst, Lifecycle events): before_train, before_train_loader(epoch) (the
    training loader of ``epoch`` is about to be built: a hook swaps the training set or its
    slice here), before_epoch(epoch), before_data(iter),
    before_forward(iter, batch), after_forward(iter, outputs), after_backward(iter, loss),
    before_step(iter) (only when this micro-batch steps the optimizer: gradients complete,
    all-reduced), after_update(iter), after_epoch(epoch), before_eval, after_eval(metrics),
    after_train, before_save_checkpoint(ckpt), after_load_checkpoint(ckpt), on_exception(exc).

    Hooks share measurements through ``trainer.scalars`` (:mod:`up_trainer.engine.scalars`).

    A hook that holds state across iterations implements state_dict/load_state_dict; it is
    saved under ``ckpt['hooks'][hook.name]``: the entry's ``name:``, else its type
    (:mod:`up_trainer.engine.hook_keys`; never its list position).

    ``allow_multiple``: whether a run may list this hook more than once. False by default:
    most hooks act on shared state (weights, gradients, signal handlers, ckpt_best.pth,
    metrics.csv), and a second instance would silently act twice (two EMA swaps put the EMA
    weights into training). A hook whose instances are independent (each with its own
    monitor or output) sets it to True; ``up hooks`` shows which.
    """

    priority = "NORMAL"
    allow_multiple = False
    lock_outputs = False  # whether `up train` locks this hook's output_dirs for the run (run_lock.py)
    # Class-level too: a user's subclass whose __init__ skips super().__init__() still has them.
    name = None
    type_name = None

    def __init__(self):
        self.name = None  # set by HookList: the state key (the entry's name:, else the registry type)
        self.type_name = None  # set by HookList: the registry type

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass

    @classmethod
    def keeps_state(cls):
        """Whether this hook saves anything in checkpoints: it overrides state_dict."""
        return cls.state_dict is not Hook.state_dict

    @classmethod
    def output_dirs(cls, kwargs):
        """[(kwarg name, folder, names)] for each folder this hook would write files in, given
        its YAML ``kwargs`` (defaults not filled in): the folder as configured (relative to the
        run dir, or absolute) and ``names``, a predicate on the names of the files it writes.
        The run's output guard checks each before anything starts (run.py), so a folder that
        is a file, read-only or full of the user's own files of those names stops the run in
        one line at start-up instead of crashing it at the first write."""
        return []

    @classmethod
    def configured(cls, kwargs, name):
        """The value kwarg ``name`` will have: the YAML's, else the constructor's default."""
        if name in kwargs:
            return kwargs[name]
        return inspect.signature(cls.__init__).parameters[name].default


class HookList:
    """Hooks ordered by priority (stable for ties: YAML order), one dispatch per event."""

    def __init__(self):
        self._hooks = []  # (priority, insertion index, hook)
        self._dispatch = {}  # event -> handlers; an empty list (up eval) dispatches too

    def add(self, hook, priority=None, name=None, type_name=None):
        """``name``: the key its state is saved under (build_hooks checked that hooks keeping
        state have distinct ones); a repeat of a stateless hook gets a suffix to be told apart."""
        prio = parse_priority(hook.priority if priority is None else priority)
        hook.priority_value = prio
        base = name or getattr(hook, "name", None) or type(hook).__name__
        hook.type_name = type_name or getattr(hook, "type_name", None) or base
        taken = {h.name for h in self}
        hook.name, i = base, 1
        while hook.name in taken:
            i += 1
            hook.name = f"{base}_{i}"
        self._hooks.append((prio, len(self._hooks), hook))
        self._hooks.sort(key=lambda t: (t[0], t[1]))
        self._dispatch = {}
        return hook

    def __iter__(self):
        return (h for _, _, h in self._hooks)

    def __len__(self):
        return len(self._hooks)

    def get(self, name):
        """The hook whose state key is ``name``, else the first of type ``name`` (a logger
        given a ``name:`` is still ``get("train_val_logger")``)."""
        for h in self:
            if h.name == name:
                return h
        return next((h for h in self if h.type_name == name), None)

    def handlers(self, event):
        """Bound methods of hooks overriding ``event``, in order (cached: hot path)."""
        if event not in self._dispatch:
            self._dispatch[event] = [
                getattr(h, event) for h in self if getattr(type(h), event, None) is not getattr(Hook, event, None)
            ]
        return self._dispatch[event]

    def call(self, event, trainer, *args):
        for fn in self.handlers(event):
            fn(trainer, *args)

    def order_table(self):
        """Per event, the hooks that handle it in call order: printed before training."""
        lines = []
        width = max(len(e) for e in EVENTS)
        for event in EVENTS:
            names = [f"{fn.__self__.name}({fn.__self__.priority_value})" for fn in self.handlers(event)]
            if names:
                lines.append(f"  {event:<{width}}  " + " -> ".join(names))
        return "\n".join(lines)

    def state_dict(self):
        return {h.name: h.state_dict() for h in self}

    def load_state_dict(self, states):
        from .hook_keys import saved_state_for

        for h, state in saved_state_for(list(self), states).items():
            try:
                h.load_state_dict(state)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
                # a hand-edited file, or a state from another version of the hook
                raise CheckpointError(f"hooks.{h.name}: the saved state does not fit this hook "
                                      f"({type(exc).__name__}: {str(exc)[:80]})") from None
