"""Chunked copies: a pointwise model's host run (cinfer_session_run_into from page-locked memory) split into chunks
whose uploads, compute and downloads overlap. On a CPU the fault-injection wrapper shows the CPU as a device that
copies by memcpy and calls all memory page-locked, so the split itself (chunk bounds, several inputs and outputs,
a ragged last chunk, a copy failing mid-run) is tested here; tests/cuda runs it on a GPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import CinferError, Session

ROWS, COLS = 4, 3000  # 12,000 elements: copy_chunks=5 gives chunks of 3,072 (a multiple of 1,024) and one of 2,784


def scalar(name, value):
    return numpy_helper.from_array(np.array(value, np.float32), name)


def window_model():
    """y = clip((x - 40) / 400 + 0.5, 0, 1) and w = x * z + 1: two inputs, two outputs, every node pointwise."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [ROWS, COLS])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, COLS])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [ROWS, COLS])
    nodes = [helper.make_node("Sub", ["x", "level"], ["a"]), helper.make_node("Div", ["a", "width"], ["b"]),
             helper.make_node("Add", ["b", "half"], ["c"]), helper.make_node("Clip", ["c", "zero", "one"], ["y"]),
             helper.make_node("Mul", ["x", "z"], ["xz"]), helper.make_node("Add", ["xz", "one"], ["w"])]
    consts = [scalar("level", 40.0), scalar("width", 400.0), scalar("half", 0.5), scalar("zero", 0.0), scalar("one", 1.0)]
    g = helper.make_graph(nodes, "window", [x, z], [y, w], consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def row_bias_model():
    """x + a [COLS] vector: broadcasting a non-scalar constant, so not split."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [ROWS, COLS])
    bias = numpy_helper.from_array(np.arange(COLS, dtype=np.float32), "bias")
    g = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "row_bias", [x], [y], [bias])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def feeds(seed):
    rng = np.random.default_rng(seed)
    return {"x": (rng.standard_normal((ROWS, COLS)) * 300).astype(np.float32),
            "z": rng.standard_normal((ROWS, COLS)).astype(np.float32)}


def expected(f):
    return [np.clip((f["x"] - np.float32(40)) / np.float32(400) + np.float32(0.5), 0, 1), f["x"] * f["z"] + np.float32(1)]


@pytest.fixture
def fake_device(monkeypatch):
    """The CPU shown as a device; a copy rule that matches nothing until a test sets its own."""
    monkeypatch.setenv("CINFER_FAULT_INJECTION", "1")
    monkeypatch.setenv("CINFER_FAULT_COPY", "min_bytes=999999999999")
    return monkeypatch


def run_into(s, f, shape=(ROWS, COLS), count=2):
    outs = [np.full(shape, np.nan, np.float32) for _ in range(count)]
    s.run_into(f, outs)
    return outs


def test_chunked_run_matches_the_whole_run(lib, fake_device):
    """Split into four chunks (the last one ragged) the outputs are the whole run's, bit for bit, run after run,
    and numpy's."""
    chunked = Session(lib, window_model(), device="cpu", options={"copy_chunks": "5"})
    whole = Session(lib, window_model(), device="cpu", options={"copy_chunks": "1"})
    for seed in (1, 2, 3):
        f = feeds(seed)
        got, want = run_into(chunked, f), run_into(whole, f)
        for g, w, ref in zip(got, want, expected(f)):
            np.testing.assert_array_equal(g, w)
            np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-6)


def test_the_copies_go_chunk_by_chunk_and_a_failed_one_fails_only_its_run(lib, fake_device):
    """The copy points show the split: per run 2 inputs x 4 chunks go up, the 7th being chunk 3's x (2,784 floats);
    the 2nd download is chunk 0's w (3,072 floats). An injected failure there fails that run with the copy named;
    the next run is whole and right. Unsplit (copy_chunks=1), a run copies each input once, whole."""
    chunked = Session(lib, window_model(), device="cpu", options={"copy_chunks": "5"})
    f = feeds(7)
    for rule, what in (("dir=h2d,nth=7", f"host-to-device copy #7 of {2784 * 4} bytes"),
                       ("dir=d2h,nth=2", f"device-to-host copy #2 of {3072 * 4} bytes")):
        fake_device.setenv("CINFER_FAULT_COPY", rule)
        with pytest.raises(CinferError) as e:
            run_into(chunked, f)
        assert "injected copy failure" in e.value.message and what in e.value.message, e.value.message
        for got, ref in zip(run_into(chunked, f), expected(f)):  # the rule fired once: this run goes through
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)
    whole = Session(lib, window_model(), device="cpu", options={"copy_chunks": "1"})
    fake_device.setenv("CINFER_FAULT_COPY", "dir=h2d,nth=2")
    with pytest.raises(CinferError) as e:
        run_into(whole, f)
    assert f"host-to-device copy #2 of {ROWS * COLS * 4} bytes" in e.value.message, e.value.message


