"""Bad values in the ``quant`` section: one line naming the key, exit 2, for ``up config`` and
``up train`` alike (the section is read once, by up_trainer/config/quant_spec.py, when the config is resolved)."""
import pytest

from conftest import invoke, tiny_cfg, write_cfg

CASES = [
    ({"backend": "tensorrtx"}, "quant.backend: 'tensorrtx' is not one of tensorrt, vitis, academic"),
    ({"backend": 3}, "quant.backend: 3 is not one of"),
    ({"mode": "qta"}, "quant.mode: 'qta' is not one of qat, ptq"),
    ({"mode": "ptq", "ptq": {"iterations": -5}}, "quant.ptq.iterations: expected an integer >= 1, got -5"),
    ({"mode": "ptq", "ptq": {"drop_prob": 1.5}}, "quant.ptq.drop_prob: expected a number in [0, 1], got 1.5"),
    ({"mode": "ptq", "ptq": {"drop_prob": -0.1}}, "quant.ptq.drop_prob: expected a number in [0, 1], got -0.1"),
    ({"mode": "ptq", "ptq": {"algorithm": "gptq"}}, "quant.ptq.algorithm: 'gptq' is not one of adaround, brecq, qdrop"),
    ({"mode": "ptq", "ptq": {"algorithm": "brecg"}}, "quant.ptq.algorithm: 'brecg' is not one of adaround, brecq, "
                                                     "qdrop (did you mean 'brecq'?)"),
    ({"mode": "ptq", "ptq": {"beta": [2, 20]}}, "quant.ptq.beta: expected [start, end] with start >= end > 0"),
    ({"mode": "ptq", "ptq": {"warm_up": 1}}, "quant.ptq.warm_up: expected a number in [0, 1), got 1"),
    ({"mode": "ptq", "ptq": {"calibration_batches": 0}}, "quant.ptq.calibration_batches: expected an integer >= 1"),
    ({"mode": "ptq", "ptq": {"iteration": 5}}, "quant.ptq.iteration: unknown key (did you mean 'iterations'?)"),
    ({"mode": "ptq", "ptq": [5]}, "quant.ptq: expected a mapping, got list"),
    ({"ptq": {"iterations": 5}}, "quant.ptq: is read in mode: ptq only"),
    ({"backend": "academic", "layer_bits": {"backbone.conv1": 9}},
     "quant.layer_bits.backbone.conv1: expected an integer from 2 to 8"),
    ({"layer_bits": {"backbone.conv1": 4}}, "quant.layer_bits.backbone.conv1: backend tensorrt runs bits: 8, got 4"),
    ({"backend": "academic", "layer_bits": {"conv9": 8}}, "quant.layer_bits.conv9: the net has no module 'conv9'"),
    ({"weight": {"observer": "MinMaxObserverX"}}, "quant.weight.observer: 'MinMaxObserverX' is not one of"),
    ({"weight": {"observer": "ema_minmax"}}, "quant.weight.observer: ema_minmax averages ranges"),
    ({"activation": {"fake_quantize": "adaround"}}, "quant.activation.fake_quantize: 'adaround' is not one of"),
    ({"activation": {"bits": "8"}}, "quant.activation.bits: expected an integer from 2 to 8, got '8'"),
    ({"activation": {"bits": 16}}, "quant.activation.bits: expected an integer from 2 to 8, got 16"),
    ({"weight": {"bits": 4}}, "quant.weight.bits: backend tensorrt runs bits: 8, got 4"),
    ({"weight": {"per_channel": "yes"}}, "quant.weight.per_channel: expected true or false, got 'yes'"),
    ({"activation": {"ema_ratio": 1.5}}, "quant.activation.ema_ratio: expected a number in [0, 1), got 1.5"),
    ({"backend": "academic", "weight": {"pot_scale": True, "symmetric": False}},
     "quant.weight.pot_scale: power-of-two scales need a symmetric scheme"),
    ({"weight": [8]}, "quant.weight: expected a mapping, got list"),
    ({"backend": "academic", "activation": {"per_channel": True}},
     "quant.activation.per_channel: activations are quantized per tensor"),
    ({"skip": "backbone.conv1"}, "quant.skip: expected a list of module paths"),
    ({"skip": ["backbone.nope"]}, "quant.skip[0]: the net has no module 'backbone.nope'"),
    ({"backnd": "tensorrt"}, "quant.backnd: unknown key (did you mean 'backend'?)"),
    ([1, 2], "quant: expected dict, got list"),
]


@pytest.mark.parametrize("command", ["config", "train"])
@pytest.mark.parametrize("quant, line", CASES, ids=[c[1].split(":")[0] + str(i) for i, c in enumerate(CASES)])
def test_bad_quant_value_is_one_line(tmp_path, command, quant, line):
    cfg = write_cfg(tmp_path / "q.yaml", tiny_cfg(quant=quant))
    args = ["--work-dir", tmp_path / "run"] if command == "train" else []
    res = invoke([command, "--config", cfg, *args])
    assert res.exit_code == 2, (res.exit_code, res.stderr, res.stdout[-800:])
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("up: error: " + line), lines[0]
    assert not list((tmp_path / "run").glob("checkpoints/*.pth"))  # nothing trained, nothing saved


@pytest.mark.parametrize("quant, args, line", [
    ({"backend": "academic", "weight": {"bits": 4}, "activation": {"bits": 4}}, ["--format", "onnx"],
     "--format: weights int4 / activations int4 cannot be written as ONNX QuantizeLinear (8-bit only)"),
    ({"backend": "tensorrt"}, ["--format", "onnx", "--opset", "12"], "--opset: per-channel QDQ needs opset 13"),
    ({"backend": "tensorrt"}, ["--format", "onnx", "--int8"], "--int8: the net is quantization-aware trained"),
])
def test_a_qat_checkpoint_export_that_cannot_be_written_is_one_line(tmp_path, quant, args, line):
    import torch

    from up_trainer.config import resolve_config
    from up_trainer.quant import apply_quant
    from up_trainer.tasks.net import build_model

    cfg = write_cfg(tmp_path / "q.yaml", tiny_cfg(quant=quant))
    resolved = resolve_config(cfg)
    torch.save(apply_quant(build_model(resolved["net"]), resolved).state_dict(), tmp_path / "q.pth")
    res = invoke(["export", "--config", cfg, "--checkpoint", tmp_path / "q.pth", "--out", tmp_path / "q.onnx", *args])
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("up: error: " + line), res.stderr
    assert not (tmp_path / "q.onnx").exists()
