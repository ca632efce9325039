"""CPU fallback in CUDA sessions (docs/engine.md "CPU fallback in device sessions"): NonZero, Unique and
NonMaxSuppression have no CUDA kernels and run on the CPU kernels between CUDA ops. Each test first checks the CPU
session against onnxruntime on the same inputs (that half runs everywhere), then, given a GPU, that the CUDA session
gives the CPU session's outputs bitwise (the models keep their float values exact: integers and eighths under Relu,
Add, Mul, Gather and sums), names exactly the fallback nodes, and counts the plans that hold them in
graph_fallbacks."""
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
from cinfer_ctypes import Session  # noqa: E402
from test_data_dependent import check_same, info, make_model, reference  # noqa: E402


@pytest.fixture(scope="module")
def gpus(lib):
    return lib.cuda_devices()


def need_gpu(gpus):
    devices, why = gpus
    if not devices:
        pytest.skip(f"no usable CUDA device: {why} (the CPU reference half ran and passed)")


def nonzero_unique_model():
    """Relu (CUDA) -> NonZero (CPU) -> Transpose, GatherND, Mul (CUDA) -> Unique (CPU) -> Cast, Mul, ReduceSum
    (CUDA): three stages, the first two ending at a fallback node."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NonZero", ["r"], ["nz"], name="nonzero"),
        helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0], name="transpose"),
        helper.make_node("GatherND", ["x", "idx"], ["picked"], name="gather_nd"),
        helper.make_node("Mul", ["picked", "two"], ["scaled"], name="scale"),
        helper.make_node("Unique", ["scaled"], ["uniq", "first", "inverse", "counts"], name="unique"),
        helper.make_node("Cast", ["counts"], ["counts_f"], to=TensorProto.FLOAT, name="counts_float"),
        helper.make_node("Mul", ["uniq", "counts_f"], ["weighted"], name="weigh"),
        helper.make_node("ReduceSum", ["weighted"], ["total"], keepdims=0, name="total"),
    ]
    two = helper.make_tensor("two", TensorProto.FLOAT, [], [2.0])
    return make_model(nodes, [info("x", TensorProto.FLOAT, [6, 5])],
                      [info("scaled", TensorProto.FLOAT, None), info("uniq", TensorProto.FLOAT, None),
                       info("first", TensorProto.INT64, None), info("inverse", TensorProto.INT64, None),
                       info("counts", TensorProto.INT64, None), info("total", TensorProto.FLOAT, [])], [two])


def nms_model(boxes=32, classes=3):
    """Add, Relu (CUDA) -> NonMaxSuppression (CPU) -> Gather, GatherND, Mul (CUDA): the kept boxes and scores."""
    nodes = [
        helper.make_node("Add", ["boxes_in", "shift"], ["boxes"], name="shift_boxes"),
        helper.make_node("Relu", ["logits"], ["scores"], name="scores"),
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_th"], ["selected"],
                         name="nms"),
        helper.make_node("Gather", ["selected", "col2"], ["box_index"], axis=1, name="box_index"),
        helper.make_node("Gather", ["boxes", "zero"], ["image_boxes"], axis=0, name="image_boxes"),
        helper.make_node("Gather", ["image_boxes", "box_index"], ["kept"], axis=0, name="kept_boxes"),
        helper.make_node("Mul", ["kept", "two"], ["kept_scaled"], name="scale_boxes"),
        helper.make_node("GatherND", ["scores", "selected"], ["kept_scores"], name="kept_scores"),
    ]
    consts = [helper.make_tensor("shift", TensorProto.FLOAT, [], [0.5]),
              helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
              helper.make_tensor("col2", TensorProto.INT64, [], [2]),
              helper.make_tensor("zero", TensorProto.INT64, [], [0]),
              helper.make_tensor("max_out", TensorProto.INT64, [1], [12]),
              helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.4])]
    return make_model(nodes, [info("boxes_in", TensorProto.FLOAT, [1, boxes, 4]),
                              info("logits", TensorProto.FLOAT, [1, classes, boxes]),
                              info("score_th", TensorProto.FLOAT, [1])],
                      [info("selected", TensorProto.INT64, None), info("kept_scaled", TensorProto.FLOAT, None),
                       info("kept_scores", TensorProto.FLOAT, None)], consts)


def nonzero_unique_feeds(rng, trials=6):
    """Inputs of small integers with varying counts of positives (one repeated, so a stage plan is reused)."""
    feeds = []
    for t in range(trials):
        x = rng.integers(-4, 4, size=(6, 5)).astype(np.float32)
        x[rng.random((6, 5)) < t / trials] = -1  # fewer positives as t grows
        feeds.append({"x": x})
    return feeds + feeds[:2]


def nms_feeds(rng, trials=6, boxes=32, classes=3):
    """Boxes in eighths (exact after the shift) and scores in sixteenths, many tied; the score threshold varies the
    number of boxes kept."""
    feeds = []
    for t in range(trials):
        corners = np.round(rng.uniform(0, 12, (1, boxes, 4)) * 8) / 8
        logits = np.round(rng.uniform(-0.5, 1, (1, classes, boxes)) * 16) / 16
        feeds.append({"boxes_in": corners.astype(np.float32), "logits": logits.astype(np.float32),
                      "score_th": np.array([[0.0, 0.25, 0.5, 0.75, 0.9, 0.125][t % 6]], np.float32)})
    return feeds + feeds[:2]


def cpu_reference(lib, data, feeds):
    """The CPU session's outputs per feed, each checked against onnxruntime first."""
    cpu = Session(lib, data, device="cpu")
    assert cpu.fallback_nodes() == []
    outputs = []
    for feed in feeds:
        outputs.append(cpu.run(feed))
        check_same(outputs[-1], reference(data, feed))
    return outputs


