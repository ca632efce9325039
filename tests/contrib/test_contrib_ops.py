"""onnxruntime's com.microsoft contrib ops (src/onnx/contrib_ops.c lowers them at import) vs onnxruntime's CPU provider.

Each op runs as a one-node onnx.helper model (com.microsoft opset 1) at several shapes and attributes; outputs must
agree within a relative error of 1e-4 (max |diff| / max |reference|). BiasAdd, which onnxruntime runs only on GPUs,
is checked against numpy. The forms cinfer refuses must fail at load naming the node, op and what is unsupported.
"""
import pathlib
import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from cinfer_ctypes import CinferError, Session  # noqa: E402

REL_TOL = 1e-4
MS = "com.microsoft"


def relative_error(actual, expected):
    if expected.size == 0:
        return 0.0
    scale = float(np.max(np.abs(expected)))
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) / (scale if scale > 0 else 1.0)


def build(nodes, feeds, outputs, inits=None, opset=17):
    """A model of `nodes` whose inputs are the arrays in feeds (shapes fixed), initializers `inits` (name -> array),
    and outputs (name, onnx elem type)."""
    graph = helper.make_graph(
        nodes, "contrib",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(name, t, None) for name, t in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(MS, 1)])


def run_both(lib, model, feeds):
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 2
    expected = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    actual = Session(lib, data).run(feeds)
    return actual, expected


def check(lib, model, feeds, rows=None):
    """Runs both and compares every output; rows: for each output an optional index selecting what is specified."""
    actual, expected = run_both(lib, model, feeds)
    assert len(actual) == len(expected)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.shape == e.shape, f"output {i}: shape {a.shape} vs onnxruntime {e.shape}"
        assert a.dtype == e.dtype, f"output {i}: dtype {a.dtype} vs onnxruntime {e.dtype}"
        if rows is not None and rows[i] is not None:
            a, e = a[rows[i]], e[rows[i]]
        if np.issubdtype(e.dtype, np.floating):
            err = relative_error(a, e)
            assert err < REL_TOL, f"output {i}: relative error {err:.3g}"
        else:
            np.testing.assert_array_equal(a, e, err_msg=f"output {i}")
    return actual


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


F = TensorProto.FLOAT


# ---- activations ----

@pytest.mark.parametrize("shape", [(2, 3, 8), (1, 5, 16), (7,)])
@pytest.mark.parametrize("op,bias", [("Gelu", False), ("BiasGelu", True), ("FastGelu", False), ("FastGelu", True),
                                     ("QuickGelu", False)])
def test_gelu_family(lib, shape, op, bias):
    rng = np.random.default_rng(1)
    feeds = {"x": 3 * randn(rng, *shape)}
    inputs = ["x"]
    if bias:
        feeds["b"] = randn(rng, shape[-1])
        inputs.append("b")
    check(lib, build([helper.make_node(op, inputs, ["y"], domain=MS)], feeds, [("y", F)]), feeds)


@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5])
def test_quick_gelu_alpha(lib, alpha):
    feeds = {"x": 4 * randn(np.random.default_rng(2), 3, 10)}
    check(lib, build([helper.make_node("QuickGelu", ["x"], ["y"], domain=MS, alpha=alpha)], feeds, [("y", F)]), feeds)


@pytest.mark.parametrize("shape", [(2, 6, 8), (1, 4, 32)])
def test_bias_add_matches_numpy(lib, shape):
    """onnxruntime runs BiasAdd only on GPUs: the reference is its definition, X + bias + skip."""
    rng = np.random.default_rng(3)
    feeds = {"x": randn(rng, *shape), "b": randn(rng, shape[-1]), "s": randn(rng, *shape)}
    model = build([helper.make_node("BiasAdd", ["x", "b", "s"], ["y"], domain=MS)], feeds, [("y", F)])
    (y,) = Session(lib, model.SerializeToString()).run(feeds)
    np.testing.assert_allclose(y, feeds["x"] + feeds["b"] + feeds["s"], rtol=1e-6, atol=1e-6)


