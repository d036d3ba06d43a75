"""UP's quantization runner (``runtime.runner: quant`` / ``quant_ptq``) and its ``quant`` section,
translated into the native ``quant`` section (config/quant_spec.py). No torch import here.

UP (through MQBench) reads ``quant_type`` (qat / ptq), ``deploy_backend``, ``cali_batch_size``
and ``prepare_args: {extra_qconfig_dict: {w_observer, a_observer, w_fakequantize,
a_fakequantize, w_qscheme, a_qscheme}, leaf_module, extra_quantizer_dict}``; its PTQ files add
``ptq``, ``tricks`` and ``resume_quant``. Each name is mapped onto ours or refused by name.
"""
from ..errors import ConfigError, did_you_mean, join_path
from .up_ptq import translate_ptq

QUANT_RUNNERS = ("quant", "quant_ptq")
BACKENDS = {"tensorrt": "tensorrt", "vitis": "vitis", "academic": "academic"}
# MQBench's other backends: each pins its own engine's scheme, none of which is built here
OTHER_BACKENDS = ("snpe", "ppl", "openvino", "tengine_u8", "tvm", "nnie", "sophgo_tpu", "onnx_qnn", "ppl_cuda")
OBSERVERS = {"MinMaxObserver": "minmax", "EMAMinMaxObserver": "ema_minmax", "MSEObserver": "mse",
             "EMAMSEObserver": "ema_mse"}
FAKE_QUANTIZES = {"FixedFakeQuantize": "fixed", "LearnableFakeQuantize": "learnable"}
# MQBench's post-training fake-quantizes: rounding learned by block reconstruction
PTQ_FAKE_QUANTIZES = {"AdaRoundFakeQuantize": "AdaRound's learned rounding",
                      "QDropFakeQuantize": "QDrop's randomly dropped activation quantization"}
QCONFIG_KEYS = ("w_observer", "a_observer", "w_fakequantize", "a_fakequantize", "w_qscheme", "a_qscheme")
QSCHEME_KEYS = {"bit": "bits", "symmetry": "symmetric", "per_channel": "per_channel", "pot_scale": "pot_scale",
                "p": "p"}
SECTION_KEYS = ("quant_type", "deploy_backend", "cali_batch_size", "prepare_args", "ptq", "tricks", "resume_quant")


def _runner(cfg):
    runtime = cfg.get("runtime")
    runner = runtime.get("runner") if isinstance(runtime, dict) else None
    return runner.get("type") if isinstance(runner, dict) else runner


def _name(table, value, path, what):
    if value in table:
        return table[value]
    if value in PTQ_FAKE_QUANTIZES:
        raise ConfigError(path, f"UP's {value} ({PTQ_FAKE_QUANTIZES[value]}) belongs to post-training "
                          "reconstruction, run by quant_type: ptq", "FixedFakeQuantize or LearnableFakeQuantize with "
                          "quant_type: qat")
    raise ConfigError(path, f"UP's {what} {value!r} is not mapped",
                      did_you_mean(str(value), table) or f"mapped: {', '.join(table)}")


def _qscheme(value, path):
    if not isinstance(value, dict):
        raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
    out = {}
    for key, v in value.items():
        if key not in QSCHEME_KEYS:
            raise ConfigError(join_path(path, key), "is not read by UP's quant runner",
                              did_you_mean(str(key), QSCHEME_KEYS) or f"known: {', '.join(QSCHEME_KEYS)}")
        out[QSCHEME_KEYS[key]] = v
    return out


