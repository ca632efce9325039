"""C API tests through ctypes: loader errors on malformed files, external data, unsupported-op listing,
input validation messages, run-time shape subgraphs, plan caching."""
import ctypes
import os
import re

import cinfer_ctypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import CinferError, Session

INVALID_ARGUMENT, INVALID_MODEL, UNSUPPORTED, IO, NOT_FOUND = 1, 2, 3, 5, 7


def make_model(nodes, inputs, outputs, initializers=(), opset=18):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def add_relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    b = numpy_helper.from_array(np.array([1, -2, 3, -4], np.float32), "b")
    return make_model([helper.make_node("Add", ["x", "b"], ["t"]), helper.make_node("Relu", ["t"], ["y"])], [x], [y], [b])


def test_runs_and_matches_numpy(lib):
    s = Session(lib, add_relu_model().SerializeToString())
    x = np.random.randn(3, 4).astype(np.float32)
    (y,) = s.run({"x": x})
    np.testing.assert_allclose(y, np.maximum(x + np.array([1, -2, 3, -4], np.float32), 0), rtol=1e-6)
    # a second batch size gets its own plan; the first still works after it
    x5 = np.random.randn(5, 4).astype(np.float32)
    assert s.run({"x": x5})[0].shape == (5, 4)
    np.testing.assert_allclose(s.run([x])[0], y)


def test_gpu_wait_option_is_checked(lib):
    """gpu_wait (spin|block) is a GPU session's choice; a CPU session accepts and ignores it, a bad value is refused
    by name."""
    x = np.random.randn(2, 4).astype(np.float32)
    want = Session(lib, add_relu_model().SerializeToString()).run({"x": x})[0]
    for v in ("spin", "block"):
        s = Session(lib, add_relu_model().SerializeToString(), options={"gpu_wait": v})
        np.testing.assert_array_equal(s.run({"x": x})[0], want)
    with pytest.raises(CinferError, match="session option 'gpu_wait': 'yield' is not spin or block"):
        Session(lib, add_relu_model().SerializeToString(), options={"gpu_wait": "yield"})


def test_timeline_option_is_checked(lib):
    """timeline=1 times a GPU session's runs; a CPU session has no streams to time and refuses it by name, a bad value
    is refused, and reading the timeline of a session made without it says so (tests/cuda reads real ones)."""
    model = add_relu_model().SerializeToString()
    with pytest.raises(CinferError, match="session option 'timeline': the cpu backend has no streams to time"):
        Session(lib, model, device="cpu", options={"timeline": "1"})
    with pytest.raises(CinferError, match="session option 'timeline': 'yes' is not 0 or 1"):
        Session(lib, model, device="cpu", options={"timeline": "yes"})
    s = Session(lib, model, device="cpu", options={"timeline": "0"})
    s.run({"x": np.ones((2, 4), np.float32)})
    with pytest.raises(CinferError, match="made without the option timeline=1") as e:
        s.timeline()
    assert e.value.status == INVALID_ARGUMENT


def test_session_options_are_listed_with_docs_and_defaults(lib):
    """cinfer_session_option_info lists the engine's option table: every entry has a type, its values, a default and a
    doc; giving an option its listed default is accepted; past the end is not found."""
    options = lib.session_options()
    keys = [o["key"] for o in options]
    assert len(keys) == len(set(keys))
    assert {"threads", "precision", "deterministic", "cuda_graphs", "gpu_wait", "profile", "guard_bytes",
            "copy_chunks", "timeline", "max_batch", "dim."} <= set(keys)
    model = add_relu_model().SerializeToString()
    for o in options:
        assert o["type"] in ("bool", "int", "enum") and o["values"] and o["default_value"] and len(o["doc"]) > 20, o
        if o["default_value"] != "none" and not o["is_prefix"]:
            Session(lib, model, device="cpu", options={o["key"]: o["default_value"]}).close()
    info = cinfer_ctypes.OptionInfo()
    assert lib.lib.cinfer_session_option_info(len(options), ctypes.byref(info)) == NOT_FOUND