def check_cuda_matches(lib, data, feeds, want, fallback, options=None):
    """A CUDA session on the feeds: the CPU session's outputs bitwise, fallback_nodes() exactly `fallback`. Returns
    the session."""
    cuda = Session(lib, data, device="cuda:0", options=options)
    assert cuda.fallback_nodes() == fallback
    assert lib.lib.cinfer_session_fallback_node(cuda.session, len(fallback)) is None
    for k, (feed, expected) in enumerate(zip(feeds, want)):
        got = cuda.run(feed)
        for name, g, e in zip(("output %d" % i for i in range(len(got))), got, expected):
            assert g.dtype == e.dtype and g.shape == e.shape, (k, name, g.dtype, g.shape, e.dtype, e.shape)
            np.testing.assert_array_equal(g, e, err_msg=f"run {k}, {name}")
    return cuda


def test_nonzero_and_unique_between_cuda_ops(lib, gpus):
    data = nonzero_unique_model()
    feeds = nonzero_unique_feeds(np.random.default_rng(11))
    want = cpu_reference(lib, data, feeds)
    counts = {len(w[0]) for w in want}  # NonZero's count: the key of the second stage
    assert len(counts) >= 3, f"the inputs should vary the NonZero count, got {sorted(counts)}"
    need_gpu(gpus)
    plain = check_cuda_matches(lib, data, feeds, want, ["nonzero", "unique"], {"cuda_graphs": "0"})
    st = plain.last_run_stats()
    assert (st.graph_captures, st.graph_fallbacks) == (0, 0)
    graphs = check_cuda_matches(lib, data, feeds, want, ["nonzero", "unique"])
    # one plan of stage 0 (ends at nonzero) and one of stage 1 (holds unique) per NonZero count: none captured
    assert graphs.last_run_stats().graph_fallbacks == 1 + len(counts)


def test_nms_between_cuda_ops(lib, gpus):
    data = nms_model()
    feeds = nms_feeds(np.random.default_rng(12))
    want = cpu_reference(lib, data, feeds)
    kept = [len(w[0]) for w in want]
    assert len(set(kept)) >= 3 and max(kept) > 0, f"the inputs should vary the number kept, got {kept}"
    need_gpu(gpus)
    plain = check_cuda_matches(lib, data, feeds, want, ["nms"], {"cuda_graphs": "0"})
    assert plain.last_run_stats().graph_fallbacks == 0
    graphs = check_cuda_matches(lib, data, feeds, want, ["nms"])
    st = graphs.last_run_stats()
    # stage 0 holds the nms: one plan, not captured; the stage after it has no CPU node, so a count seen twice
    # (the repeated feeds) gets its graph captured
    assert st.graph_fallbacks == 1 and st.graph_captures >= 1, (st.graph_fallbacks, st.graph_captures)


def test_zero_counts_between_cuda_ops(lib, gpus):
    """No positives for NonZero, no score above the threshold for NMS: the CUDA ops after them get empty tensors."""
    cases = [(nonzero_unique_model(), [{"x": -np.ones((6, 5), np.float32)}], ["nonzero", "unique"]),
             (nms_model(), [dict(nms_feeds(np.random.default_rng(13), trials=1)[0],
                                 score_th=np.array([2.0], np.float32))], ["nms"])]
    wants = [cpu_reference(lib, data, feeds) for data, feeds, _ in cases]
    assert all(w[0][0].size == 0 for w in wants)
    need_gpu(gpus)
    for (data, feeds, fallback), want in zip(cases, wants):
        check_cuda_matches(lib, data, feeds * 3, want * 3, fallback)


def test_inspect_lists_fallback_nodes(cli, gpus, tmp_path):
    """`cinfer inspect --device cuda` names the nodes the CUDA session runs on the CPU; on the CPU there are none."""
    model = tmp_path / "nonzero_unique.onnx"
    model.write_bytes(nonzero_unique_model())
    label = "nodes run on the CPU (no kernel on the device)"
    r = subprocess.run([cli, "inspect", str(model)], capture_output=True, text=True)
    assert r.returncode == 0 and "host-evaluated shape nodes: 0" in r.stdout, r.stdout + r.stderr
    assert label not in r.stdout
    need_gpu(gpus)
    r = subprocess.run([cli, "inspect", str(model), "--device", "cuda"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"{label}: 2 (nonzero, unique)" in r.stdout, r.stdout
    assert r.stderr.count("NonZero 'nonzero', Unique 'unique'") == 1, r.stderr  # the session's note, once
