"""Old default-domain opsets (src/onnx/opset_upgrade.c, issue 23): the mappings the node tests' old-opset variants
cannot reach (onnx's converter has no down adapter to them) checked against onnxruntime where it runs the opset,
else numpy, and the load errors for old forms cinfer cannot map (node, op, version and attribute named)."""
import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from cinfer_ctypes import CinferError, Session, STATUS_UNSUPPORTED

F = TensorProto.FLOAT
STATUS_INVALID_MODEL = 2
RNG = np.random.default_rng(23)


def model(opset, nodes, inputs, outputs, inits=None):
    """inputs/outputs: (name, elem type, shape or None for an unknown rank)."""
    def vi(name, elem, shape):
        return helper.make_tensor_value_info(name, elem, shape) if shape is not None else \
            helper.make_tensor_value_info(name, elem, None)
    graph = helper.make_graph(nodes, f"opset{opset}", [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                              [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=max(3, helper.find_min_ir_version_for(opsets, ignore_unknown=True)))


def run_cinfer(lib, m, feeds):
    s = Session(lib, m.SerializeToString())
    try:
        return s.run(feeds)
    finally:
        s.close()


def run_ort(m, feeds):
    options = ort.SessionOptions()
    options.log_severity_level = 3  # its warning that opsets below 7 are not guaranteed
    s = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


ORT_MIN_OPSET = 7  # onnxruntime guarantees opset 7 and newer only (below, some ops run, others throw)


def check(lib, m, feeds, numpy_reference=None, rtol=1e-5, atol=1e-6):
    """cinfer's outputs against onnxruntime's from opset 7 on (and numpy_reference()'s too where given: the two
    oracles must agree), against numpy_reference()'s alone below."""
    opset = m.opset_import[0].version
    expected = numpy_reference() if numpy_reference is not None else None
    if opset >= ORT_MIN_OPSET:
        from_ort = run_ort(m, feeds)
        if expected is not None:
            for o, e in zip(from_ort, expected):
                np.testing.assert_allclose(o, e, rtol=rtol, atol=atol)
        expected = from_ort
    assert expected is not None, "below opset 7 a numpy reference is needed"
    got = run_cinfer(lib, m, feeds)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def load_error(lib, m):
    with pytest.raises(CinferError) as info:
        Session(lib, m.SerializeToString()).close()
    return info.value


def x_of(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


# ---- mappings ----

@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample7_scales_attribute_is_resize(lib, mode):
    x = x_of(1, 2, 3, 4)
    m = model(7, [helper.make_node("Upsample", ["x"], ["y"], "up", mode=mode, scales=[1.0, 1.0, 2.0, 3.0])],
              [("x", F, [1, 2, 3, 4])], [("y", F, [1, 2, 6, 12])])
    check(lib, m, {"x": x})


def test_upsample1_height_width_scale(lib):
    x = x_of(1, 2, 2, 3)
    m = model(6, [helper.make_node("Upsample", ["x"], ["y"], "up", height_scale=2.0, width_scale=3.0)],
              [("x", F, [1, 2, 2, 3])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [x.repeat(2, axis=2).repeat(3, axis=3)])


def test_upsample9_scales_input(lib):
    x = x_of(1, 1, 2, 3)
    scales = np.array([1, 1, 2, 2], np.float32)
    m = model(9, [helper.make_node("Upsample", ["x", "scales"], ["y"], "up", mode="nearest")],
              [("x", F, [1, 1, 2, 3])], [("y", F, [1, 1, 4, 6])], {"scales": scales})
    check(lib, m, {"x": x}, lambda: [x.repeat(2, axis=2).repeat(2, axis=3)])


@pytest.mark.parametrize("opset,mode,transform", [(10, "linear", None), (10, "nearest", None),
                                                  (11, "linear", "half_pixel"), (11, "linear", "align_corners"),
                                                  (11, "nearest", "asymmetric"), (12, "cubic", "pytorch_half_pixel")])
def test_resize_10_to_12_read_at_their_own_opset(lib, opset, mode, transform):
    # no node-test variant reaches these (onnx's converter has no Resize-13 -> 12 adapter)
    x = x_of(1, 2, 3, 4)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    attrs = {"mode": mode}
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    inputs = ["x", "scales"] if opset == 10 else ["x", "roi", "scales"]
    inits = {"scales": scales} if opset == 10 else {"roi": np.zeros(0, np.float32), "scales": scales}
    m = model(opset, [helper.make_node("Resize", inputs, ["y"], "rs", **attrs)], [("x", F, [1, 2, 3, 4])],
              [("y", F, None)], inits)
    check(lib, m, {"x": x}, rtol=1e-5, atol=1e-5)


def test_slice1_attributes(lib):
    x = x_of(4, 5, 6)
    m = model(9, [helper.make_node("Slice", ["x"], ["y"], "s", starts=[1, -4], ends=[3, 1000], axes=[0, 2])],
              [("x", F, [4, 5, 6])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [x[1:3, :, -4:]])


def test_slice1_without_axes(lib):
    x = x_of(4, 5)
    m = model(1, [helper.make_node("Slice", ["x"], ["y"], "s", starts=[0, 1], ends=[2, -1])],
              [("x", F, [4, 5])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [x[0:2, 1:-1]])


@pytest.mark.parametrize("mode,value", [("constant", 0.0), ("constant", 2.5), ("reflect", 0.0), ("edge", 0.0)])
def test_pad2_pads_and_value(lib, mode, value):
    x = x_of(2, 3, 4)
    pads = [0, 1, 2, 0, 2, 1]
    m = model(10, [helper.make_node("Pad", ["x"], ["y"], "p", mode=mode, pads=pads, value=value)],
              [("x", F, [2, 3, 4])], [("y", F, None)])
    width = list(zip(pads[:3], pads[3:]))
    np_mode = {"constant": "constant", "reflect": "reflect", "edge": "edge"}[mode]
    kwargs = {"constant_values": value} if mode == "constant" else {}
    check(lib, m, {"x": x}, lambda: [np.pad(x, width, mode=np_mode, **kwargs)])


def test_pad1_paddings(lib):
    x = x_of(2, 3)
    m = model(1, [helper.make_node("Pad", ["x"], ["y"], "p", paddings=[1, 0, 0, 2], value=-1.0)],
              [("x", F, [2, 3])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [np.pad(x, [(1, 0), (0, 2)], constant_values=-1.0)])


def test_reshape1_shape_attribute(lib):
    x = x_of(2, 3, 4)
    m = model(4, [helper.make_node("Reshape", ["x"], ["y"], "r", shape=[0, -1], consumed_inputs=[0])],
              [("x", F, [2, 3, 4])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [x.reshape(2, 12)])


def test_batchnorm_spatial1_is_test(lib):
    x = x_of(2, 3, 4, 5)
    scale, bias, mean = x_of(3), x_of(3), x_of(3)
    var = np.abs(x_of(3)) + 0.5
    m = model(6, [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], "bn", is_test=1,
                                   spatial=1, epsilon=1e-3)],
              [("x", F, [2, 3, 4, 5])], [("y", F, [2, 3, 4, 5])], {"s": scale, "b": bias, "m": mean, "v": var})
    c = (slice(None), None, None)
    check(lib, m, {"x": x}, lambda: [(x - mean[c]) / np.sqrt(var[c] + 1e-3) * scale[c] + bias[c]], rtol=1e-4,
          atol=1e-5)


@pytest.mark.parametrize("op,fn", [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply), ("Div", np.divide)])
def test_opset6_broadcast_axis(lib, op, fn):
    a, b = x_of(2, 3, 4, 5), x_of(3, 4) + 3.0
    m = model(6, [helper.make_node(op, ["a", "b"], ["y"], "n", broadcast=1, axis=1)],
              [("a", F, [2, 3, 4, 5]), ("b", F, [3, 4])], [("y", F, [2, 3, 4, 5])])
    check(lib, m, {"a": a, "b": b}, lambda: [fn(a, b[None, :, :, None])])


def test_opset6_broadcast_axis_with_unknown_rank_of_a(lib):
    # A's rank unknown at load: B is lined up by the Shape/ConstantOfShape/Concat subgraph the mapping adds
    a, b = x_of(2, 3, 4, 5), x_of(3)
    m = model(6, [helper.make_node("Add", ["a", "b"], ["y"], "n", broadcast=1, axis=1)],
              [("a", F, None), ("b", F, [3])], [("y", F, None)])
    expected = a + b[None, :, None, None]
    np.testing.assert_allclose(run_cinfer(lib, m, {"a": a, "b": b})[0], expected, rtol=1e-6)


def test_opset6_broadcast_suffix_and_negative_axis(lib):
    a, b, c = x_of(2, 3, 4), x_of(4), x_of(3, 4)
    m = model(6, [helper.make_node("Mul", ["a", "b"], ["t"], "suffix", broadcast=1),
                  helper.make_node("Add", ["t", "c"], ["y"], "neg", broadcast=1, axis=-2)],
              [("a", F, [2, 3, 4]), ("b", F, [4]), ("c", F, [3, 4])], [("y", F, [2, 3, 4])])
    check(lib, m, {"a": a, "b": b, "c": c}, lambda: [a * b + c])


@pytest.mark.parametrize("opset", [6, 7, 10])
def test_dropout_ratio_is_identity_at_inference(lib, opset):
    x = x_of(3, 4)
    attrs = {"ratio": 0.3}
    if opset < 7:
        attrs["is_test"] = 1
    m = model(opset, [helper.make_node("Dropout", ["x"], ["y"], "d", **attrs)], [("x", F, [3, 4])],
              [("y", F, [3, 4])])
    check(lib, m, {"x": x}, lambda: [x])


@pytest.mark.parametrize("attrs", [{"min": -0.5, "max": 0.25}, {"min": 0.0}, {"max": -0.1}, {}])
def test_clip6_min_max_attributes(lib, attrs):
    x = x_of(4, 5)
    m = model(6, [helper.make_node("Clip", ["x"], ["y"], "c", **attrs)], [("x", F, [4, 5])], [("y", F, [4, 5])])
    check(lib, m, {"x": x}, lambda: [np.clip(x, attrs.get("min", -np.inf), attrs.get("max", np.inf))])


def test_clip6_double_input(lib):
    x = RNG.standard_normal((3, 3))
    m = model(6, [helper.make_node("Clip", ["x"], ["y"], "c", min=-0.5, max=0.5)],
              [("x", TensorProto.DOUBLE, [3, 3])], [("y", TensorProto.DOUBLE, [3, 3])])
    check(lib, m, {"x": x}, lambda: [np.clip(x, -0.5, 0.5)])


@pytest.mark.parametrize("opset", [2, 11])
def test_split_attribute(lib, opset):
    x = x_of(2, 7)
    m = model(opset, [helper.make_node("Split", ["x"], ["a", "b", "c"], "sp", axis=1, split=[2, 4, 1])],
              [("x", F, [2, 7])], [("a", F, None), ("b", F, None), ("c", F, None)])
    check(lib, m, {"x": x}, lambda: np.split(x, [2, 6], axis=1))


def test_split_equal_parts_without_attribute(lib):
    x = x_of(6, 2)
    m = model(11, [helper.make_node("Split", ["x"], ["a", "b"], "sp", axis=0)], [("x", F, [6, 2])],
              [("a", F, None), ("b", F, None)])
    check(lib, m, {"x": x}, lambda: np.split(x, 2))


def test_squeeze_unsqueeze_reducesum_axes_attributes(lib):
    x = x_of(2, 1, 3)
    m = model(11, [helper.make_node("Squeeze", ["x"], ["s"], "sq", axes=[1]),
                   helper.make_node("Unsqueeze", ["s"], ["u"], "unsq", axes=[0, -1]),
                   helper.make_node("ReduceSum", ["u"], ["y"], "sum", axes=[1], keepdims=0)],
              [("x", F, [2, 1, 3])], [("y", F, None)])
    check(lib, m, {"x": x}, lambda: [x.reshape(1, 2, 3, 1).sum(axis=1)])


def test_topk1_k_attribute(lib):
    x = x_of(3, 6)
    m = model(9, [helper.make_node("TopK", ["x"], ["v", "i"], "tk", k=2, axis=1)], [("x", F, [3, 6])],
              [("v", F, None), ("i", TensorProto.INT64, None)])
    order = np.argsort(-x, axis=1, kind="stable")[:, :2]
    check(lib, m, {"x": x}, lambda: [np.take_along_axis(x, order, axis=1), order])


def test_cast1_string_to(lib):
    x = (x_of(3, 3) * 10).astype(np.float32)
    m = model(5, [helper.make_node("Cast", ["x"], ["y"], "c", to="INT32")], [("x", F, [3, 3])],
              [("y", TensorProto.INT32, [3, 3])])
    np.testing.assert_array_equal(run_cinfer(lib, m, {"x": x})[0], x.astype(np.int32))


def test_concat1_default_axis_is_1(lib):
    a, b = x_of(2, 3), x_of(2, 4)
    m = model(3, [helper.make_node("Concat", ["a", "b"], ["y"], "cat")], [("a", F, [2, 3]), ("b", F, [2, 4])],
              [("y", F, [2, 7])])
    np.testing.assert_array_equal(run_cinfer(lib, m, {"a": a, "b": b})[0], np.concatenate([a, b], axis=1))


def test_selu1_old_default_constants(lib):
    x = x_of(4, 4)
    m = model(5, [helper.make_node("Selu", ["x"], ["y"], "selu")], [("x", F, [4, 4])], [("y", F, [4, 4])])
    alpha, gamma = 1.6732, 1.0507  # Selu-1's rounded defaults, not Selu-6's
    expected = np.where(x > 0, gamma * x, gamma * alpha * (np.exp(x) - 1)).astype(np.float32)
    np.testing.assert_allclose(run_cinfer(lib, m, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
def test_softmax_family_before_13_coerces_to_2d(lib, op):
    # not reached by the node-test variants (onnx's converter misses this change): axis 1 of a 3-D input means
    # over the last two dims flattened together
    x = x_of(2, 3, 4)
    m = model(11, [helper.make_node(op, ["x"], ["y"], "sm", axis=1)], [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])])
    check(lib, m, {"x": x})


def test_gemm6_broadcast_attribute(lib):
    a, b, c = x_of(3, 4), x_of(4, 5), x_of(5)
    m = model(6, [helper.make_node("Gemm", ["a", "b", "c"], ["y"], "g", broadcast=1, alpha=0.5)],
              [("a", F, [3, 4]), ("b", F, [4, 5]), ("c", F, [5])], [("y", F, [3, 5])])
    check(lib, m, {"a": a, "b": b, "c": c}, lambda: [0.5 * a @ b + c], rtol=1e-5, atol=1e-5)


# ---- refusals: node, op, version and attribute named ----

def assert_names(err, status, *parts):
    assert err.status == status, err.message
    for part in parts:
        assert part in err.message, f"'{part}' not in: {err.message}"


def test_batchnorm_spatial0_is_refused(lib):
    inits = {k: np.ones(3, np.float32) for k in "sbmv"}
    m = model(7, [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], "bn_per_element",
                                   spatial=0)], [("x", F, [2, 3, 4])], [("y", F, [2, 3, 4])], inits)
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "bn_per_element", "BatchNormalization", "version 7",
                 "opset 7", "'spatial'")


@pytest.mark.parametrize("op,opset", [("Dropout", 6), ("BatchNormalization", 6)])
def test_training_mode_is_test_0_is_refused(lib, op, opset):
    inputs = ["x"] + (list("sbmv") if op == "BatchNormalization" else [])
    inits = {k: np.ones(3, np.float32) for k in inputs[1:]}
    m = model(opset, [helper.make_node(op, inputs, ["y"], "train", is_test=0)], [("x", F, [2, 3])],
              [("y", F, [2, 3])], inits)
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "train", op, "version 6", "'is_test'")


def test_dropout_unread_mask_before_10_is_dropped(lib):
    # the classic model-zoo files (AlexNet, opset 9) name a mask nothing reads
    x = x_of(2, 3)
    m = model(9, [helper.make_node("Dropout", ["x"], ["t", "mask"], "d", ratio=0.5),
                  helper.make_node("Relu", ["t"], ["y"], "r")], [("x", F, [2, 3])], [("y", F, [2, 3])])
    check(lib, m, {"x": x}, lambda: [np.maximum(x, 0)])


def test_dropout_mask_before_10_is_refused(lib):
    m = model(7, [helper.make_node("Dropout", ["x"], ["y", "mask"], "d")], [("x", F, [2, 3])],
              [("y", F, [2, 3]), ("mask", F, [2, 3])])
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "'d'", "Dropout", "version 7", "'mask'")


