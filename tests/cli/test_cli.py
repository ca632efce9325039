"""The cinfer tool and the C example program on good and bad input: right outputs, clear errors, no crashes."""
import os
import pathlib
import subprocess

import numpy as np
import onnxruntime as ort
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "examples" / "models"


def run(*args, expect=0):
    p = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=120)
    assert p.returncode >= 0, f"crashed with signal {-p.returncode}: {p.stderr}"
    assert p.returncode == expect, f"exit {p.returncode}, expected {expect}\nstdout: {p.stdout}\nstderr: {p.stderr}"
    return p.stdout + p.stderr


@pytest.mark.parametrize("name,inp", [("mlp", "x"), ("tiny_cnn", "image")])
def test_run_writes_outputs_matching_onnxruntime(cli, tmp_path, name, inp):
    model, data = MODELS / f"{name}.onnx", MODELS / f"{name}_{inp}.npy"
    out_dir = tmp_path / "nested" / "outputs"  # missing parents are created
    run(cli, "run", model, "--input", f"{inp}={data}", "--output-dir", out_dir, "--threads", "1")
    reference = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    for out, expected in zip(reference.get_outputs(), reference.run(None, {inp: np.load(data)})):
        got = np.load(out_dir / f"{out.name}.npy")
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_run_timings_name_each_step(cli, tmp_path):
    """--timings: one stderr line with each step's milliseconds, adding up to no more than the total."""
    import re
    model, data = MODELS / "tiny_cnn.onnx", MODELS / "tiny_cnn_image.npy"
    p = subprocess.run([str(cli), "run", str(model), "--input", f"image={data}", "--output-dir", str(tmp_path),
                        "--timings"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    m = re.search(r"timings \(ms\): model load ([\d.]+), session ([\d.]+), inputs \+ first run ([\d.]+), "
                  r"outputs ([\d.]+), teardown ([\d.]+), total ([\d.]+)", p.stderr)
    assert m, p.stderr
    steps, total = [float(v) for v in m.groups()[:-1]], float(m.group(6))
    assert all(v >= 0 for v in steps) and sum(steps) <= total + 0.5 and total > 0
    assert "timings (ms)" not in run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path)


def test_run_on_cuda_starts_the_device_beside_the_load(cli, tmp_path):
    """--device cuda starts the device on a second thread while the model loads: with a GPU the outputs equal the
    CPU's (within float rounding); without one, the session's clear error and exit 1, nothing crashing."""
    model, data = MODELS / "tiny_cnn.onnx", MODELS / "tiny_cnn_image.npy"
    has_gpu = subprocess.run([str(cli), "gpus"], capture_output=True, text=True, timeout=120).returncode == 0
    run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "cpu")
    out = run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "cuda", "--device", "cuda",
              expect=0 if has_gpu else 1)
    if not has_gpu:
        assert "cinfer: session: device 'cuda'" in out, out
        return
    for f in (tmp_path / "cpu").iterdir():
        np.testing.assert_allclose(np.load(tmp_path / "cuda" / f.name), np.load(f), rtol=1e-4, atol=1e-5)


def test_run_and_bench_in_half_precision(cli, tmp_path):
    model, data = MODELS / "tiny_cnn.onnx", MODELS / "tiny_cnn_image.npy"
    run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "fp32", "--threads", "1")
    run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "fp16", "--threads", "1",
        "--precision", "fp16", "--deterministic")
    for f in (tmp_path / "fp32").iterdir():
        ref, got = np.load(f), np.load(tmp_path / "fp16" / f.name)
        assert got.dtype == ref.dtype and got.shape == ref.shape  # io keeps the model's dtypes
        np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2 * float(np.max(np.abs(ref))))
    out = run(cli, "bench", model, "--iters", "2", "--warmup", "0", "--precision", "bf16")
    assert "precision: bf16" in out
    out = run(cli, "bench", model, "--iters", "2", "--precision", "fp12", expect=1)
    assert "'fp12' is not fp32, tf32, fp16 or bf16" in out


def test_help_and_options_list_every_session_option(cli, lib):
    """--help ends with the engine's session options and `cinfer options` prints the same list: one line per option
    (key, type, values, default) from cinfer_session_option_info, then its doc."""
    listed = run(cli, "options")
    assert run(cli, "--help").endswith("\n" + listed)
    lines = listed.splitlines()
    for o in lib.session_options():
        key = o["key"] + ("NAME" if o["is_prefix"] else "")
        row = [line for line in lines if line.split()[:1] == [key]]
        assert row and row[0].split()[1] == o["type"], (key, listed)
        assert f"{o['values']} (default: {o['default_value']})" in row[0]
        assert " ".join(o["doc"].split()[:6]) in listed


