"""Data-dependent output shapes (NonZero, Compress, Unique, NonMaxSuppression): cinfer's CPU kernels against
onnxruntime on random inputs, and the staged runs of graphs whose later nodes depend on such shapes
(docs/engine.md "Data-dependent shapes"). Runs on CINFER_TEST_DEVICE (cpu by default; on cuda the ops run on the
CPU inside the CUDA session)."""
import sys
import pathlib

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from cinfer_ctypes import CinferError, Session  # noqa: E402

OPSET = 18


def make_model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "dd", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    return model.SerializeToString()


def info(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def reference(data, feeds):
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


def check_same(actual, expected):
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and a.shape == e.shape, (a.dtype, a.shape, e.dtype, e.shape)
        np.testing.assert_array_equal(a, e)


NP_TO_ONNX = {np.float32: TensorProto.FLOAT, np.int64: TensorProto.INT64, np.int32: TensorProto.INT32,
              np.int8: TensorProto.INT8, np.float64: TensorProto.DOUBLE, np.bool_: TensorProto.BOOL,
              np.uint8: TensorProto.UINT8}


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int32, np.bool_, np.uint8])
def test_nonzero_random(lib, dtype):
    rng = np.random.default_rng(1)
    data = make_model([helper.make_node("NonZero", ["x"], ["y"])], [info("x", NP_TO_ONNX[dtype], None)],
                      [info("y", TensorProto.INT64, None)])
    sess = Session(lib, data)
    for shape in [(7,), (3, 4), (2, 3, 5), (4, 1, 2, 3), (0, 3), ()]:
        x = np.asarray(rng.integers(0, 3, size=shape) * (rng.random(shape) < 0.5)).astype(dtype)
        check_same(sess.run({"x": x}), reference(data, {"x": x}))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_random(lib, axis):
    rng = np.random.default_rng(2)
    attrs = {} if axis is None else {"axis": axis}
    data = make_model([helper.make_node("Compress", ["x", "c"], ["y"], **attrs)],
                      [info("x", TensorProto.FLOAT, [4, 6]), info("c", TensorProto.BOOL, [None])],
                      [info("y", TensorProto.FLOAT, None)])
    sess = Session(lib, data)
    length = 24 if axis is None else 6 if axis in (1, -1) else 4
    for cut in [length, length - 1, 1, 0]:
        x = rng.standard_normal((4, 6)).astype(np.float32)
        c = rng.random(cut) < 0.5
        check_same(sess.run({"x": x, "c": c}), reference(data, {"x": x, "c": c}))


@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8, np.float64])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_random(lib, dtype, axis, sorted_):
    rng = np.random.default_rng(3)
    attrs = {"sorted": sorted_}
    if axis is not None:
        attrs["axis"] = axis
    data = make_model([helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)],
                      [info("x", NP_TO_ONNX[dtype], [5, 4])],
                      [info("y", NP_TO_ONNX[dtype], None)] + [info(n, TensorProto.INT64, None)
                                                              for n in ("indices", "inverse", "counts")])
    sess = Session(lib, data)
    for trial in range(4):
        x = rng.integers(-2, 3, size=(5, 4)).astype(dtype)
        if axis is not None and trial % 2:  # repeated slices
            x = np.take(x, [0, 1, 0, 2, 1], axis=0) if axis == 0 else np.take(x, [0, 1, 0, 1], axis=1)
        check_same(sess.run({"x": x}), reference(data, {"x": x}))


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("inputs", ["all", "no_score_threshold", "max_only", "none"])
def test_nms_random(lib, center, inputs):
    rng = np.random.default_rng(4 + center)
    batches, classes, count = 2, 3, 40
    names = ["boxes", "scores", "max_out", "iou", "score_th"]
    used = {"all": 5, "no_score_threshold": 4, "max_only": 3, "none": 2}[inputs]
    graph_inputs = [info("boxes", TensorProto.FLOAT, [batches, count, 4]),
                    info("scores", TensorProto.FLOAT, [batches, classes, count]),
                    info("max_out", TensorProto.INT64, [1]), info("iou", TensorProto.FLOAT, [1]),
                    info("score_th", TensorProto.FLOAT, [1])][:used]
    data = make_model([helper.make_node("NonMaxSuppression", names[:used], ["sel"], center_point_box=center)],
                      graph_inputs, [info("sel", TensorProto.INT64, None)])
    sess = Session(lib, data)
    for trial in range(5):
        if center:
            xy = rng.uniform(0, 10, (batches, count, 2))
            wh = rng.uniform(0.5, 4, (batches, count, 2))
            boxes = np.concatenate([xy, wh], axis=2).astype(np.float32)
        else:  # corners in either order
            boxes = rng.uniform(0, 10, (batches, count, 4)).astype(np.float32)
        if trial == 3:
            boxes[:, 1::2] = boxes[:, ::2]  # identical boxes
        scores = np.round(rng.random((batches, classes, count)) * 8) / 8  # many ties: index order decides
        feeds = {"boxes": boxes, "scores": scores.astype(np.float32),
                 "max_out": np.array([[3, 100, 0, 7, -1][trial]], np.int64),
                 "iou": np.array([[0.5, 0.0, 0.3, 1.0, 0.7][trial]], np.float32),
                 "score_th": np.array([[0.25, 0.5, 0.0, 0.125, 0.9][trial]], np.float32)}
        feeds = {k: feeds[k] for k in names[:used]}
        check_same(sess.run(feeds), reference(data, feeds))


