"""Indices out of range are refused, never read: every index op whose indices are run-time data (Gather,
GatherElements, GatherND, ScatterElements, ScatterND, and the fused LookupConcat; the class targets of
NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss, the batch indices of RoiAlign / MaxRoiPool) fails the run with
CINFER_ERR_INVALID_ARGUMENT naming the op, the node and the index, while in-range indices (negative ones wrapping
once where the op wraps) give numpy's answer; so do ops whose output is empty but whose indices are not, and a loss
target equal to ignore_index is never refused. The builders are shared with tests/cuda/test_cuda.py's CPU/CUDA
parity test."""
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
    cases += empty_output_cases()
    cases += loss_cases(rng)
    cases += roi_cases()
    return cases


def empty_output_cases():
    """Ops that move nothing (an empty output, empty slices) still refuse a bad index, as the CPU checks each one."""
    cases = []
    table = np.zeros((5, 0), np.float32)  # five rows of nothing
    good = np.array([0, 4, -5], np.int64)
    cases.append(("gather_empty_output",
                  _model(helper.make_node("Gather", ["table", "idx"], ["y"], axis=0, name="no_cols"),
                         {"idx": good}, "y", {"table": table}),
                  {"idx": good}, np.zeros((3, 0), np.float32), {"idx": np.array([0, 5, 1], np.int64)}, "Gather",
                  "no_cols", "index 5 is out of range for axis 0 of size 5"))

    cube = np.zeros((4, 3, 0), np.float32)
    good = np.array([[1, 2], [-1, 0]], np.int64)
    cases.append(("gather_nd_empty_output",
                  _model(helper.make_node("GatherND", ["cube", "idx"], ["y"], name="empty_slices"),
                         {"idx": good}, "y", {"cube": cube}),
                  {"idx": good}, np.zeros((2, 0), np.float32), {"idx": np.array([[1, 2], [4, 0]], np.int64)},
                  "GatherND", "empty_slices", "index 4 is out of range for axis 0 of size 4"))

    data = np.zeros((4, 0), np.float32)  # ScatterND's slices (and its updates) are empty
    feeds = {"data": data, "idx": np.array([[2], [-4]], np.int64), "upd": np.zeros((2, 0), np.float32)}
    cases.append(("scatter_nd_empty_updates",
                  _model(helper.make_node("ScatterND", ["data", "idx", "upd"], ["y"], name="put_nothing"), feeds,
                         "y"),
                  feeds, data, dict(feeds, idx=np.array([[2], [-5]], np.int64)), "ScatterND", "put_nothing",
                  "index -5 is out of range for axis 0 of size 4"))
    return cases


def loss_cases(rng):
    """Class targets outside [0, C) are refused; one equal to ignore_index is not (its loss is 0), even outside."""
    scores = rng.standard_normal((4, 3)).astype(np.float32)
    cases = []

    def nll(target, ignore=None):
        rows = np.arange(len(target))
        loss = -scores[rows, np.clip(target, 0, 2)]
        return np.where(target == ignore, np.float32(0), loss).astype(np.float32)

    good = np.array([0, 2, 1, 2], np.int64)
    cases.append(("nll_target", _model(helper.make_node("NegativeLogLikelihoodLoss", ["scores", "t"], ["y"],
                                                        reduction="none", name="nll"), {"t": good}, "y",
                                       {"scores": scores}),
                  {"t": good}, nll(good), {"t": np.array([0, 3, 1, 2], np.int64)}, "NegativeLogLikelihoodLoss", "nll",
                  "target 3 is out of range for C = 3"))

    good = np.array([0, 7, 1, 7], np.int32)  # 7, out of range, is ignore_index: never refused
    cases.append(("nll_ignore_index", _model(helper.make_node("NegativeLogLikelihoodLoss", ["scores", "t"], ["y"],
                                                              reduction="none", ignore_index=7, name="nll_ign"),
                                             {"t": good}, "y", {"scores": scores}),
                  {"t": good}, nll(good, 7), {"t": np.array([0, 7, -1, 7], np.int32)}, "NegativeLogLikelihoodLoss",
                  "nll_ign", "target -1 is out of range for C = 3"))

    x = scores.astype(np.float64)
    log_prob = x - (x.max(1, keepdims=True) + np.log(np.exp(x - x.max(1, keepdims=True)).sum(1, keepdims=True)))
    good = np.array([2, -100, 0, 1], np.int64)  # -100: ignore_index
    rows = np.arange(4)
    want = np.where(good == -100, 0.0, -log_prob[rows, np.clip(good, 0, 2)]).astype(np.float32)
    cases.append(("softmax_cross_entropy_target",
                  _model(helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "t"], ["y"], reduction="none",
                                          ignore_index=-100, name="sce"), {"t": good}, "y", {"scores": scores}),
                  {"t": good}, want, {"t": np.array([2, -100, 5, 1], np.int64)}, "SoftmaxCrossEntropyLoss", "sce",
                  "target 5 is out of range for C = 3"))
    return cases


def roi_cases():
    """Batch indices outside [0, N) are refused (RoiAlign's batch_indices input, MaxRoiPool's first roi column).
    Each image is one value, so every pooled bin of a roi is that value (rois on whole pixels, one sample a bin)."""
    values = np.array([1.5, -2.0], np.float32)
    images = np.broadcast_to(values[:, None, None, None], (2, 2, 4, 4)).astype(np.float32)
    rois = np.array([[0, 0, 2, 2], [1, 1, 3, 3], [0, 2, 2, 4]], np.float32)
    cases = []
    good = np.array([1, 0, 1], np.int64)
    align = dict(output_height=2, output_width=2, sampling_ratio=1, mode="avg",
                 coordinate_transformation_mode="output_half_pixel")
    cases.append(("roi_align_batch_index",
                  _model(helper.make_node("RoiAlign", ["images", "rois", "b"], ["y"], name="align", **align),
                         {"b": good}, "y", {"images": images, "rois": rois}),
                  {"b": good}, np.broadcast_to(values[good][:, None, None, None], (3, 2, 2, 2)).astype(np.float32),
                  {"b": np.array([1, 2, 0], np.int64)}, "RoiAlign", "align", "batch_indices[1] = 2 is not in [0, 2)"))

    no_channels = np.zeros((2, 0, 4, 4), np.float32)  # an empty output: the batch indices are still checked
    cases.append(("roi_align_empty_output",
                  _model(helper.make_node("RoiAlign", ["images", "rois", "b"], ["y"], name="align_empty", **align),
                         {"b": good}, "y", {"images": no_channels, "rois": rois}),
                  {"b": good}, np.zeros((3, 0, 2, 2), np.float32), {"b": np.array([1, 0, -1], np.int64)}, "RoiAlign",
                  "align_empty", "batch_indices[2] = -1 is not in [0, 2)"))

    boxes = np.array([[1, 0, 0, 1, 1], [0, 2, 2, 3, 3]], np.float32)  # [batch, x1, y1, x2, y2]: 2x2 pixels each
    bad = boxes.copy()
    bad[1, 0] = 2
    cases.append(("max_roi_pool_batch_index",
                  _model(helper.make_node("MaxRoiPool", ["images", "boxes"], ["y"], pooled_shape=[2, 2], name="pool"),
                         {"boxes": boxes}, "y", {"images": images}),
                  {"boxes": boxes},
                  np.broadcast_to(values[[1, 0]][:, None, None, None], (2, 2, 2, 2)).astype(np.float32),
                  {"boxes": bad}, "MaxRoiPool", "pool", "roi 1 has batch index 2, not in [0, 2)"))
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
