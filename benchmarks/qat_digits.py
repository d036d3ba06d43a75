"""Quantization-aware training of the digits ResNet-18 to an int8 QDQ ONNX file, measured beside
the float model and its post-training int8 file (the QAT row of docs/export.rst's table).

    python benchmarks/qat_digits.py [--work-dir runs/qat_digits] [--qat-epochs 3] [--repeats 10]

Steps, each an ``up`` command: train configs/cls/digits_resnet18.yaml (float32, 10 epochs);
fine-tune that checkpoint with ``quant: {backend: tensorrt}`` (``--qat-epochs`` epochs, LR 0.005,
cosine); ``up benchmark`` (one thread, batch 8) on the float checkpoint (eager, onnx, onnx-int8:
onnxruntime's static post-training quantization) and on the QAT checkpoint (eager: the fake-quant
model; onnx: the QDQ file the export verified against it). The rows are printed as one table
with the machine and its load average; the last line says whether the QAT file's top-1 is within
one point of the float ONNX file's. A step whose checkpoint exists already is skipped.
"""
import argparse
import json
import os
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FP32_CONFIG = os.path.join(REPO, "configs", "cls", "digits_resnet18.yaml")


def up(*args):
    cmd = [sys.executable, "-m", "up_trainer", *map(str, args)]
    print("+", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True, cwd=REPO, stdout=subprocess.DEVNULL)


def qat_config(work, fp32_ckpt, epochs):
    with open(FP32_CONFIG, encoding="utf-8") as f:
        cfg = yaml.safe_load(f)
    cfg["quant"] = {"backend": "tensorrt"}
    cfg["saver"] = {"save_dir": "checkpoints", "pretrain_model": fp32_ckpt}
    cfg["trainer"]["max_epoch"] = epochs
    cfg["trainer"]["optimizer"]["kwargs"]["lr"] = 0.005
    cfg["trainer"]["lr_scheduler"] = {"type": "CosineAnnealingLR", "kwargs": {"T_max": epochs}}
    path = os.path.join(work, "digits_resnet18_qat.yaml")
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", default=os.path.join(REPO, "runs", "qat_digits"))
    parser.add_argument("--qat-epochs", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    work = os.path.abspath(args.work_dir)
    os.makedirs(work, exist_ok=True)
    fp32_ckpt = os.path.join(work, "fp32", "checkpoints", "ckpt_e10.pth")
    if not os.path.exists(fp32_ckpt):
        up("train", "--config", FP32_CONFIG, "--work-dir", os.path.join(work, "fp32"))
    qat_cfg = qat_config(work, fp32_ckpt, args.qat_epochs)
    qat_ckpt = os.path.join(work, "qat", "checkpoints", f"ckpt_e{args.qat_epochs}.pth")
    if not os.path.exists(qat_ckpt):
        up("train", "--config", qat_cfg, "--work-dir", os.path.join(work, "qat"))
    common = ("--repeats", args.repeats, "--batch", 8, "--opts", "runtime.num_threads=1")
    up("benchmark", "--config", FP32_CONFIG, "--checkpoint", fp32_ckpt, "--formats", "eager,onnx,onnx-int8",
       "--out", os.path.join(work, "bench_fp32"), *common)
    up("benchmark", "--config", qat_cfg, "--checkpoint", qat_ckpt, "--formats", "eager,onnx",
       "--out", os.path.join(work, "bench_qat"), *common)
    tables = [json.load(open(os.path.join(work, d, "benchmark.json"))) for d in ("bench_fp32", "bench_qat")]
    m = tables[0]["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores; load average {m['load_average'][0]:.2f} then "
          f"{tables[1]['machine']['load_average'][0]:.2f}; {tables[0]['threads']} thread(s); "
          f"torch {m['torch']}, onnxruntime {m['onnxruntime']}")
    print(f"{'model':<26}{'size MB':>9}{'ms/img b1':>11}{'img/s b8':>11}{'top1':>9}")
    values = {}
    for name, info in (("fp32", tables[0]), ("QAT", tables[1])):
        for r in info["rows"]:
            if "size_mb" not in r:
                continue
            label = f"{name} {r['format']}"
            values[label] = r.get("value")
            print(f"{label:<26}{r['size_mb']:>9.2f}{r['ms_per_image_b1']:>11.2f}{r['images_per_s']:>11.1f}"
                  f"{r.get('value') or float('nan'):>9.2f}")
    gap = values["fp32 onnx"] - values["QAT onnx"]
    print(f"QAT int8 QDQ top-1 is {gap:+.2f} points below fp32 ONNX: {'within' if gap <= 1 else 'NOT within'} 1 point")


if __name__ == "__main__":
    main()
