#!/usr/bin/env python3
"""Regenerates the bundled example models and their sample inputs (fixed seeds, so the files are stable).

  mlp.onnx        x[batch,16] -> Gemm/Relu x2 -> Softmax -> probs[batch,4]
  tiny_cnn.onnx   image[batch,3,32,32] -> Conv/BN/Relu/MaxPool x2 -> GlobalAveragePool -> Flatten -> Gemm -> logits[batch,10]
Run with the project's venv: .venv/bin/python examples/models/make_examples.py
"""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = pathlib.Path(__file__).resolve().parent


def mlp(rng):
    w1, b1 = rng.standard_normal((16, 32)).astype(np.float32) * 0.3, rng.standard_normal(32).astype(np.float32) * 0.1
    w2, b2 = rng.standard_normal((32, 4)).astype(np.float32) * 0.3, rng.standard_normal(4).astype(np.float32) * 0.1
    inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["hr"], name="relu1"),
             helper.make_node("Gemm", ["hr", "w2", "b2"], ["logits"], name="fc2"),
             helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=-1)]
    g = helper.make_graph(nodes, "mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 4])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="cinfer-examples")


def tiny_cnn(rng):
    inits, nodes = [], []
    cin, x = 3, "image"
    for i, cout in enumerate((8, 16)):
        w = rng.standard_normal((cout, cin, 3, 3)).astype(np.float32) * (2.0 / (cin * 9)) ** 0.5
        inits += [numpy_helper.from_array(w, f"conv{i}.w"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), f"bn{i}.scale"),
                  numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, f"bn{i}.bias"),
                  numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32) * 0.1, f"bn{i}.mean"),
                  numpy_helper.from_array(rng.uniform(0.5, 1.5, cout).astype(np.float32), f"bn{i}.var")]
        nodes += [helper.make_node("Conv", [x, f"conv{i}.w"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  helper.make_node("BatchNormalization", [f"c{i}", f"bn{i}.scale", f"bn{i}.bias", f"bn{i}.mean", f"bn{i}.var"],
                                   [f"n{i}"], name=f"bn{i}"),
                  helper.make_node("Relu", [f"n{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], name=f"pool{i}", kernel_shape=[2, 2], strides=[2, 2])]
        cin, x = cout, f"p{i}"
    inits += [numpy_helper.from_array(rng.standard_normal((10, 16)).astype(np.float32) * 0.3, "fc.w"),
              numpy_helper.from_array(np.zeros(10, np.float32), "fc.b")]
    nodes += [helper.make_node("GlobalAveragePool", [x], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
              helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1)]
    g = helper.make_graph(nodes, "tiny_cnn",
                          [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], producer_name="cinfer-examples")


def main():
    rng = np.random.default_rng(2026)
    for name, model, inp, shape in (("mlp", mlp(rng), "x", (2, 16)), ("tiny_cnn", tiny_cnn(rng), "image", (1, 3, 32, 32))):
        onnx.checker.check_model(model)
        onnx.save(model, HERE / f"{name}.onnx")
        np.save(HERE / f"{name}_{inp}.npy", rng.standard_normal(shape).astype(np.float32))
        print("wrote", HERE / f"{name}.onnx")


if __name__ == "__main__":
    main()
