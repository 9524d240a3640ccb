"""Embedding quantization: INT8 per row or group / INT4 group-wise, most frequent rows kept in
FP16; exported as GGUF (Q8_0/Q4_0) and compressed-tensors checkpoints."""

from copilot_cli.quant.apply import apply_quantized_embeddings, load_quantized, swapped_embeddings
from copilot_cli.quant.inspect import inspect_gguf_export, inspect_quantized
from copilot_cli.quant.module import QuantizedEmbedding, QuantizedLMHead
from copilot_cli.quant.options import QuantizeOptions
from copilot_cli.quant.quantizer import quantize_embeddings
from copilot_cli.quant.results import QuantizeReport, QuantizeResult
from copilot_cli.quant.scheme import dequantize_rows, quantize

__all__ = [
    "QuantizeOptions",
    "QuantizeReport",
    "QuantizeResult",
    "QuantizedEmbedding",
    "QuantizedLMHead",
    "apply_quantized_embeddings",
    "dequantize_rows",
    "inspect_gguf_export",
    "inspect_quantized",
    "load_quantized",
    "quantize",
    "quantize_embeddings",
    "swapped_embeddings",
]
