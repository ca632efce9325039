"""Builders of the reference-shaped test models, with onnx.helper and fixed random weights.

Each builder returns (model, make_inputs) where make_inputs(batch, rng) gives a feed dict. The shapes mirror
the reference workloads at small sizes: an MLP, a CNN with BatchNormalization and pools, a transformer
encoder block (attention with a mask, LayerNormalization, GELU), a recommender (embedding Gather bags +
concat + MLP) and an image windowing pipeline. Used by tests/models/ and bench/.
"""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

OPSET = 18


def _model(name, nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, name, inputs, outputs, [numpy_helper.from_array(a, n) for n, a in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="cinfer-tests")
    m.ir_version = 9
    return m


def _w(rng, *shape, scale=None):
    fan_in = shape[0] if len(shape) == 2 else int(np.prod(shape[1:]))
    s = scale if scale is not None else (2.0 / fan_in) ** 0.5
    return (rng.standard_normal(shape) * s).astype(np.float32)


def mlp(rng, features=256, hidden=(512, 512), classes=10):
    inits, nodes, x, fin = {}, [], "x", features
    for i, h in enumerate(hidden):
        inits[f"w{i}"], inits[f"b{i}"] = _w(rng, fin, h), (rng.standard_normal(h) * 0.1).astype(np.float32)
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]), helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node("Relu", [f"a{i}"], [f"h{i}"])]
        x, fin = f"h{i}", h
    inits["wo"], inits["bo"] = _w(rng, classes, fin), np.zeros(classes, np.float32)
    nodes += [helper.make_node("Gemm", [x, "wo", "bo"], ["logits"], transB=1),
              helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)]
    model = _model("mlp", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", features])],
                   [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", classes])], inits)
    return model, lambda batch, r: {"x": r.standard_normal((batch, features)).astype(np.float32)}


def cnn(rng, size=64, channels=(16, 32, 64), classes=10):
    inits, nodes, x, cin = {}, [], "image", 3
    for i, cout in enumerate(channels):
        inits[f"c{i}.w"] = _w(rng, cout, cin, 3, 3)
        inits[f"c{i}.b"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        for p, lo, hi in (("scale", 0.5, 1.5), ("var", 0.5, 1.5)):
            inits[f"bn{i}.{p}"] = rng.uniform(lo, hi, cout).astype(np.float32)
        for p in ("bias", "mean"):
            inits[f"bn{i}.{p}"] = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        stride = 2 if i == 0 else 1
        nodes += [helper.make_node("Conv", [x, f"c{i}.w", f"c{i}.b"], [f"conv{i}"], pads=[1, 1, 1, 1], strides=[stride, stride]),
                  helper.make_node("BatchNormalization", [f"conv{i}", f"bn{i}.scale", f"bn{i}.bias", f"bn{i}.mean", f"bn{i}.var"],
                                   [f"bn{i}"], epsilon=1e-5),
                  helper.make_node("Relu", [f"bn{i}"], [f"relu{i}"])]
        pool = ("MaxPool" if i % 2 == 0 else "AveragePool")
        nodes.append(helper.make_node(pool, [f"relu{i}"], [f"pool{i}"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))
        x, cin = f"pool{i}", cout
    # a depthwise conv and a residual add, as in mobile and residual networks
    inits["dw.w"] = _w(rng, cin, 1, 3, 3)
    nodes += [helper.make_node("Conv", [x, "dw.w"], ["dw"], group=cin, pads=[1, 1, 1, 1]),
              helper.make_node("Add", ["dw", x], ["res"]), helper.make_node("Relu", ["res"], ["resr"]),
              helper.make_node("GlobalAveragePool", ["resr"], ["gap"]), helper.make_node("Flatten", ["gap"], ["flat"])]
    inits["fc.w"], inits["fc.b"] = _w(rng, cin, classes), np.zeros(classes, np.float32)
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"]))
    model = _model("cnn", nodes, [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])], inits)
    return model, lambda batch, r: {"image": r.standard_normal((batch, 3, size, size)).astype(np.float32)}


def transformer_block(rng, hidden=64, heads=4, ffn=256, seq=16):
    """One BERT-style encoder layer as the legacy exporter writes it: runtime Shape/Gather/Concat/Reshape
    chains for the head split, an additive attention mask from an int64 mask input, Erf GELU, LayerNorm."""
    d = hidden // heads
    inits = {"wq": _w(rng, hidden, hidden), "wk": _w(rng, hidden, hidden), "wv": _w(rng, hidden, hidden),
             "wo": _w(rng, hidden, hidden), "w1": _w(rng, hidden, ffn), "w2": _w(rng, ffn, hidden)}
    for n, size in (("bq", hidden), ("bk", hidden), ("bv", hidden), ("bo", hidden), ("b1", ffn), ("b2", hidden)):
        inits[n] = (rng.standard_normal(size) * 0.1).astype(np.float32)
    for i in (1, 2):
        inits[f"ln{i}.g"] = rng.uniform(0.8, 1.2, hidden).astype(np.float32)
        inits[f"ln{i}.b"] = (rng.standard_normal(hidden) * 0.1).astype(np.float32)
    inits.update({"i0": np.array(0, np.int64), "i1": np.array(1, np.int64), "ax0": np.array([0], np.int64),
                  "heads": np.array([heads], np.int64), "dhead": np.array([d], np.int64), "hid": np.array([hidden], np.int64),
                  "ax12": np.array([1, 2], np.int64), "scale": np.array(np.sqrt(d), np.float32),
                  "one": np.array(1.0, np.float32), "neg": np.array(-10000.0, np.float32),
                  "half": np.array(0.5, np.float32), "sqrt2": np.array(np.sqrt(2.0), np.float32)})
    N = helper.make_node
    nodes = [
        N("Shape", ["x"], ["xs"]), N("Gather", ["xs", "i0"], ["B"], axis=0), N("Gather", ["xs", "i1"], ["S"], axis=0),
        N("Unsqueeze", ["B", "ax0"], ["B1"]), N("Unsqueeze", ["S", "ax0"], ["S1"]),
        N("Concat", ["B1", "S1", "heads", "dhead"], ["split_shape"], axis=0),
        N("Concat", ["B1", "S1", "hid"], ["merge_shape"], axis=0),
    ]
    for p in ("q", "k", "v"):
        nodes += [N("MatMul", ["x", f"w{p}"], [f"{p}m"]), N("Add", [f"{p}m", f"b{p}"], [f"{p}a"]),
                  N("Reshape", [f"{p}a", "split_shape"], [f"{p}r"]),
                  N("Transpose", [f"{p}r"], [f"{p}t"], perm=[0, 2, 3, 1] if p == "k" else [0, 2, 1, 3])]
    nodes += [
        # mask [B,S] int64 (1 keep, 0 pad) -> additive [B,1,1,S]
        N("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT), N("Sub", ["one", "maskf"], ["inv"]),
        N("Mul", ["inv", "neg"], ["addmask"]), N("Unsqueeze", ["addmask", "ax12"], ["addmask4"]),
        N("MatMul", ["qt", "kt"], ["scores"]), N("Div", ["scores", "scale"], ["scaled"]),
        N("Add", ["scaled", "addmask4"], ["masked"]), N("Softmax", ["masked"], ["probs"], axis=-1),
        N("MatMul", ["probs", "vt"], ["ctx"]), N("Transpose", ["ctx"], ["ctxt"], perm=[0, 2, 1, 3]),
        N("Reshape", ["ctxt", "merge_shape"], ["ctxm"]), N("MatMul", ["ctxm", "wo"], ["om"]), N("Add", ["om", "bo"], ["oa"]),
        N("Add", ["oa", "x"], ["res1"]),
        N("LayerNormalization", ["res1", "ln1.g", "ln1.b"], ["h1"], axis=-1, epsilon=1e-12),
        N("MatMul", ["h1", "w1"], ["f1"]), N("Add", ["f1", "b1"], ["f1b"]),
        N("Div", ["f1b", "sqrt2"], ["gd"]), N("Erf", ["gd"], ["ge"]), N("Add", ["ge", "one"], ["gp"]),
        N("Mul", ["f1b", "gp"], ["gm"]), N("Mul", ["gm", "half"], ["gelu"]),
        N("MatMul", ["gelu", "w2"], ["f2"]), N("Add", ["f2", "b2"], ["f2b"]), N("Add", ["f2b", "h1"], ["res2"]),
        N("LayerNormalization", ["res2", "ln2.g", "ln2.b"], ["y"], axis=-1, epsilon=1e-12),
    ]
    model = _model("transformer_block", nodes,
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden]),
                    helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", hidden])], inits)

    def make_inputs(batch, r):
        mask = np.ones((batch, seq), np.int64)
        for b in range(batch):
            mask[b, r.integers(seq // 2, seq + 1):] = 0
        return {"x": r.standard_normal((batch, seq, hidden)).astype(np.float32), "mask": mask}
    return model, make_inputs


def recommender(rng, dense=13, tables=(1000, 500, 200, 50), dim=16, bag=3, hidden=64):
    """DLRM-style: bottom MLP on dense features, embedding bags (Gather + ReduceSum) per table, concat, top MLP."""
    N = helper.make_node
    inits = {"bw": _w(rng, dense, dim), "bb": np.zeros(dim, np.float32),
             "tw1": _w(rng, dim * (len(tables) + 1), hidden), "tb1": np.zeros(hidden, np.float32),
             "tw2": _w(rng, hidden, 1), "tb2": np.zeros(1, np.float32), "sum_axis": np.array([1], np.int64)}
    nodes = [N("Gemm", ["dense", "bw", "bb"], ["bot"]), N("Relu", ["bot"], ["botr"])]
    parts = ["botr"]
    for t, rows in enumerate(tables):
        inits[f"emb{t}"] = (rng.standard_normal((rows, dim)) * 0.1).astype(np.float32)
        inits[f"sel{t}"] = np.array(t, np.int64)
        nodes += [N("Gather", ["ids", f"sel{t}"], [f"ids{t}"], axis=1),          # [B, bag]
                  N("Gather", [f"emb{t}", f"ids{t}"], [f"e{t}"], axis=0),        # [B, bag, dim]
                  N("ReduceSum", [f"e{t}", "sum_axis"], [f"bag{t}"], keepdims=0)]  # [B, dim]
        parts.append(f"bag{t}")
    nodes += [N("Concat", parts, ["cat"], axis=1), N("Gemm", ["cat", "tw1", "tb1"], ["t1"]), N("Relu", ["t1"], ["t1r"]),
              N("Gemm", ["t1r", "tw2", "tb2"], ["t2"]), N("Sigmoid", ["t2"], ["ctr"])]
    model = _model("recommender", nodes,
                   [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["batch", dense]),
                    helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", len(tables), bag])],
                   [helper.make_tensor_value_info("ctr", TensorProto.FLOAT, ["batch", 1])], inits)

    def make_inputs(batch, r):
        ids = np.stack([r.integers(0, rows, (batch, bag)) for rows in tables], axis=1).astype(np.int64)
        return {"dense": r.standard_normal((batch, dense)).astype(np.float32), "ids": ids}
    return model, make_inputs


def image_window(rng, size=256):
    """Medical-style window/level on a raw image, 2x2 average downsample, a 3x3 smoothing conv, quantise to uint8."""
    N = helper.make_node
    inits = {"level": np.array(40.0, np.float32), "width": np.array(400.0, np.float32), "half": np.array(0.5, np.float32),
             "zero": np.array(0.0, np.float32), "one": np.array(1.0, np.float32), "scale255": np.array(255.0, np.float32),
             "smooth": (np.ones((1, 1, 3, 3), np.float32) / 9.0)}
    nodes = [N("Mul", ["width", "half"], ["hw"]), N("Sub", ["level", "hw"], ["lo"]),
             N("Sub", ["image", "lo"], ["shifted"]), N("Div", ["shifted", "width"], ["norm"]),
             N("Clip", ["norm", "zero", "one"], ["clipped"]),
             N("AveragePool", ["clipped"], ["down"], kernel_shape=[2, 2], strides=[2, 2]),
             N("Conv", ["down", "smooth"], ["smoothed"], pads=[1, 1, 1, 1]),
             N("Mul", ["smoothed", "scale255"], ["scaled"]), N("Floor", ["scaled"], ["floored"]),
             N("Cast", ["floored"], ["pixels"], to=TensorProto.UINT8)]
    model = _model("image_window", nodes,
                   [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["batch", 1, "height", "width"])],
                   [helper.make_tensor_value_info("smoothed", TensorProto.FLOAT, None),
                    helper.make_tensor_value_info("pixels", TensorProto.UINT8, None)], inits)
    return model, lambda batch, r: {"image": (r.standard_normal((batch, 1, size, size)) * 300 + 40).astype(np.float32)}


ALL = {"mlp": mlp, "cnn": cnn, "transformer_block": transformer_block, "recommender": recommender,
       "image_window": image_window}