# ---- normalisations ----

@pytest.mark.parametrize("skip_shape", ["full", "broadcast_batch", "2d"])
@pytest.mark.parametrize("beta,bias", [(True, True), (False, False), (True, False), (False, True)])
@pytest.mark.parametrize("outputs", [("y",), ("y", "", "", "sum"), ("y", "mean", "inv_std", "sum")])
def test_skip_layer_norm(lib, skip_shape, beta, bias, outputs):
    rng = np.random.default_rng(4)
    b, s, hidden = 2, 5, 16
    skip = {"full": (b, s, hidden), "broadcast_batch": (1, s, hidden), "2d": (s, hidden)}[skip_shape]
    feeds = {"x": randn(rng, b, s, hidden), "skip": randn(rng, *skip)}
    inits = {"gamma": randn(rng, hidden), "beta": randn(rng, hidden), "bias": randn(rng, hidden)}
    inputs = ["x", "skip", "gamma", "beta" if beta else "", "bias" if bias else ""]
    node = helper.make_node("SkipLayerNormalization", inputs, list(outputs), domain=MS, epsilon=1e-5)
    check(lib, build([node], feeds, [(o, F) for o in outputs if o], inits), feeds)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("with_sum", [False, True])
@pytest.mark.parametrize("shape", [(2, 5, 16), (6, 32)])
def test_skip_simplified_layer_norm(lib, bias, with_sum, shape):
    rng = np.random.default_rng(5)
    feeds = {"x": randn(rng, *shape), "skip": randn(rng, *shape)}
    inits = {"gamma": randn(rng, shape[-1]), "bias": randn(rng, shape[-1])}
    outputs = ["y", "", "", "sum"] if with_sum else ["y"]
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"] + (["bias"] if bias else []),
                            outputs, domain=MS, epsilon=1e-6)
    check(lib, build([node], feeds, [(o, F) for o in outputs if o], inits), feeds)


@pytest.mark.parametrize("epsilon", [1e-5, 1e-6])
@pytest.mark.parametrize("shape", [(2, 5, 16), (3, 64)])
def test_simplified_layer_norm(lib, epsilon, shape):
    """onnxruntime registers SimplifiedLayerNormalization in the default domain (its optimizer writes it there)."""
    rng = np.random.default_rng(6)
    feeds = {"x": randn(rng, *shape)}
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], epsilon=epsilon, axis=-1)
    check(lib, build([node], feeds, [("y", F)], {"scale": randn(rng, shape[-1])}), feeds)


@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("mask", [True, False])
@pytest.mark.parametrize("position_ids", [None, "2d", "1row"])
@pytest.mark.parametrize("with_sum", [False, True])
def test_embed_layer_norm(lib, segments, mask, position_ids, with_sum):
    rng = np.random.default_rng(7)
    b, s, hidden, vocab = 3, 6, 16, 30
    feeds = {"ids": rng.integers(0, vocab, (b, s)).astype(np.int32)}
    if segments:
        feeds["seg"] = rng.integers(0, 2, (b, s)).astype(np.int32)
    if mask:
        lengths = [6, 3, 1]
        feeds["mask"] = np.array([[1] * n + [0] * (s - n) for n in lengths], dtype=np.int32)
    if position_ids == "2d":
        feeds["pos"] = rng.integers(0, 10, (b, s)).astype(np.int32)
    elif position_ids == "1row":
        feeds["pos"] = rng.integers(0, 10, (1, s)).astype(np.int32)
    inits = {"word": randn(rng, vocab, hidden), "position": randn(rng, 10, hidden), "segment": randn(rng, 2, hidden),
             "gamma": randn(rng, hidden), "beta": randn(rng, hidden)}
    inputs = ["ids", "seg" if segments else "", "word", "position", "segment" if segments else "", "gamma", "beta",
              "mask" if mask else "", "pos" if position_ids else ""]
    outputs = ["y", "mask_index" if mask else "", "embedding_sum" if with_sum else ""]
    node = helper.make_node("EmbedLayerNormalization", inputs, outputs, domain=MS, epsilon=1e-5)
    types = {"y": F, "mask_index": TensorProto.INT32, "embedding_sum": F}
    check(lib, build([node], feeds, [(o, types[o]) for o in outputs if o], inits), feeds)


