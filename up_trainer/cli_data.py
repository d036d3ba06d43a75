"""`up data`: write the built-in detection scenes, convert a detection set between label-tool
formats, check one against what training would read."""
import os

import click

from .cli_options import _ARGS, _collect_opts, _resolve
from .exits import run_safely


@click.group("data")
def data_group():
    """Write built-in data sets to disk, convert a detection set between formats, check one."""


@data_group.command("digits-det")
@click.option("--out", "out_dir", required=True, help="output directory (images/, annotations/)")
@click.option("--num-images", type=click.IntRange(min=1), default=1000, show_default=True, help="train scenes")
@click.option("--num-val-images", type=click.IntRange(min=0), default=None, help="val scenes (default: a quarter)")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--canvas-size", type=click.IntRange(min=8), default=64, show_default=True)
@run_safely
def data_digits_det(out_dir, num_images, num_val_images, seed, canvas_size):
    """digits_det scenes as a COCO data set (PNG files + instances JSON per split)."""
    from .paths import guard_output_dir
    from .tasks.det.export import export_digits_coco

    for sub in ("images/train", "images/val"):  # each folder written, the levels above it too
        guard_output_dir(os.path.join(out_dir, sub), "--out", writes=())
    guard_output_dir(os.path.join(out_dir, "annotations"), "--out",
                     writes=("instances_train.json", "instances_val.json"))

    for split, (ann, img_dir) in export_digits_coco(out_dir, num_images, num_val_images, seed,
                                                    canvas_size=canvas_size).items():
        click.echo(f"{split}: {ann} (images in {img_dir})")


@data_group.command("convert")
@click.option("--from", "src_fmt", type=click.Choice(["voc", "yolo", "labelme", "cvat", "coco"]), required=True,
              help="the input's format")
@click.option("--to", "dst_fmt", type=click.Choice(["coco", "yolo"]), required=True, help="the output's format")
@click.option("--input", "input_path", required=True, metavar="PATH",
              help="voc: root or annotation folder; yolo: data.yaml; labelme: folder; cvat, coco: the file")
@click.option("--images", default=None, metavar="DIR", help="image folder (cvat, coco; voc/labelme: to override)")
@click.option("--split", "splits", multiple=True, help="split name(s) (default: every split the input holds, "
                                                       "else train)")
@click.option("--classes", default=None, metavar="A,B,..", help="class names in label order (default: the input's)")
@click.option("--out", "out_dir", required=True, help="output directory: new or empty, outside the input")
@click.option("--copy", is_flag=True, help="copy the images (default: symlink them)")
@run_safely
def data_convert(src_fmt, dst_fmt, input_path, images, splits, classes, out_dir, copy):
    """Convert a detection set between formats; prints what could not be carried."""
    from .tasks.det.convert import convert

    names = [c.strip() for c in classes.split(",")] if classes else None
    for line in convert(src_fmt, dst_fmt, input_path, out_dir, images, splits, names, copy):
        click.echo(line)


@data_group.command("check", context_settings=_ARGS)
@click.option("--config", "config_path", default=None, metavar="CFG", help="check this config's train and test sets")
@click.option("--opts", "opts", multiple=True, metavar="KEY=VALUE", help="config overrides, as for up train")
@click.option("--from", "src_fmt", type=click.Choice(["voc", "yolo", "labelme", "cvat", "coco"]), default=None,
              help="or: the format of --input")
@click.option("--input", "input_path", default=None, metavar="PATH", help="as for up data convert")
@click.option("--images", default=None, metavar="DIR", help="image folder (cvat, coco)")
@click.option("--split", "splits", multiple=True, help="split name(s), as for up data convert")
@click.option("--out", "out_dir", default="data_check", show_default=True, help="report.json and PNGs go here")
@click.option("--decode", is_flag=True, help="decode every image (finds truncated or unreadable files)")
@click.option("--strict", is_flag=True, help="exit 2, one line per error found")
@click.option("--seed", type=int, default=0, show_default=True, help="which train images the contact sheet shows")
@click.pass_context
@run_safely
def data_check(ctx, config_path, opts, src_fmt, input_path, images, splits, out_dir, decode, strict, seed):
    """Health report of a detection set: counts, box sizes, problems; PNGs + JSON under --out."""
    from .tasks.data_check import run_check

    cfg = _resolve(config_path, _collect_opts(opts, ctx.args)) if config_path else None
    lines, errors = run_check(cfg, src_fmt, input_path, images, splits, out_dir, decode, seed)
    for line in lines:
        click.echo(line)
    if strict and errors:
        for e in errors:
            click.echo(f"up: error: [{e['split']}] {e['check']}: {e['message']}", err=True)
        ctx.exit(2)
