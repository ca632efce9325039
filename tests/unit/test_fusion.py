"""Load-time fusions (graph/fusion.c): each pattern is rewritten (the optimised graph's op histogram shows it) and the
results still match onnxruntime; near-misses of each pattern are left alone."""
import ctypes

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import Session, Tensor, selected_device

N = helper.make_node


def model(nodes, inputs, outputs, inits):
    g = helper.make_graph(nodes, "fusion", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def ops_of(lib, s):
    L = lib.lib
    L.cinfer_model_num_op_types.argtypes = [ctypes.c_void_p]
    L.cinfer_model_num_op_types.restype = ctypes.c_size_t
    L.cinfer_model_op_type.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                       ctypes.POINTER(ctypes.c_size_t)]
    hist = {}
    for i in range(L.cinfer_model_num_op_types(s.model)):
        name, count = ctypes.c_char_p(), ctypes.c_size_t()
        lib.check(L.cinfer_model_op_type(s.model, i, ctypes.byref(name), ctypes.byref(count)))
        hist[name.value.decode()] = count.value
    return hist


def check_against_ort(lib, m, feeds, rtol=1e-5, atol=1e-6, ort_fusions=True):
    """ort_fusions=False: onnxruntime unoptimised (its own SkipLayerNormalization fusion refuses some valid joins)."""
    s = Session(lib, m.SerializeToString())
    options = ort.SessionOptions()
    if not ort_fusions:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    want = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feeds)
    for w, g in zip(want, s.run(feeds)):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return ops_of(lib, s)


def f32(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("form", ["half_first", "x_first", "mul_inv_sqrt2"])
def test_erf_gelu_becomes_one_node(lib, form):
    c = {"sqrt2": np.array(np.sqrt(2), np.float32), "inv": np.array(1 / np.sqrt(2), np.float32),
         "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}
    scale = N("Mul", ["x", "inv"], ["t"]) if form == "mul_inv_sqrt2" else N("Div", ["x", "sqrt2"], ["t"])
    tail = ([N("Mul", ["half", "p"], ["h"]), N("Mul", ["x", "h"], ["y"])] if form == "half_first"
            else [N("Mul", ["p", "x"], ["h"]), N("Mul", ["h", "half"], ["y"])])
    m = model([scale, N("Erf", ["t"], ["e"]), N("Add", ["one", "e"], ["p"])] + tail,
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 32])], c)
    ops = check_against_ort(lib, m, {"x": f32(4, 32) * 3})
    assert ops == {"Gelu": 1}, ops


def test_gelu_with_an_intermediate_used_elsewhere_is_left_alone(lib):
    c = {"sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32), "half": np.array(0.5, np.float32)}
    m = model([N("Div", ["x", "sqrt2"], ["t"]), N("Erf", ["t"], ["e"]), N("Add", ["e", "one"], ["p"]),
               N("Mul", ["x", "p"], ["h"]), N("Mul", ["h", "half"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
               helper.make_tensor_value_info("e", TensorProto.FLOAT, [4, 8])], c)
    ops = check_against_ort(lib, m, {"x": f32(4, 8)})
    assert "Gelu" not in ops, ops  # (Div and Erf, up to the output e, make an elementwise chain)


def test_common_subexpressions_and_equal_constants_merge(lib):
    """Two layers rebuild the same additive mask from per-layer copies of one scalar: one Where remains."""
    c = {"zero_a": np.array(0, np.float32), "zero_b": np.array(0, np.float32),
         "neg_a": np.array(-1e4, np.float32), "neg_b": np.array(-1e4, np.float32)}
    m = model([N("Cast", ["mask"], ["keep"], to=TensorProto.BOOL),
               N("Where", ["keep", "zero_a", "neg_a"], ["add_a"]), N("Add", ["x", "add_a"], ["y_a"]),
               N("Where", ["keep", "zero_b", "neg_b"], ["add_b"]), N("Add", ["y_a", "add_b"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6]),
               helper.make_tensor_value_info("mask", TensorProto.INT64, [2, 6])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])], c)
    mask = np.array([[1, 1, 0, 1, 0, 0], [1] * 6], np.int64)
    ops = check_against_ort(lib, m, {"x": f32(2, 6), "mask": mask})
    assert ops["Where"] == 1 and ops["Add"] == 2


def softmax_guard_model(zero_dtype=np.float32):
    return model([N("Add", ["x", "m"], ["s"]), N("Softmax", ["s"], ["p"], axis=-1), N("IsNaN", ["p"], ["nan"]),
                  N("Where", ["nan", "zero", "p"], ["w"]), N("Relu", ["w"], ["y"])],
                 [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5]),
                  helper.make_tensor_value_info("m", TensorProto.FLOAT, [3, 5])],
                 [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])], {"zero": np.array(0, zero_dtype)})


def test_softmax_nan_guard_is_fused_and_zeroes_fully_masked_rows(lib):
    mask = np.zeros((3, 5), np.float32)
    mask[0, 2:] = -np.inf
    mask[1, :] = -np.inf  # every position masked: softmax gives NaN, the guard 0
    x = f32(3, 5)
    x[2, 1] = np.nan       # a NaN input poisons its row the same way
    ops = check_against_ort(lib, softmax_guard_model(), {"x": x, "m": mask})
    assert ops == {"Add": 1, "Softmax": 1, "Relu": 1}, ops
    got = Session(lib, softmax_guard_model().SerializeToString()).run({"x": x, "m": mask})[0]
    assert np.all(got[1] == 0) and np.all(got[2] == 0) and np.all(np.isfinite(got))
    half = Session(lib, softmax_guard_model().SerializeToString(), options={"precision": "fp16"}).run({"x": x, "m": mask})[0]
    assert np.all(half[1] == 0) and np.all(half[2] == 0)


def test_a_nonzero_guard_value_is_not_fused(lib):
    m = softmax_guard_model()
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(np.array(1, np.float32), "zero"))  # Where(nan, 1, p)
    ops = check_against_ort(lib, m, {"x": f32(3, 5), "m": np.zeros((3, 5), np.float32)})
    assert ops["Where"] == 1 and ops["IsNaN"] == 1


def attention_scale_model(shared_bias):
    """q = Transpose(Reshape(x @ Wq + b)) * 0.35: the scale folds into Wq and b (b may be shared with another
    projection, which must keep the unscaled values); Shape of an intermediate does not block it."""
    inits = {"wq": f32(16, 16, seed=1), "wk": f32(16, 16, seed=2), "b": f32(16, seed=3), "b2": f32(16, seed=4),
             "shape": np.array([2, 3, 4, 4], np.int64), "s": np.array(0.35, np.float32)}
    nodes = [N("MatMul", ["x", "wq"], ["mq"]), N("Add", ["mq", "b"], ["lq"]), N("Reshape", ["lq", "shape"], ["rq"]),
             N("Transpose", ["rq"], ["tq"], perm=[0, 2, 1, 3]), N("Shape", ["tq"], ["tq_shape"]),
             N("Mul", ["tq", "s"], ["qs"]), N("Relu", ["qs"], ["q"]),
             N("MatMul", ["x", "wk"], ["mk"]), N("Add", ["mk", "b" if shared_bias else "b2"], ["k"])]
    return model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16])],
                 [helper.make_tensor_value_info("q", TensorProto.FLOAT, None),
                  helper.make_tensor_value_info("k", TensorProto.FLOAT, None),
                  helper.make_tensor_value_info("tq_shape", TensorProto.INT64, None)], inits)


