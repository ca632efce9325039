#!/usr/bin/env python3
"""Seed corpora for the fuzz targets.

  make_corpus.py OUT                 the model fuzzer's large seed corpus, written into OUT at fuzz time: the
                                     bundled examples, the test models and a sample of small ONNX node test
                                     models (one per op set)
  make_corpus.py --committed         rewrites the small committed seeds in tests/fuzz/corpus/<target>/ (npy,
                                     config, kserve, model); crash regressions (crash-*) there are left alone

Every committed seed set holds inputs that decode successfully as well as near misses."""
import io
import json
import pathlib
import struct
import sys
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "fuzz" / "corpus"


def model_corpus(out):
    sys.path.insert(0, str(ROOT / "tests" / "models"))
    import builders  # noqa: E402
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for p in (ROOT / "examples" / "models").glob("*.onnx"):
        (out / p.name).write_bytes(p.read_bytes())
    for p in (CORPUS / "model").glob("*"):
        (out / p.name).write_bytes(p.read_bytes())
    for name, build in builders.ALL.items():
        kwargs = {"size": 16} if name in ("cnn", "image_window") else {}
        model, _ = build(np.random.default_rng(0), **kwargs)
        (out / f"{name}.onnx").write_bytes(model.SerializeToString())
    for case in node_cases(4096):
        (out / f"{case.name}.onnx").write_bytes(case.model.SerializeToString())
    print(f"corpus: {len(list(out.iterdir()))} files in {out}")


def node_cases(max_bytes):
    """One small ONNX node test model per distinct op set."""
    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    seen = set()
    for case in cases:
        ops = tuple(sorted({n.op_type for n in case.model.graph.node}))
        if ops in seen or len(case.model.SerializeToString()) > max_bytes:
            continue
        seen.add(ops)
        yield case


def npy_bytes(a, version=None):
    f = io.BytesIO()
    if version is None:
        np.save(f, a)
    else:
        np.lib.format.write_array(f, a, version=version)
    return f.getvalue()


def npy_seeds():
    rng = np.random.default_rng(0)
    s = {
        "f32_2x3.npy": npy_bytes(rng.standard_normal((2, 3)).astype(np.float32)),
        "f64_vec.npy": npy_bytes(np.arange(5, dtype=np.float64)),
        "f16_scalar.npy": npy_bytes(np.array(1.5, dtype=np.float16)),
        "i64_empty.npy": npy_bytes(np.zeros((0, 4), dtype=np.int64)),
        "i32_3d.npy": npy_bytes(np.arange(8, dtype=np.int32).reshape(2, 2, 2)),
        "i8.npy": npy_bytes(np.array([-1, 2], dtype=np.int8)),
        "u8.npy": npy_bytes(np.array([1, 255], dtype=np.uint8)),
        "u64.npy": npy_bytes(np.array([7], dtype=np.uint64)),
        "bool.npy": npy_bytes(np.array([True, False])),
        "v2_f32.npy": npy_bytes(np.ones(3, dtype=np.float32), version=(2, 0)),
        "v3_i16.npy": npy_bytes(np.ones(2, dtype=np.int16), version=(3, 0)),
        # near misses: refused with an error
        "big_endian.npy": npy_bytes(np.ones(2, dtype=">f4")),
        "fortran.npy": npy_bytes(np.asfortranarray(np.ones((2, 2), dtype=np.float32))),
        "truncated.npy": npy_bytes(np.ones(16, dtype=np.float32))[:-8],
    }
    return s