# ---- attention ----

def attention_mask(kind, rng, b, s, total):
    lengths = rng.integers(1, total + 1, b)
    lengths[0] = total
    if kind == "raw2d":
        return np.array([[1] * n + [0] * (total - n) for n in lengths], dtype=np.int32)
    if kind == "raw3d":
        return (rng.random((b, s, total)) > 0.3).astype(np.int32) | np.eye(s, total, dtype=np.int32)[None]
    if kind == "lengths":
        return lengths.astype(np.int32)
    if kind == "left_padding":  # exclusive ends, then inclusive starts
        starts = rng.integers(0, total, b)
        starts[0] = 0
        return np.concatenate([np.full(b, total), starts]).astype(np.int32)
    raise AssertionError(kind)


@pytest.mark.parametrize("mask", [None, "raw2d", "raw3d", "lengths", "left_padding"])
@pytest.mark.parametrize("unidirectional", [0, 1])
@pytest.mark.parametrize("heads,bias", [(2, True), (4, False)])
def test_attention(lib, mask, unidirectional, heads, bias):
    rng = np.random.default_rng(8)
    b, s, hin, hidden = 3, 5, 12, 16
    feeds = {"x": randn(rng, b, s, hin)}
    inits = {"w": randn(rng, hin, 3 * hidden) * 0.5, "bias": randn(rng, 3 * hidden)}
    inputs = ["x", "w", "bias" if bias else ""]
    if mask:
        feeds["mask"] = attention_mask(mask, rng, b, s, s)
        inputs.append("mask")
    node = helper.make_node("Attention", inputs, ["y"], domain=MS, num_heads=heads, unidirectional=unidirectional)
    check(lib, build([node], feeds, [("y", F)], inits), feeds)


def test_attention_sizes_bias_scale_present(lib):
    """qkv_hidden_sizes with a different V width, attention_bias, a custom scale and the filter value; then the
    present output (K and V stacked) with equal widths."""
    rng = np.random.default_rng(9)
    b, s, hin, heads = 2, 4, 8, 2
    feeds = {"x": randn(rng, b, s, hin), "mask": attention_mask("raw2d", rng, b, s, s),
             "attn_bias": randn(rng, 1, heads, s, s)}
    inits = {"w": randn(rng, hin, 8 + 8 + 12), "bias": randn(rng, 28)}
    node = helper.make_node("Attention", ["x", "w", "bias", "mask", "", "attn_bias"], ["y"], domain=MS,
                            num_heads=heads, qkv_hidden_sizes=[8, 8, 12], scale=0.3, mask_filter_value=-500.0)
    check(lib, build([node], feeds, [("y", F)], inits), feeds)
    inits = {"w": randn(rng, hin, 24), "bias": randn(rng, 24)}
    del feeds["attn_bias"]
    node = helper.make_node("Attention", ["x", "w", "bias", "mask"], ["y", "present"], domain=MS, num_heads=heads)
    check(lib, build([node], feeds, [("y", F), ("present", F)], inits), feeds)


MHA_FORMS = ["separate", "separate_bias", "cross", "packed_qkv", "packed_kv", "bnsh_kv"]
# unidirectional only where queries and keys have one length: with more keys than queries onnxruntime's CPU provider
# gives neither the upper-left nor the bottom-right causal alignment (its last query row sees every key), so there is
# no reference to hold cinfer's (ONNX Attention's upper-left) answer to
MHA_CASES = [(form, uni) for form in MHA_FORMS for uni in (0, 1) if not (uni and form in ("cross", "packed_kv", "bnsh_kv"))]


