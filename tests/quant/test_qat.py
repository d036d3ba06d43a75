"""Quantization-aware training as a normal run: fake quantizers inserted in place, trained,
resumed bitwise, averaged by the EMA hook only where weights are, exported as a QDQ ONNX file
that onnxruntime runs as the fake-quant model does."""
import json

import pytest
import torch
from torch import nn

from conftest import invoke, tiny_cfg, write_cfg
from up_trainer.quant import quant_spec, quantize_model
from up_trainer.quant.fake_quant import FakeQuantizer, QuantConv2d, QuantLinear

QUANT = {"backend": "tensorrt"}


def _load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def _train(tmp_path, name, cfg, *extra):
    res = invoke(["train", "--config", write_cfg(tmp_path / f"{name}.yaml", cfg), "--work-dir", tmp_path / name,
                  *extra])
    assert res.exit_code == 0, (res.stderr, res.stdout[-3000:])
    return tmp_path / name, res


def test_wrapping_keeps_parameters_and_names_and_quantizes_onto_the_grid():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    before = dict(net.named_parameters())
    wrapped = quantize_model(net, quant_spec(QUANT))
    assert wrapped == ["0", "3"] and type(net[0]) is QuantConv2d and type(net[3]) is QuantLinear
    assert dict(net.named_parameters()) == before  # the same objects under the same names
    net.train()
    x = torch.randn(2, 1, 8, 8)
    net(x)
    wq = net[0].weight_quant
    assert wq.per_channel and wq.scale.shape == (4,) and int(wq.zero_point.abs().sum()) == 0
    amax = net[0].weight.detach().reshape(4, -1).abs().amax(1)
    assert torch.allclose(wq.scale, amax / 127)
    q = wq(net[0].weight) / wq.scale.reshape(4, 1, 1, 1)
    assert torch.allclose(q, q.round(), atol=1e-4) and q.abs().max() <= 127.001  # integers times the channel scale
    state = {k: v.clone() for k, v in net.state_dict().items()}
    net.eval()
    net(torch.randn(2, 1, 8, 8) * 100)  # evaluation never moves a range
    assert all(torch.equal(v, state[k]) for k, v in net.state_dict().items())


def test_vitis_scales_are_powers_of_two_per_tensor():
    net = nn.Sequential(nn.Conv2d(1, 4, 3))
    quantize_model(net, quant_spec({"backend": "vitis"}))
    net.train()(torch.randn(2, 1, 8, 8) * 3)
    for fq in (net[0].weight_quant, net[0].input_quant):
        assert fq.scale.shape == (1,) and torch.equal(torch.log2(fq.scale), torch.log2(fq.scale).round())


def test_skip_keeps_a_layer_in_float_and_a_wrong_path_is_one_line():
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Conv2d(4, 4, 3))
    quantize_model(net, quant_spec({"skip": ["0"]}))
    assert type(net[0]) is nn.Conv2d and type(net[1]) is QuantConv2d
    from up_trainer.errors import ConfigError

    with pytest.raises(ConfigError, match=r"quant.skip\[0\]: the net has no module 'stem'"):
        quantize_model(nn.Sequential(nn.Conv2d(1, 4, 3)), quant_spec({"skip": ["stem"]}))


SECTIONS = {"quant": QUANT, "hooks": [{"type": "ema", "kwargs": {"decay": 0.9}}], "default_hooks": {"logger": None},
            "dataset": {"train": {"type": "digits", "kwargs": {"split": "train", "subset": 32}},
                        "test": {"type": "digits", "kwargs": {"split": "test", "subset": 16}}, "batch_size": 16}}


@pytest.fixture(scope="module")
def qat_run(tmp_path_factory):
    """A two-epoch QAT run of ResNet-18 on 32 digits, with EMA."""
    tmp_path = tmp_path_factory.mktemp("qat")
    cfg = tiny_cfg(**SECTIONS)
    run, res = _train(tmp_path, "straight", cfg)
    assert "20 conv/linear layers fake-quantized for tensorrt" in res.stdout or \
        "21 conv/linear layers fake-quantized for tensorrt" in res.stdout
    return tmp_path, cfg, run


def test_qat_run_resumes_bitwise_and_the_ema_keeps_the_live_quantizer_state(qat_run):
    tmp_path, cfg, straight = qat_run
    resumed, res = _train(tmp_path, "resumed", cfg, "--resume", straight / "checkpoints" / "ckpt_e1.pth")
    assert "resumed from" in res.stdout
    a, b = _load(straight / "checkpoints" / "ckpt_e2.pth"), _load(resumed / "checkpoints" / "ckpt_e2.pth")
    quant_keys = [k for k in a["model"] if ".weight_quant." in k or ".input_quant." in k]
    assert len(quant_keys) == 21 * 2 * 4  # 20 convolutions and the classifier: 2 quantizers, 4 buffers each
    for k, v in a["model"].items():
        assert torch.equal(v, b["model"][k]), k
    for k, v in a["ema"]["model"].items():
        assert torch.equal(v, b["ema"]["model"][k]), k
    # the EMA averages the weights; the quantizers' ranges and scales are the live model's
    assert all(torch.equal(a["ema"]["model"][k], a["model"][k]) for k in quant_keys)
    weight = next(k for k in a["model"] if k.endswith("conv1.weight"))
    assert not torch.equal(a["ema"]["model"][weight], a["model"][weight])