def test_a_broadcast_vector_is_not_split(lib, fake_device):
    """A node reading a constant of more than one element (a row bias) is not pointwise in the sense chunks need:
    the run copies its input whole even when asked for chunks."""
    s = Session(lib, row_bias_model(), device="cpu", options={"copy_chunks": "4"})
    x = feeds(3)["x"]
    fake_device.setenv("CINFER_FAULT_COPY", "dir=h2d,nth=1")
    with pytest.raises(CinferError) as e:
        run_into(s, {"x": x}, count=1)
    assert f"host-to-device copy #1 of {ROWS * COLS * 4} bytes" in e.value.message, e.value.message
    (got,) = run_into(s, {"x": x}, count=1)
    np.testing.assert_array_equal(got, x + np.arange(COLS, dtype=np.float32))


def mixed_dtype_model():
    """Outputs of four dtypes from a float and an int32 input: a bool mask (1-byte elements), a float16 cast, a Where
    reading the mask and a scalar, an int32 sum; 'pos' is both an output and read by another node."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [ROWS, COLS])
    n = helper.make_tensor_value_info("n", TensorProto.INT32, [ROWS, COLS])
    outs = [helper.make_tensor_value_info("pos", TensorProto.BOOL, [ROWS, COLS]),
            helper.make_tensor_value_info("h", TensorProto.FLOAT16, [ROWS, COLS]),
            helper.make_tensor_value_info("relu", TensorProto.FLOAT, [ROWS, COLS]),
            helper.make_tensor_value_info("m", TensorProto.INT32, [ROWS, COLS])]
    nodes = [helper.make_node("Greater", ["x", "zero"], ["pos"]), helper.make_node("Cast", ["x"], ["h"], to=TensorProto.FLOAT16),
             helper.make_node("Where", ["pos", "x", "zero"], ["relu"]), helper.make_node("Add", ["n", "seven"], ["m"])]
    consts = [scalar("zero", 0.0), numpy_helper.from_array(np.array(7, np.int32), "seven")]
    g = helper.make_graph(nodes, "mixed", [x, n], outs, consts)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_outputs_of_every_element_size_split_alike(lib, fake_device):
    """1-, 2- and 4-byte outputs and an int32 input split at the same element bounds (byte offsets per dtype): the
    chunked run (copies #1-#8 up, as the copy points show: 2 inputs x 4 chunks) equals the whole one bit for bit."""
    rng = np.random.default_rng(11)
    f = {"x": rng.standard_normal((ROWS, COLS)).astype(np.float32),
         "n": rng.integers(-1000, 1000, (ROWS, COLS), dtype=np.int32)}
    dtypes = [np.bool_, np.float16, np.float32, np.int32]

    def run(s):
        outs = [np.zeros((ROWS, COLS), d) for d in dtypes]
        s.run_into(f, outs)
        return outs

    chunked = Session(lib, mixed_dtype_model(), device="cpu", options={"copy_chunks": "5"})
    whole = Session(lib, mixed_dtype_model(), device="cpu", options={"copy_chunks": "1"})
    for got, want in zip(run(chunked), run(whole)):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run(chunked)[3], f["n"] + 7)
    np.testing.assert_array_equal(run(chunked)[2], np.where(f["x"] > 0, f["x"], np.float32(0)))
    fake_device.setenv("CINFER_FAULT_COPY", "dir=h2d,nth=8")
    with pytest.raises(CinferError) as e:
        run(chunked)
    assert f"host-to-device copy #8 of {2784 * 4} bytes" in e.value.message, e.value.message  # chunk 3's n


def test_copy_chunks_option_is_checked(lib):
    for bad in ("65", "-1", "four"):
        with pytest.raises(CinferError, match=f"session option 'copy_chunks': '{bad}' is not a count from 0"):
            Session(lib, window_model(), device="cpu", options={"copy_chunks": bad})
