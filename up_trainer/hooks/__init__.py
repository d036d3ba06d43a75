"""Every built-in hook; importing this package registers them in HOOKS."""
import importlib
import pkgutil

from ..engine.hooks import PRIORITIES, Hook, HookList  # noqa: F401


def _import_all():
    for info in pkgutil.iter_modules(__path__):
        if info.name not in ("base", "describe"):
            importlib.import_module(f"{__name__}.{info.name}")


_import_all()