@pytest.mark.parametrize("shared_bias", [False, True])
def test_scalar_scale_folds_into_the_linear(lib, shared_bias):
    ops = check_against_ort(lib, attention_scale_model(shared_bias), {"x": f32(2, 3, 16)}, rtol=1e-5, atol=1e-5)
    assert "Mul" not in ops, ops


def test_scale_after_a_non_constant_product_stays(lib):
    m = model([N("MatMul", ["x", "x2"], ["p"]), N("Div", ["p", "s"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
               helper.make_tensor_value_info("x2", TensorProto.FLOAT, [4, 3])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])], {"s": np.array(8, np.float32)})
    ops = check_against_ort(lib, m, {"x": f32(3, 4), "x2": f32(4, 3, seed=1)})
    assert ops["Div"] == 1


def test_reshapes_are_views_of_a_value_read_elsewhere_too(lib):
    """Reshape/Squeeze/Unsqueeze/Flatten outputs share their input's arena block even when the input has other
    readers (the fused Gemm's row view of a LayerNorm output that Q, K and V all read): only the Relu's block is
    planned."""
    m = model([N("Relu", ["x"], ["r"]), N("Reshape", ["r", "s1"], ["v1"]), N("Flatten", ["r"], ["v2"], axis=0),
               N("Add", ["v1", "c"], ["y1"]), N("Mul", ["v2", "c"], ["y2"]), N("Sigmoid", ["r"], ["y3"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 32])],
              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y1", "y2", "y3")],
              {"s1": np.array([1024, 1], np.int64), "c": np.array(2, np.float32)})
    ops = check_against_ort(lib, m, {"x": f32(32, 32)})
    assert ops["Reshape"] == 1 and ops["Flatten"] == 1
    s = Session(lib, m.SerializeToString())
    x = f32(32, 32)
    ins = (Tensor * 1)()
    ins[0].name, ins[0].dtype, ins[0].ndim = b"x", 1, 2
    ins[0].dims[0] = ins[0].dims[1] = 32
    ins[0].data = x.ctypes.data
    arena = ctypes.c_size_t()
    lib.lib.cinfer_session_plan_memory.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                                   ctypes.POINTER(ctypes.c_size_t)]
    lib.check(lib.lib.cinfer_session_plan_memory(s.session, ins, 1, ctypes.byref(arena)))
    assert arena.value == 32 * 32 * 4, arena.value


@pytest.mark.parametrize("rank", [2, 3])
def test_matmul_bias_becomes_one_gemm(lib, rank):
    shape = [6, 24] if rank == 2 else [2, 3, 24]
    m = model([N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"] + shape[1:])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
              {"w": f32(24, 8, seed=1), "b": f32(8, seed=2)})
    ops = check_against_ort(lib, m, {"x": f32(*shape)})
    assert ops.get("Gemm") == 1 and "MatMul" not in ops and "Add" not in ops, ops
    s = Session(lib, m.SerializeToString())  # another batch size re-plans the host-evaluated output shape
    x = f32(5, *shape[1:], seed=3)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(s.run({"x": x})[0], want, rtol=1e-5, atol=1e-6)


class ModelStats(ctypes.Structure):
    _fields_ = [("opset", ctypes.c_int64), ("num_nodes", ctypes.c_size_t), ("num_nodes_original", ctypes.c_size_t),
                ("num_parameters", ctypes.c_size_t), ("parameter_bytes", ctypes.c_size_t),
                ("num_host_shape_nodes", ctypes.c_size_t)]


def test_a_weight_shared_by_matmuls_is_transposed_once(lib):
    """MatMul + bias Gemms store their weight transposed (transB = 1); layers that share one weight (ALBERT's) share
    its transposed copy too: the model holds no more parameters than the file, and every layer still computes."""
    layers, nodes = 4, []
    for i in range(layers):
        src = "x" if i == 0 else f"y{i - 1}"
        nodes += [N("MatMul", [src, "w"], [f"m{i}"]), N("Add", [f"m{i}", f"b{i}"], [f"y{i}"])]
    inits = {"w": f32(16, 16, seed=1) * 0.25, **{f"b{i}": f32(16, seed=10 + i) for i in range(layers)}}
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
              [helper.make_tensor_value_info(f"y{layers - 1}", TensorProto.FLOAT, None)], inits)
    ops = check_against_ort(lib, m, {"x": f32(3, 16)})
    assert ops == {"Gemm": layers}, ops
    s = Session(lib, m.SerializeToString())
    stats = ModelStats()
    lib.check(lib.lib.cinfer_model_get_stats(s.model, ctypes.byref(stats)))
    assert stats.num_parameters == 16 * 16 + layers * 16, stats.num_parameters


def test_a_shared_weight_and_its_shared_scale_are_folded_once(lib):
    """ALBERT as the dynamo exporter writes it: every layer reuses one projection (weight and bias) and scales its
    output by the same attention constant. The scale folds into one scaled copy that all layers share (one copy per
    layer made a 12-layer ALBERT-base take seconds to load): the model holds one weight and one bias, as the file."""
    layers, nodes = 6, []
    for i in range(layers):
        src = "x" if i == 0 else f"y{i - 1}"
        nodes += [N("MatMul", [src, "w"], [f"m{i}"]), N("Add", [f"m{i}", "b"], [f"l{i}"]),
                  N("Mul", [f"l{i}", "s"], [f"q{i}"]), N("Tanh", [f"q{i}"], [f"y{i}"])]
    inits = {"w": f32(16, 16, seed=1) * 0.25, "b": f32(16, seed=2), "s": np.array(0.35, np.float32)}
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
              [helper.make_tensor_value_info(f"y{layers - 1}", TensorProto.FLOAT, None)], inits)
    ops = check_against_ort(lib, m, {"x": f32(3, 16)})
    assert "Mul" not in ops and ops.get("Gemm") == layers, ops
    s = Session(lib, m.SerializeToString())
    stats = ModelStats()
    lib.check(lib.lib.cinfer_model_get_stats(s.model, ctypes.byref(stats)))
    assert stats.num_parameters == 16 * 16 + 16, stats.num_parameters


