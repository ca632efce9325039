"""Indices out of range are refused, never read: every index op whose indices are run-time data (Gather,
GatherElements, GatherND, ScatterElements, ScatterND, and the fused LookupConcat) fails the run with
CINFER_ERR_INVALID_ARGUMENT naming the op, the node and the index, while in-range indices (negative ones wrapping
once) give numpy's answer. The builders are shared with tests/cuda/test_cuda.py's CPU/CUDA parity test."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import CinferError, Session

INVALID_ARGUMENT = 1
V = helper.make_tensor_value_info
FLOAT_OF = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32}


def _model(node, inputs, output, inits=None):
    """One node; inputs: {name: array} of run-time inputs (the feeds' dtypes and shapes), inits: constants."""
    vis = [V(n, FLOAT_OF[a.dtype.type], list(a.shape)) for n, a in inputs.items()]
    g = helper.make_graph([node], "index_bounds", vis, [V(output, TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(a, n) for n, a in (inits or {}).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m.SerializeToString()


def _scatter_elements_ref(data, idx, upd, axis):
    out = data.copy()
    for pos in np.ndindex(*idx.shape):
        target = list(pos)
        target[axis] = idx[pos] % data.shape[axis]
        out[tuple(target)] = upd[pos]
    return out


def index_cases():
    """[(name, model bytes, good feeds, expected output, bad feeds, op, node, CPU message)]."""
    rng = np.random.default_rng(7)
    table = rng.standard_normal((5, 3)).astype(np.float32)
    wide = rng.standard_normal((2, 4)).astype(np.float32)
    cube = rng.standard_normal((4, 3, 2)).astype(np.float32)
    grid = rng.standard_normal((3, 4)).astype(np.float32)
    cases = []

    good = np.array([0, 4, -5, 2], np.int64)
    cases.append(("gather", _model(helper.make_node("Gather", ["table", "idx"], ["y"], axis=0, name="rows"),
                                   {"idx": good}, "y", {"table": table}),
                  {"idx": good}, table[good], {"idx": np.array([0, 5, 1, 2], np.int64)}, "Gather", "rows",
                  "index 5 is out of range for axis 0 of size 5"))

    good = np.array([3, -1, 0], np.int32)
    cases.append(("gather_axis1_int32", _model(helper.make_node("Gather", ["wide", "idx"], ["y"], axis=1, name="cols"),
                                               {"idx": good}, "y", {"wide": wide}),
                  {"idx": good}, wide[:, good], {"idx": np.array([3, -5, 0], np.int32)}, "Gather", "cols",
                  "index -5 is out of range for axis 1 of size 4"))

    good = np.array([[0, 3], [-1, 2], [1, 1]], np.int64)
    cases.append(("gather_elements",
                  _model(helper.make_node("GatherElements", ["grid", "idx"], ["y"], axis=1, name="pick"),
                         {"idx": good}, "y", {"grid": grid}),
                  {"idx": good}, np.take_along_axis(grid, good % 4, axis=1),
                  {"idx": np.array([[0, 3], [4, 2], [1, 1]], np.int64)}, "GatherElements", "pick",
                  "index 4 is out of range for axis 1 of size 4"))

    good = np.array([[1, 2], [-1, 0]], np.int64)
    cases.append(("gather_nd", _model(helper.make_node("GatherND", ["cube", "idx"], ["y"], name="slices"),
                                      {"idx": good}, "y", {"cube": cube}),
                  {"idx": good}, np.stack([cube[1, 2], cube[-1, 0]]), {"idx": np.array([[1, 3], [0, 0]], np.int64)},
                  "GatherND", "slices", "index 3 is out of range for axis 1 of size 3"))

    idx = np.array([[0, 3], [-1, 2], [1, 1]], np.int64)
    upd = rng.standard_normal((3, 2)).astype(np.float32)
    feeds = {"data": grid, "idx": idx, "upd": upd}
    bad = dict(feeds, idx=np.array([[0, 3], [-5, 2], [1, 1]], np.int64))
    cases.append(("scatter_elements",
                  _model(helper.make_node("ScatterElements", ["data", "idx", "upd"], ["y"], axis=1, name="put"),
                         feeds, "y"),
                  feeds, _scatter_elements_ref(grid, idx, upd, 1), bad, "ScatterElements", "put",
                  "index -5 is out of range for axis 1 of size 4"))

    data = rng.standard_normal((4, 3)).astype(np.float32)
    idx = np.array([[2], [-4]], np.int64)
    upd = rng.standard_normal((2, 3)).astype(np.float32)
    want = data.copy()
    want[2], want[0] = upd[0], upd[1]
    feeds = {"data": data, "idx": idx, "upd": upd}
    cases.append(("scatter_nd", _model(helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], name="rows_put"),
                                       feeds, "y"),
                  feeds, want, dict(feeds, idx=np.array([[2], [4]], np.int64)), "ScatterND", "rows_put",
                  "index 4 is out of range for axis 0 of size 4"))
    return cases


CASES = index_cases()


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_cpu_refuses_an_index_out_of_range_and_runs_on_after(lib, case):
    _, model, good, want, bad, op, node, message = case
    s = Session(lib, model, device="cpu")
    np.testing.assert_array_equal(s.run(good)[0], want)
    with pytest.raises(CinferError) as e:
        s.run(bad)
    assert e.value.status == INVALID_ARGUMENT, e.value
    assert f"{op} node '{node}': {message}" in e.value.message, e.value.message
    np.testing.assert_array_equal(s.run(good)[0], want)  # the session is still good
