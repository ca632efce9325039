"""Channels-last convolutions in half-precision CUDA sessions (graph/layout.c): the convolutions, pools and the
elementwise ops between them run [N, H, W, C], Transposes appear only where a channels-first reader or a model output
needs one, and every output matches the float32 CPU reference and the same session kept channels-first
(CINFER_CHANNELS_LAST=0)."""
import ctypes
import os
import pathlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
from cinfer_ctypes import Session  # noqa: E402
from test_fusion import session_ops  # noqa: E402

N = helper.make_node


def small_resnet():
    """A stem conv + Relu, a max pool, a residual block (1x1 conv + Add + Relu, fused into the conv), a strided
    grouped conv, a per-channel scale and a scalar shift, an average pool with padding counted, then three kinds of
    reader: a Softmax over channels (channels-first only), a global pool into a Gemm head and a ReduceMean over both
    spatial axes (which becomes a global pool), and a conv with asymmetric pads (left channels-first). The residual
    block's output is a model output too."""
    rng = np.random.default_rng(7)
    w = lambda *s: (rng.standard_normal(s) * (2.0 / np.prod(s[1:])) ** 0.5).astype(np.float32)  # noqa: E731
    inits = {"w1": w(8, 3, 3, 3), "b1": w(8) * 0.1, "w2": w(8, 8, 1, 1), "b2": w(8) * 0.1, "w3": w(16, 4, 3, 3),
             "b3": w(16) * 0.1, "k3": (rng.random((16, 1, 1)) + 0.5).astype(np.float32),
             "half": np.array(0.5, np.float32), "wf": w(16, 5), "w4": w(4, 8, 2, 2),
             "spatial": np.array([-1, -2], np.int64)}
    nodes = [
        N("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]), N("Relu", ["c1"], ["r1"]),
        N("MaxPool", ["r1"], ["p1"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
        N("Conv", ["p1", "w2", "b2"], ["c2"]), N("Add", ["c2", "p1"], ["a2"]), N("Relu", ["a2"], ["r2"]),
        N("Conv", ["r2", "w3", "b3"], ["c3"], group=2, strides=[2, 2], pads=[1, 1, 1, 1]),
        N("Mul", ["c3", "k3"], ["s3"]), N("Add", ["s3", "half"], ["t3"]),
        N("AveragePool", ["t3"], ["ap"], kernel_shape=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
        N("Softmax", ["ap"], ["sm"], axis=1),
        N("GlobalAveragePool", ["ap"], ["g"]), N("Flatten", ["g"], ["f"]), N("Gemm", ["f", "wf"], ["y"]),
        N("ReduceMean", ["ap", "spatial"], ["rm"], keepdims=1),
        N("Conv", ["r2", "w4"], ["z"], pads=[0, 0, 1, 1]),
    ]
    outputs = [helper.make_tensor_value_info(k, TensorProto.FLOAT, None) for k in ("y", "sm", "r2", "z", "rm")]
    g = helper.make_graph(nodes, "small_resnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 12, 12])],
                          outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=9).SerializeToString()


def test_cpu_half_sessions_stay_channels_first(lib):
    """Only the CUDA backend has channels-last kernels: a CPU session at fp16 runs the channels-first graph."""
    s = Session(lib, small_resnet(), device="cpu", options={"precision": "fp16", "profile": "1"})
    assert "Transpose" not in session_ops(lib, s)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_channels_last_matches_the_reference_and_channels_first(lib, gpus, precision, monkeypatch):
    devices, why = gpus
    if not devices:
        pytest.skip(f"no usable CUDA device: {why}")
    m = small_resnet()
    s = Session(lib, m, device="cuda:0", options={"precision": precision, "profile": "1"})
    ops = session_ops(lib, s)
    # in: x before the stem conv; out: r2 (a model output, read by the asymmetric conv), ap (for the Softmax)
    assert ops.get("Transpose") == 3 and ops.get("GlobalAveragePool") == 2 and "ReduceMean" not in ops, ops
    monkeypatch.setenv("CINFER_CHANNELS_LAST", "0")
    first = Session(lib, m, device="cuda:0", options={"precision": precision, "profile": "1"})
    assert "Transpose" not in session_ops(lib, first)
    monkeypatch.delenv("CINFER_CHANNELS_LAST")
    ref = Session(lib, m, device="cpu")
    tol = {"fp16": 2e-2, "bf16": 8e-2}[precision]
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 12, 12)).astype(np.float32)
        want, got, alt = ref.run({"x": x}), s.run({"x": x}), first.run({"x": x})
        for name, w, g, a in zip(("y", "sm", "r2", "z", "rm"), want, got, alt):
            assert g.shape == w.shape and g.dtype == np.float32, name
            scale = float(np.abs(w).max())
            assert float(np.abs(g - w).max()) <= tol * scale, f"{name} b{batch}: channels-last off the reference"
            assert float(np.abs(g - a).max()) <= tol * scale, f"{name} b{batch}: channels-last off channels-first"


@pytest.fixture(scope="module")
def gpus(lib):
    return lib.cuda_devices()


def test_channels_last_convolutions_without_cudnn_match_the_reference(lib, gpus, monkeypatch):
    """Where cuDNN takes no part in a channels-last Conv (sizes beyond its int range; forced here with
    CINFER_CONV_DIRECT=1), X and W are reordered channels-first for the direct kernel and Y reordered back, the
    residual and Relu after: the same outputs as the float32 reference."""
    devices, why = gpus
    if not devices:
        pytest.skip(f"no usable CUDA device: {why}")
    m = small_resnet()
    monkeypatch.setenv("CINFER_CONV_DIRECT", "1")
    s = Session(lib, m, device="cuda:0", options={"precision": "fp16", "profile": "1"})
    assert session_ops(lib, s).get("Transpose") == 3
    x = np.random.default_rng(3).standard_normal((2, 3, 12, 12)).astype(np.float32)
    want, got = Session(lib, m, device="cpu").run({"x": x}), s.run({"x": x})
    for name, w, g in zip(("y", "sm", "r2", "z", "rm"), want, got):
        assert float(np.abs(g - w).max()) <= 2e-2 * float(np.abs(w).max()), name