CONFIGS = {
    "full.pbtxt": """name: "resnet"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, -1 ] format: FORMAT_NCHW } ]
output { name: "y" data_type: TYPE_FP16 dims: 10 label_filename: "labels.txt" }
instance_group [ { name: "g" kind: KIND_GPU count: 2 gpus: [0, 1] } ]
dynamic_batching { preferred_batch_size: [4, 8] max_queue_delay_microseconds: 100 priority_levels: 2
  default_priority_level: 2 preserve_ordering: false default_queue_policy { timeout_action: REJECT
  default_timeout_microseconds: 5000 allow_timeout_override: true max_queue_size: 16 } }
version_policy: { specific: { versions: [1, 3] } }
optimization { cuda { graphs: true busy_wait_events: true output_copy_stream: true } }
parameters { key: "pad" value { string_value: "x:0" } }
model_warmup [ { name: "w" batch_size: 2 count: 1 inputs { key: "x" value { data_type: TYPE_FP32 dims: [3, 4]
  zero_data: true } } } ]
""",
    "mlp.pbtxt": """# completes against examples/models/mlp.onnx (x[batch,16] -> probs[batch,4])
name: "mlp"
backend: "onnxruntime"
max_batch_size: 4
input [ { name: "x", data_type: TYPE_FP32, dims: [ 16 ] } ]
output [ { name: "probs", data_type: TYPE_FP32, dims: [ 4 ] } ]
instance_group [ { kind: KIND_CPU, count: 2 } ]
dynamic_batching { }
version_policy: { all { } }
""",
    "mlp_nobatch.pbtxt": """name: "mlp"
max_batch_size: 0
input < name: 'x' data_type: TYPE_FP32 dims: [2, 16] >
output < name: 'probs' data_type: TYPE_FP32 dims: [2, 4] >
version_policy { latest { num_versions: 2 } }
model_transaction_policy { decoupled: false }
response_cache { enable: false }
default_model_filename: "model.onnx"
""",
    "empty.pbtxt": "",
    "text_syntax.pbtxt": """# every scalar syntax of the text format
name: "a\\tb\\"c\\x41\\101" 'd'
parameters { key: "k" value: { string_value: "v" } }
parameters: [ { key: "n" value { string_value: "-inf" } } ]
model_warmup { name: "r" batch_size: 1 inputs [ { key: "x" value: { data_type: TYPE_INT64 dims: 0x2 random_data: true } } ] }
dynamic_batching { max_queue_delay_microseconds: 1e2 }
""",
    "typed.pbtxt": """input [ { name: "b" data_type: TYPE_BOOL dims: -1 }, { name: "s" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "h" data_type: TYPE_BF16 dims: [ 2 ] optional: true allow_ragged_batch: false is_shape_tensor: false } ]
output [ { name: "o" data_type: TYPE_UINT64 dims: [ 1 ] } ]
""",
    "bad_unknown_field.pbtxt": "max_batch_size: 4\nbogus: 1\n",
    "bad_unterminated.pbtxt": "name: \"abc\ninput {\n",
}


