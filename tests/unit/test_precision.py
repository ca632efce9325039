"""Session options "precision" and "deterministic", and device-resident io (cinfer_session_run_device /
cinfer_session_output_info), through ctypes.

On the CPU these check the graph conversion (half-precision copy with casts at the edges, saturated constants,
float32 io kept) and the API plumbing; with CINFER_TEST_DEVICE=cuda the same tests run on the GPU.
"""
import ctypes
import pathlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import CinferError, Session, Tensor, selected_device

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
import builders  # noqa: E402

INVALID_ARGUMENT, UNSUPPORTED = 1, 3


def relative_error(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def run_all(lib, model, feeds, **options):
    return Session(lib, model.SerializeToString(), options=options).run(feeds)


@pytest.mark.parametrize("precision,tol", [("fp16", 5e-3), ("bf16", 4e-2)])
@pytest.mark.parametrize("builder", ["mlp", "cnn", "transformer_block", "recommender", "image_window"])
def test_half_precision_agrees_with_fp32_and_keeps_io_dtypes(lib, builder, precision, tol):
    rng = np.random.default_rng(3)
    model, make_inputs = getattr(builders, builder)(rng)
    feeds = make_inputs(4, np.random.default_rng(4))
    ref = run_all(lib, model, feeds)
    got = run_all(lib, model, feeds, precision=precision)
    for r, g in zip(ref, got):
        assert g.dtype == r.dtype and g.shape == r.shape  # the caller keeps the model's dtypes
        if r.dtype != np.float32:  # quantised outputs (image_window's uint8 pixels): a rounding step apart at most
            assert np.max(np.abs(g.astype(np.int64) - r.astype(np.int64))) <= 1
            continue
        assert np.all(np.isfinite(g))
        err = relative_error(g.astype(np.float64), r.astype(np.float64))
        assert err < tol, f"{builder} {precision}: relative error {err:.2e}"
    # the conversion did happen: half storage cannot reproduce every float32 bit
    assert any(not np.array_equal(r, g) for r, g in zip(ref, got) if r.dtype == np.float32)


def test_fp32_and_tf32_match_the_default_on_the_cpu(lib):
    model, make_inputs = builders.mlp(np.random.default_rng(1))
    feeds = make_inputs(3, np.random.default_rng(2))
    ref = run_all(lib, model, feeds)
    np.testing.assert_array_equal(run_all(lib, model, feeds, precision="fp32")[0], ref[0])
    if selected_device() == "cpu":  # TF32 is a GPU tensor-core mode: the CPU computes float32 either way
        np.testing.assert_array_equal(run_all(lib, model, feeds, precision="tf32")[0], ref[0])


def masked_softmax_model():
    """softmax(x + (1 - mask) * finfo(float32).min): the mask constant transformers exports. In float16 it must
    saturate to -65504; as -inf, 0 * -inf would give NaN for the kept positions."""
    N = helper.make_node
    g = helper.make_graph(
        [N("Cast", ["mask"], ["maskf"], to=TensorProto.FLOAT), N("Sub", ["one", "maskf"], ["inv"]),
         N("Mul", ["inv", "big"], ["add"]), N("Add", ["x", "add"], ["masked"]), N("Softmax", ["masked"], ["y"], axis=-1)],
        "masked_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 8]),
         helper.make_tensor_value_info("mask", TensorProto.INT64, ["b", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 8])],
        [numpy_helper.from_array(np.array(1.0, np.float32), "one"),
         numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "big")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_float32_min_mask_constant_saturates_in_fp16(lib):
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    mask = np.array([[1] * 5 + [0] * 3, [1] * 8], np.int64)
    ref = run_all(lib, masked_softmax_model(), {"x": x, "mask": mask})[0]
    got = run_all(lib, masked_softmax_model(), {"x": x, "mask": mask}, precision="fp16")[0]
    assert np.all(np.isfinite(got)), got
    assert np.all(got[0, 5:] == 0)
    np.testing.assert_allclose(got, ref, atol=2e-3)


def test_generated_float_values_follow_the_precision(lib):
    """ConstantOfShape without a value (a float32 zero) and Cast(to=FLOAT) inside the graph become half, and a
    float output that is also read inside the graph is still returned as float32."""
    N = helper.make_node
    g = helper.make_graph(
        [N("Shape", ["x"], ["s"]), N("ConstantOfShape", ["s"], ["zeros"]), N("Add", ["x", "zeros"], ["x0"]),
         N("Cast", ["n"], ["nf"], to=TensorProto.FLOAT), N("Mul", ["x0", "nf"], ["y"]), N("Relu", ["y"], ["z"])],
        "generated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4]),
         helper.make_tensor_value_info("n", TensorProto.INT32, ["b", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", 4]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, ["b", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    n = np.arange(12, dtype=np.int32).reshape(3, 4)
    y, z = run_all(lib, model, {"x": x, "n": n}, precision="fp16")
    assert y.dtype == np.float32 and z.dtype == np.float32
    want = (x.astype(np.float16) * n.astype(np.float16)).astype(np.float32)
    np.testing.assert_allclose(y, want, rtol=1e-3)
    np.testing.assert_allclose(z, np.maximum(want, 0), rtol=1e-3)


def test_bad_precision_and_quantized_models_are_refused_clearly(lib):
    model, _ = builders.mlp(np.random.default_rng(1))
    with pytest.raises(CinferError) as e:
        Session(lib, model.SerializeToString(), options={"precision": "fp8"})
    assert e.value.status == INVALID_ARGUMENT and "'fp8' is not fp32, tf32, fp16 or bf16" in e.value.message
    N = helper.make_node
    g = helper.make_graph(
        [N("QuantizeLinear", ["x", "s", "zp"], ["q"]), N("DequantizeLinear", ["q", "s", "zp"], ["y"])], "qdq",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0.1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "zp")])
    q = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    with pytest.raises(CinferError) as e:
        Session(lib, q.SerializeToString(), options={"precision": "fp16"})
    assert e.value.status == UNSUPPORTED and "quantized (QuantizeLinear node" in e.value.message


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_deterministic_runs_are_bitwise_identical(lib, precision):
    model, make_inputs = builders.transformer_block(np.random.default_rng(7))
    feeds = make_inputs(8, np.random.default_rng(8))
    s = Session(lib, model.SerializeToString(), options={"deterministic": "1", "precision": precision})
    first = s.run(feeds)[0]
    for _ in range(9):
        np.testing.assert_array_equal(s.run(feeds)[0], first)
    with pytest.raises(CinferError) as e:
        Session(lib, model.SerializeToString(), options={"deterministic": "yes"})
    assert e.value.status == INVALID_ARGUMENT and "'deterministic'" in e.value.message


# ---- device-resident io ----

def device_api(lib):
    L = lib.lib
    L.cinfer_session_run_device.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                            ctypes.POINTER(Tensor), ctypes.c_size_t, ctypes.c_void_p]
    L.cinfer_session_output_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t,
                                             ctypes.POINTER(Tensor), ctypes.c_size_t]
    return L