@pytest.mark.parametrize("form,unidirectional", MHA_CASES)
@pytest.mark.parametrize("mask", [None, "raw2d", "lengths", "attention_bias"])
def test_multi_head_attention(lib, form, mask, unidirectional):
    """The packed forms, which onnxruntime's CPU provider refuses, are held to onnxruntime's answer on the same
    query, key and value given separately."""
    rng = np.random.default_rng(10)
    b, s, heads, hs = 2, 4, 2, 8
    kv_len = 6 if form in ("cross", "packed_kv", "bnsh_kv") else s
    hidden = heads * hs
    q, k, v = randn(rng, b, s, hidden), randn(rng, b, kv_len, hidden), randn(rng, b, kv_len, hidden)
    separate = {"q": q, "k": k, "v": v}
    if form == "packed_qkv":
        feeds = {"q": np.stack([x.reshape(b, s, heads, hs) for x in (q, k, v)], axis=3)}
        inputs = ["q", "", ""]
    elif form == "packed_kv":
        feeds = {"q": q, "kv": np.stack([x.reshape(b, kv_len, heads, hs) for x in (k, v)], axis=3)}
        inputs = ["q", "kv", ""]
    elif form == "bnsh_kv":
        feeds = {"q": q, "k": k.reshape(b, kv_len, heads, hs).transpose(0, 2, 1, 3).copy(),
                 "v": v.reshape(b, kv_len, heads, hs).transpose(0, 2, 1, 3).copy()}
        inputs = ["q", "k", "v"]
    else:
        feeds = dict(separate)
        inputs = ["q", "k", "v"]
    extra = {}
    if mask in ("raw2d", "lengths"):
        extra["mask"] = attention_mask(mask, rng, b, s, kv_len)
    if mask == "attention_bias":
        extra["attn_bias"] = randn(rng, b, 1, s, kv_len)
    tail = ["bias" if form == "separate_bias" else "", "mask" if "mask" in extra else "",
            "attn_bias" if "attn_bias" in extra else ""]
    inits = {"bias": randn(rng, 3 * hidden)}
    feeds.update(extra)
    separate.update(extra)

    def model(names):
        node = helper.make_node("MultiHeadAttention", names + tail, ["y"], domain=MS, num_heads=heads,
                                unidirectional=unidirectional)
        return build([node], feeds if names is inputs else separate, [("y", F)], inits)

    reference = model(["q", "k", "v"])
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    (expected,) = ort.InferenceSession(reference.SerializeToString(), opts,
                                       providers=["CPUExecutionProvider"]).run(None, separate)
    (actual,) = Session(lib, model(inputs).SerializeToString()).run(feeds)
    assert actual.shape == expected.shape
    err = relative_error(actual, expected)
    assert err < REL_TOL, f"relative error {err:.3g}"


def test_multi_head_attention_present(lib):
    rng = np.random.default_rng(11)
    b, s, heads, hs = 2, 3, 2, 4
    feeds = {"q": randn(rng, b, s, heads * hs), "k": randn(rng, b, s, heads * hs), "v": randn(rng, b, s, heads * hs)}
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y", "pk", "pv"], domain=MS, num_heads=heads)
    check(lib, build([node], feeds, [("y", F), ("pk", F), ("pv", F)]), feeds)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (2, 2), (4, 1)])
@pytest.mark.parametrize("causal", [1, 0])
def test_group_query_attention_prompt(lib, packed, ragged, heads, kv_heads, causal):
    rng = np.random.default_rng(12)
    b, s, hs = 3, 5, 8
    lengths = np.array([5, 3, 1] if ragged else [5, 5, 5])
    q, k, v = randn(rng, b, s, heads * hs), randn(rng, b, s, kv_heads * hs), randn(rng, b, s, kv_heads * hs)
    feeds = {"seqlens_k": (lengths - 1).astype(np.int32), "total": np.array(s, dtype=np.int32)}
    if packed:
        feeds["qkv"] = np.concatenate([q, k, v], axis=2)
        inputs = ["qkv", "", ""]
    else:
        feeds.update(q=q, k=k, v=v)
        inputs = ["q", "k", "v"]
    node = helper.make_node("GroupQueryAttention", inputs + ["", "", "seqlens_k", "total"], ["y", "pk", "pv"],
                            domain=MS, num_heads=heads, kv_num_heads=kv_heads, causal=causal)
    # right padding: rows past each entry's length are unspecified in onnxruntime's contract
    valid = np.zeros((b, s), dtype=bool)
    for i, n in enumerate(lengths):
        valid[i, :n] = True
    check(lib, build([node], feeds, [("y", F), ("pk", F), ("pv", F)]), feeds, rows=[valid, None, None])


