"""``trainer.scalars``: the numbers hooks publish for other hooks to read, by declared name.

A hook that measures something other hooks show (the gradient norm, whether it was clipped)
writes it here instead of setting an attribute on the trainer; a logger reads it here. Every
name is declared once, with what it means; writing an undeclared name is an error, so a typo
cannot silently publish to nobody. Plugins declare their own with :meth:`Scalars.declare`.

Step scalars describe the optimizer step being taken: the trainer drops them just before
each ``before_step``, so a value read later belongs to the latest step (or is absent).
Values may be tensors: readers convert them only when they log, which keeps the hot path
free of host-device synchronisation.
"""

BUILTIN = {
    # name: (step scalar?, meaning)
    "grad_norm": (True, "total gradient norm (2-norm unless grad_clipper says otherwise) of the latest "
                        "optimizer step, before clipping; true scale under fp16"),
    "grad_clipped": (True, "whether grad_clipper scaled the gradients of the latest optimizer step"),
}


class Scalars:
    def __init__(self):
        self._declared = dict(BUILTIN)
        self._values = {}

    def declare(self, name, meaning, step=False):
        """Allow ``name``; ``step=True`` makes it a step scalar (dropped before each step)."""
        self._declared[name] = (bool(step), meaning)

    def put(self, name, value):
        if name not in self._declared:
            raise KeyError(f"trainer.scalars: {name!r} is not declared (declared: {', '.join(sorted(self._declared))}); "
                           "call trainer.scalars.declare(name, meaning) first")
        self._values[name] = value

    def get(self, name, default=None):
        return self._values.get(name, default)

    def __contains__(self, name):
        return name in self._values

    def declared(self):
        """{name: meaning} of every declared scalar."""
        return {k: meaning for k, (_, meaning) in self._declared.items()}

    def new_step(self):
        """Drop the step scalars: an optimizer step is about to be taken."""
        for name in [k for k in self._values if self._declared[k][0]]:
            del self._values[name]