@pytest.mark.parametrize("key,value,message", [
    ("deterministic", "yes", "session option 'deterministic': 'yes' is not 0 or 1"),
    ("threads", "-1", "session option 'threads': '-1' is not a count from 0 to 1024"),
    ("precision", "fp64", "session option 'precision': 'fp64' is not fp32, tf32, fp16 or bf16"),
    ("dim.batch", "0", "session option 'dim.batch': '0' is not a size >= 1"),
])
def test_bad_option_values_are_named_with_what_the_option_takes(lib, key, value, message):
    with pytest.raises(CinferError, match=re.escape(message)) as e:
        Session(lib, add_relu_model().SerializeToString(), device="cpu", options={key: value})
    assert e.value.status == INVALID_ARGUMENT


def test_unknown_option_lists_every_known_key(lib):
    with pytest.raises(CinferError, match="unknown session option 'thread' \\(known: ") as e:
        Session(lib, add_relu_model().SerializeToString(), device="cpu", options={"thread": "2"})
    known = e.value.message.split("(known: ", 1)[1].rstrip(")").split(", ")
    assert known == [o["key"] + ("NAME" if o["is_prefix"] else "") for o in lib.session_options()]


def test_run_into_fills_the_callers_buffers(lib):
    """cinfer_session_run_into writes the outputs into the caller's arrays (the same values as cinfer_session_run),
    at two batch sizes in turn; a buffer described with the wrong shape or dtype, or the wrong number of them, is
    refused naming the output, what the inputs give and what was described, and the buffer is left alone."""
    s = Session(lib, add_relu_model().SerializeToString())
    for rows in (3, 8, 3):
        x = np.random.default_rng(rows).standard_normal((rows, 4)).astype(np.float32)
        want = s.run({"x": x})[0]
        out = np.full((rows, 4), np.nan, np.float32)
        s.run_into({"x": x}, [out])
        np.testing.assert_array_equal(out, want)
    x = np.ones((3, 4), np.float32)
    wrong = np.full((4, 4), 7, np.float32)
    with pytest.raises(CinferError, match=r"output 'y': these inputs give float32 \[3,4\], the caller's buffer is "
                                          r"described as float32 \[4,4\]"):
        s.run_into({"x": x}, [wrong])
    assert (wrong == 7).all()
    with pytest.raises(CinferError, match=r"output 'y': these inputs give float32 \[3,4\], the caller's buffer is "
                                          r"described as float64 \[3,4\]"):
        s.run_into({"x": x}, [np.zeros((3, 4), np.float64)])
    with pytest.raises(CinferError, match="cinfer_session_run_into: room for 2 outputs given, the model has 1"):
        s.run_into({"x": x}, [np.zeros((3, 4), np.float32), np.zeros((3, 4), np.float32)])


def test_misaligned_input_data(lib):
    """Inputs need not be aligned to their element size (a binary tensor right after a JSON header is not)."""
    s = Session(lib, add_relu_model().SerializeToString())
    x = np.random.randn(3, 4).astype(np.float32)
    raw = bytearray(1 + x.nbytes)
    raw[1:] = x.tobytes()
    shifted = np.frombuffer(raw, dtype=np.float32, offset=1).reshape(3, 4)
    assert shifted.ctypes.data % 4 != 0
    np.testing.assert_array_equal(s.run({"x": shifted})[0], s.run({"x": x})[0])


@pytest.mark.parametrize("cut", [1, 10, 0.5])
def test_truncated_model_is_refused(lib, cut):
    data = add_relu_model().SerializeToString()
    n = int(len(data) * cut) if isinstance(cut, float) else cut
    with pytest.raises(CinferError) as e:
        Session(lib, data[:n])
    assert e.value.status == INVALID_MODEL


def test_corrupt_bytes_are_refused(lib):
    rng = np.random.default_rng(1)
    base = bytearray(add_relu_model().SerializeToString())
    statuses = set()
    for trial in range(200):
        data = bytearray(base)
        for _ in range(5):
            data[rng.integers(len(data))] = rng.integers(256)
        try:
            s = Session(lib, bytes(data))
            s.run({"x": np.ones((2, 4), np.float32)}) if s else None
            statuses.add("ok")
        except CinferError as e:
            statuses.add(e.status)
            assert e.message, "every refusal carries a message"
    assert statuses - {"ok"}, "some corruptions must be detected"