# rotary_embedding_dim (partial rotation) comes with num_heads in onnxruntime's schema
ROTARY_CASES = [(layout, partial) for layout in ("3d_heads", "4d", "3d_no_heads") for partial in (False, True)
                if not (layout == "3d_no_heads" and partial)]


@pytest.mark.parametrize("layout,partial", ROTARY_CASES)
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("positions", ["2d", "offset"])
def test_rotary_embedding(lib, layout, interleaved, positions, partial):
    rng = np.random.default_rng(13)
    b, s, heads, hs, max_pos = 2, 5, 3, 8, 16
    rot = 4 if partial else hs
    feeds = {"x": randn(rng, b, heads, s, hs) if layout == "4d" else randn(rng, b, s, heads * hs)}
    feeds["pos"] = (rng.integers(0, max_pos - s, (b, s)) if positions == "2d" else np.array([3])).astype(np.int64)
    angles = rng.random((max_pos, rot // 2)).astype(np.float32) * 3
    inits = {"cos": np.cos(angles), "sin": np.sin(angles)}
    attrs = {"interleaved": interleaved}
    if layout == "3d_heads" or partial:
        attrs["num_heads"] = heads
    if partial:
        attrs["rotary_embedding_dim"] = rot
    node = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], domain=MS, **attrs)
    check(lib, build([node], feeds, [("y", F)], inits), feeds)


# ---- quantized weights ----

def pack_bits(values, bits):
    """Little-end-first packing of `bits`-wide fields along the last axis (onnxruntime's MatMulNBits layout)."""
    per = 8 // bits
    v = values.reshape(*values.shape[:-1], -1, per).astype(np.uint8)
    out = np.zeros(v.shape[:-1], dtype=np.uint8)
    for j in range(per):
        out |= v[..., j] << (j * bits)
    return out


# onnxruntime's CPU provider takes float zero points with 4 (and 2) bits only
NBITS_CASES = [(bits, zp) for bits in (4, 8, 2) for zp in (None, "packed", "float") if not (bits == 8 and zp == "float")]


