"""The `up` command. Thin: parse flags, resolve the config, call the engine.

Nothing heavy is imported at module level, so `up --help` stays instant.
"""
import os

import click

from .click_errors import OneLineErrorGroup
from .cli_data import data_group
from .cli_options import (_ARGS, _collect_opts, _resolve, _tta, config_options, oneline_options, resolve_train,
                          tta_options, typed_command)
from .cli_weights import pretrained_option, weights_group
from .exits import one_line, run_safely  # noqa: F401  (one_line: imported from here before)
from .run_dirs import run_dir_inputs


@click.group(cls=OneLineErrorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="up-trainer", prog_name="up")
def main():
    """up: YAML-driven training for image classification and object detection."""



@main.command(context_settings=_ARGS)
@config_options(required=False)
@oneline_options
@click.option("--work-dir", type=click.Path(file_okay=False), default=None,
              help="run directory: checkpoints, logs and results resolve against it (default: cwd; with "
                   "--resume, the checkpoint's own run directory)")
@click.option("--resume", "resume", default=None, metavar="CKPT", help="resume exactly from this checkpoint")
@click.option("-e", "--evaluate", is_flag=True, help="evaluate only (weights from --resume or saver.*)")
@click.option("--launch", type=click.Choice(["none", "pytorch", "slurm"]), default="none", show_default=True,
              help="none: one process or torchrun's environment; pytorch: spawn --ng processes; slurm: srun tasks")
@click.option("--ng", type=click.IntRange(min=1), default=1, show_default=True, help="processes (GPUs) per node")
@click.option("--nm", type=click.IntRange(min=1), default=1, show_default=True, help="nodes")
@click.option("--port", type=click.IntRange(0, 65535), default=None, help="rendezvous port (default: a free one)")
@click.option("--display", type=click.IntRange(min=1), default=None, help="log every N iterations (overrides freq)")
@click.option("--seed", type=click.IntRange(-2**63, 2**63 - 1), default=None,
              help="overrides runtime.seed (a signed 64-bit integer)")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None, help="overrides runtime.device")
@click.option("--dry-run", is_flag=True, help="build everything, run 2 training iterations and 2 evaluation "
                                               "batches, write nothing but the log")
@pretrained_option
@click.pass_context
@run_safely
def train(ctx, config_path, opts, data, data_format, model, epochs, imgsz, batch, fresh, work_dir, resume, evaluate,
          launch, ng, nm, port, display, seed, device, dry_run, pretrained):
    """Train (or with -e, evaluate) the model a config describes, or with --data DIR a detector
    on that data set from a recipe (no YAML)."""
    from .run import run_train

    opts = _collect_opts(opts, ctx.args)
    oneline = dict(data=data, data_format=data_format, model=model, epochs=epochs, imgsz=imgsz, batch=batch)
    cfg, config_files, work_dir, run_files = resolve_train(config_path, opts, seed, device, work_dir, resume, fresh,
                                                           oneline, pretrained)
    run_train(cfg, config_path=config_path, work_dir=work_dir, resume=resume, evaluate_only=evaluate,
              launch=launch, ng=ng, nm=nm, port=port, display=display, device=device, dry_run=dry_run,
              config_files=config_files, existing_run="fresh" if fresh else "refuse", run_files=run_files,
              command=typed_command(ctx))


@main.command("eval", context_settings=_ARGS)
@config_options(required=False, run_dir=True)
@click.option("--checkpoint", default=None, metavar="CKPT", help="checkpoint to evaluate")
@click.option("--model", "model_path", default=None, metavar="FILE",
              help="or: an up export file (.onnx, .pt2) to evaluate, run by its runtime on the CPU")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None)
@click.option("--no-ema", is_flag=True, help="evaluate the raw weights even when EMA weights are saved")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None)
@tta_options
@click.pass_context
@run_safely
def eval_cmd(ctx, config_path, opts, checkpoint, model_path, work_dir, no_ema, device, tta, tta_scales, tta_no_flip):
    """Evaluate a checkpoint (or an exported model): metrics printed and written as JSON to results_dir."""
    from .run import run_eval

    config_files = []
    config_path, checkpoint = run_dir_inputs(config_path, checkpoint, want_checkpoint=not model_path)
    checkpoint = _checkpoint_or_model(checkpoint, model_path)
    tta = _tta(tta, tta_scales, tta_no_flip)
    cfg = _resolve(config_path, _collect_opts(opts, ctx.args), files=config_files)
    if model_path:
        from .export.evaluate import run_eval_model

        run_eval_model(cfg, model_path, work_dir=work_dir, config_files=config_files, tta=tta)
        return
    run_eval(cfg, checkpoint, work_dir=work_dir, use_ema=not no_ema, device=device, config_files=config_files,
             tta=tta)


