"""Quantized integer ops (MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv): cinfer's exact reference kernels
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
             np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16}
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


@pytest.mark.parametrize("scale_dtype", [np.float16, np.float32])
def test_qlinear_matmul_batched_per_row_a(lib, scale_dtype):
    """Per-row A parameters apply to every batch's rows; float16 scales (opset 21) are read as float32."""
    rng = np.random.default_rng(9)
    a, b = rand_q(rng, np.int8, (3, 5, 7)), rand_q(rng, np.uint8, (7, 4))
    feeds = {"a": a, "as": rng.uniform(0.01, 0.1, 5).astype(scale_dtype), "az": rand_q(rng, np.int8, (5,)),
             "b": b, "bs": rng.uniform(0.01, 0.1, 4).astype(scale_dtype), "bz": rand_q(rng, np.uint8, (4,)),
             "ys": np.asarray(scale_dtype(0.25)), "yz": np.asarray(np.int8(-3))}
    data = make_model(helper.make_node("QLinearMatMul", list(feeds), ["y"]), feeds, np.int8)
    got = Session(lib, data).run(feeds)[0]
    acc = np.matmul(a.astype(np.int32) - feeds["az"].astype(np.int32)[:, None],
                    b.astype(np.int32) - feeds["bz"].astype(np.int32))
    f32 = {k: feeds[k].astype(np.float32) for k in ("as", "bs", "ys")}
    want = requantize(acc, f32["as"][:, None] * f32["bs"][None, :] / f32["ys"], feeds["yz"])
    assert got.shape == (3, 5, 4)
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


def test_qlinear_matmul_nan_scale_gives_the_zero_point(lib):
    """A NaN multiplier (here a NaN a_scale) requantises as 0 + y_zero_point, as QuantizeLinear maps NaN: a defined
    result, where casting the NaN to an integer was undefined (found by fuzz_model under UBSan)."""
    a = np.array([[1, -3], [5, 0]], np.int8)
    feeds = {"a": a, "as": np.asarray(np.float32("nan")), "az": np.asarray(np.int8(0)), "b": np.eye(2, dtype=np.int8),
             "bs": np.asarray(np.float32(1)), "bz": np.asarray(np.int8(0)), "ys": np.asarray(np.float32(1)),
             "yz": np.asarray(np.int8(7))}
    data = make_model(helper.make_node("QLinearMatMul", list(feeds), ["y"]), feeds, np.int8)
    np.testing.assert_array_equal(Session(lib, data).run(feeds)[0], np.full((2, 2), 7, np.int8))


def test_matmul_integer_bad_zero_point_is_named(lib):
    feeds = {"a": np.zeros((3, 4), np.uint8), "b": np.zeros((4, 5), np.uint8), "az": np.zeros(2, np.uint8)}
    data = make_model(helper.make_node("MatMulInteger", list(feeds), ["y"]), feeds, np.int32)
    with pytest.raises(Exception, match="a_zero_point"):
        Session(lib, data).run(feeds)