@pytest.mark.parametrize("form", ["gemm", "matmul_add"])
def test_gemm_relu_fuses_into_the_gemm(lib, form):
    """Relu after a Gemm (or after the Gemm a 2-D MatMul + bias becomes) runs in the Gemm (a GPU: cuBLASLt's
    RELU_BIAS epilogue): no Relu node left, onnxruntime's values; negative products come out 0."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = ([N("Gemm", ["x", "w", "b"], ["m"], transB=1)] if form == "gemm" else
             [N("MatMul", ["x", "wt"], ["mm"]), N("Add", ["mm", "b"], ["m"])])
    m = model(nodes + [N("Relu", ["m"], ["y"])], [x], [y],
              {"w": f32(8, 16, seed=1), "wt": f32(16, 8, seed=1), "b": f32(8, seed=2)})
    feeds = {"x": f32(6, 16, seed=3)}
    ops = check_against_ort(lib, m, feeds)
    assert ops.get("Gemm") == 1 and "Relu" not in ops, ops
    got = Session(lib, m.SerializeToString()).run(feeds)[0]
    assert (got == 0).any() and (got > 0).any()


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("form,rank", [("erf_pattern", 3), ("erf_pattern", 2), ("gelu", 2), ("gelu_tanh", 3)])
def test_gemm_gelu_fuses_into_the_gemm(lib, monkeypatch, form, rank, precision):
    """A Gelu after MatMul + bias (the pattern BERT exports write, or the opset-20 Gelu op, erf or tanh form; on 3-D
    activations through the Reshape the fused Gemm ends with) runs in the Gemm (a GPU: cuBLASLt's GELU_BIAS epilogue
    for the tanh form, and in half precision for the erf form too; else the Gelu kernel after the GEMM): no Gelu node
    left, onnxruntime's values; CINFER_GELU_EPILOGUE=0 (the Gelu kernel) agrees within the two forms' difference."""
    c = {"w": f32(64, 96, seed=1) * 0.25, "b": f32(96, seed=2)}
    nodes = [N("MatMul", ["x", "w"], ["mm"]), N("Add", ["mm", "b"], ["m"])]
    if form == "erf_pattern":
        c.update({"sqrt2": np.array(np.sqrt(2), np.float32), "one": np.array(1, np.float32),
                  "half": np.array(0.5, np.float32)})
        nodes += [N("Div", ["m", "sqrt2"], ["t"]), N("Erf", ["t"], ["e"]), N("Add", ["e", "one"], ["p"]),
                  N("Mul", ["m", "p"], ["h"]), N("Mul", ["h", "half"], ["y"])]
    else:
        nodes += [N("Gelu", ["m"], ["y"], approximate="tanh" if form == "gelu_tanh" else "none")]
    x_shape = ["batch", 64] if rank == 2 else ["batch", 11, 64]
    g = helper.make_graph(nodes, "gelu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    feeds = {"x": f32(33, 64, seed=3) if rank == 2 else f32(3, 11, 64, seed=3)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    s = Session(lib, m.SerializeToString(), options={"precision": precision, "profile": "1"})
    ops = session_ops(lib, s)
    assert ops.get("Gemm") == 1 and "Gelu" not in ops, ops
    got = s.run(feeds)[0]
    tol = dict(rtol=1e-5, atol=1e-5) if precision == "fp32" else dict(rtol=2e-2, atol=1e-2)
    np.testing.assert_allclose(got, want, **tol)
    monkeypatch.setenv("CINFER_GELU_EPILOGUE", "0")
    kernel = Session(lib, m.SerializeToString(), options={"precision": precision}).run(feeds)[0]
    np.testing.assert_allclose(got, kernel, rtol=0, atol=1e-5 if precision == "fp32" else 1e-2)


def test_gemm_read_elsewhere_keeps_its_relu(lib):
    m = model([N("Gemm", ["x", "w", "b"], ["m"], transB=1), N("Relu", ["m"], ["r"]), N("Add", ["m", "r"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], {"w": f32(8, 16, seed=1), "b": f32(8)})
    ops = check_against_ort(lib, m, {"x": f32(4, 16, seed=2)})
    assert ops.get("Relu") == 1, ops


def test_matmul_with_a_non_constant_weight_stays(lib):
    m = model([N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
               helper.make_tensor_value_info("w", TensorProto.FLOAT, [6, 3])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 3])], {"b": f32(3)})
    ops = check_against_ort(lib, m, {"x": f32(4, 6), "w": f32(6, 3, seed=1)})
    assert ops == {"MatMul": 1, "Add": 1}, ops


def residual_model(relu=True, residual_shape=(2, 8, 6, 6), bias=True, conv_shape=("n", 8, 6, 6)):
    nodes = [N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"]),
             N("Conv", ["r1", "w2"] + (["b2"] if bias else []), ["c2"], pads=[1, 1, 1, 1]),
             N("Add", ["skip", "c2"], ["s"])]
    nodes += [N("Relu", ["s"], ["y"])] if relu else [N("Sigmoid", ["s"], ["y"])]
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4, 6, 6]),
                      helper.make_tensor_value_info("skip", TensorProto.FLOAT, ["n"] + list(residual_shape[1:]))],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 8, 6, 6])],
              {"w1": f32(8, 4, 3, 3, seed=1) * 0.3, "b1": f32(8, seed=2), "w2": f32(8, 8, 3, 3, seed=3) * 0.2,
               "b2": f32(8, seed=4)})
    # dynamo exports record intermediate shapes (value_info), torch's legacy exporter none (conv_shape=None): cinfer
    # infers them at load either way, and its own shapes win over a file's
    if conv_shape:
        m.graph.value_info.append(helper.make_tensor_value_info("c2", TensorProto.FLOAT, list(conv_shape)))
    return m


@pytest.mark.parametrize("relu,bias", [(True, True), (False, True), (True, False)])
def test_conv_residual_add_relu_fuse_into_the_conv(lib, relu, bias):
    m = residual_model(relu=relu, bias=bias)
    feeds = {"x": f32(2, 4, 6, 6), "skip": f32(2, 8, 6, 6, seed=9)}
    ops = check_against_ort(lib, m, feeds, rtol=1e-5, atol=1e-5)
    assert ops == ({"Conv": 2} if relu else {"Conv": 2, "Sigmoid": 1}), ops
    half = Session(lib, m.SerializeToString(), options={"precision": "fp16"}).run(feeds)[0]
    want = Session(lib, m.SerializeToString()).run(feeds)[0]
    np.testing.assert_allclose(half, want, rtol=1e-2, atol=1e-2)


def test_conv_residual_fuses_without_intermediate_shapes_in_the_file(lib):
    """torch's legacy exporter writes no value_info (ResNets exported so kept every residual Add and Relu): the
    Conv output's shape inferred at load proves the join."""
    m = residual_model(conv_shape=None)
    assert not m.graph.value_info
    ops = check_against_ort(lib, m, {"x": f32(3, 4, 6, 6), "skip": f32(3, 8, 6, 6, seed=9)}, rtol=1e-5, atol=1e-5)
    assert ops == {"Conv": 2}, ops


@pytest.mark.parametrize("conv_shape", [("n", 8, 6, 6), None, ("n", 8, 1, 1)])
def test_broadcast_residual_is_not_fused(lib, conv_shape):
    """A residual that Add broadcasts stays an Add, also where the file's value_info claims (wrongly) that the Conv
    output has the residual's shape: the fused kernel would read the [n, 8, 1, 1] residual as [n, 8, 6, 6]."""
    m = residual_model(residual_shape=(2, 8, 1, 1), conv_shape=conv_shape)
    feeds = {"x": f32(2, 4, 6, 6), "skip": f32(2, 8, 1, 1, seed=9)}
    # onnxruntime checks (and throws on, which an ASan-preloaded run cannot survive) a wrong value_info: its result
    # comes from the model without it, the same computation
    clean = residual_model(residual_shape=(2, 8, 1, 1), conv_shape=None).SerializeToString()
    want = ort.InferenceSession(clean, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    s = Session(lib, m.SerializeToString())
    np.testing.assert_allclose(s.run(feeds)[0], want, rtol=1e-5, atol=1e-5)
    ops = ops_of(lib, s)
    assert ops["Add"] == 1 and ops["Relu"] == 1, ops


def test_a_conv_with_four_inputs_in_a_file_is_refused(lib):
    m = model([N("Conv", ["x", "w", "b", "x"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
              {"w": f32(1, 1, 1, 1), "b": f32(1)})
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString()).run({"x": f32(1, 1, 3, 3)})
    assert "4 inputs given, Conv takes 2 or 3" in str(e.value)


def residual_layer_norm_model(skip_shape=None, stats=False, cols=48):
    """LayerNorm(h + skip) as post-LN transformers write it, h the output of an earlier op (recorded in value_info)."""
    skip_shape = skip_shape or (2, 5, cols)
    outs = ["y", "mean"] if stats else ["y"]
    nodes = [N("Mul", ["x", "g"], ["h"]), N("Add", ["h", "skip"], ["s"]),
             N("LayerNormalization", ["s", "scale", "bias"], outs, axis=-1, epsilon=1e-5)]
    graph_outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5, cols])]
    if stats:
        graph_outs.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    m = model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5, cols]),
                      helper.make_tensor_value_info("skip", TensorProto.FLOAT, ["n"] + list(skip_shape[1:]))],
              graph_outs, {"g": f32(cols, seed=1), "scale": f32(cols, seed=2), "bias": f32(cols, seed=3)})
    m.graph.value_info.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["n", 5, cols]))
    m.graph.value_info.append(helper.make_tensor_value_info("s", TensorProto.FLOAT, ["n", 5, cols]))
    return m


