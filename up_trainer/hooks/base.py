"""The hook base and dispatcher live in :mod:`up_trainer.engine.hooks`; this name stays for
plugins written against it (``from up_trainer.hooks.base import Hook``)."""
from ..engine.hooks import EVENTS, PRIORITIES, Hook, HookList, parse_priority  # noqa: F401