def conv_int32(x, w, strides, pads, dilations, group):
    """numpy model of the integer convolution: int64 sums of x * w (already minus their zero points), explicit
    pads (begin..., end...), wrapped to int32 like the int32 accumulator."""
    nsp = x.ndim - 2
    xp = np.pad(x.astype(np.int64), [(0, 0), (0, 0)] + [(pads[i], pads[i + nsp]) for i in range(nsp)])
    k = w.shape[2:]
    out = [(xp.shape[2 + i] - (k[i] - 1) * dilations[i] - 1) // strides[i] + 1 for i in range(nsp)]
    m, cg = w.shape[0], w.shape[1]
    mg = m // group
    y = np.zeros((x.shape[0], m, *out), np.int64)
    for off in itertools.product(*[range(kk) for kk in k]):
        window = tuple(slice(off[i] * dilations[i], off[i] * dilations[i] + (out[i] - 1) * strides[i] + 1, strides[i])
                       for i in range(nsp))
        xs = xp[(slice(None), slice(None)) + window]
        for g in range(group):
            wk = w[g * mg:(g + 1) * mg, :, *off].astype(np.int64)
            y[:, g * mg:(g + 1) * mg] += np.einsum("nc...,mc->nm...", xs[:, g * cg:(g + 1) * cg], wk)
    return y.astype(np.int32)  # wraps like int32 accumulation


def explicit_pads(x_shape, w_shape, attrs):
    """The pads the attributes put into effect (auto_pad applied)."""
    nsp = len(x_shape) - 2
    strides, dil = attrs.get("strides", [1] * nsp), attrs.get("dilations", [1] * nsp)
    auto = attrs.get("auto_pad", "NOTSET")
    if auto == "NOTSET":
        return attrs.get("pads", [0] * 2 * nsp)
    if auto == "VALID":
        return [0] * 2 * nsp
    begin, end = [], []
    for i in range(nsp):
        out = -(-x_shape[2 + i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (w_shape[2 + i] - 1) * dil[i] + 1 - x_shape[2 + i])
        small = total // 2
        begin.append(small if auto == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


# (x shape, w shape, attributes): 1-D, 2-D and 3-D; strides, dilations, pads, auto_pad, group
CONV_CASES = [
    ((2, 3, 9, 8), (4, 3, 3, 3), {}),
    ((1, 4, 10, 7), (6, 2, 3, 2), {"group": 2, "strides": [2, 1], "pads": [1, 0, 2, 1]}),
    ((2, 3, 11, 9), (5, 3, 3, 3), {"dilations": [2, 1], "strides": [1, 2], "pads": [2, 1, 1, 2]}),
    ((1, 2, 7, 6), (3, 2, 3, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((1, 2, 7, 6), (3, 2, 2, 3), {"auto_pad": "SAME_LOWER"}),
    ((1, 3, 6, 6), (3, 1, 3, 3), {"group": 3, "auto_pad": "VALID"}),
    ((2, 3, 12), (4, 3, 3), {"strides": [2], "pads": [1, 1], "dilations": [2]}),
    ((1, 2, 5, 6, 4), (3, 2, 2, 3, 2), {"pads": [1, 0, 1, 0, 1, 1], "strides": [1, 2, 1]}),
]



@pytest.mark.parametrize("tx,tw", list(itertools.product(Q8, Q8)))
@pytest.mark.parametrize("zp_kind", ["none", "scalar", "per_channel"])
def test_conv_integer_random(lib, tx, tw, zp_kind):
    rng = np.random.default_rng(11)
    for xs, ws, attrs in CONV_CASES:
        x, w = rand_q(rng, tx, xs), rand_q(rng, tw, ws)
        feeds = {"x": x, "w": w}
        if zp_kind != "none":
            feeds["xz"] = np.asarray(rand_q(rng, tx, ()))
            feeds["wz"] = rand_q(rng, tw, (ws[0],) if zp_kind == "per_channel" else ())
        node = helper.make_node("ConvInteger", list(feeds), ["y"], **attrs)

        def numpy_model():
            x32, w32 = x.astype(np.int32), w.astype(np.int32)
            if "xz" in feeds:
                x32 = x32 - feeds["xz"].astype(np.int32)
                wz = feeds["wz"].astype(np.int32)
                w32 = w32 - wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim else w32 - wz
            return conv_int32(x32, w32, attrs.get("strides", [1] * (x.ndim - 2)), explicit_pads(xs, ws, attrs),
                              attrs.get("dilations", [1] * (x.ndim - 2)), attrs.get("group", 1))

        want = check(lib, node, feeds, np.int32, numpy_model)
        np.testing.assert_array_equal(want, numpy_model())  # the numpy model itself holds against onnxruntime


@pytest.mark.parametrize("tx,tw,ty", list(itertools.product(Q8, Q8, Q8)))
@pytest.mark.parametrize("per_channel,bias", [(False, False), (True, True), (False, True)])
def test_qlinear_conv_random(lib, tx, tw, ty, per_channel, bias):
    rng = np.random.default_rng(13)
    for xs, ws, attrs in CONV_CASES:
        m = ws[0]
        x, w = rand_q(rng, tx, xs), rand_q(rng, tw, ws)
        feeds = {"x": x, "xs": np.float32(rng.uniform(0.01, 0.1)), "xz": rand_q(rng, tx, ()), "w": w,
                 "ws": rng.uniform(0.01, 0.1, size=(m,) if per_channel else ()).astype(np.float32),
                 "wz": rand_q(rng, tw, (m,) if per_channel else ()), "ys": np.float32(rng.uniform(0.5, 4)),
                 "yz": rand_q(rng, ty, ())}
        if bias:
            feeds["b"] = rng.integers(-5000, 5000, size=m).astype(np.int32)
        feeds = {k: np.asarray(v) for k, v in feeds.items()}
        node = helper.make_node("QLinearConv", list(feeds), ["y"], **attrs)

        def numpy_model():
            shape = (-1,) + (1,) * (w.ndim - 1)
            acc = conv_int32(x.astype(np.int32) - feeds["xz"].astype(np.int32),
                             w.astype(np.int32) - feeds["wz"].astype(np.int32).reshape(shape if per_channel else ()),
                             attrs.get("strides", [1] * (x.ndim - 2)), explicit_pads(xs, ws, attrs),
                             attrs.get("dilations", [1] * (x.ndim - 2)), attrs.get("group", 1))
            if bias:
                acc = acc + feeds["b"].reshape((1, -1) + (1,) * (x.ndim - 2))
            scale = (feeds["xs"] * feeds["ws"] / feeds["ys"]).astype(np.float32)
            return requantize(acc, scale.reshape((1, -1) + (1,) * (x.ndim - 2)) if per_channel else scale,
                              feeds["yz"])

        check(lib, node, feeds, ty, numpy_model)


def test_qlinear_conv_bad_w_scale_is_named(lib):
    feeds = {"x": np.zeros((1, 2, 4, 4), np.uint8), "xs": np.asarray(np.float32(1)), "xz": np.asarray(np.uint8(0)),
             "w": np.zeros((3, 2, 2, 2), np.uint8), "ws": np.ones(2, np.float32), "wz": np.asarray(np.uint8(0)),
             "ys": np.asarray(np.float32(1)), "yz": np.asarray(np.uint8(0))}
    data = make_model(helper.make_node("QLinearConv", list(feeds), ["y"]), feeds, np.uint8)
    with pytest.raises(Exception, match="w_scale"):
        Session(lib, data).run(feeds)