@pytest.mark.parametrize("cols", [48, 128, 768, 1024, 1500])  # GPU: 128-1024 the 16-byte kernel (float and half), 1500 too long for a warp a row
def test_residual_add_fuses_into_the_layer_norm(lib, cols):
    m = residual_layer_norm_model(cols=cols)
    feeds = {"x": f32(2, 5, cols) * 2, "skip": f32(2, 5, cols, seed=9) + 3}
    ops = check_against_ort(lib, m, feeds, rtol=1e-4, atol=1e-4)
    assert ops == {"Mul": 1, "LayerNormalization": 1}, ops
    half = Session(lib, m.SerializeToString(), options={"precision": "fp16"}).run(feeds)[0]
    want = Session(lib, m.SerializeToString()).run(feeds)[0]
    np.testing.assert_allclose(half, want, rtol=2e-2, atol=2e-2)


def test_residual_add_fuses_on_a_dynamic_sequence(lib):
    """Both operands [n, seq, 64] with seq dynamic: the same named dims are the same sizes, so the Add fuses; the
    intermediate shapes come from load-time inference (none in the file)."""
    m = residual_layer_norm_model(cols=64)
    del m.graph.value_info[:]
    for v in (m.graph.input[0], m.graph.input[1], m.graph.output[0]):
        v.type.tensor_type.shape.dim[1].dim_param = "seq"
    for seq in (5, 9):
        feeds = {"x": f32(2, seq, 64) * 2, "skip": f32(2, seq, 64, seed=9) + 3}
        ops = check_against_ort(lib, m, feeds, rtol=1e-4, atol=1e-4)
        assert ops == {"Mul": 1, "LayerNormalization": 1}, ops


def test_a_model_whose_shapes_cannot_be_probed_still_loads_and_runs(lib):
    """A dynamic dim the graph needs at one size (a constant [1, 16, 64] added to [n, seq, 64]) makes the load-time
    shape inference fail at that node: what follows keeps the file's description, and the model runs as before."""
    m = residual_layer_norm_model(cols=64)
    del m.graph.value_info[:]
    m.graph.node.insert(0, N("Add", ["x0", "pos"], ["x"]))
    m.graph.input[0].name = "x0"
    m.graph.initializer.append(numpy_helper.from_array(f32(1, 16, 64, seed=7), "pos"))
    for v in (m.graph.input[0], m.graph.input[1], m.graph.output[0]):
        v.type.tensor_type.shape.dim[1].dim_param = "seq"
    feeds = {"x0": f32(2, 16, 64), "skip": f32(2, 16, 64, seed=9)}
    ops = check_against_ort(lib, m, feeds, rtol=1e-4, atol=1e-4)
    assert ops["Add"] == 2, ops  # nothing proves h and skip alike: the residual Add stays


def test_layer_norm_residual_near_misses_stay_unfused(lib):
    # the residual broadcasts (a bias-like [1, 1, 48] operand): the Add stays
    m = residual_layer_norm_model(skip_shape=(1, 1, 48))
    m.graph.input[1].CopyFrom(helper.make_tensor_value_info("skip", TensorProto.FLOAT, [1, 1, 48]))
    ops = check_against_ort(lib, m, {"x": f32(2, 5, 48), "skip": f32(1, 1, 48, seed=9)}, rtol=1e-4, atol=1e-4)
    assert ops["Add"] == 1, ops
    # the statistics output is wanted: the unfused kernel's Mean is of the sum, so the Add stays
    m = residual_layer_norm_model(stats=True)
    feeds = {"x": f32(2, 5, 48), "skip": f32(2, 5, 48, seed=9)}
    ops = check_against_ort(lib, m, feeds, rtol=1e-4, atol=1e-4)
    assert ops["Add"] == 1, ops
    # the sum is read elsewhere too
    m = residual_layer_norm_model()
    m.graph.node.append(N("Relu", ["s"], ["r"]))
    m.graph.output.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, None))
    ops = check_against_ort(lib, m, feeds, rtol=1e-4, atol=1e-4)
    assert ops["Add"] == 1, ops


def test_a_layer_norm_with_four_inputs_in_a_file_is_refused(lib):
    m = model([N("LayerNormalization", ["x", "scale", "bias", "x"], ["y"], axis=-1)],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {"scale": f32(8), "bias": f32(8)})
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString()).run({"x": f32(2, 8)})
    assert "4 inputs given, it takes 2 or 3" in str(e.value)


def test_internal_attributes_are_refused_in_a_model_file(lib):
    """The fused forms' attributes belong to the optimiser: a file that carries one is refused at load."""
    m = model([N("LayerNormalization", ["x", "scale", "bias", "x"], ["y"], axis=-1, cinfer_fused_add=1)],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {"scale": f32(8), "bias": f32(8)})
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString())
    assert "attribute 'cinfer_fused_add' is internal to cinfer" in str(e.value)


# ---- attention: softmax(Q.K^T * s + mask).V between head splits -> one Attention node ----