def test_option_passes_any_session_option_to_the_engine(cli, tmp_path):
    """--option KEY=VALUE reaches the engine, which alone checks it; --precision is the same as --option precision."""
    model, data = MODELS / "tiny_cnn.onnx", MODELS / "tiny_cnn_image.npy"
    run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "flag", "--precision", "fp16")
    run(cli, "run", model, "--input", f"image={data}", "--output-dir", tmp_path / "option", "--option",
        "precision=fp16", "--option", "threads=1")
    for f in (tmp_path / "flag").iterdir():
        np.testing.assert_array_equal(np.load(tmp_path / "option" / f.name), np.load(f))
    assert "precision: bf16" in run(cli, "bench", model, "--iters", "2", "--warmup", "0", "--option", "precision=bf16")
    out = run(cli, "bench", model, "--iters", "1", "--option", "guard_bytes=lots", expect=1)
    assert "session option 'guard_bytes': 'lots' is not a count from 0 to 1048576" in out
    out = run(cli, "bench", model, "--iters", "1", "--option", "precison=fp16", expect=1)
    assert "unknown session option 'precison' (known: threads, precision," in out
    assert "--option wants KEY=VALUE, got 'fp16'" in run(cli, "bench", model, "--option", "fp16", expect=2)


def test_inspect_reports_structure_and_memory(cli):
    out = run(cli, "inspect", MODELS / "tiny_cnn.onnx", "--batch", "4")
    assert "image" in out and "[batch, 3, 32, 32]" in out
    assert "BatchNormalization" not in out, "Conv+BN must be folded"
    assert "Conv" in out and "parameters:" in out
    assert "planned activation memory at batch 4:" in out


def unsupported_model(path, extra=0):
    """Relu plus nodes cinfer does not run, of three domains: If (control flow), a com.example op, a com.microsoft op
    no lowering knows; `extra` more unknown nodes after them."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["out"])], "branch", [],
                               [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("If", ["c"], ["i"], name="branching", then_branch=branch, else_branch=branch),
             helper.make_node("Frobnicate", ["i"], ["f"], name="custom", domain="com.example"),
             helper.make_node("NoSuchContribOp", ["f"], ["m0"], name="contrib", domain="com.microsoft")]
    for k in range(extra):
        nodes.append(helper.make_node("Unknown%d" % k, ["m%d" % k], ["m%d" % (k + 1)], name="extra%d" % k))
    nodes.append(helper.make_node("Add", ["r", "m%d" % extra], ["y"], name="add"))
    graph = helper.make_graph(nodes, "unsupported", [x, cond], [y])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.example", 3), helper.make_opsetid("com.microsoft", 1)]
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    return path


def test_inspect_lists_every_unsupported_node(cli, tmp_path):
    """inspect names each node cinfer cannot run (node, op, domain, opset) in one go and exits 1 with a summary;
    run's load error names them too."""
    model = unsupported_model(tmp_path / "unsupported.onnx")
    out = run(cli, "inspect", model, expect=1)
    rows = {tuple(line.split()) for line in out.splitlines()}
    assert {("branching", "If", "ai.onnx", "17"), ("custom", "Frobnicate", "com.example", "3"),
            ("contrib", "NoSuchContribOp", "com.microsoft", "1")} <= rows, out
    assert not any(row[:1] in (("relu",), ("add",)) for row in rows), "supported nodes are not listed"
    assert "3 nodes of" in out and "ops cinfer does not support" in out
    out = run(cli, "run", model, "--input", "x=unused.npy", "--output-dir", tmp_path, expect=1)
    assert "3 unsupported nodes" in out and "'branching' (If, ai.onnx v17)" in out, out
    assert "'custom' (Frobnicate, com.example v3)" in out and "'contrib' (NoSuchContribOp, com.microsoft v1)" in out


def test_inspect_lists_unsupported_nodes_beyond_the_load_error(cli, tmp_path):
    """The load error names the first 20 and says how many there are; inspect lists all of them."""
    model = unsupported_model(tmp_path / "many.onnx", extra=30)
    out = run(cli, "run", model, "--input", "x=unused.npy", "--output-dir", tmp_path, expect=1)
    assert "33 unsupported nodes" in out and "'extra16'" in out and "'extra17'" not in out and "inspect" in out, out
    out = run(cli, "inspect", model, expect=1)
    assert all(f"extra{k} " in out for k in range(30)) and "33 nodes of" in out, out


