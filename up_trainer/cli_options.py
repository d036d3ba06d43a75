"""Options and steps the `up` commands share: --config/--opts, the test-time augmentation
flags, and the config resolution every command goes through."""
import os

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


def config_options(fn=None, *, required=True, run_dir=False):
    """--config and --opts. ``required=False``: another flag may stand in for --config
    (``up train --data``); ``run_dir``: a run directory is accepted in its place."""
    if fn is None:
        return lambda f: config_options(f, required=required, run_dir=run_dir)
    fn = click.option("--opts", "opts", multiple=True, metavar="KEY=VALUE",
                      help="override config values: dotted paths, list indexes, hooks by type "
                           "(hooks.grad_clipper.kwargs.max_norm=5); values are YAML scalars. Repeatable; "
                           "several may follow one --opts.")(fn)
    shown = "YAML config file, or a run directory (its config.yaml and best checkpoint)" if run_dir else \
        "YAML config file"
    fn = click.option("--config", "config_path", required=required, metavar="CFG", help=shown)(fn)
    return fn


def oneline_options(fn):
    """`up train --data DIR`: a run with no YAML (oneline.py), and how a run dir already in
    use is treated (run_reuse.py)."""
    from .data.detect_format import FORMATS

    fn = click.option("--fresh", is_flag=True, help="start over in a run dir that holds another run's checkpoints "
                                                    "(its files are moved to a replaced-<time> folder)")(fn)
    fn = click.option("--batch", type=click.IntRange(min=1), default=None, help="--data: images per batch")(fn)
    fn = click.option("--imgsz", type=click.IntRange(min=32), default=None,
                      help="--data: the long side images are resized to")(fn)
    fn = click.option("--epochs", type=click.IntRange(min=1), default=None, help="--data: epochs to train")(fn)
    fn = click.option("--model", "model", default=None, metavar="NAME",
                      help="--data: the recipe (atss, fcos, yolox: configs/det/small_data_<NAME>.yaml; "
                           "default: the recommended one)")(fn)
    fn = click.option("--format", "data_format", type=click.Choice(FORMATS), default=None,
                      help="--data: the data's format when the folder does not say")(fn)
    fn = click.option("--data", "data", default=None, metavar="DIR",
                      help="train a detector on this data set with no YAML: a VOC root, a YOLO data.yaml, a COCO, "
                           "LabelMe or CVAT folder (detected)")(fn)
    return fn


def resolve_train(config_path, opts, seed, device, work_dir, resume, fresh, oneline, pretrained=None):
    """(config, config files, work dir, files for the run dir) of `up train`.

    ``oneline``: {data, data_format, model, epochs, imgsz, batch} from the flags. --resume
    without --work-dir continues in the checkpoint's own run dir (run_dirs.find_run_dir).
    ``pretrained``: --pretrained, written into the net's kwargs (cli_weights.apply_pretrained)."""
    from .cli_weights import apply_pretrained
    from .run_dirs import find_run_dir

    if resume and fresh:
        raise click.UsageError("--fresh starts over, --resume continues: give one of them")
    if resume and work_dir is None and os.path.isfile(resume):
        work_dir = find_run_dir(resume)
        if work_dir is not None and os.path.realpath(work_dir) != os.path.realpath(os.getcwd()):
            click.echo(f"--resume: continuing in the checkpoint's run directory {work_dir}")
    flag = {"data_format": "format"}
    data_flags = [f"--{flag.get(k, k)}" for k, v in oneline.items() if k != "data" and v is not None]
    if oneline["data"] is None:
        if data_flags:
            raise click.UsageError(f"{', '.join(data_flags)} go with --data DIR (with --config, use --opts)")
        if config_path is None:
            raise click.UsageError("Missing option '--config' (or --data DIR: train on a data set with no YAML)")
        files = []
        return apply_pretrained(_resolve(config_path, opts, seed, files), pretrained), files, work_dir, None
    if config_path is not None:
        raise click.UsageError("give --config CFG or --data DIR, not both (--data builds the config from a recipe)")
    from .oneline import build_config, reproduce_command

    run_dir = work_dir or os.getcwd()
    built, run_files, lines = build_config(oneline["data"], fmt=oneline["data_format"], model=oneline["model"],
                                           epochs=oneline["epochs"], imgsz=oneline["imgsz"],
                                           batch=oneline["batch"], run_dir=run_dir, seed=seed, redraw=fresh)
    for line in lines:
        click.echo(line)
    again = reproduce_command(run_dir, seed=seed, device=device, opts=opts)
    if pretrained is not None:
        again += f" --pretrained {pretrained}"
    click.echo(f"config: {os.path.join(run_dir, 'train.yaml')}; the same run from YAML: {again}")
    return apply_pretrained(_resolve(built, opts, seed), pretrained), [], work_dir, run_files


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


def typed_command(ctx):
    """The arguments of the running command as the user could type them again: every option
    given a value other than its default, in declaration order (the resume command an
    interrupted or refused run prints)."""
    argv = [ctx.info_name] if ctx.info_name else []
    for param in ctx.command.params:
        value = ctx.params.get(param.name)
        if not isinstance(param, click.Option) or value is None or value is False or value == () or \
                value == param.default:
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            argv.append(flag)
        else:
            for item in value if param.multiple else [value]:
                argv += [flag, str(item)]
    for extra in ctx.args:  # UP's `--opts a=1 b=2`: the values after the first arrive as extras
        argv += ["--opts", extra]
    return argv