def test_garbage_is_not_a_model(lib):
    with pytest.raises(CinferError) as e:
        Session(lib, b"this is not a protobuf at all \xff\xff\xff")
    assert e.value.status == INVALID_MODEL


def test_all_unsupported_ops_listed_at_once(lib):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("NoSuchOpA", ["x"], ["a"], name="first"),
             helper.make_node("NoSuchOpB", ["a"], ["b"], name="second"),
             helper.make_node("Relu", ["b"], ["y"], name="third")]
    with pytest.raises(CinferError) as e:
        Session(lib, make_model(nodes, [x], [y]).SerializeToString())
    assert e.value.status == UNSUPPORTED
    assert "2 unsupported nodes" in e.value.message
    assert "'first' (NoSuchOpA, ai.onnx v" in e.value.message and "'second' (NoSuchOpB, ai.onnx v" in e.value.message


def test_old_opset_loads_and_runs(lib):
    # opsets below 13 are mapped onto today's semantics at load (tests/unit/test_old_opsets.py has the mappings)
    m = add_relu_model()
    s = Session(lib, make_model(m.graph.node, m.graph.input, m.graph.output, m.graph.initializer,
                                opset=11).SerializeToString())
    x = np.random.randn(2, 4).astype(np.float32)
    (y,) = s.run({"x": x})
    np.testing.assert_allclose(y, np.maximum(x + np.array([1, -2, 3, -4], np.float32), 0), rtol=1e-6)


