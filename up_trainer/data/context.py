"""The run's data settings, handed to its data sets and readers instead of held by the process.

A :class:`DataContext` is built once per run (``engine.builder.build_trainer``, from the
validated config and the chosen device) and handed to every data set the run builds
(``build_dataset(entry, path, context)``, reload hooks' rebuilds included); a data set keeps
it as ``self.context`` and passes it to each read (``readers.read_image(..., context=)``). It
holds:

- ``normalize_on``: where the model-input conversion runs, ``device`` or ``workers``
  (``dataset.normalize_on`` with ``auto`` resolved for the device; data/model_input.py);
- ``max_pixels``: ``runtime.max_image_pixels``, the largest width x height decoded (None: no
  limit);
- ``image_cache``: the run's ``dataset.cache`` (data/image_cache.py), or None. It is opened
  after the data sets are built (its plan lists their files) and attached with
  :meth:`DataContext.with_cache`; forked DataLoader workers inherit the data set, its context
  and so the cache's one shared arena.

Nothing here is a process global: two runs in one process (API calls, tests) each read their
own settings, and code that builds a data set without a context (tools, tests) gets the
defaults, never what an earlier run left behind.
"""
import dataclasses
from typing import Any, Optional

import torch

from ..errors import ConfigError

DEFAULT_MAX_PIXELS = 89478485  # Pillow's own default guard
NORMALIZE_ON = ("auto", "device", "workers")


def resolve_normalize_on(where, device=None):
    """``dataset.normalize_on`` as the run's data sets apply it: ``device`` or ``workers``
    (data/model_input.py says what each does). ``auto``: ``device`` when ``device`` is an
    accelerator; on the CPU ``workers``, where the conversion runs beside the training step
    instead of inside it (the main process is the CPU run's bottleneck, and a uint8 batch saves
    no copy there)."""
    if where not in NORMALIZE_ON:
        raise ConfigError("dataset.normalize_on", f"{where!r} is not one of {', '.join(NORMALIZE_ON)}")
    if where == "auto":
        where = "workers" if device is None or torch.device(device).type == "cpu" else "device"
    return where


@dataclasses.dataclass(frozen=True)
class DataContext:
    """One run's data settings (the module docstring says what each is); frozen, so a data set
    shares it with its workers and no reader can change it for the others."""

    normalize_on: str = "device"
    max_pixels: Optional[int] = DEFAULT_MAX_PIXELS
    image_cache: Any = None

    @classmethod
    def from_config(cls, cfg, device=None):
        """The context of a validated config: ``dataset.normalize_on`` (``auto`` resolved for
        ``device``) and ``runtime.max_image_pixels``; no cache yet."""
        dataset = cfg.get("dataset") or {}
        runtime = cfg.get("runtime") or {}
        return cls(normalize_on=resolve_normalize_on(dataset.get("normalize_on", "auto"), device),
                   max_pixels=runtime.get("max_image_pixels", DEFAULT_MAX_PIXELS))

    def with_cache(self, cache):
        """This context with ``cache`` as its image cache (None: none)."""
        return dataclasses.replace(self, image_cache=cache)

    def __getstate__(self):
        # A data set pickled into a spawned worker (macOS, Windows) arrives without the cache:
        # its arena is shared by forking only, and such a worker decodes every image.
        return {"normalize_on": self.normalize_on, "max_pixels": self.max_pixels, "image_cache": None}

    def __setstate__(self, state):
        for key, value in state.items():
            object.__setattr__(self, key, value)