@main.command("predict", context_settings=_ARGS)
@config_options(required=False, run_dir=True)
@click.option("--checkpoint", default=None, metavar="CKPT", help="checkpoint (or bare weights) to predict with")
@click.option("--model", "model_path", default=None, metavar="FILE",
              help="or: an up export file (.onnx, .pt2) to predict with, run by its runtime on the CPU")
@click.option("--input", "input_path", required=True, metavar="IMG_OR_DIR", help="an image file or a directory of them")
@click.option("--out", "out_dir", default="predictions", show_default=True,
              help="output directory, holding no input; the drawing of a.jpg is a.jpg.png")
@click.option("--score-thr", type=float, default=0.3, show_default=True, help="detection: lowest score drawn/written")
@click.option("--no-ema", is_flag=True, help="use the raw weights even when EMA weights are saved")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default=None)
@tta_options
@click.pass_context
@run_safely
def predict_cmd(ctx, config_path, opts, checkpoint, model_path, input_path, out_dir, score_thr, no_ema, device, tta,
                tta_scales, tta_no_flip):
    """Predict images: predictions.jsonl plus a PNG per image with boxes (or the class) drawn."""
    from .predict import predict
    from .run import setup_logging

    config_path, checkpoint = run_dir_inputs(config_path, checkpoint, want_checkpoint=not model_path)
    checkpoint = _checkpoint_or_model(checkpoint, model_path)
    tta = _tta(tta, tta_scales, tta_no_flip)
    config_files = []
    cfg = _resolve(config_path, _collect_opts(opts, ctx.args), files=config_files)
    setup_logging(None)
    predict(cfg, checkpoint, input_path, out_dir, score_thr=score_thr, device=device, use_ema=not no_ema,
            config_files=config_files, tta=tta)


def _checkpoint_or_model(checkpoint, model_path):
    """Exactly one of --checkpoint / --model; an exported file must be named by --model."""
    from .predict import is_exported

    if bool(checkpoint) == bool(model_path):
        raise click.UsageError("give one of --checkpoint CKPT or --model FILE (an up export file)")
    if model_path and not is_exported(model_path):
        raise click.UsageError(f"--model {model_path}: not an exported model (.onnx or .pt2); a checkpoint "
                               "goes to --checkpoint")
    return checkpoint or model_path


@main.command("export", context_settings=_ARGS)
@config_options(required=False, run_dir=True)
@click.option("--checkpoint", default=None, metavar="CKPT",
              help="checkpoint (or bare weights) to export (default with a run directory: its best)")
@click.option("--format", "fmt", type=click.Choice(["onnx", "pt2", "torchscript"]), default="onnx", show_default=True,
              help="file format (pt2: torch.export; torchscript: for older torch)")
@click.option("--form", type=click.Choice(["raw", "end2end"]), default="raw", show_default=True,
              help="detectors: raw outputs + a documented decode step, or (onnx) decoding and NMS in the graph")
@click.option("--int8", is_flag=True, help="also write an int8 ONNX file (onnxruntime quantization) and print "
                                           "its accuracy cost on the val split")
@click.option("--calib-images", type=click.IntRange(min=1), default=32, show_default=True,
              help="--int8: train images its static calibration reads")
@click.option("--out", default=None, metavar="FILE", help="output file (default: CKPT with .onnx / .pt2 / .pt)")
@click.option("--input-size", default=None, metavar="C,H,W",
              help="input size (default: classification the test dataset's, detection min_size square)")
@click.option("--dynamic-size", is_flag=True,
              help="height and width free in the file too (classifiers; detectors in onnx / pt2, not SSDlite); "
                   "verified at the export size and a second one")
@click.option("--tolerance", type=float, default=1e-4, show_default=True,
              help="largest error allowed between export and PyTorch (|a-b| / (1+|b|))")
@click.option("--opset", type=click.IntRange(min=11), default=17, show_default=True, help="ONNX opset")
@click.option("--no-ema", is_flag=True, help="export the raw weights even when EMA weights are saved")
@click.pass_context
@run_safely
def export_cmd(ctx, config_path, opts, checkpoint, fmt, form, int8, calib_images, out, input_size, dynamic_size,
               tolerance, opset, no_ema):
    """Export a model to ONNX, pt2 or TorchScript and verify it against PyTorch (exit 1 if it differs)."""
    from .export import export_model
    from .run import setup_logging

    config_path, checkpoint = run_dir_inputs(config_path, checkpoint)
    if checkpoint is None:
        raise click.UsageError("give --checkpoint CKPT, or a run directory (--config RUN_DIR)")
    config_files = []
    cfg = _resolve(config_path, _collect_opts(opts, ctx.args), files=config_files)
    setup_logging(None)
    record = export_model(cfg, checkpoint, fmt, out, form=form, input_size=input_size, use_ema=not no_ema,
                          tolerance=tolerance, opset=opset, config_files=config_files, int8=int8,
                          calib_images=calib_images, dynamic_size=dynamic_size)
    click.echo(f"{record['file']}: {record['weights']} weights, max error {record['max_error']:.3g} "
               f"<= {record['tolerance']:g}")
    if int8:
        click.echo(record["int8"]["summary"])


