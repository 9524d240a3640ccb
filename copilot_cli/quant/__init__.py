"""Embedding quantization: INT8 per row or group / INT4 group-wise, most frequent rows kept in
FP16; exported as GGUF (Q8_0/Q4_0) and compressed-tensors checkpoints.

Names are imported on first use (core/lazy.py)."""

from copilot_cli.core.lazy import exports

_WHERE = {
    "QuantizeOptions": "copilot_cli.quant.options",
    "QuantizeReport": "copilot_cli.quant.results",
    "QuantizeResult": "copilot_cli.quant.results",
    "QuantizedEmbedding": "copilot_cli.quant.module",
    "QuantizedLMHead": "copilot_cli.quant.module",
    "apply_quantized_embeddings": "copilot_cli.quant.apply",
    "dequantize_rows": "copilot_cli.quant.scheme",
    "inspect_gguf_export": "copilot_cli.quant.inspect",
    "inspect_quantized": "copilot_cli.quant.inspect",
    "load_quantized": "copilot_cli.quant.apply",
    "quantize": "copilot_cli.quant.scheme",
    "quantize_embeddings": "copilot_cli.quant.quantizer",
    "swapped_embeddings": "copilot_cli.quant.apply",
}
__all__ = sorted(_WHERE)
__getattr__, __dir__ = exports(__name__, _WHERE)
