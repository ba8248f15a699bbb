"""Builds the fp32 ONNX graph of all-MiniLM-L6-v2 from its safetensors weights, without torch.

    python build_onnx.py MODEL.safetensors CONFIG.json OUT.onnx

A standard BERT encoder at opset 17 with HF's interface: inputs `input_ids`, `attention_mask`,
`token_type_ids` (int64 [batch, sequence]); output `last_hidden_state` (float32
[batch, sequence, hidden]). Pooling and normalization happen in Rust (embed/src/onnx.rs).
The sizes come from config.json, so the same builder serves any BERT of this layout.

Position ids are a Slice of the position table up to Shape(input_ids)[1]: the
Shape->Gather->Range->Gather form breaks under ORT's extended fusions
(docs/embedding.md, "The graph"). With the pinned numpy, onnx, safetensors and
protobuf (scripts/fetch-model) the output is byte-for-byte reproducible.
"""

import json
import math
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from safetensors.numpy import load_file


def build(weights_path, config_path, out_path):
    weights = load_file(weights_path)
    with open(config_path) as f:
        config = json.load(f)
    hidden = config["hidden_size"]
    heads = config["num_attention_heads"]
    head_dim = hidden // heads
    layers = config["num_hidden_layers"]
    eps = config["layer_norm_eps"]

    nodes, inits = [], []

    def init(name, array):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def weight(key):
        return init(key, weights[key])

    def linear(x, prefix, out):
        # torch stores [out, in]; MatMul wants [in, out].
        w = init(prefix + ".weight.T", weights[prefix + ".weight"].T)
        return node("Add", [node("MatMul", [x, w], out + ".mm"), weight(prefix + ".bias")], out)

    def layer_norm(x, prefix, out):
        return node("LayerNormalization", [x, weight(prefix + ".weight"), weight(prefix + ".bias")],
                    out, axis=-1, epsilon=eps)

    # Embeddings: word + position + token type, then LayerNorm.
    seq_len = node("Shape", ["input_ids"], "seq_len", start=1, end=2)
    zero = init("zero_1d", np.array([0], dtype=np.int64))
    axis0 = init("axis0_1d", np.array([0], dtype=np.int64))
    positions = node("Slice", [weight("embeddings.position_embeddings.weight"), zero, seq_len, axis0],
                     "positions")
    words = node("Gather", [weight("embeddings.word_embeddings.weight"), "input_ids"], "words")
    types = node("Gather", [weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "types")
    summed = node("Add", [node("Add", [words, types], "words_types"), positions], "embeddings_sum")
    x = layer_norm(summed, "embeddings.LayerNorm", "embeddings")

    # Additive attention mask, HF layout: (1 - mask) * finfo(float32).min, shape [B, 1, 1, S].
    mask4 = node("Unsqueeze", ["attention_mask", init("mask_axes", np.array([1, 2], dtype=np.int64))], "mask4")
    mask_f = node("Cast", [mask4], "mask_f", to=TensorProto.FLOAT)
    inverted = node("Sub", [init("one", np.array(1.0, dtype=np.float32)), mask_f], "mask_inverted")
    additive = node("Mul", [inverted, init("f32_min", np.array(np.finfo(np.float32).min, dtype=np.float32))],
                    "mask_additive")

    split_heads = init("split_heads", np.array([0, 0, heads, head_dim], dtype=np.int64))
    merge_heads = init("merge_heads", np.array([0, 0, hidden], dtype=np.int64))
    scale = init("sqrt_head_dim", np.array(math.sqrt(head_dim), dtype=np.float32))
    sqrt2 = init("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
    half = init("half", np.array(0.5, dtype=np.float32))

    for i in range(layers):
        p = f"encoder.layer.{i}"
        def heads_of(name, perm):
            projected = linear(x, f"{p}.attention.self.{name}", f"l{i}.{name}")
            shaped = node("Reshape", [projected, split_heads], f"l{i}.{name}.heads")
            return node("Transpose", [shaped], f"l{i}.{name}.t", perm=perm)
        q = heads_of("query", [0, 2, 1, 3])
        k = heads_of("key", [0, 2, 3, 1])
        v = heads_of("value", [0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k], f"l{i}.qk"), scale], f"l{i}.scores")
        probs = node("Softmax", [node("Add", [scores, additive], f"l{i}.masked")], f"l{i}.probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"l{i}.context")], f"l{i}.context.t",
                       perm=[0, 2, 1, 3])
        merged = node("Reshape", [context, merge_heads], f"l{i}.context.merged")
        attended = linear(merged, f"{p}.attention.output.dense", f"l{i}.attention.out")
        x = layer_norm(node("Add", [attended, x], f"l{i}.attention.residual"),
                       f"{p}.attention.output.LayerNorm", f"l{i}.attention.norm")
        h = linear(x, f"{p}.intermediate.dense", f"l{i}.ffn.in")
        erf = node("Erf", [node("Div", [h, sqrt2], f"l{i}.ffn.scaled")], f"l{i}.ffn.erf")
        gelu = node("Mul", [node("Mul", [h, half], f"l{i}.ffn.half"),
                            node("Add", [erf, "one"], f"l{i}.ffn.erf1")], f"l{i}.ffn.gelu")
        out = linear(gelu, f"{p}.output.dense", f"l{i}.ffn.out")
        x = layer_norm(node("Add", [out, x], f"l{i}.ffn.residual"), f"{p}.output.LayerNorm",
                       "last_hidden_state" if i == layers - 1 else f"l{i}.out")

    dims = ["batch", "sequence"]
    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
         for n in ("input_ids", "attention_mask", "token_type_ids")],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [hidden])],
        inits)
    model = helper.make_model(graph, producer_name="amberdb build_onnx.py",
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out_path)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    build(*sys.argv[1:])