@main.command("benchmark", context_settings=_ARGS)
@config_options
@click.option("--checkpoint", required=True, metavar="CKPT", help="checkpoint (or bare weights) to measure")
@click.option("--formats", default=None, metavar="A,B,..",
              help="any of eager, compile, torchscript, pt2, onnx, onnx-int8 (default: eager,pt2,onnx,onnx-int8)")
@click.option("--batch", type=click.IntRange(min=1), default=8, show_default=True, help="batch size of the images/s column")
@click.option("--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="untimed runs first")
@click.option("--repeats", type=click.IntRange(min=1), default=10, show_default=True, help="timed runs (median)")
@click.option("--calib-images", type=click.IntRange(min=1), default=32, show_default=True,
              help="onnx-int8: train images its calibration reads")
@click.option("--no-metric", is_flag=True, help="time only; skip the val-split metric")
@click.option("--out", "out_dir", default="benchmark", show_default=True,
              help="directory for the exported files, benchmark.csv and benchmark.json")
@click.pass_context
@run_safely
def benchmark_cmd(ctx, config_path, opts, checkpoint, formats, batch, warmup, repeats, calib_images, no_metric,
                  out_dir):
    """Size, speed and val metric of a model in each deployment format: one table, CSV and JSON."""
    from .export.benchmark import format_table, parse_formats, run_benchmark
    from .run import setup_logging

    names = parse_formats(formats)
    config_files = []
    cfg = _resolve(config_path, _collect_opts(opts, ctx.args), files=config_files)
    setup_logging(None)
    info = run_benchmark(cfg, checkpoint, names, out_dir, batch=batch, warmup=warmup, repeats=repeats,
                         calib_images=calib_images, metric=not no_metric, config_files=config_files)
    click.echo(format_table(info))
    click.echo(f"written: {os.path.join(out_dir, 'benchmark.csv')}, {os.path.join(out_dir, 'benchmark.json')}")


@main.command("config", context_settings=_ARGS)
@config_options
@click.pass_context
@run_safely
def config_cmd(ctx, config_path, opts):
    """Print the resolved config after checking everything `up train` would build (every type
    name and kwarg; the net on the meta device), without reading data."""
    import yaml

    from .config.redact import redact
    from .engine.preflight import check_buildable

    cfg = _resolve(config_path, _collect_opts(opts, ctx.args))
    _check_up_net(cfg["net"])
    check_buildable(cfg)
    click.echo(origin_header(cfg), nl=False)
    click.echo(yaml.safe_dump(redact(cfg), sort_keys=False), nl=False)


def _check_up_net(net):
    """UP's net list is checked kwarg by kwarg, so ``up config`` fails where ``up train`` would
    (torch is imported only for such a list)."""
    if isinstance(net, list):
        from .tasks.net import check_net

        check_net(net)


def origin_header(cfg):
    """Comment lines naming the dialect and every UP default applied (also in ``origin``)."""
    origin = cfg.get("origin") or {}
    if not origin:
        return ""
    lines = [f"# {origin.get('form', 'native')} form: {origin.get('file', '')}".rstrip()]
    lines += [f"#   {note}" for note in origin.get("notes", [])]
    return "\n".join(lines) + "\n"


@main.command("hooks")
@click.argument("name", required=False)
@click.option("--config", "config_path", default=None, metavar="CFG",
              help="also list the hooks this config's runtime.imports register")
@run_safely
def hooks_cmd(name, config_path):
    """List every hook with its kwargs, defaults, priority and doc (or one hook in full)."""
    from .hooks.describe import describe_hooks

    if config_path:
        from .registry import import_user_modules

        import_user_modules(_resolve(config_path, [])["runtime"]["imports"])
    click.echo(describe_hooks(name))


@main.command("flops", context_settings=_ARGS)
@config_options
@click.option("--input-size", default=None, metavar="C,H,W", help="input size (default: from the test dataset)")
@click.pass_context
@run_safely
def flops_cmd(ctx, config_path, opts, input_size):
    """Parameters and FLOPs per top-level module (torch.utils.flop_counter)."""
    from .flops import flops_table

    cfg = _resolve(config_path, _collect_opts(opts, ctx.args))
    click.echo(flops_table(cfg, input_size))


@main.command("plot")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--out", default=None, metavar="PNG", help="output file (default: RUN_DIR/results.png)")
@run_safely
def plot_cmd(run_dir, out):
    """Training curves (loss, LR, grad norm, metrics) from RUN_DIR/metrics.csv to PNG."""
    from .paths import guard_output_file
    from .plot import plot_run

    guard_output_file(out or os.path.join(run_dir, "results.png"), "--out")
    click.echo(plot_run(run_dir, out))


main.add_command(data_group)
main.add_command(weights_group)


def entry():
    main(prog_name=os.environ.get("UP_PROG_NAME", "up"))


if __name__ == "__main__":
    entry()