def test_nms_node_cases_at_opset_13(lib):
    """The ONNX node tests of NonMaxSuppression are opset 11 models (unchanged since): run them at opset 13."""
    from onnx.backend.test.loader import load_model_tests
    cases = [c for c in load_model_tests(kind="node") if "nonmaxsuppression" in c.name]
    assert len(cases) >= 10
    for case in cases:
        model = onnx.ModelProto.FromString(case.model.SerializeToString())
        for op in model.opset_import:
            if op.domain in ("", "ai.onnx"):
                op.version = 13
        sess = Session(lib, model.SerializeToString())
        assert case.data_sets
        for inputs, outputs in case.data_sets:
            feeds = dict(zip([vi.name for vi in model.graph.input], inputs))
            check_same(sess.run(feeds), [np.asarray(o) for o in outputs])


def staged_model():
    """Relu -> NonZero -> GatherND back into the input -> Unique of the picked values -> their count, and the
    NonZero's shape: two stages end at data-dependent nodes, later nodes plan for the counts they produced."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("NonZero", ["r"], ["nz"]),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "idx"], ["picked"]),
        helper.make_node("Mul", ["picked", "two"], ["scaled"]),
        helper.make_node("Unique", ["scaled"], ["uniq", "first", "inverse", "counts"]),
        helper.make_node("ReduceSum", ["uniq"], ["total"], keepdims=0),
        helper.make_node("Shape", ["nz"], ["nz_shape"]),
        helper.make_node("ConstantOfShape", ["nz_shape"], ["ones"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])),
        helper.make_node("ReduceSum", ["ones"], ["ones_sum"], keepdims=0),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return make_model(nodes, [info("x", TensorProto.FLOAT, ["n", 3])],
                      [info("total", TensorProto.FLOAT, []), info("counts", TensorProto.INT64, None),
                       info("nz_shape", TensorProto.INT64, [2]), info("ones_sum", TensorProto.FLOAT, []),
                       info("scaled", TensorProto.FLOAT, None)], [two])


def test_staged_runs_match_onnxruntime(lib):
    data = staged_model()
    sess = Session(lib, data)
    rng = np.random.default_rng(5)
    # the same input shape with different counts (child plans per count, reused when a count comes back), and
    # other batch sizes (other stage-0 plans), interleaved
    for n in [4, 4, 7, 4, 1, 7, 4, 0]:
        for _ in range(2):
            x = np.round(rng.standard_normal((n, 3)) * 2).astype(np.float32)
            check_same(sess.run({"x": x}), reference(data, {"x": x}))


def test_staged_model_refuses_run_into(lib):
    sess = Session(lib, staged_model())
    x = np.ones((2, 3), np.float32)
    with pytest.raises(CinferError, match="depend on values computed while it runs.*NonZero"):
        sess.run_into({"x": x}, [np.zeros((), np.float32)] * 5)


def test_host_evaluated_and_folded(lib):
    """A Compress that decides a Reshape's target runs while planning (its inputs are shape values); a NonZero of a
    constant is folded at load. Both take the kernels' actual shapes."""
    nodes = [helper.make_node("Compress", ["dims", "keep"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"]),
             helper.make_node("NonZero", ["mask"], ["nz"]),
             helper.make_node("Cast", ["nz"], ["nz_f"], to=TensorProto.FLOAT),
             helper.make_node("ReduceSum", ["nz_f"], ["nz_sum"], keepdims=0)]
    mask = helper.make_tensor("mask", TensorProto.INT64, [2, 3], [0, 1, 0, 2, 0, 3])
    data = make_model(nodes, [info("x", TensorProto.FLOAT, [2, 3, 4]), info("dims", TensorProto.INT64, [4]),
                              info("keep", TensorProto.BOOL, [4])],
                      [info("y", TensorProto.FLOAT, None), info("nz_sum", TensorProto.FLOAT, [])], [mask])
    sess = Session(lib, data)
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for dims, keep in [([6, 9, 4, 99], [1, 0, 1, 0]), ([2, 12, 0, 5], [1, 1, 0, 0])]:
        feeds = {"x": x, "dims": np.array(dims, np.int64), "keep": np.array(keep, bool)}
        check_same(sess.run(feeds), reference(data, feeds))
