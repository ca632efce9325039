"""LRN (LocalResponseNormalization) against the ONNX spec written out in numpy (float64) and against onnxruntime:
windows of odd and even size (the even ones reach one channel further after c than before it), size 1, a window
wider than the channels, ranks 2 to 5, float32/float64/float16/bfloat16 tensors and the half precisions of a float32
model. onnxruntime's CPU LRN refuses even sizes ("size_ % 2 == 1") and ranks other than 4, so it checks the odd 4-D
cases; onnx.reference's LRN loops over the batch instead of the channels, so it is no oracle here. With
CINFER_TEST_DEVICE=cuda the same cases run on the GPU."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cinfer_ctypes import CinferError, Session

FLOAT_TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16}


def lrn_reference(x, size, alpha=1e-4, beta=0.75, bias=1.0):
    """y = x / (bias + alpha / size * square_sum)^beta, square_sum over the channels
    [c - floor((size - 1) / 2), c + ceil((size - 1) / 2)] that exist, in float64 (the attributes are float32)."""
    x = x.astype(np.float64)
    alpha, beta, bias = (float(np.float32(v)) for v in (alpha, beta, bias))
    channels = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    square_sum = np.zeros_like(x)
    for c in range(channels):
        lo, hi = max(0, c - before), min(channels - 1, c + after)
        square_sum[:, c] = np.sum(x[:, lo:hi + 1] ** 2, axis=1)
    return x / (bias + alpha / size * square_sum) ** beta


def lrn_model(shape, elem_type=TensorProto.FLOAT, opset=13, **attrs):
    node = helper.make_node("LRN", ["x"], ["y"], name="lrn0", **attrs)
    graph = helper.make_graph([node], "lrn", [helper.make_tensor_value_info("x", elem_type, list(shape))],
                              [helper.make_tensor_value_info("y", elem_type, list(shape))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


# shape, attributes: odd and even windows, size 1, a window wider than the channels, the defaults, big alpha
CASES = {
    "odd_size3": ((2, 7, 5, 5), dict(size=3)),
    "even_size4": ((1, 8, 4, 6), dict(size=4, alpha=0.01, beta=0.5, bias=2.0)),
    "even_size2": ((3, 5, 3, 3), dict(size=2, alpha=0.5, beta=0.9, bias=1.5)),
    "size1": ((2, 4, 3, 3), dict(size=1, alpha=0.3)),
    "window_wider_than_channels": ((2, 4, 6, 6), dict(size=9, alpha=0.2, beta=0.6)),
    "alexnet_like": ((2, 96, 13, 13), dict(size=5, alpha=1e-4, beta=0.75, bias=1.0)),
    "large_alpha": ((1, 16, 8, 8), dict(size=5, alpha=2.0, beta=0.75, bias=1.0)),
}


def feeds_for(shape, dtype=np.float32, seed=0):
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lrn_matches_the_spec_and_onnxruntime(lib, case):
    shape, attrs = CASES[case]
    model = lrn_model(shape, **attrs)
    feeds = feeds_for(shape)
    got = Session(lib, model.SerializeToString()).run(feeds)[0]
    want = lrn_reference(feeds["x"], **attrs)
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    if attrs["size"] % 2 == 0:
        return  # onnxruntime refuses even sizes: the spec above is the oracle
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, sess.run(None, feeds)[0], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape,size", [((2, 6, 10), 3), ((1, 5, 2, 3, 3), 4), ((3, 4), 2)])
def test_lrn_on_other_ranks(lib, shape, size):
    """Any rank >= 2 ([N, C, D1...]): the window runs over dim 1 at every other position."""
    feeds = feeds_for(shape, seed=1)
    got = Session(lib, lrn_model(shape, size=size, alpha=0.1).SerializeToString()).run(feeds)[0]
    np.testing.assert_allclose(got, lrn_reference(feeds["x"], size, alpha=0.1), rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float16, 2e-3)])
def test_lrn_float64_and_float16_tensors(lib, dtype, rtol):
    shape, attrs = (2, 9, 4, 4), dict(size=5, alpha=0.05)
    feeds = feeds_for(shape, dtype, seed=2)
    got = Session(lib, lrn_model(shape, FLOAT_TYPES[dtype], **attrs).SerializeToString()).run(feeds)[0]
    assert got.dtype == dtype
    np.testing.assert_allclose(got.astype(np.float64), lrn_reference(feeds["x"], **attrs), rtol=rtol, atol=rtol)


def test_lrn_bfloat16_tensor(lib):
    """bfloat16 (opset 13): numpy has no bfloat16, so the model casts float32 in and out around the LRN."""
    shape, attrs = (2, 6, 5, 5), dict(size=3, alpha=0.05)
    nodes = [helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
             helper.make_node("LRN", ["xb"], ["yb"], **attrs),
             helper.make_node("Cast", ["yb"], ["y"], to=TensorProto.FLOAT)]
    graph = helper.make_graph(nodes, "lrn_bf16", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feeds = feeds_for(shape, seed=3)
    got = Session(lib, model.SerializeToString()).run(feeds)[0]
    np.testing.assert_allclose(got, lrn_reference(feeds["x"], **attrs), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("precision,tol", [("fp16", 3e-3), ("bf16", 2e-2)])
def test_lrn_in_half_precision_sessions(lib, precision, tol):
    shape, attrs = CASES["alexnet_like"]
    model = lrn_model(shape, **attrs).SerializeToString()
    feeds = feeds_for(shape, seed=4)
    want = Session(lib, model).run(feeds)[0]
    got = Session(lib, model, options={"precision": precision}).run(feeds)[0]
    assert got.dtype == np.float32
    assert float(np.max(np.abs(got - want)) / np.max(np.abs(want))) < tol


@pytest.mark.parametrize("attrs,words", [({}, "'size' is missing"), ({"size": 0}, "size is 0, expected >= 1")])
def test_lrn_bad_size_is_refused_naming_the_node(lib, attrs, words):
    with pytest.raises(CinferError) as e:
        Session(lib, lrn_model((1, 4, 3, 3), **attrs).SerializeToString()).run(feeds_for((1, 4, 3, 3)))
    assert "LRN node 'lrn0'" in e.value.message and words in e.value.message


def test_lrn_model_is_valid_onnx():
    onnx.checker.check_model(lrn_model((1, 4, 3, 3), size=3), full_check=True)
