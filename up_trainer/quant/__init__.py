"""Quantization-aware training: fake quantization inserted into a built net (apply.py), its
configuration (spec.py), observers (ranges.py), quantizers (fake_quant.py) and the QDQ ONNX
file it exports to (onnx_qdq.py). See docs/quant.rst."""
from .apply import apply_quant, is_quantized, quantize_model, quantizer_state_keys  # noqa: F401
from ..config.quant_spec import quant_spec  # noqa: F401
