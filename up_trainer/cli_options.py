"""Options and steps the `up` commands share: --config/--opts, the test-time augmentation
flags, and the config resolution every command goes through."""
import click

# Commands that take --opts accept UP's form too: `--opts a=1 b=2` (the extras after one flag).
_ARGS = dict(ignore_unknown_options=False, allow_extra_args=True)


def tta_options(fn):
    fn = click.option("--tta-no-flip", "tta_no_flip", is_flag=True, help="--tta without the left-right flip")(fn)
    fn = click.option("--tta-scales", default="1", show_default=True, metavar="S,S,..",
                      help="--tta: image scale factors (views)")(fn)
    fn = click.option("--tta", is_flag=True, help="test-time augmentation: every scale, each also flipped "
                                                  "left-right; probabilities averaged / boxes merged by NMS")(fn)
    return fn


def _tta(tta, scales, no_flip):
    if not tta:
        return None
    from .tta import parse_scales

    return {"scales": parse_scales(scales), "flip": not no_flip}


def config_options(fn):
    fn = click.option("--opts", "opts", multiple=True, metavar="KEY=VALUE",
                      help="override config values: dotted paths, list indexes, hooks by type "
                           "(hooks.grad_clipper.kwargs.max_norm=5); values are YAML scalars. Repeatable; "
                           "several may follow one --opts.")(fn)
    fn = click.option("--config", "config_path", required=True, metavar="CFG", help="YAML config file")(fn)
    return fn


def _collect_opts(opts, extra):
    """UP writes `--opts a=1 b=2`: click gives one value per flag, the rest arrive as extras."""
    out = list(opts)
    for item in extra:
        if "=" not in item:
            raise click.UsageError(f"unexpected argument {item!r} (options take the form KEY=VALUE after --opts)")
        out.append(item)
    return out


def _resolve(config_path, opts, seed=None, files=None):
    """The resolved config; ``files`` (a list) receives the config files read, which no
    output of the command may overwrite."""
    from .api import load_config  # the Python API's own resolution: one path for both

    extra = [f"runtime.seed={seed}"] if seed is not None else []
    cfg = load_config(config_path, list(opts) + extra)
    if files is not None:
        files.extend(cfg.files)
    return dict(cfg)
