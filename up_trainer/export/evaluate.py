"""An exported file evaluated like a checkpoint: the config's test split, its loader, its
evaluator, the exported file in the model's place (:class:`.runtime.ExportedModel`)."""
import logging
import os
import stat

from ..errors import ConfigError

log = logging.getLogger("up")


def load_exported(path, threads=None):
    """The exported model at ``path`` (its ``.json`` record beside it); one-line errors."""
    from .runtime import RUNTIME_FORMATS, ExportedModel

    suffix = os.path.splitext(path)[1]
    if suffix not in RUNTIME_FORMATS:
        raise ConfigError("--model", f"{path}: not an exported model (suffixes: {', '.join(RUNTIME_FORMATS)})")
    if not os.path.exists(path):
        raise ConfigError("--model", f"{path}: no such file")
    from ..paths import kind_of

    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise ConfigError("--model", f"{path} is {kind_of(mode)}, not a regular file")
    return ExportedModel(path, threads=threads)


def check_matches(cfg, exported):
    """The exported model must be of the config's task, family and class count, as a checkpoint
    must fit the config's net (a mix-up is one line, not an IndexError or a silent score)."""
    from ..tasks.net import build_model

    net = build_model(cfg["net"])
    kind = getattr(net, "kind", None) if exported.task == "det" else None
    if exported.kind and kind and exported.kind != kind:
        raise ConfigError("--model", f"{exported.path} holds a {exported.kind} detector, the config's net is {kind}")
    held, wanted = exported.num_classes, getattr(net, "num_classes", None)
    if wanted is None and isinstance(cfg["net"], dict):  # a net that does not say: what its config asks for
        wanted = (cfg["net"].get("kwargs") or {}).get("num_classes")
    if held is not None and (type(held) is not int or held < 1):
        raise ConfigError("--model", f"{exported.path}.json: num_classes must be a positive integer, got {held!r}")
    if held is not None and type(wanted) is int and held != wanted:
        key = getattr(net, "num_classes_path", None) or (
            "net[0].kwargs.num_classes" if isinstance(cfg["net"], list) else "net.kwargs.num_classes")
        raise ConfigError("--model", f"{exported.path} predicts {held} classes, the config's net {wanted} ({key})",
                          "use the config the exported model was trained with")


def evaluation_trainer(cfg, work_dir=None):
    """A trainer for evaluation only: data, evaluator, no optimizer, no hooks."""
    from ..engine.builder import build_trainer
    from ..engine.hooks import HookList
    from ..run import require_evaluator

    trainer = build_trainer(cfg, work_dir=work_dir, device="cpu", with_optim=False)
    trainer.hooks = HookList()
    require_evaluator(trainer)
    return trainer


def evaluate_exported(cfg, model, trainer=None, work_dir=None):
    """Metrics of ``model`` (an ExportedModel, or any module) on the config's test split."""
    from ..data.label_map import adopt_recorded

    trainer = trainer or evaluation_trainer(cfg, work_dir)
    inner = getattr(model, "model", model)  # a test-time-augmentation wrapper holds the model
    adopt_recorded(trainer, getattr(inner, "recorded_classes", None),
                   f"the export record {getattr(inner, 'path', 'of the model')}.json")
    kept = trainer.model
    trainer.model = model
    try:
        return trainer.evaluate(), trainer
    finally:
        trainer.model = kept


def run_eval_model(cfg, path, *, work_dir=None, config_files=(), tta=None):
    """``up eval --model FILE``: metrics printed and written as ``up eval`` writes them."""
    from ..paths import resolve_path
    from ..paths import guard_output_dir
    from ..run import _output_names, setup_logging, write_eval_results

    if cfg["saver"]["save_result"] and cfg["saver"]["results_dir"]:
        guard_output_dir(resolve_path(cfg["saver"]["results_dir"], work_dir), "saver.results_dir",
                         inputs=[*config_files, path, path + ".json"], writes=_output_names("saver.results_dir"))
    setup_logging(None)
    model = load_exported(path, threads=cfg["runtime"].get("num_threads") or None)
    check_matches(cfg, model)
    log.info("evaluating the exported %s file %s", model.format, path)
    if tta:
        from ..tta import with_tta

        model = with_tta(model, **tta)
    metrics, trainer = evaluate_exported(cfg, model, work_dir=work_dir)
    write_eval_results(trainer, metrics)
    return metrics