def test_qat_checkpoint_exports_a_qdq_onnx_that_matches_the_fake_quant_model(qat_run):
    pytest.importorskip("onnxruntime")
    import onnx

    from up_trainer.config import resolve_config
    from up_trainer.export.verify import onnx_runner
    from up_trainer.predict import load_model

    tmp_path, cfg, straight = qat_run
    out, config = tmp_path / "qat.onnx", write_cfg(tmp_path / "straight.yaml", cfg)
    ckpt = str(straight / "checkpoints" / "ckpt_e2.pth")
    res = invoke(["export", "--config", config, "--checkpoint", ckpt, "--format", "onnx", "--out", out])
    assert res.exit_code == 0, res.stderr
    graph = onnx.load(str(out)).graph
    ops = [n.op_type for n in graph.node]
    # every layer's input and weight dequantized; only activations are quantized at run time
    assert ops.count("DequantizeLinear") == 2 * 21 and ops.count("QuantizeLinear") == 21
    assert sum(t.data_type == onnx.TensorProto.INT8 for t in graph.initializer) >= 21
    record = json.loads(open(str(out) + ".json").read())
    assert record["quantization"]["backend"] == "tensorrt" and record["quantization"]["layers"] == 21
    model = load_model(resolve_config(config), ckpt, "cpu")
    x = torch.rand(4, 1, 8, 8)
    with torch.no_grad():
        want = model({"image": x})["logits"]
    got = onnx_runner(str(out))(x)[0]
    assert (got - want).abs().max() <= record["tolerance"]
    res = invoke(["export", "--config", config, "--checkpoint", ckpt, "--format", "onnx", "--out",
                  tmp_path / "again.onnx", "--int8"])
    assert res.exit_code == 2 and "--int8: the net is quantization-aware trained" in res.stderr


def test_learnable_scales_start_from_the_observer_then_train():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    spec = quant_spec({"activation": {"fake_quantize": "learnable"}, "weight": {"fake_quantize": "learnable"}})
    quantize_model(net, spec)
    fq = net[0].input_quant
    assert isinstance(fq.scale, nn.Parameter) and not bool(fq.initialized)
    x = torch.randn(8, 1, 8, 8)
    net.train()(x).sum().backward()
    assert bool(fq.initialized) and torch.allclose(fq.scale.detach(), x.abs().max().reshape(1) / 127)
    assert fq.scale.grad is not None and net[0].weight_quant.scale.grad.shape == (4,)
    first = fq.scale.detach().clone()
    net(x * 10)  # no longer observed: the scale moves only by training
    assert torch.equal(fq.scale.detach(), first)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert net.eval()(x).dtype == torch.bfloat16


@pytest.mark.slow  # 75 s on 2 busy cores (the export's own verification runs the detector several times)
def test_a_qat_detector_exports_its_raw_heads_verified(tmp_path):
    """RetinaNet's quantizers observe two val scenes (the rest of the net in eval mode); the raw
    heads' QDQ file is verified against the fake-quant model on export."""
    pytest.importorskip("onnxruntime")
    from up_trainer.config import resolve_config
    from up_trainer.export import export_model
    from up_trainer.quant import apply_quant
    from up_trainer.tasks.net import build_model

    net = {"type": "retinanet", "kwargs": {"num_classes": 3, "backbone": "resnet18", "returned_layers": [2, 3],
                                           "fpn_extra": "none", "fpn_channels": 32, "min_size": 64, "max_size": 64}}
    cfg = {"runtime": {"num_threads": 1}, "trainer": {"max_epoch": 1}, "net": net, "quant": QUANT,
           "dataset": {"test": {"type": "digits_det", "kwargs": {"split": "val", "num_images": 2, "canvas_size": 48}}}}
    path = write_cfg(tmp_path / "det.yaml", cfg)
    resolved = resolve_config(path)
    torch.manual_seed(0)
    model = apply_quant(build_model(resolved["net"]), resolved).eval()
    for m in model.modules():
        if isinstance(m, FakeQuantizer):
            m.train()
    with torch.no_grad():
        model({"image": [torch.rand(3, 48, 48), torch.rand(3, 48, 48)]})
    assert all(torch.isfinite(m.max_val).all() for m in model.modules() if isinstance(m, FakeQuantizer))
    torch.save(model.state_dict(), tmp_path / "det.pth")
    record = export_model(resolved, str(tmp_path / "det.pth"), "onnx", str(tmp_path / "det.onnx"))
    assert record["quantization"]["layers"] == sum(isinstance(m, QuantConv2d) for m in model.modules())
    assert record["max_error"] <= record["tolerance"] and record["form"] == "heads"