I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def self_attention_model(seq=16, heads=2, size=64, k_form="roundtrip", mask="full", guard=True, scale="div",
                         p_output=False, softmax_axis=-1, mask_last=None, split=None, merge=None, x_shape=None,
                         mask_shape=None, legacy=False, split_dims=(0, 1)):
    """x [batch, seq, heads * size] -> q, k, v projections (MatMul + bias) -> heads split ([-1, seq, heads, size],
    [0,2,1,3]) -> softmax(Q.K^T * s + m).V -> heads merged -> y, written the ways exporters write it. k_form: the
    dynamo exporter's 3-D round trip through Shape/Slice/Concat, a direct [0,2,3,1] transpose, or [0,1,3,2] of K4.
    scale: "div" (scores / sqrt(size)), "qk" (Q and K each times size^-1/4 after the split) or "none". The model
    carries onnx's inferred intermediate shapes, as dynamo exports do (the fusion checks shapes statically).
    legacy: as torch's legacy exporter writes it: split and merge targets computed from Shape(x) (dims split_dims of
    it, then the constants), a Reshape of P.V to its own shape (its SDPA export), an output projection after the
    merge, and no intermediate shapes in the file (cinfer infers them at load)."""
    hidden = heads * size
    inits = {f"w{c}": f32(hidden, hidden, seed=10 + i) * (hidden ** -0.5) for i, c in enumerate("qkv")}
    inits.update({f"b{c}": f32(hidden, seed=20 + i) * 0.1 for i, c in enumerate("qkv")})
    inits.update({"split": np.array(split or [-1, seq, heads, size], np.int64),
                  "merge": np.array(merge or [-1, seq, hidden], np.int64),
                  "root": np.array(np.sqrt(size), np.float32), "quarter": np.array(size ** -0.25, np.float32),
                  "zero": np.array(0, np.float32), "minus1": np.array([-1], np.int64), "minus2": np.array([-2], np.int64),
                  "big": np.array([I64_MAX], np.int64), "small": np.array([I64_MIN], np.int64)})
    nodes = []
    if legacy:
        inits.update({"axis0": np.array([0], np.int64), "heads_size": np.array([heads, size], np.int64),
                      "hidden": np.array([hidden], np.int64)})
        nodes += [N("Shape", ["x"], ["xs"])]
        for d in (0, 1):
            inits[f"d{d}"] = np.array(split_dims[d], np.int64)
            nodes += [N("Gather", ["xs", f"d{d}"], [f"g{d}"], axis=0), N("Unsqueeze", [f"g{d}", "axis0"], [f"u{d}"])]
        nodes += [N("Concat", ["u0", "u1", "heads_size"], ["split"], axis=0),
                  N("Concat", ["u0", "u1", "hidden"], ["merge"], axis=0)]
        del inits["split"], inits["merge"]
    for c in "qkv":
        nodes += [N("MatMul", ["x", f"w{c}"], [f"m{c}"]), N("Add", [f"m{c}", f"b{c}"], [f"l{c}"]),
                  N("Reshape", [f"l{c}", "split"], [f"r{c}"])]
    nodes += [N("Transpose", ["rq"], ["q4"], perm=[0, 2, 1, 3]), N("Transpose", ["rv"], ["v4"], perm=[0, 2, 1, 3])]
    if k_form == "direct":
        nodes += [N("Transpose", ["rk"], ["kt"], perm=[0, 2, 3, 1])]
    else:
        nodes += [N("Transpose", ["rk"], ["k4"], perm=[0, 2, 1, 3])]
        if k_form == "swap":
            nodes += [N("Transpose", ["k4"], ["kt"], perm=[0, 1, 3, 2])]
        else:
            nodes += [N("Shape", ["k4"], ["ks"], start=0), N("Slice", ["ks", "minus1", "big"], ["d_size"]),
                      N("Slice", ["ks", "minus2", "minus1"], ["d_seq"]), N("Slice", ["ks", "small", "minus2"], ["d_lead"]),
                      N("Concat", ["minus1", "d_seq", "d_size"], ["flat"], axis=0),
                      N("Concat", ["d_lead", "d_size", "d_seq"], ["back"], axis=0),
                      N("Reshape", ["k4", "flat"], ["k3"]), N("Transpose", ["k3"], ["k3t"], perm=[0, 2, 1]),
                      N("Reshape", ["k3t", "back"], ["kt"])]
    q, kt = "q4", "kt"
    if scale == "qk":
        nodes += [N("Mul", ["q4", "quarter"], ["q4s"]), N("Mul", ["kt", "quarter"], ["kts"])]
        q, kt = "q4s", "kts"
    nodes += [N("MatMul", [q, kt], ["s"])]
    s = "s"
    if scale == "div":
        nodes += [N("Div", ["s", "root"], ["ss"])]
        s = "ss"
    if mask:
        nodes += [N("Add", [s, "m"], ["sm"])]
        s = "sm"
    nodes += [N("Softmax", [s], ["p"], axis=softmax_axis)]
    p = "p"
    if guard:
        nodes += [N("IsNaN", ["p"], ["pn"]), N("Where", ["pn", "zero", "p"], ["pg"])]
        p = "pg"
    o4 = "o4"
    nodes += [N("MatMul", [p, "v4"], ["o4"])]
    if legacy:
        nodes += [N("Shape", ["o4"], ["o4s"]), N("Reshape", ["o4", "o4s"], ["o4r"])]
        o4 = "o4r"
    merged = "y"
    if legacy:  # the output projection reads the merge (the fusion does not need the model output's shape)
        inits["wo"] = f32(hidden, hidden, seed=30) * (hidden ** -0.5)
        merged = "merged"
    nodes += [N("Transpose", [o4], ["o3"], perm=[0, 2, 1, 3]), N("Reshape", ["o3", "merge"], [merged])]
    if legacy:
        nodes += [N("MatMul", ["merged", "wo"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape or ["batch", seq, hidden])]
    if mask:
        shape = mask_shape or {"full": ["batch", 1, seq, seq], "keys": ["batch", 1, 1, seq]}[mask]
        if mask_last is not None:
            shape[-1] = mask_last
        inputs.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, shape))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if p_output:
        outputs.append(helper.make_tensor_value_info("p", TensorProto.FLOAT, None))
    m = model(nodes, inputs, outputs, inits)
    return m if legacy else onnx.shape_inference.infer_shapes(m)


def attention_feeds(batch=3, seq=16, hidden=128, mask="full", mask_last=None):
    feeds = {"x": f32(batch, seq, hidden, seed=5)}
    if mask:
        last = seq if mask_last is None else mask_last
        m = np.zeros((batch, 1, seq if mask == "full" else 1, last), np.float32)
        m[0, ..., last // 2:] = -np.inf                    # padding keys of sequence 0
        if last > 3:  # (a whole row of it would overflow to -inf in the fp16 session's input cast)
            m[1, ..., :3] = np.float32(-3.4028235e38)      # the exporters' finite "minus infinity"
        if mask == "full":
            m[2, 0, 1, :] = -np.inf                        # one fully masked query: NaN, the guard makes it 0
        feeds["m"] = m
    return feeds


def session_ops(lib, s):
    """Op histogram of the graph a session runs (a half-precision session has its own): needs profile=1."""
    L = lib.lib
    L.cinfer_session_node_profile.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_char_p),
                                              ctypes.POINTER(ctypes.c_char_p), ctypes.c_void_p, ctypes.c_void_p]
    hist, i = {}, 0
    while True:
        name, op = ctypes.c_char_p(), ctypes.c_char_p()
        if L.cinfer_session_node_profile(s.session, i, ctypes.byref(name), ctypes.byref(op), None, None) != 0:
            return hist
        hist[op.value.decode()] = hist.get(op.value.decode(), 0) + 1
        i += 1


def attention_check(lib, m, feeds, fused, precision="fp16"):
    """Runs m at `precision` (profiled) against onnxruntime in float32; checks whether the attention was fused."""
    s = Session(lib, m.SerializeToString(), options={"precision": precision, "profile": "1"})
    ops = session_ops(lib, s)
    assert (ops.get("Attention") == 1) == fused, ops
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = s.run(feeds)[0]
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    if precision == "bf16":  # 8 mantissa bits: a bound on the error relative to the output's scale instead
        assert np.abs(got - want).max() <= 0.05 * np.abs(want).max()
    elif precision == "fp32":
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    else:
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=1e-2)
    return ops, got


@pytest.mark.parametrize("k_form", ["roundtrip", "direct", "swap"])
@pytest.mark.parametrize("scale", ["div", "qk"])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_self_attention_becomes_one_attention_node(lib, k_form, scale, precision):
    m = self_attention_model(k_form=k_form, scale=scale)
    feeds = attention_feeds()
    ops, got = attention_check(lib, m, feeds, fused=True, precision=precision)
    for gone in ("Softmax", "Transpose", "MatMul", "IsNaN", "Where", "Div", "Mul"):
        assert gone not in ops, ops
    assert np.all(got[2, 1] == 0), "the fully masked query row must be zeros (NaN guard)"


@pytest.mark.parametrize("size", [64, 40])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_self_attention_projections_become_one_gemm(lib, monkeypatch, precision, size):
    """The Q, K and V projections of one input become one GEMM whose output the Attention node reads in thirds;
    CINFER_PACK_QKV=0 keeps three GEMMs, with the same result up to float rounding. Head size 40 takes the GPU's
    general path (staged copies through the row stride), 64 the fused kernel."""
    m, feeds = self_attention_model(size=size), attention_feeds(hidden=2 * size)
    ops, packed = attention_check(lib, m, feeds, fused=True, precision=precision)
    assert ops.get("Gemm") == 1, ops
    monkeypatch.setenv("CINFER_PACK_QKV", "0")
    ops, apart = attention_check(lib, m, feeds, fused=True, precision=precision)
    assert ops.get("Gemm") == 3, ops
    np.testing.assert_allclose(packed, apart, rtol=1e-5 if precision == "fp32" else 1e-2, atol=1e-6)