def kserve_seeds():
    """Inputs of fuzz_kserve: the Inference-Header-Content-Length line (empty: absent), then the body. The
    configs they bind to are in fuzz_kserve.c (batched: x0 FP32 [2], x1 INT64 [-1], x2 BYTES [1]; single:
    x0 FP32 [-1,2]; half: x0 FP16 [2], x1 BF16 [-1]; typed: x0..x8 BOOL..FP64 [-1])."""
    def js(obj):
        return json.dumps(obj, separators=(",", ":")).encode()

    def seed(header, binary=b""):
        j = js(header)
        return f"{len(j)}\n".encode() + j + binary

    def bytes_el(*ss):
        return b"".join(struct.pack("<I", len(s)) + s for s in ss)

    batched = {"id": "req-1", "parameters": {"priority": 1, "timeout": 1000, "custom": "x"},
               "inputs": [{"name": "x0", "shape": [2, 2], "datatype": "FP32", "data": [[1, 2.5], [3, 4]]},
                          {"name": "x1", "shape": [2, 3], "datatype": "INT64", "data": [1, -2, 3, 4, 5, 9007199254740993]},
                          {"name": "x2", "shape": [2, 1], "datatype": "BYTES", "data": ["hi", ""]}],
               "outputs": [{"name": "y0"}, {"name": "y1", "parameters": {"binary_data": True}}]}
    s = {"json_batched.txt": b"\n" + js(batched)}
    s["binary_batched.bin"] = seed(
        {"inputs": [{"name": "x0", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 8}},
                    {"name": "x1", "shape": [1, 1], "datatype": "INT64", "parameters": {"binary_data_size": 8}},
                    {"name": "x2", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 9}}],
         "parameters": {"binary_data_output": True}},
        struct.pack("<2f", 1.0, -2.0) + struct.pack("<q", 7) + bytes_el(b"hello"))
    s["raw_single.bin"] = b"0\n" + struct.pack("<4f", 1, 2, 3, 4)
    s["json_single.txt"] = b"\n" + js({"inputs": [{"name": "x0", "shape": [1, 2], "datatype": "FP32", "data": [0.5, 1]}],
                                         "outputs": [{"name": "y0", "parameters": {"binary_data": False}}]})
    s["binary_half.bin"] = seed(
        {"inputs": [{"name": "x0", "shape": [1, 2], "datatype": "FP16", "parameters": {"binary_data_size": 4}},
                    {"name": "x1", "shape": [1, 3], "datatype": "BF16", "parameters": {"binary_data_size": 6}}],
         "parameters": {"binary_data_output": True}},
        b"\x00\x3c\x00\x40" + b"\x80\x3f\x00\x40\x40\x40")
    typed = [("BOOL", [True, False]), ("UINT8", [0, 255]), ("INT8", [-128, 127]), ("INT16", [-3, 4]),
             ("UINT16", [0, 65535]), ("INT32", [-1, 2]), ("UINT32", [4294967295, 0]), ("UINT64", [1, 2]),
             ("FP64", [0.25, -1e300])]
    s["json_typed.txt"] = b"\n" + js({"inputs": [{"name": f"x{i}", "shape": [2], "datatype": t, "data": d}
                                                 for i, (t, d) in enumerate(typed)]})
    s["shm_single.txt"] = b"\n" + js(
        {"inputs": [{"name": "x0", "shape": [2, 2], "datatype": "FP32",
                     "parameters": {"shared_memory_region": "r0", "shared_memory_offset": 64, "shared_memory_byte_size": 16}}],
         "outputs": [{"name": "y0", "parameters": {"shared_memory_region": "r0", "shared_memory_byte_size": 16}}]})
    # near misses: each refused with a 400
    s["bad_json.txt"] = b"\n{\"inputs\":[{\"name\":\"x0\""
    s["bad_header_len.bin"] = b"999\n{}"
    s["bad_binary_size.bin"] = seed(
        {"inputs": [{"name": "x0", "shape": [1, 2], "datatype": "FP32", "parameters": {"binary_data_size": 16}}]}, b"\0" * 8)
    return s


def committed():
    node = {c.name: c.model.SerializeToString() for c in node_cases(1024)}
    picks = ["test_add", "test_matmul_2d", "test_gather_0", "test_reshape_reordered_all_dims", "test_conv_with_strides_padding",
             "test_reduce_sum_keepdims_example", "test_softmax_axis_1", "test_concat_2d_axis_0", "test_relu",
             "test_slice", "test_transpose_default", "test_where_example"]
    sets = {"npy": npy_seeds(), "config": {k: v.encode() for k, v in CONFIGS.items()}, "kserve": kserve_seeds(),
            "model": {f"{n}.onnx": node[n] for n in picks if n in node}}
    sets["model"]["mlp.onnx"] = (ROOT / "examples" / "models" / "mlp.onnx").read_bytes()
    for target, files in sets.items():
        d = CORPUS / target
        d.mkdir(parents=True, exist_ok=True)
        for p in d.iterdir():
            if not p.name.startswith("crash-"):
                p.unlink()
        for name, data in files.items():
            (d / name).write_bytes(data)
        print(f"{d.relative_to(ROOT)}: {len(files)} seeds")


if __name__ == "__main__":
    if sys.argv[1:] == ["--committed"]:
        committed()
    else:
        model_corpus(sys.argv[1] if len(sys.argv) > 1 else "build-fuzz/corpus")