@pytest.mark.parametrize("bits,zero_points", NBITS_CASES)
@pytest.mark.parametrize("k,block", [(64, 32), (80, 16), (96, 64)])
@pytest.mark.parametrize("bias", [False, True])
def test_matmul_nbits(lib, bits, k, block, zero_points, bias):
    rng = np.random.default_rng(14)
    n, m = 24, 5
    blocks = -(-k // block)
    q = rng.integers(0, 2 ** bits, (n, blocks * block))
    q[:, k:] = 0
    inits = {"B": pack_bits(q.reshape(n, blocks, block), bits),
             "scales": (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32), "bias": randn(rng, n)}
    inputs = ["A", "B", "scales", "", "", ""]
    if zero_points == "packed":
        zp = rng.integers(0, 2 ** bits, (n, blocks))
        padded = -(-blocks * bits // 8) * (8 // bits)
        inits["zp"] = pack_bits(np.pad(zp, ((0, 0), (0, padded - blocks))), bits)
        inputs[3] = "zp"
    elif zero_points == "float":
        inits["zp"] = (rng.random((n, blocks)) * 2 ** bits).astype(np.float32)
        inputs[3] = "zp"
    if bias:
        inputs[5] = "bias"
    while inputs and not inputs[-1]:
        inputs.pop()
    feeds = {"A": randn(rng, 2, m, k)}
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block)
    check(lib, build([node], feeds, [("y", F)], inits), feeds)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_linear(lib, dtype, per_axis):
    rng = np.random.default_rng(15)
    info = np.iinfo(dtype)
    feeds = {"x": rng.integers(info.min, info.max + 1, (3, 4, 5)).astype(dtype)}
    shape = (4,) if per_axis else ()
    inits = {"scale": (rng.random(shape) + 0.1).astype(np.float32),
             "zp": rng.integers(info.min, info.max + 1, shape).astype(dtype)}
    attrs = {"axis": 1} if per_axis else {}
    node = helper.make_node("DequantizeLinear", ["x", "scale", "zp"], ["y"], domain=MS, **attrs)
    check(lib, build([node], feeds, [("y", F)], inits), feeds)


# ---- what is refused, by name ----

def load_error(lib, model):
    with pytest.raises(CinferError) as info:
        Session(lib, model.SerializeToString())
    return str(info.value)


def test_unknown_contrib_op_is_refused_by_name(lib):
    feeds = {"x": np.zeros((2, 3), np.float32)}
    model = build([helper.make_node("Snpe", ["x"], ["y"], domain=MS, name="mystery")], feeds, [("y", F)])
    msg = load_error(lib, model)
    assert "'mystery' (Snpe, com.microsoft v1)" in msg, msg


@pytest.mark.parametrize("case", ["attention_past", "attention_rotary", "gqa_past", "gqa_window", "nbits_g_idx",
                                  "nbits_bits", "unknown_attr", "version"])
def test_unmappable_forms_are_refused_by_name(lib, case):
    rng = np.random.default_rng(16)
    feeds = {"x": randn(rng, 2, 3, 8)}
    inits = {"w": randn(rng, 8, 24)}
    outputs = [("y", F)]
    version = 1
    if case == "attention_past":
        feeds["past"] = randn(rng, 2, 2, 2, 1, 4)
        node, want = helper.make_node("Attention", ["x", "w", "", "", "past"], ["y"], domain=MS, num_heads=2), "past"
    elif case == "attention_rotary":
        node, want = helper.make_node("Attention", ["x", "w"], ["y"], domain=MS, num_heads=2, do_rotary=1), "do_rotary"
    elif case in ("gqa_past", "gqa_window"):
        feeds.update(seqlens=np.array([2, 2], np.int32), total=np.array(3, np.int32), past=randn(rng, 2, 1, 0, 4))
        past = ["past", "past"] if case == "gqa_past" else ["", ""]
        attrs = {"local_window_size": 2} if case == "gqa_window" else {}
        node = helper.make_node("GroupQueryAttention", ["x", "x", "x"] + past + ["seqlens", "total"], ["y"], domain=MS,
                                num_heads=2, kv_num_heads=2, **attrs)
        want = "past_key" if case == "gqa_past" else "local_window_size"
    elif case in ("nbits_g_idx", "nbits_bits"):
        inits = {"B": np.zeros((4, 1, 4), np.uint8), "scales": np.ones((4, 1), np.float32),
                 "g": np.zeros(8, np.int32)}
        bits = 3 if case == "nbits_bits" else 4
        node = helper.make_node("MatMulNBits", ["x", "B", "scales", "", "g" if case == "nbits_g_idx" else ""], ["y"],
                                domain=MS, K=8, N=4, bits=bits, block_size=16)
        want = "g_idx" if case == "nbits_g_idx" else "'bits' = 3"
    elif case == "unknown_attr":
        node, want = helper.make_node("FastGelu", ["x"], ["y"], domain=MS, flavour=2), "'flavour'"
    else:
        node, want, version = helper.make_node("FastGelu", ["x"], ["y"], domain=MS), "version 2", 2
    node.name = "the_node"
    model = build([node], feeds, outputs, inits)
    if version != 1:
        model.opset_import[1].version = version
    msg = load_error(lib, model)
    assert "the_node" in msg and want in msg and "com.microsoft" in msg, msg