def test_dangling_input_is_invalid(lib):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    with pytest.raises(CinferError) as e:
        Session(lib, make_model([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")], [x], [y]).SerializeToString())
    assert e.value.status == INVALID_MODEL and "ghost" in e.value.message and "adder" in e.value.message


def test_raw_data_size_mismatch(lib):
    m = add_relu_model()
    m.graph.initializer[0].raw_data = b"\0" * 7
    with pytest.raises(CinferError) as e:
        Session(lib, m.SerializeToString())
    assert e.value.status == INVALID_MODEL and "'b'" in e.value.message


def save_external(model, folder, location):
    onnx.save_model(model, os.path.join(folder, "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="weights.bin", size_threshold=0)
    m = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    onnx.save_model(m, os.path.join(folder, "model.onnx"))
    return os.path.join(folder, "model.onnx")


def test_external_data_loads(lib, tmp_path):
    path = save_external(add_relu_model(), str(tmp_path), "weights.bin")
    s = Session(lib, path=path)
    (y,) = s.run({"x": np.zeros((1, 4), np.float32)})
    np.testing.assert_array_equal(y, [[1, 0, 3, 0]])


@pytest.mark.parametrize("location", ["../weights.bin", "/etc/passwd", "sub/../../weights.bin"])
def test_external_data_may_not_escape(lib, tmp_path, location):
    folder = tmp_path / "m"
    folder.mkdir()
    path = save_external(add_relu_model(), str(folder), location)
    (tmp_path / "weights.bin").write_bytes(b"\0" * 16)
    with pytest.raises(CinferError) as e:
        Session(lib, path=path)
    assert e.value.status == INVALID_MODEL and "escapes" in e.value.message


def test_external_data_symlink_escape(lib, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    path = save_external(add_relu_model(), str(folder), "link.bin")
    (tmp_path / "outside.bin").write_bytes(b"\0" * 16)
    os.symlink(tmp_path / "outside.bin", folder / "link.bin")
    with pytest.raises(CinferError) as e:
        Session(lib, path=path)
    assert "escapes" in e.value.message


def test_missing_external_file(lib, tmp_path):
    path = save_external(add_relu_model(), str(tmp_path), "weights.bin")
    os.remove(tmp_path / "weights.bin")
    with pytest.raises(CinferError) as e:
        Session(lib, path=path)
    assert e.value.status == IO and "weights.bin" in e.value.message


def test_wrong_input_name(lib):
    s = Session(lib, add_relu_model().SerializeToString())
    with pytest.raises(CinferError) as e:
        s.run({"z": np.zeros((1, 4), np.float32)})
    assert e.value.status == INVALID_ARGUMENT and "'z'" in e.value.message and "'x'" in e.value.message


def test_wrong_dtype(lib):
    s = Session(lib, add_relu_model().SerializeToString())
    with pytest.raises(CinferError) as e:
        s.run({"x": np.zeros((1, 4), np.float64)})
    assert "expected dtype float32, got float64" in e.value.message


def test_wrong_shape(lib):
    s = Session(lib, add_relu_model().SerializeToString())
    with pytest.raises(CinferError) as e:
        s.run({"x": np.zeros((1, 5), np.float32)})
    assert "dim 1 must be 4, got 5" in e.value.message
    with pytest.raises(CinferError) as e:
        s.run({"x": np.zeros((4,), np.float32)})
    assert "expected rank 2" in e.value.message


def test_missing_input(lib):
    s = Session(lib, add_relu_model().SerializeToString())
    with pytest.raises(CinferError) as e:
        s.run({})
    assert "input 'x' is missing" in e.value.message


def test_runtime_shape_chain(lib):
    """Reshape target computed from Shape/Gather/Concat at run time: evaluated on the host per plan."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 12])
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
             helper.make_node("Unsqueeze", ["b", "axes0"], ["b1"]),
             helper.make_node("Concat", ["b1", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits.append(numpy_helper.from_array(np.array([0], np.int64), "axes0"))
    s = Session(lib, make_model(nodes, [x], [y], inits).SerializeToString())
    for batch in (1, 5, 2):
        a = np.random.randn(batch, 3, 4).astype(np.float32)
        (out,) = s.run({"x": a})
        np.testing.assert_array_equal(out, a.reshape(batch, 12))


def test_cpu_sessions_have_no_fallback_nodes(lib):
    """cinfer_session_num_fallback_nodes / cinfer_session_fallback_node list the nodes a device session runs on the
    CPU: a CPU session has none, even with an op no device has (NonZero) beside host-evaluated shape nodes, before
    and after a run; an index past the end and a NULL session give 0 / NULL."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])
    outs = [helper.make_tensor_value_info("nz", TensorProto.INT64, [2, None]),
            helper.make_tensor_value_info("flat", TensorProto.FLOAT, [None])]
    nodes = [helper.make_node("NonZero", ["x"], ["nz"], name="nonzero"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("ReduceProd", ["s"], ["n"], keepdims=1, name="count"),
             helper.make_node("Reshape", ["x", "n"], ["flat"], name="flatten")]
    s = Session(lib, make_model(nodes, [x], outs).SerializeToString(), device="cpu")
    L = lib.lib
    assert L.cinfer_session_num_host_nodes(s.session) >= 2  # shape, count: the other list is not empty
    for ran in (False, True):
        if ran:
            a = np.array([[0, 1, 2], [3, 0, 0]], np.float32)
            nz, flat = s.run({"x": a})
            np.testing.assert_array_equal(nz, np.stack(np.nonzero(a)))
            np.testing.assert_array_equal(flat, a.ravel())
        assert L.cinfer_session_num_fallback_nodes(s.session) == 0
        assert s.fallback_nodes() == []
        for index in (0, 1, 4, 2**64 - 1):
            assert L.cinfer_session_fallback_node(s.session, index) is None
    assert L.cinfer_session_num_fallback_nodes(None) == 0
    assert L.cinfer_session_fallback_node(None, 0) is None


def test_identity_chains_are_forwarded(lib):
    """Identity/Dropout chains collapse onto their source; one naming a model output survives as a node."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])]
    b = numpy_helper.from_array(np.array([1, 2, 3], np.float32), "b")
    nodes = [helper.make_node("Identity", ["x"], ["i1"]), helper.make_node("Dropout", ["i1"], ["i2"]),
             helper.make_node("Identity", ["i2"], ["i3"]), helper.make_node("Add", ["i3", "b"], ["a"]),
             helper.make_node("Identity", ["a"], ["i4"]), helper.make_node("Mul", ["i4", "i1"], ["y"]),
             helper.make_node("Identity", ["a"], ["z"])]
    s = Session(lib, make_model(nodes, [x], outs, [b]).SerializeToString())
    v = np.array([1, -2, 5], np.float32)
    y, z = s.run({"x": v})
    np.testing.assert_array_equal(z, v + [1, 2, 3])
    np.testing.assert_array_equal(y, (v + [1, 2, 3]) * v)


def test_duplicate_value_names_are_refused(lib):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="one"), helper.make_node("Neg", ["x"], ["y"], name="two")]
    with pytest.raises(CinferError) as e:
        Session(lib, make_model(nodes, [x], [y]).SerializeToString())
    assert e.value.status == INVALID_MODEL and "assigned more than once" in e.value.message


def test_variadic_op_with_repeated_operand(lib):
    """Sum(t, y, t) where t dies at the Sum: the output must not be written over t, which is read again."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    o = helper.make_tensor_value_info("o", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("Neg", ["x"], ["t"]), helper.make_node("Sum", ["t", "y", "t"], ["s"]),
             helper.make_node("Neg", ["s"], ["o"])]
    s = Session(lib, make_model(nodes, [x, y], [o]).SerializeToString())
    a, b = np.array([1, 2, 3, 4], np.float32), np.ones(4, np.float32)
    np.testing.assert_array_equal(s.run({"x": a, "y": b})[0], -(-a + b - a))


def test_plan_memory_without_data(lib):
    """Planning needs shapes only; an arena grows with the batch."""
    import ctypes
    from cinfer_ctypes import Tensor
    s = Session(lib, add_relu_model().SerializeToString())
    fn = lib.lib.cinfer_session_plan_memory
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    sizes = []
    for batch in (1, 64):
        t = (Tensor * 1)()
        t[0].name, t[0].dtype, t[0].ndim, t[0].data = b"x", 1, 2, None
        t[0].dims[0], t[0].dims[1] = batch, 4
        arena = ctypes.c_size_t()
        lib.check(fn(s.session, t, 1, ctypes.byref(arena)))
        sizes.append(arena.value)
    assert 0 < sizes[0] < sizes[1]


def _plan(lib, s, shapes):
    """cinfer_session_plan_memory for float inputs of these shapes (no data): (status, last error)."""
    import ctypes
    from cinfer_ctypes import Tensor
    fn = lib.lib.cinfer_session_plan_memory
    fn.argtypes = [ctypes.c_void_p, ctypes.POINTER(Tensor), ctypes.c_size_t, ctypes.POINTER(ctypes.c_size_t)]
    t = (Tensor * len(shapes))()
    names = [n.encode() for n in shapes]
    for i, (name, dims) in enumerate(shapes.items()):
        t[i].name, t[i].dtype, t[i].ndim, t[i].data = names[i], 1, len(dims), None
        for d, v in enumerate(dims):
            t[i].dims[d] = v
    arena = ctypes.c_size_t()
    st = fn(s.session, t, len(shapes), ctypes.byref(arena))
    return st, lib.lib.cinfer_last_error().decode()


def test_sizes_that_overflow_are_refused(lib):
    """A caller's shape, or an output shape the inputs imply, whose byte count passes 2^56 (or whose product would
    wrap around to a small allocation) is refused naming the input or node; shapes below the limit still plan."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["a", "b"])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, ["c", "d"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["a", "d"])
    s = Session(lib, make_model([helper.make_node("Mul", ["x", "z"], ["y"], name="outer")], [x, z], [y]).SerializeToString())
    st, msg = _plan(lib, s, {"x": [1 << 40, 1 << 40], "z": [1, 1]})
    assert st == INVALID_ARGUMENT and "input 'x'" in msg and "too large" in msg, msg
    st, msg = _plan(lib, s, {"x": [1 << 62, 4], "z": [1, 1]})  # the product wraps around int64
    assert st == INVALID_ARGUMENT and "input 'x'" in msg, msg
    st, msg = _plan(lib, s, {"x": [1 << 28, 1], "z": [1, 1 << 28]})  # inputs fit, the broadcast output does not
    assert st == INVALID_ARGUMENT and "Mul node 'outer'" in msg and "[268435456,268435456]" in msg, msg
    st, msg = _plan(lib, s, {"x": [1 << 10, 1], "z": [1, 1 << 10]})
    assert st == 0, msg
    st, msg = _plan(lib, s, {"x": [0, 1 << 62], "z": [1, 1]})  # empty: nothing to size
    assert st == 0, msg
