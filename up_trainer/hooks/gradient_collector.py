"""gradient_collector (UP): hand the gradients flowing through chosen modules to a loss that
asks for them (UP's equalization losses, e.g. EQL v2 / equalized focal loss, weigh classes by
the gradients they accumulated).

Each module named in ``hook_module`` gets a full backward hook; on every backward pass it calls
``collect_grad(grad)`` on the module named by ``collect_func_module`` with the gradient of the
hooked module's first output (``grad_type: output``) or first input (``input``). Module names
are dotted paths in the model as ``model.named_modules()`` spells them (UP's own defaults name
UP's detection head and loss). The hooks are removed when training ends.
"""
from ..errors import ConfigError, did_you_mean
from ..protocols import CollectsGrad
from ..registry import HOOKS
from .base import Hook


def find_module(model, dotted, path):
    modules = dict(model.named_modules())
    if dotted not in modules:
        names = [n for n in modules if n]
        raise ConfigError(path, f"the model has no module {dotted!r}",
                          did_you_mean(dotted, names) or f"e.g. {', '.join(names[:5])}")
    return modules[dotted]


@HOOKS.register("gradient_collector")
class GradientCollector(Hook):
    """Pass the gradients at modules `hook_module` to `collect_func_module`.collect_grad(grad).

    hook_module: list of module names to hook. collect_func_module: the module (usually the loss)
    whose collect_grad method receives the gradients. grad_type: output (gradient w.r.t. the
    hooked module's output) or input (w.r.t. its input).
    """

    def __init__(self, hook_module: list = ("roi_head.cls_subnet_pred",),
                 collect_func_module: str = "post_process.cls_loss", grad_type: str = "output"):
        super().__init__()
        if grad_type not in ("output", "input"):
            raise ConfigError("grad_type", f"expected output or input, got {grad_type!r}")
        if isinstance(hook_module, str):
            hook_module = [hook_module]
        if not hook_module or not all(isinstance(m, str) for m in hook_module):
            raise ConfigError("hook_module", f"expected a list of module names, got {hook_module!r}")
        self.hook_module = list(hook_module)
        self.collect_func_module = collect_func_module
        self.grad_type = grad_type
        self._handles = []

    def before_train(self, trainer):
        model = trainer.module
        base = f"hooks.{self.name}.kwargs"
        target = find_module(model, self.collect_func_module, f"{base}.collect_func_module")
        if not (isinstance(target, CollectsGrad) and callable(target.collect_grad)):
            raise ConfigError(f"{base}.collect_func_module", f"{type(target).__name__} has no collect_grad(grad) method",
                              "name the loss module that collects gradients")
        collect = target.collect_grad
        index = 1 if self.grad_type == "output" else 0

        def on_backward(module, grad_input, grad_output):
            grads = (grad_input, grad_output)[index]
            if grads and grads[0] is not None:
                collect(grads[0])

        self.remove()
        for i, name in enumerate(self.hook_module):
            module = find_module(model, name, f"{base}.hook_module.{i}")
            self._handles.append(module.register_full_backward_hook(on_backward))

    def remove(self):
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def after_train(self, trainer):
        self.remove()

    def on_exception(self, trainer, exc):
        self.remove()
