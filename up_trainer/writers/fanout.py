"""Several summary writers as one: ``summary_writer: [tensorboard, mlflow, wandb]``.

:func:`writer_specs` checks the logger's ``summary_writer`` / ``writer_kwargs`` when the config
is loaded: one name (its kwargs in ``writer_kwargs``, as before) or a list of names (each
writer's kwargs under its name: ``writer_kwargs: {mlflow: {experiment: x}, wandb: {mode:
offline}}``). :class:`FanOutWriter` hands every call to each writer that takes it, and
closes every writer even when one fails (the first failure is raised after all are closed).
"""
from ..errors import ConfigError, did_you_mean, join_path
from ..registry import WRITERS, check_kwargs

PROGRAM_WRITER_KWARGS = ("logdir", "start_iter", "start_epoch")  # supplied by the logger, not by the user


def writer_specs(summary_writer, writer_kwargs):
    """[(name, writer class, kwargs)] of the writers asked for ([] for ``none``)."""
    writer_kwargs = dict(writer_kwargs or {})
    if summary_writer == "none":
        if writer_kwargs:
            raise ConfigError("writer_kwargs", "given, but summary_writer is none")
        return []
    if isinstance(summary_writer, str):
        return [_spec(summary_writer, writer_kwargs, "summary_writer", "writer_kwargs")]
    if not isinstance(summary_writer, list) or not summary_writer:
        raise ConfigError("summary_writer", "expected a writer name, a non-empty list of them, or none")
    names = []
    for i, name in enumerate(summary_writer):
        if not isinstance(name, str) or name == "none":
            raise ConfigError(join_path("summary_writer", i), f"expected a writer name, got {name!r}")
        if name in names:
            raise ConfigError(join_path("summary_writer", i), f"{name} is listed twice")
        names.append(name)
    for key, value in writer_kwargs.items():
        if key not in names:
            raise ConfigError(join_path("writer_kwargs", key), "names no writer of summary_writer",
                              did_you_mean(key, names) or f"writers: {', '.join(names)}")
        if not isinstance(value, dict):
            raise ConfigError(join_path("writer_kwargs", key), f"expected a mapping of {key}'s kwargs, got "
                              f"{type(value).__name__}")
    return [_spec(name, writer_kwargs.get(name) or {}, join_path("summary_writer", i), join_path("writer_kwargs", name))
            for i, name in enumerate(names)]


def _spec(name, kwargs, name_path, kwargs_path):
    cls = WRITERS.get(name, name_path)
    taken = sorted(set(kwargs) & set(PROGRAM_WRITER_KWARGS))
    if taken:
        raise ConfigError(join_path(kwargs_path, taken[0]), "is set by the logger", "use the logger's own kwargs")
    check_kwargs(cls, kwargs, kwargs_path, provided=PROGRAM_WRITER_KWARGS)
    validate = getattr(cls, "validate_kwargs", None)
    if validate is not None:
        try:
            validate(kwargs)
        except ConfigError as exc:
            raise ConfigError(join_path(kwargs_path, exc.path), exc.message, exc.hint) from None
    return name, cls, dict(kwargs)


class FanOutWriter:
    """The writer interface over several writers, in the order listed."""

    def __init__(self, named_writers):
        self.writers = list(named_writers)  # [(name, writer)]
        for method in ("add_config", "add_artifact", "add_image"):  # only when some writer takes it
            if any(hasattr(w, method) for _, w in self.writers):
                setattr(self, method, self._forwarder(method))
        self.images_from_hooks = any(getattr(w, "images_from_hooks", False) for _, w in self.writers)

    def _forwarder(self, method):
        def forward(*args, **kwargs):
            for _, writer in self.writers:
                if method == "add_image" and not getattr(writer, "images_from_hooks", False):
                    continue  # TensorBoard gets the hooks' pictures in their own event files
                if hasattr(writer, method):
                    getattr(writer, method)(*args, **kwargs)
        return forward

    def add_scalar(self, tag, value, step):
        for _, writer in self.writers:
            writer.add_scalar(tag, value, step)

    def add_scalars(self, main_tag, values, step):
        for _, writer in self.writers:
            writer.add_scalars(main_tag, values, step)

    def flush(self):
        for _, writer in self.writers:
            writer.flush()

    def close(self, timeout=None):
        first = None
        for _, writer in self.writers:
            try:
                writer.close(timeout)
            except Exception as exc:  # every writer is closed; the first failure is the one raised
                first = first or exc
        if first is not None:
            raise first

    def __repr__(self):
        return " and ".join(repr(w) if name == "pavi" else name for name, w in self.writers)