def test_ops_lists_the_table_by_domain(cli):
    """cinfer ops: domain, op, opsets, backends; rows grouped by domain; each ONNX op's range runs from its first
    version in onnx's schema history to the newest opset there (or the one before it was deprecated)."""
    from onnx import defs
    rows = [line.split(None, 3) for line in run(cli, "ops").splitlines()[1:]]
    domains = [r[0] for r in rows]
    assert sorted(set(domains), key=domains.index) == ["ai.onnx", "com.microsoft", "cinfer"]
    assert all(domains[i] == domains[i - 1] or domains[i] not in domains[:i] for i in range(1, len(domains)))
    table = {(r[0], r[1]): r for r in rows}
    # "cpu", or "cpu,cuda" where the CUDA module loads (a machine with an NVIDIA driver)
    assert "cpu" in table[("ai.onnx", "Conv")][3].split(",")
    assert ("com.microsoft", "SkipLayerNormalization") in table and ("com.microsoft", "Attention") in table
    newest = max(s.since_version for s in defs.get_all_schemas_with_history() if s.domain == "")
    for (domain, op), row in table.items():
        if domain != "ai.onnx":
            continue
        history = sorted((s for s in defs.get_all_schemas_with_history() if s.domain == "" and s.name == op),
                         key=lambda s: s.since_version)
        last = history[-1].since_version - 1 if history[-1].deprecated else newest
        assert row[2] == f"{history[0].since_version}-{last}", (op, row)


def test_bench_prints_latency_table(cli):
    out = run(cli, "bench", MODELS / "mlp.onnx", "--batch", "3", "--iters", "5", "--warmup", "1")
    assert "p50 ms" in out and "latency" in out


def static_relu_model(path):
    """A model whose input shape is fixed ([2, 4]): it has no batch dim --batch could set."""
    import onnx
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "static", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_bench_reports_the_batch_it_ran(cli, tmp_path):
    out = run(cli, "bench", MODELS / "mlp.onnx", "--batch", "3", "--iters", "2", "--warmup", "0")
    assert "batch: 3" in out and "items/s" in out
    # fixed shapes: no batch is claimed, and the figure is runs per second
    out = run(cli, "bench", static_relu_model(tmp_path / "static.onnx"), "--iters", "2", "--warmup", "0")
    assert "batch: fixed by the model" in out and "runs/s" in out and "items/s" not in out


def test_bench_refuses_a_batch_the_model_cannot_take(cli, tmp_path):
    model = static_relu_model(tmp_path / "static.onnx")
    for cmd in ("bench", "inspect"):
        out = run(cli, cmd, model, "--batch", "8", expect=2)
        assert "--batch 8: no input of the model has a dynamic batch dim" in out and "p50 ms" not in out
    # the batch dim named by --dim is no longer the batch: --batch has nothing to set
    out = run(cli, "bench", MODELS / "mlp.onnx", "--batch", "4", "--dim", "batch=2", expect=2)
    assert "--batch 4: no input of the model has a dynamic batch dim" in out
    # an input read from a file keeps the file's batch
    x = tmp_path / "x.npy"
    np.save(x, np.load(MODELS / "mlp_x.npy"))
    rows = np.load(x).shape[0]
    out = run(cli, "bench", MODELS / "mlp.onnx", "--input", f"x={x}", "--batch", str(rows + 1), expect=2)
    assert f"input 'x' is read from a file whose batch dim is {rows}" in out


def test_bench_refuses_unknown_or_malformed_dims(cli):
    out = run(cli, "bench", MODELS / "mlp.onnx", "--dim", "seq=16", expect=2)
    assert "--dim seq=16: the model has no dynamic input dim named 'seq' (named dynamic dims: batch)" in out
    for spec in ("batch", "batch=", "batch=0", "batch=x", "=3"):
        out = run(cli, "inspect", MODELS / "mlp.onnx", "--dim", spec, expect=2)
        assert f"--dim wants NAME=SIZE with SIZE >= 1, got '{spec}'" in out
    assert "planned activation memory at batch 5:" in run(cli, "inspect", MODELS / "mlp.onnx", "--dim", "batch=5")
    assert "batch: 5 " in run(cli, "bench", MODELS / "mlp.onnx", "--dim", "batch=5", "--iters", "2", "--warmup", "0")


def test_bench_profile_lists_op_types(cli):
    out = run(cli, "bench", MODELS / "tiny_cnn.onnx", "--iters", "3", "--warmup", "0", "--profile")
    rows = {line.split()[0]: line.split() for line in out.split("profile (per run, 3 runs):")[1].splitlines()[2:] if line.strip()}
    assert set(rows) == {"Conv", "MaxPool", "GlobalAveragePool", "Flatten", "Gemm"}
    assert rows["Conv"][1] == "2"  # node count; BN folded and Relu fused into the Convs


def test_bench_timeline_needs_a_gpu_device(cli):
    out = run(cli, "bench", MODELS / "tiny_cnn.onnx", "--iters", "2", "--timeline", expect=2)
    assert "--timeline times a GPU's streams: it needs --device cuda[:N], not 'cpu'" in out