def test_projections_read_elsewhere_stay_apart(lib):
    """A projection that is also a model output keeps its own GEMM (the attention still fuses), and the output
    and the attention are right."""
    m, feeds = self_attention_model(), attention_feeds()
    m.graph.output.append(helper.make_tensor_value_info("lq", TensorProto.FLOAT, None))
    ops, _ = attention_check(lib, m, feeds, fused=True, precision="fp32")
    assert ops.get("Gemm") == 3, ops
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = Session(lib, m.SerializeToString()).run(feeds)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mask,guard", [("keys", True), (None, False), ("full", True)])
@pytest.mark.parametrize("seq,heads,size", [(16, 2, 64), (100, 3, 32), (130, 2, 128)])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_fused_attention_matches_float32(lib, mask, guard, seq, heads, size, precision):
    """Float32 and half-precision sessions (on a GPU: the fused kernels; seq 100 and 130 leave partial query and key
    tiles) against onnxruntime in float32, with the mask broadcast over queries or given per query, and with no
    mask."""
    m = self_attention_model(seq=seq, heads=heads, size=size, mask=mask, guard=guard)
    feeds = attention_feeds(seq=seq, hidden=heads * size, mask=mask)
    attention_check(lib, m, feeds, fused=True, precision=precision)


def test_attention_with_a_dynamic_sequence_fuses_through_copied_dims(lib):
    """[0, 0, heads, size] splits (copy batch and sequence) on a dynamic sequence fuse; a split naming the sequence
    length it was exported with does not (a longer input would split differently)."""
    x_shape = ["batch", "seq", 128]
    m = self_attention_model(split=[0, 0, 2, 64], merge=[0, 0, 128], x_shape=x_shape, mask="keys",
                             mask_shape=["batch", 1, 1, "seq"])
    attention_check(lib, m, attention_feeds(mask="keys"), fused=True)
    m = self_attention_model(x_shape=x_shape, mask="keys", mask_shape=["batch", 1, 1, "seq"])
    attention_check(lib, m, attention_feeds(mask="keys"), fused=False)


def test_attention_near_misses_stay_unfused(lib):
    """A mask that Add would broadcast along the keys (last dim 1), a Softmax over another axis, a probability
    tensor read elsewhere, a split into other batch/sequence dims (chunked attention), a merge into another shape, and
    a mask that enlarges the scores' batch: left as they are, and still right."""
    attention_check(lib, self_attention_model(mask="keys", mask_last=1),
                         attention_feeds(mask="keys", mask_last=1), fused=False)
    attention_check(lib, self_attention_model(softmax_axis=2, mask=None), attention_feeds(mask=None), fused=False)
    attention_check(lib, self_attention_model(guard=False, mask="keys", p_output=True),
                         attention_feeds(mask="keys"), fused=False)
    attention_check(lib, self_attention_model(split=[4, 8, 2, 64], mask=None, x_shape=[2, 16, 128]),
                         attention_feeds(batch=2, mask=None), fused=False)
    attention_check(lib, self_attention_model(merge=[1, -1, 128], mask=None, x_shape=[2, 16, 128]),
                         attention_feeds(batch=2, mask=None), fused=False)
    wide = {"x": attention_feeds(batch=1, mask=None)["x"], "m": attention_feeds(batch=3, mask="full")["m"]}
    attention_check(lib, self_attention_model(x_shape=[1, 16, 128], mask_shape=[3, 1, 16, 16]), wide,
                         fused=False)


@pytest.mark.parametrize("mask", ["full", "keys", None])
def test_attention_without_the_nan_guard_fuses_and_keeps_its_nan_rows(lib, mask):
    """An unguarded Softmax (older exports) fuses too: its fully masked query row stays NaN, as onnxruntime gives it,
    where Attention's own rule (and the guard) would make it zeros."""
    m = self_attention_model(mask=mask, guard=False)
    feeds = attention_feeds(mask=mask)
    ops, got = attention_check(lib, m, feeds, fused=True)
    assert "Softmax" not in ops, ops
    if mask == "full":
        assert np.all(np.isnan(got[2, 1])) and np.isfinite(got[2, 0]).all()


@pytest.mark.parametrize("k_form", ["direct", "swap"])
@pytest.mark.parametrize("guard,mask", [(False, "keys"), (True, "full")])
def test_legacy_export_attention_fuses_with_inferred_shapes(lib, k_form, guard, mask):
    """torch's legacy exporter computes the split and merge targets from Shape(x) at run time, reshapes P.V to its
    own shape, and writes no intermediate shapes: the shapes inferred at load prove the pattern, on a dynamic
    sequence too, and the fused session still matches onnxruntime."""
    m = self_attention_model(k_form=k_form, guard=guard, mask=mask, legacy=True, x_shape=["batch", "seq", 128],
                             mask_shape=["batch", 1, 1 if mask == "keys" else "seq", "seq"])
    assert not m.graph.value_info
    for seq in (16, 24):
        feeds = attention_feeds(seq=seq, mask=mask)
        ops, _ = attention_check(lib, m, feeds, fused=True)
        assert "Softmax" not in ops and "Transpose" not in ops and ops["MatMul"] == 1, ops  # 1: the projection


def test_legacy_split_into_other_dims_stays_unfused(lib):
    """A computed split target that takes the sequence as the batch and the batch as the sequence is not the head
    split the pattern needs: left alone, and still right."""
    m = self_attention_model(mask=None, legacy=True, x_shape=["batch", "seq", 128], split_dims=(1, 0))
    attention_check(lib, m, attention_feeds(mask=None), fused=False)


