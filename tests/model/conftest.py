"""The LM and the codec against the recorded reference outputs of the tiny checkpoints (parity),
their kernels (sampling, fused ops, ring attention, run in Triton's interpreter on CPU), the
CPU precision modes and the ONNX export.
"""

from support.codec_helpers import codec_vectors, tiny_codec  # noqa: F401  (fixtures)
