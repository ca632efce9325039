"""Quantized integer ops (MatMulInteger, QLinearMatMul): cinfer's exact reference kernels
against onnxruntime on random inputs, bit for bit; where onnxruntime refuses a dtype combination or a per-row scale,
against a numpy model of the ONNX definition instead. Runs on CINFER_TEST_DEVICE (cpu by default; on cuda the ops
run on the CPU inside the CUDA session)."""
import itertools
import pathlib
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from cinfer_ctypes import Session  # noqa: E402

OPSET = 21
ONNX_TYPE = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8, np.int32: TensorProto.INT32,
             np.float32: TensorProto.FLOAT}
Q8 = [np.uint8, np.int8]


def make_model(node, feeds, out_dtype):
    inputs = [helper.make_tensor_value_info(k, ONNX_TYPE[v.dtype.type], None) for k, v in feeds.items()]
    graph = helper.make_graph([node], "q", inputs, [helper.make_tensor_value_info("y", ONNX_TYPE[out_dtype], None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 10
    return model.SerializeToString()


def ort_run(data, feeds):
    """onnxruntime's output, or None where it has no kernel for these types or parameter shapes."""
    try:
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    except Exception as e:  # onnxruntime raises its own exception classes
        if "NOT_IMPLEMENTED" in str(e) or "not implemented" in str(e).lower() or "scalar" in str(e).lower():
            return None
        raise


def check(lib, node, feeds, out_dtype, numpy_model):
    data = make_model(node, feeds, out_dtype)
    got = Session(lib, data).run(feeds)[0]
    want = ort_run(data, feeds)
    if want is None:
        want = numpy_model()
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)
    return want


def rand_q(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, size=shape).astype(dtype)


def requantize(acc, scale, zp):
    """ONNX requantisation as onnxruntime does it: float32 product, round half to even, add zp, saturate."""
    v = np.rint(acc.astype(np.float32) * scale.astype(np.float32)) + np.float32(zp)
    info = np.iinfo(zp.dtype)
    return np.clip(v, info.min, info.max).astype(zp.dtype)


MATMUL_SHAPES = [((3, 5), (5, 4)), ((2, 3, 5), (5, 6)), ((2, 1, 3, 7), (4, 7, 2)), ((5,), (5, 3)), ((4, 5), (5,)),
                 ((1, 3, 5), (2, 5, 4))]


@pytest.mark.parametrize("ta,tb", list(itertools.product(Q8, Q8)))
@pytest.mark.parametrize("zp_kind", ["none", "scalar", "vector"])
def test_matmul_integer_random(lib, ta, tb, zp_kind):
    rng = np.random.default_rng(3)
    for sa, sb in MATMUL_SHAPES:
        a, b = rand_q(rng, ta, sa), rand_q(rng, tb, sb)
        m = sa[-2] if len(sa) > 1 else 1
        nn = sb[-1] if len(sb) > 1 else 1
        feeds = {"a": a, "b": b}
        if zp_kind != "none":
            vec = zp_kind == "vector" and len(sa) == 2 and len(sb) == 2
            feeds["az"] = rand_q(rng, ta, (m,) if vec else ())
            feeds["bz"] = rand_q(rng, tb, (nn,) if vec else ())
        node = helper.make_node("MatMulInteger", list(feeds), ["y"])

        def numpy_model():
            a32, b32 = a.astype(np.int32), b.astype(np.int32)
            if "az" in feeds:
                az = feeds["az"].astype(np.int32)
                a32 = a32 - (az[:, None] if az.ndim == 1 else az)
                b32 = b32 - feeds["bz"].astype(np.int32)
            return np.matmul(a32, b32)

        check(lib, node, feeds, np.int32, numpy_model)


@pytest.mark.parametrize("ta,tb,ty", list(itertools.product(Q8, Q8, Q8)))
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_matmul_random(lib, ta, tb, ty, per_channel):
    rng = np.random.default_rng(5)
    for sa, sb in MATMUL_SHAPES:
        a, b = rand_q(rng, ta, sa), rand_q(rng, tb, sb)
        m = sa[-2] if len(sa) > 1 else 1
        nn = sb[-1] if len(sb) > 1 else 1
        per = per_channel and len(sb) == 2
        feeds = {"a": a, "as": np.float32(rng.uniform(0.01, 0.1)), "az": rand_q(rng, ta, ()), "b": b,
                 "bs": rng.uniform(0.01, 0.1, size=(nn,) if per else ()).astype(np.float32),
                 "bz": rand_q(rng, tb, (nn,) if per else ()), "ys": np.float32(rng.uniform(1, 8)),
                 "yz": rand_q(rng, ty, ())}
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        node = helper.make_node("QLinearMatMul", list(feeds), ["y"])

        def numpy_model():
            acc = np.matmul(a.astype(np.int32) - feeds["az"].astype(np.int32),
                            b.astype(np.int32) - feeds["bz"].astype(np.int32))
            return requantize(acc, feeds["as"] * feeds["bs"] / feeds["ys"], feeds["yz"])

        check(lib, node, feeds, ty, numpy_model)


def test_qlinear_matmul_per_row_a(lib):
    """A per-row a_scale / a_zero_point (ONNX allows it; onnxruntime does not): the numpy model of the definition."""
    rng = np.random.default_rng(7)
    a, b = rand_q(rng, np.uint8, (6, 9)), rand_q(rng, np.int8, (9, 4))
    feeds = {"a": a, "as": rng.uniform(0.01, 0.1, 6).astype(np.float32), "az": rand_q(rng, np.uint8, (6,)),
             "b": b, "bs": rng.uniform(0.01, 0.1, 4).astype(np.float32), "bz": rand_q(rng, np.int8, (4,)),
             "ys": np.asarray(np.float32(0.5)), "yz": np.asarray(np.uint8(128))}
    data = make_model(helper.make_node("QLinearMatMul", list(feeds), ["y"]), feeds, np.uint8)
    got = Session(lib, data).run(feeds)[0]
    acc = np.matmul(a.astype(np.int32) - feeds["az"].astype(np.int32)[:, None],
                    b.astype(np.int32) - feeds["bz"].astype(np.int32))
    want = requantize(acc, feeds["as"][:, None] * feeds["bs"][None, :] / feeds["ys"], feeds["yz"])
    np.testing.assert_array_equal(got, want)


def test_qlinear_matmul_rounds_half_to_even_and_saturates(lib):
    """Accumulators landing exactly on .5 after scaling round to even; out-of-range values saturate."""
    a = np.array([[1, 3, 5, 7, -1, -3, 100, -100]], np.int8).T  # [8, 1]
    b = np.array([[1]], np.int8)
    feeds = {"a": a, "as": np.asarray(np.float32(1)), "az": np.asarray(np.int8(0)), "b": b,
             "bs": np.asarray(np.float32(1)), "bz": np.asarray(np.int8(0)), "ys": np.asarray(np.float32(2)),
             "yz": np.asarray(np.int8(100))}
    data = make_model(helper.make_node("QLinearMatMul", list(feeds), ["y"]), feeds, np.int8)
    got = Session(lib, data).run(feeds)[0]
    np.testing.assert_array_equal(got.ravel(), np.array([100, 102, 102, 104, 100, 98, 127, 50], np.int8))


def test_matmul_integer_bad_zero_point_is_named(lib):
    feeds = {"a": np.zeros((3, 4), np.uint8), "b": np.zeros((4, 5), np.uint8), "az": np.zeros(2, np.uint8)}
    data = make_model(helper.make_node("MatMulInteger", list(feeds), ["y"]), feeds, np.int32)
    with pytest.raises(Exception, match="a_zero_point"):
        Session(lib, data).run(feeds)