def test_upsample_unknown_mode_is_refused(lib):
    m = model(7, [helper.make_node("Upsample", ["x"], ["y"], "up", mode="cubic", scales=[1.0, 1.0, 2.0, 2.0])],
              [("x", F, [1, 1, 2, 2])], [("y", F, None)])
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "'up'", "Upsample", "version 7", "'mode'", "cubic")


def test_lppool1_fractional_p_is_refused(lib):
    m = model(1, [helper.make_node("LpPool", ["x"], ["y"], "lp", p=1.5, kernel_shape=[2, 2])],
              [("x", F, [1, 1, 4, 4])], [("y", F, None)])
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "'lp'", "LpPool", "version 1", "'p'")


def test_old_attribute_of_another_type_is_refused(lib):
    # Squeeze-11's axes as a float: not silently read as something else
    node = helper.make_node("Squeeze", ["x"], ["y"], "sq")
    node.attribute.append(helper.make_attribute("axes", 1.0))
    m = model(11, [node], [("x", F, [1, 3])], [("y", F, None)])
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "'sq'", "Squeeze", "version 11", "'axes'")


def test_attribute_the_version_lacks_is_invalid(lib):
    # dilations came with AveragePool-19: at opset 11 it would be ignored (onnx's converter writes such files)
    m = model(11, [helper.make_node("AveragePool", ["x"], ["y"], "pool", kernel_shape=[2, 2], dilations=[2, 2])],
              [("x", F, [1, 1, 4, 4])], [("y", F, None)])
    assert_names(load_error(lib, m), STATUS_INVALID_MODEL, "'pool'", "AveragePool version 11", "opset 11",
                 "'dilations'")


def test_tile1_is_refused(lib):
    m = model(5, [helper.make_node("Tile", ["x", "tiles", "axis"], ["y"], "t1")], [("x", F, [2, 3])],
              [("y", F, None)], {"tiles": np.array(2, np.int64), "axis": np.array(1, np.int64)})
    assert_names(load_error(lib, m), STATUS_UNSUPPORTED, "'t1'", "Tile version 1", "opset 5")


def test_op_newer_than_the_models_opset_is_invalid(lib):
    m = model(9, [helper.make_node("Gelu", ["x"], ["y"], "gelu")], [("x", F, [2])], [("y", F, [2])])
    assert_names(load_error(lib, m), STATUS_INVALID_MODEL, "'gelu'", "Gelu", "opset 20", "opset 9")


def test_opset_0_is_invalid(lib):
    m = model(1, [helper.make_node("Relu", ["x"], ["y"])], [("x", F, [2])], [("y", F, [2])])
    m.opset_import[0].version = 0
    assert_names(load_error(lib, m), STATUS_INVALID_MODEL, "opset 0")