def describe(arrays, with_data=True):
    ts = (Tensor * len(arrays))()
    for i, (name, a) in enumerate(arrays):
        ts[i].name = name.encode() if name else None
        ts[i].dtype = {np.dtype(np.float32): 1, np.dtype(np.int64): 7}[a.dtype]
        ts[i].ndim = a.ndim
        for d in range(a.ndim):
            ts[i].dims[d] = a.shape[d]
        ts[i].data = a.ctypes.data if with_data else None
    return ts


@pytest.mark.skipif(selected_device() != "cpu", reason="host buffers stand for device memory only on the CPU; "
                    "the GPU path is exercised by bench/gpu/compare_pytorch.py with torch tensors")
def test_run_device_on_the_cpu_writes_into_caller_buffers(lib):
    L = device_api(lib)
    model, make_inputs = builders.transformer_block(np.random.default_rng(7))
    feeds = make_inputs(3, np.random.default_rng(9))
    s = Session(lib, model.SerializeToString())
    (want,) = s.run(feeds)
    ins = describe(list(feeds.items()))
    info = (Tensor * 1)()
    lib.check(L.cinfer_session_output_info(s.session, describe(list(feeds.items()), with_data=False), 2, info, 1))
    assert info[0].name == b"y" and info[0].dtype == 1 and info[0].data is None
    shape = tuple(info[0].dims[d] for d in range(info[0].ndim))
    assert shape == want.shape
    out = np.full(shape, np.nan, np.float32)
    outs = describe([("y", out)])
    for _ in range(2):  # the cached plan serves the second call
        lib.check(L.cinfer_session_run_device(s.session, ins, 2, outs, 1, None))
        np.testing.assert_array_equal(out, want)
    # a caller buffer described with another shape is refused with both shapes named
    wrong = describe([("y", np.zeros((3, 16, 32), np.float32))])
    assert L.cinfer_session_run_device(s.session, ins, 2, wrong, 1, None) == INVALID_ARGUMENT
    msg = L.cinfer_last_error().decode()
    assert "output 'y'" in msg and "[3,16,64]" in msg and "[3,16,32]" in msg, msg
