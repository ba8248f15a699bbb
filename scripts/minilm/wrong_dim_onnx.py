"""Writes a tiny ONNX graph with MiniLM's inputs but 16-dimensional output, for the test that a
model of the wrong dimension is refused at load (embed/tests/onnx.rs).

    python wrong_dim_onnx.py OUT.onnx
"""

import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

dims = ["batch", "sequence"]
ones = numpy_helper.from_array(np.ones(16, dtype=np.float32), "ones")
axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
nodes = [
    helper.make_node("Cast", ["input_ids"], ["ids_f"], to=TensorProto.FLOAT),
    helper.make_node("Unsqueeze", ["ids_f", "axes"], ["ids_3d"]),
    helper.make_node("Mul", ["ids_3d", "ones"], ["last_hidden_state"]),
]
graph = helper.make_graph(
    nodes, "wrong-dim",
    [helper.make_tensor_value_info(n, TensorProto.INT64, dims)
     for n in ("input_ids", "attention_mask", "token_type_ids")],
    [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, dims + [16])],
    [ones, axes])
model = helper.make_model(graph, producer_name="amberdb wrong_dim_onnx.py",
                          opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.checker.check_model(model)
onnx.save(model, sys.argv[1])