def test_bench_timeline_prints_the_spans_of_a_gpu_run(cli):
    """--timeline on a GPU: after the timing table, one run's spans (upload, compute, download on the session's
    stream, in order) and its end to end."""
    if subprocess.run([str(cli), "gpus"], capture_output=True, text=True, timeout=120).returncode != 0:
        pytest.skip("no usable CUDA device for the GPU half")
    out = run(cli, "bench", MODELS / "tiny_cnn.onnx", "--iters", "2", "--device", "cuda", "--timeline")
    table = out.split("timeline of one run")[1].splitlines()[2:5]
    assert [line.split()[:2] for line in table] == [["upload", "session"], ["compute", "session"], ["download", "session"]]
    assert "end to end" in out


def test_example_program_runs(tmp_path):
    example = os.environ.get("CINFER_EXAMPLE", str(ROOT / "build" / "example_run_model"))
    out = run(example, MODELS / "tiny_cnn.onnx", "2")
    assert "output logits: float32 [2, 10]" in out


def test_wrong_input_name(cli, tmp_path):
    out = run(cli, "run", MODELS / "mlp.onnx", "--input", f"nope={MODELS / 'mlp_x.npy'}", "--output-dir", tmp_path, expect=1)
    assert "'nope' is not an input of the model" in out and "'x'" in out


def test_wrong_input_dtype(cli, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 16), np.float64))
    out = run(cli, "run", MODELS / "mlp.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path, expect=1)
    assert "input 'x': expected dtype float32, got float64" in out


def test_wrong_input_shape(cli, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 15), np.float32))
    out = run(cli, "run", MODELS / "mlp.onnx", "--input", f"x={tmp_path / 'x.npy'}", "--output-dir", tmp_path, expect=1)
    assert "dim 1 must be 16, got 15" in out


def test_missing_input_file(cli, tmp_path):
    out = run(cli, "run", MODELS / "mlp.onnx", "--input", "x=/no/such.npy", "--output-dir", tmp_path, expect=1)
    assert "/no/such.npy" in out


def test_missing_model(cli, tmp_path):
    out = run(cli, "inspect", tmp_path / "absent.onnx", expect=1)
    assert "absent.onnx" in out


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9])
def test_truncated_model(cli, tmp_path, fraction):
    data = (MODELS / "tiny_cnn.onnx").read_bytes()
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(data[: int(len(data) * fraction)])
    out = run(cli, "inspect", bad, expect=1)
    assert "bad.onnx" in out


def test_corrupt_models_never_crash(cli, tmp_path):
    rng = np.random.default_rng(3)
    data = bytearray((MODELS / "tiny_cnn.onnx").read_bytes())
    np.save(tmp_path / "img.npy", np.zeros((1, 3, 32, 32), np.float32))
    for trial in range(25):
        bad = bytearray(data)
        for _ in range(8):
            bad[rng.integers(len(bad))] = rng.integers(256)
        (tmp_path / "bad.onnx").write_bytes(bytes(bad))
        p = subprocess.run([cli, "run", tmp_path / "bad.onnx", "--input", f"image={tmp_path / 'img.npy'}",
                            "--output-dir", tmp_path / "out"], capture_output=True, text=True, errors="replace",
                           timeout=120)
        assert p.returncode in (0, 1), f"trial {trial}: exit {p.returncode}: {p.stderr}"
        if p.returncode == 1:
            assert "cinfer:" in p.stderr


def test_flags_take_equals_values_in_any_order(cli, tmp_path):
    """getopt_long: --flag=value as well as --flag value, flags before or after the model."""
    out = run(cli, "bench", "--batch=3", "--iters", "2", MODELS / "mlp.onnx", "--warmup=0", "--option=threads=1")
    assert "batch: 3" in out and "iters: 2" in out and "threads: 1" in out
    run(cli, "run", f"--input=x={MODELS / 'mlp_x.npy'}", "--output-dir", tmp_path, MODELS / "mlp.onnx")
    assert (tmp_path / "probs.npy").exists()
    assert "option --iters needs a value" in run(cli, "bench", MODELS / "mlp.onnx", "--iters", expect=2)
    assert "--iters wants a positive integer, got '-5'" in run(cli, "bench", MODELS / "mlp.onnx", "--iters", "-5", expect=2)
    assert "unknown option --bogus" in run(cli, "bench", MODELS / "mlp.onnx", "--bogus=1", expect=2)
    assert "unexpected argument 'extra'" in run(cli, "bench", MODELS / "mlp.onnx", "extra", expect=2)


def test_unknown_command_and_option(cli):
    assert "unknown command" in run(cli, "frobnicate", expect=2)
    assert "unknown option" in run(cli, "inspect", MODELS / "mlp.onnx", "--bogus", "1", expect=2)