def _prepare_args(args, native, notes, ptq=False):
    if not isinstance(args, dict):
        raise ConfigError("quant.prepare_args", f"expected a mapping, got {type(args).__name__}")
    for key, value in args.items():
        path = join_path("quant.prepare_args", key)
        if key in ("leaf_module", "extra_quantizer_dict"):
            notes.append(f"{path}: recorded (conv and linear layers are wrapped in place; nothing is traced or "
                         "fused, so MQBench's leaf and fused module types have nothing to do)")
        elif key == "extra_qconfig_dict":
            if not isinstance(value, dict):
                raise ConfigError(path, f"expected a mapping, got {type(value).__name__}")
            for qkey, qvalue in value.items():
                qpath = join_path(path, qkey)
                if qkey not in QCONFIG_KEYS:
                    raise ConfigError(qpath, "is not read by UP's quant runner",
                                      did_you_mean(str(qkey), QCONFIG_KEYS) or f"known: {', '.join(QCONFIG_KEYS)}")
                kind = native["weight"] if qkey.startswith("w_") else native["activation"]
                if qkey.endswith("observer"):
                    kind["observer"] = _name(OBSERVERS, qvalue, qpath, "observer")
                elif qkey.endswith("fakequantize") and ptq and qvalue in PTQ_FAKE_QUANTIZES:
                    notes.append(f"{qpath}: {qvalue} read as the post-training reconstruction (quant.ptq) it "
                                 "belongs to")
                elif qkey.endswith("fakequantize"):
                    kind["fake_quantize"] = _name(FAKE_QUANTIZES, qvalue, qpath, "fake-quantize")
                else:
                    kind.update(_qscheme(qvalue, qpath))
        else:
            raise ConfigError(path, "is not read by UP's quant runner",
                              did_you_mean(str(key), ("extra_qconfig_dict", "leaf_module", "extra_quantizer_dict"))
                              or "known: extra_qconfig_dict, leaf_module, extra_quantizer_dict")


def translate_quant(cfg, notes):
    """Rewrite UP's quant runner and section into the native ``quant`` section (in place)."""
    runner = _runner(cfg)
    if runner not in QUANT_RUNNERS:
        return  # the distillation step refuses any other unmapped runner
    cfg["runtime"].pop("runner")
    section = cfg.get("quant")
    if not isinstance(section, dict):
        raise ConfigError("quant", f"runtime.runner {runner} needs a quant section (a mapping)",
                          "UP's configs/quant files show it")
    for key in section:
        if key not in SECTION_KEYS:
            raise ConfigError(join_path("quant", key), "is not read by UP's quant runner",
                              did_you_mean(str(key), SECTION_KEYS) or f"known: {', '.join(SECTION_KEYS)}")
    mode = section.get("quant_type", "ptq" if runner == "quant_ptq" else "qat")
    if mode not in ("qat", "ptq"):
        raise ConfigError("quant.quant_type", f"{mode!r} is not one of qat, ptq (UP)")
    backend = section.get("deploy_backend", "tensorrt")
    if backend in OTHER_BACKENDS:
        raise ConfigError("quant.deploy_backend", f"UP's {backend} backend (its engine's own scheme) is not mapped",
                          f"one of {', '.join(BACKENDS)}")
    if backend not in BACKENDS:
        raise ConfigError("quant.deploy_backend", f"{backend!r} is not a UP backend",
                          did_you_mean(str(backend), BACKENDS) or f"mapped: {', '.join(BACKENDS)}")
    native = {"mode": mode, "backend": BACKENDS[backend], "weight": {}, "activation": {}}
    _prepare_args(section.get("prepare_args") or {}, native, notes, ptq=mode == "ptq")
    if mode == "ptq":
        translate_ptq(cfg, section, native, notes)  # config/up_ptq.py
    else:
        if "cali_batch_size" in section:
            notes.append("quant.cali_batch_size: recorded (QAT observes ranges on every training batch from the "
                         "first; there is no separate calibration pass)")
        for key in ("resume_quant", "ptq", "tricks"):
            if key in section:
                notes.append(f"quant.{key}: recorded (read by UP's post-training quantization only)")
    saver = cfg.get("saver")
    if isinstance(saver, dict) and saver.get("resume_model") and not saver.get("pretrain_model"):
        # UP's quant runner loads a float checkpoint named here as weights, then quantizes
        saver["pretrain_model"] = saver.pop("resume_model")
        notes.append("saver.resume_model: read as pretrain_model (UP's quant runner starts QAT or PTQ from the float "
                     "weights it names); a QAT run resumes with --resume or saver.auto_resume")
    cfg["quant"] = native
    notes.append(f"runtime.runner: {runner}: quant read as the native quant section (docs/up/quant.rst)")