def ln_join_model(pre_nodes, inputs, inits=None, value_info=()):
    """LayerNormalization(a + b) after pre_nodes that make a and b: the residual fusion's shape proof."""
    cols = 64
    inits = dict(inits or {}, scale=np.ones(cols, np.float32), bias=np.zeros(cols, np.float32))
    m = model(pre_nodes + [N("Add", ["a", "b"], ["s"]), N("LayerNormalization", ["s", "scale", "bias"], ["y"], axis=-1)],
              inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    m.graph.value_info.extend(value_info)
    return m


def test_shapes_that_clamp_or_squeeze_a_size_one_dim_are_not_taken_as_static(lib):
    """The load-time probes also run every dynamic dim at 1 and at about 1000: a Squeeze whose rank depends on a
    size-1 batch, a Slice to 32 that a 1-long sequence stays under, and intermediate dims a file names alike though
    they differ are not proven equal, so the Add stays and each runs as onnxruntime does."""
    vi = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    squeeze = ln_join_model([N("Squeeze", ["x"], ["a"]), N("Identity", ["y0"], ["b"])],
                            [vi("x", ["batch", "seq", 1, 64]), vi("y0", ["batch", "seq", 64])])
    for batch in (1, 2):
        ops = check_against_ort(lib, squeeze, {"x": f32(batch, 5, 1, 64), "y0": f32(batch, 5, 64, seed=1)}, 1e-4, 1e-4,
                                 False)
        assert ops["Add"] == 1, ops
    sliced = ln_join_model([N("Slice", ["x", "start", "end", "axis"], ["a"]), N("Identity", ["y0"], ["b"])],
                           [vi("x", ["batch", "seq", 64]), vi("y0", ["batch", 32, 64])],
                           {"start": np.array([0], np.int64), "end": np.array([32], np.int64),
                            "axis": np.array([1], np.int64)})
    ops = check_against_ort(lib, sliced, {"x": f32(2, 1, 64), "y0": f32(2, 32, 64, seed=1)}, 1e-4, 1e-4, False)
    assert ops["Add"] == 1, ops
    named = ln_join_model([N("Concat", ["x", "x"], ["a"], axis=1), N("Reshape", ["y0", "target"], ["b"])],
                          [vi("x", ["batch", "S", 64]), vi("y0", ["batch", "P", "Q", 64])],
                          {"target": np.array([0, -1, 64], np.int64)},
                          [vi("a", ["batch", "L", 64]), vi("b", ["batch", "L", 64]), vi("s", ["batch", "L", 64])])
    ops = check_against_ort(lib, named, {"x": f32(2, 3, 64), "y0": f32(2, 1, 1, 64, seed=1)}, 1e-4, 1e-4, False)
    assert ops["Add"] == 1, ops


def test_a_mask_sliced_to_a_fixed_length_is_not_fused_into_attention(lib):
    """A mask Slice(m, 0:32) on the key axis is 32 long only while m is: at length 1 the Add broadcasts it over the
    keys, which Attention (padding a short mask with -inf) would not. The size-1 probe shows the slice is not static,
    so the attention stays unfused and right at both lengths."""
    m = self_attention_model(seq=32, mask="keys", x_shape=[1, 32, 128], mask_shape=[1, 1, 1, "T"])
    m.graph.initializer.extend([numpy_helper.from_array(np.array(v, np.int64), k)
                                for k, v in (("m_start", [0]), ("m_end", [32]), ("m_axis", [3]))])
    add = next(n for n in m.graph.node if n.op_type == "Add" and "m" in n.input)
    add.input[list(add.input).index("m")] = "m32"
    m.graph.node.insert(0, N("Slice", ["m", "m_start", "m_end", "m_axis"], ["m32"]))
    del m.graph.value_info[:]
    x = attention_feeds(batch=1, seq=32, mask=None)["x"]
    for length in (1, 40):
        attention_check(lib, m, {"x": x, "m": np.full((1, 1, 1, length), 0.5, np.float32)}, fused=False)


# ---- elementwise chains: runs of float steps with scalar constants -> one ElementwiseChain node ----

def chain_model(steps, x_shape=("n", 3, 8, 8), dtype=TensorProto.FLOAT, extra_output=None):
    """x through `steps` [(op, constant or None, constant first?, attrs)], each reading the previous value."""
    nodes, inits, v = [], {}, "x"
    for i, (op, c, first, attrs) in enumerate(steps):
        ins = [v]
        if c is not None:
            inits[f"c{i}"] = np.asarray(c, np.float32 if dtype == TensorProto.FLOAT else np.int64)
            ins = [f"c{i}", v] if first else [v, f"c{i}"]
        if op == "Clip":
            inits[f"lo{i}"], inits[f"hi{i}"] = np.array(attrs["lo"], np.float32), np.array(attrs["hi"], np.float32)
            ins, attrs = [v, f"lo{i}", f"hi{i}"], {}
        nodes.append(N(op, ins, [f"v{i}"], **attrs))
        v = f"v{i}"
    nodes[-1].output[0] = "y"
    outputs = [helper.make_tensor_value_info("y", dtype, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, dtype, None))
    return model(nodes, [helper.make_tensor_value_info("x", dtype, list(x_shape))], outputs, inits)


ALL_STEPS = [("Sub", 40.0, False, {}), ("Div", 400.0, False, {}), ("Add", 0.5, False, {}),
             ("Clip", None, False, {"lo": 0.0, "hi": 1.0}), ("Mul", 3.0, True, {}), ("Sub", 1.0, True, {}),
             ("LeakyRelu", None, False, {"alpha": 0.2}), ("Tanh", None, False, {}), ("Add", 2.0, False, {}),
             ("Sqrt", None, False, {}), ("Log", None, False, {}), ("Neg", None, False, {}), ("Exp", None, False, {}),
             ("Div", 2.0, True, {}), ("Erf", None, False, {}), ("Sigmoid", None, False, {})]


def test_elementwise_steps_become_one_chain_node(lib):
    """Sixteen steps of every kind the chain takes (scalar arithmetic either way round, Clip, the activations and
    math ops): one ElementwiseChain node, and onnxruntime's result."""
    m = chain_model(ALL_STEPS)
    x = np.random.default_rng(1).normal(40.0, 300.0, (2, 3, 8, 8)).astype(np.float32)
    ops = check_against_ort(lib, m, {"x": x}, rtol=1e-5, atol=1e-6)
    assert ops == {"ElementwiseChain": 1}, ops
    # longer than one program: two chains
    ops = check_against_ort(lib, chain_model(ALL_STEPS + ALL_STEPS[:3]), {"x": x}, rtol=1e-5, atol=1e-6)
    assert ops == {"ElementwiseChain": 2}, ops


def test_a_chain_in_half_precision_reads_and_writes_the_float_io(lib):
    """The image-window chain of a float model input to a float output: in fp16/bf16 the conversion's casts go into
    the chain, which then computes in float32 from the float input (no rounding to half at all)."""
    m = chain_model(ALL_STEPS[:4], x_shape=("n", 1, 64, 64))
    x = np.random.default_rng(2).normal(40.0, 300.0, (2, 1, 64, 64)).astype(np.float32)
    want = Session(lib, m.SerializeToString()).run({"x": x})[0]
    for precision in ("fp16", "bf16"):
        s = Session(lib, m.SerializeToString(), options={"precision": precision, "profile": "1"})
        assert session_ops(lib, s) == {"ElementwiseChain": 1}
        got = s.run({"x": x})[0]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_elementwise_runs_that_are_not_chains_stay(lib):
    """A step value read elsewhere ends the run there, a constant of higher rank than the value (which broadcasting
    would add a dim for) is not a step, and integer arithmetic is not either: each still matches onnxruntime."""
    x = f32(2, 3, 8, 8)
    m = chain_model([("Sub", 1.0, False, {}), ("Relu", None, False, {}), ("Mul", 2.0, False, {})], extra_output="z")
    m.graph.node.append(N("Abs", ["v0"], ["z"]))
    ops = check_against_ort(lib, m, {"x": x})
    assert ops == {"Sub": 1, "ElementwiseChain": 1, "Abs": 1}, ops  # v0 is read twice: Relu and Mul chain after it
    m = chain_model([("Sub", np.ones((1, 1, 1, 1, 1)), False, {}), ("Relu", None, False, {})])
    ops = check_against_ort(lib, m, {"x": x})
    assert ops == {"Sub": 1, "Relu": 1}, ops
    m = chain_model([("Add", 3, False, {}), ("Mul", 2, False, {})], dtype=TensorProto.INT64)
    ops = check_against_ort(lib, m, {"x": np.arange(2 * 3 * 64, dtype=np.int64).reshape(2, 3, 8, 8)})
    assert ops == {"Add": 1, "Mul": 1}, ops


def test_the_internal_chain_op_is_refused_in_a_model_file(lib):
    m = model([N("ElementwiseChain", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {})
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString())
    assert "op 'ElementwiseChain' is internal to cinfer" in str(e.value)


def test_chain_fusion_trusts_no_file_claims_and_keeps_attention_scales(lib):
    """A rank or dtype only the file claims (value_info on a value the load-time probes cannot reach) does not decide
    whether a [1, 1, 1] constant leaves a value's shape alone; a chain after a half-precision input cast keeps
    writing the half type; and two scales in a row on the attention scores, made one chain, still fuse into the
    Attention node with their product."""
    vi = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    m = model([N("Relu", ["x"], ["a"]), N("Mul", ["a", "c"], ["b"]), N("Neg", ["b"], ["y"])],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], [vi("y", None)],
              {"c": np.full((1, 1, 1), 2.0, np.float32)})
    m.graph.value_info.extend([vi("a", ["p", "q", "r"]), vi("b", ["p", "q", "r"])])
    clean = model(list(m.graph.node), list(m.graph.input), list(m.graph.output), {"c": np.full((1, 1, 1), 2.0, np.float32)})
    feeds = {"x": f32(2, 3)}
    want = ort.InferenceSession(clean.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for precision in ("fp32", "fp16"):
        got = Session(lib, m.SerializeToString(), options={"precision": precision}).run(feeds)[0]
        assert got.shape == want.shape == (1, 2, 3)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    m = model([N("Relu", ["x"], ["a"]), N("Neg", ["a"], ["b"]), N("Softmax", ["b"], ["y"], axis=-1)],
              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)], [vi("y", None)], {})
    feeds = {"x": f32(2, 5)}
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    for precision in ("fp16", "bf16"):
        got = Session(lib, m.SerializeToString(), options={"precision": precision}).run(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=2e-2, atol=2e-2)
    m = self_attention_model(mask="keys")
    div = next(n for n in m.graph.node if n.op_type == "Div")
    div.output[0] = "ss0"
    m.graph.node.insert(list(m.graph.node).index(div) + 1, N("Mul", ["ss0", "one_and_half"], ["ss"]))
    m.graph.initializer.append(numpy_helper.from_array(np.array(1.5, np.float32), "one_and_half"))
    del m.graph.value_info[:]
    attention_check(lib, m, attention_feeds(mask="keys"), fused=True)


