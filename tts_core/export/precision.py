"""Precision of an exported graph file, set after export (ONNX Runtime's own converters, and two
exact rewrites they need first).

- `prepare`: a weight the exporter reaches through a Transpose (or a Gemm's transB) becomes a
  transposed initializer read straight by a MatMul. Exact; the browser then does no folding at
  load, and the quantizer sees every weight.
- `fp16` (for WebGPU): weights and activations in fp16, graph inputs and outputs kept fp32.
- `int8` (for wasm): MatMul weights int8 (ONNX Runtime's dynamic quantization: activations are
  quantized per call), and large lookup tables (the embeddings) int8 per row, each row with its
  own scale, dequantized after the lookup.

A rewrite never changes a graph's inputs or outputs, so one runtime drives every precision.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import numpy as np

logger = logging.getLogger(__name__)

PRECISIONS = ("fp32", "int8", "fp16")
MIN_TABLE = 1 << 16  # lookup tables of at least this many numbers are stored int8


def _initializers(graph) -> dict:
    return {init.name: init for init in graph.initializer}


def _consumers(graph) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            counts[name] = counts.get(name, 0) + 1
    for output in graph.output:
        counts[output.name] = counts.get(output.name, 0) + 1
    return counts


def _attribute(node, name: str, default):
    from onnx import helper

    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


def prepare(model, gemm: bool = False):
    """In place: MatMul(x, Transpose(W)) with W an initializer becomes MatMul(x, W^T) with W^T
    stored; with `gemm`, so does Gemm(x, W, transB=1) (its bias kept as an Add), which the
    dynamic quantizer would otherwise skip. Returns `model`."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = _initializers(graph)
    producers = {out: node for node in graph.node for out in node.output}
    transposed: dict[str, str] = {}  # initializer -> its transposed copy

    def transpose_of(name: str) -> str:
        if name not in transposed:
            array = numpy_helper.to_array(inits[name])
            new = numpy_helper.from_array(np.ascontiguousarray(array.T), f"{name}__t")
            graph.initializer.append(new)
            inits[new.name] = new
            transposed[name] = new.name
        return transposed[name]

    nodes = []
    for node in graph.node:
        if node.op_type == "MatMul" and node.input[1] in producers:
            source = producers[node.input[1]]
            if (source.op_type == "Transpose" and source.input[0] in inits
                    and len(inits[source.input[0]].dims) == 2 and list(_attribute(source, "perm", [1, 0])) == [1, 0]):
                node.input[1] = transpose_of(source.input[0])
        elif (gemm and node.op_type == "Gemm" and node.input[1] in inits and _attribute(node, "transB", 0) == 1
              and _attribute(node, "transA", 0) == 0 and _attribute(node, "alpha", 1.0) == 1.0
              and _attribute(node, "beta", 1.0) == 1.0):
            weight = transpose_of(node.input[1])
            if len(node.input) > 2 and node.input[2]:
                product = f"{node.output[0]}__mm"
                nodes.append(helper.make_node("MatMul", [node.input[0], weight], [product], name=f"{node.name}__mm"))
                nodes.append(helper.make_node("Add", [product, node.input[2]], list(node.output), name=f"{node.name}__add"))
            else:
                nodes.append(helper.make_node("MatMul", [node.input[0], weight], list(node.output), name=node.name))
            continue
        nodes.append(node)
    graph.ClearField("node")
    graph.node.extend(nodes)
    _drop_unused(graph)
    return model


def _drop_unused(graph) -> None:
    """Remove nodes whose outputs nobody reads (the folded Transposes) and unread initializers."""
    while True:
        used = _consumers(graph)
        keep = [n for n in graph.node if any(used.get(o, 0) for o in n.output)]
        if len(keep) == len(graph.node):
            break
        graph.ClearField("node")
        graph.node.extend(keep)
    used = _consumers(graph)
    keep_inits = [i for i in graph.initializer if used.get(i.name, 0)]
    graph.ClearField("initializer")
    graph.initializer.extend(keep_inits)


def quantize_tables(model):
    """In place: each Gather (axis 0) of a float initializer of >= MIN_TABLE numbers reads an int8
    copy instead, one symmetric scale per row: Gather(q) -> Cast -> Mul(Gather(scales))."""
    from onnx import TensorProto, helper, numpy_helper

    graph = model.graph
    inits = _initializers(graph)
    done: dict[str, tuple[str, str]] = {}
    nodes = []
    for node in graph.node:
        table = node.input[0] if node.op_type == "Gather" else None
        init = inits.get(table)
        if (init is None or init.data_type != TensorProto.FLOAT or len(init.dims) != 2
                or int(np.prod(init.dims)) < MIN_TABLE or _attribute(node, "axis", 0) != 0):
            nodes.append(node)
            continue
        if table not in done:
            array = numpy_helper.to_array(init)
            scale = np.maximum(np.abs(array).max(axis=1, keepdims=True), np.finfo(np.float32).tiny) / 127.0
            codes = np.clip(np.rint(array / scale), -127, 127).astype(np.int8)
            graph.initializer.extend([numpy_helper.from_array(codes, f"{table}__q8"),
                                      numpy_helper.from_array(scale.astype(np.float32), f"{table}__scale")])
            done[table] = (f"{table}__q8", f"{table}__scale")
        codes, scales = done[table]
        out, stem = node.output[0], node.name or node.output[0]
        nodes += [helper.make_node("Gather", [codes, node.input[1]], [f"{out}__q8"], name=f"{stem}__q8"),
                  helper.make_node("Cast", [f"{out}__q8"], [f"{out}__f"], to=TensorProto.FLOAT, name=f"{stem}__cast"),
                  helper.make_node("Gather", [scales, node.input[1]], [f"{out}__s"], name=f"{stem}__scale"),
                  helper.make_node("Mul", [f"{out}__f", f"{out}__s"], [out], name=f"{stem}__dequant")]
    graph.ClearField("node")
    graph.node.extend(nodes)
    _drop_unused(graph)
    return model


def convert(source: Path, target: Path, precision: str, *, quantize_matmuls: bool = True) -> None:
    """Write `source` (an fp32 graph file) at `precision` to `target`. `quantize_matmuls=False`
    keeps the MatMul weights fp32 under int8 (the codec's: its output is the audio itself)."""
    import onnx

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    model = prepare(onnx.load(str(source)), gemm=precision == "int8" and quantize_matmuls)
    if precision == "fp16":
        from onnxruntime.transformers.float16 import convert_float_to_float16

        model = convert_float_to_float16(model, keep_io_types=True, disable_shape_infer=True)
    elif precision == "int8":
        if quantize_matmuls:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            with tempfile.TemporaryDirectory() as scratch:
                staged = Path(scratch) / "model.onnx"
                quantize_dynamic(model, str(staged), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
                model = onnx.load(str(staged))
        model = quantize_tables(model)
    onnx.save(model, str(target))
    logger.debug("%s -> %s (%s)", source.name, target.name, precision)