def lookup_model(form="stack", tables=3, rows=50, dim=8, near_miss=None):
    """A DLRM-style join: dense features through a Relu (exact on every device: the join is a copy, compared bit for
    bit), `tables` embedding lookups (Gather on axis 0 of a
    constant), all joined by one Concat. form: "stack" (each piece Unsqueezed to [B, 1, dim], the last one with axis
    -2, Concat axis 1), "flat" (pieces [B, dim], Concat axis 1) or "multi" (indices [B, 2]: pieces [B, 2, dim]).
    near_miss: "input_table" (the first table is a model input, not a constant), "inner" (tables [rows, 2, dim / 2]
    joined along their last dim, which would split their rows),
    "shared" (the first lookup is read elsewhere too), "one" (one lookup only)."""
    rng = np.random.default_rng(5)
    inits = {"one": np.array([1], np.int64), "minus2": np.array([-2], np.int64)}
    nodes = [N("Relu", ["dense"], ["x"])]
    idx_shape = ["b", 2] if form == "multi" else ["b"]
    inputs = [helper.make_tensor_value_info("dense", TensorProto.FLOAT, ["b", dim])]
    pieces = []
    if form == "flat":
        pieces.append("x")
    else:
        nodes.append(N("Unsqueeze", ["x", "one"], ["xu"]))
        pieces.append("xu")
    count = 1 if near_miss == "one" else tables
    for t in range(count):
        if near_miss == "input_table" and t == 0:
            inputs.append(helper.make_tensor_value_info("t0", TensorProto.FLOAT, [rows, dim]))
        else:
            shape = (rows, 2, dim // 2) if near_miss == "inner" else (rows, dim)
            inits[f"t{t}"] = rng.standard_normal(shape).astype(np.float32)
        inputs.append(helper.make_tensor_value_info(f"i{t}", TensorProto.INT64, idx_shape))
        nodes.append(N("Gather", [f"t{t}", f"i{t}"], [f"e{t}"], axis=0))
        if form == "stack" and near_miss != "inner":
            nodes.append(N("Unsqueeze", [f"e{t}", "minus2" if t == tables - 1 else "one"], [f"u{t}"]))
            pieces.append(f"u{t}")
        elif form == "multi":
            pieces.append(f"e{t}")
        else:
            pieces.append(f"e{t}")
    if form == "multi":
        pieces[0] = "xu"
    axis = {"stack": 1, "flat": 1, "multi": 1}[form]
    if near_miss == "inner":
        axis = -1
        inits["split"] = np.array([-1, 2, dim // 2], np.int64)
        nodes.append(N("Reshape", ["x", "split"], ["xinner"]))
        pieces = ["xinner"] + [f"e{t}" for t in range(count)]
    nodes.append(N("Concat", pieces, ["y"], axis=axis))
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if near_miss == "shared":
        nodes.append(N("Neg", ["e0"], ["side"]))
        outputs.append(helper.make_tensor_value_info("side", TensorProto.FLOAT, None))
    return model(nodes, inputs, outputs, inits)


def lookup_feeds(form="stack", tables=3, rows=50, batch=5, seed=0, dim=8):
    rng = np.random.default_rng(seed)
    feeds = {"dense": rng.standard_normal((batch, dim)).astype(np.float32)}
    for t in range(tables):
        idx = rng.integers(-rows, rows, (batch, 2) if form == "multi" else (batch,)).astype(np.int64)
        feeds[f"i{t}"] = idx
    return feeds


@pytest.mark.parametrize("form", ["stack", "flat", "multi"])
def test_table_lookups_into_a_concat_become_one_node(lib, form):
    m = lookup_model(form)
    ops = check_against_ort(lib, m, lookup_feeds(form), rtol=0, atol=0)
    assert ops.get("LookupConcat") == 1 and "Gather" not in ops and "Concat" not in ops, ops
    if form == "stack":  # the dense piece's Unsqueeze is a plain input of the fused node; the lookups' are gone
        assert ops.get("Unsqueeze") == 1, ops


@pytest.mark.parametrize("near_miss", ["input_table", "inner", "shared", "one"])
def test_lookup_near_misses_stay_unfused(lib, near_miss):
    m = lookup_model("stack", near_miss=near_miss)
    tables = 1 if near_miss == "one" else 3
    feeds = lookup_feeds("stack", tables=tables)
    if near_miss == "input_table":
        feeds["t0"] = np.random.default_rng(9).standard_normal((50, 8)).astype(np.float32)
    ops = check_against_ort(lib, m, feeds, rtol=0, atol=0)
    fused = near_miss in ("input_table", "shared")  # the other two lookups still fuse
    assert ops.get("LookupConcat", 0) == int(fused), ops
    assert ops.get("Gather", 0) == (1 if fused else tables), ops


def test_a_lookup_index_out_of_range_is_a_clear_error(lib):
    """As Gather on each backend: the CPU refuses the run naming the index; the CUDA kernels raise the session's
    index flag, read after the run (docs/cuda.md, "Indices out of range"), and the run fails naming the node."""
    m = lookup_model("stack")
    feeds = lookup_feeds("stack")
    feeds["i1"][2] = 50
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString()).run(feeds)
    if selected_device() != "cpu":
        assert "LookupConcat node" in str(e.value) and "an index is out of range" in str(e.value)
    else:
        assert "index 50 is out of range for axis 0 of size 50" in str(e.value)


def test_the_internal_lookup_op_is_refused_in_a_model_file(lib):
    m = model([N("LookupConcat", ["t", "i"], ["y"])], [helper.make_tensor_value_info("i", TensorProto.INT64, [2])],
              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {"t": np.zeros((3, 2), np.float32)})
    with pytest.raises(Exception) as e:
        Session(lib, m.SerializeToString())
    assert "op 'LookupConcat' is internal to cinfer" in str(e.value)
