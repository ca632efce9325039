"""CUDA backend tests: the module loads on demand, devices are listed, sessions run on the GPU, weights are shared and
memory returns to the cache. Without a GPU the GPU tests skip with the reason the library gives, and the tests
that check the no-GPU behaviour (clear errors, CPU runs never loading CUDA) run instead."""
import ctypes
import os
import pathlib
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "python"))
from cinfer_ctypes import CinferError, Session, Tensor  # noqa: E402


@pytest.fixture(scope="module")
def gpus(lib):
    devices, why = lib.cuda_devices()
    return devices, why


def need_gpu(gpus):
    devices, why = gpus
    if not devices:
        pytest.skip(f"no usable CUDA device: {why}")
    return devices


def mlp_model(hidden=64):
    rng = np.random.default_rng(3)
    w1 = helper.make_tensor("w1", TensorProto.FLOAT, [16, hidden], rng.standard_normal((16, hidden)).astype(np.float32).ravel())
    b1 = helper.make_tensor("b1", TensorProto.FLOAT, [hidden], rng.standard_normal(hidden).astype(np.float32))
    w2 = helper.make_tensor("w2", TensorProto.FLOAT, [hidden, 4], rng.standard_normal((hidden, 4)).astype(np.float32).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["logits"]),
             helper.make_node("Softmax", ["logits"], ["y"], axis=-1)]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_unknown_device_is_refused(lib):
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device="tpu")
    assert "device 'tpu' is not known" in e.value.message
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device="cuda:x")
    assert "expected cuda or cuda:N" in e.value.message


def test_without_gpu_cuda_is_a_clear_error(lib, gpus):
    devices, why = gpus
    if devices:
        pytest.skip("a GPU is present: the no-GPU error path is not reachable here")
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device="cuda")
    assert "device 'cuda'" in e.value.message
    assert why in e.value.message
    print(f"no-GPU message: {e.value.message}")


def test_cpu_run_never_loads_cuda(tmp_path):
    """A CPU-only program must not map libcudart/libcublas/libcudnn (they cost ~60 ms at start)."""
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp_model())
    script = (
        "import sys, numpy as np; sys.path.insert(0, %r)\n"
        "from cinfer_ctypes import Library, Session\n"
        "s = Session(Library(), path=%r, device='cpu')\n"
        "s.run({'x': np.ones((2, 16), np.float32)})\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('LOADED' if any(n in maps for n in ('libcudart', 'libcublas', 'libcudnn', 'libcinfer_cuda')) else 'CLEAN')\n"
    ) % (str(pathlib.Path(__file__).resolve().parents[1] / "python"), str(model))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=dict(os.environ), check=True)
    assert out.stdout.strip().endswith("CLEAN"), out.stdout + out.stderr


def test_bench_on_a_gpu_times_page_locked_io(cli, gpus):
    """`cinfer bench --device cuda` runs into page-locked outputs allocated once (cinfer_session_run_into), as its
    inputs are page-locked, and says so in its header."""
    need_gpu(gpus)
    model = pathlib.Path(__file__).resolve().parents[2] / "examples" / "models" / "mlp.onnx"
    r = subprocess.run([cli, "bench", str(model), "--device", "cuda", "--batch", "3", "--iters", "5", "--warmup", "1"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "io: page-locked" in r.stdout and "latency" in r.stdout, r.stdout


def test_cli_gpus(cli, gpus):
    r = subprocess.run([cli, "gpus"], capture_output=True, text=True)
    devices, why = gpus
    if not devices:
        assert r.returncode == 1 and why in r.stderr, r.stderr
        return
    assert r.returncode == 0, r.stderr
    for d in devices:
        assert d.uuid.decode() in r.stdout and d.name.decode() in r.stdout


def test_device_info(gpus):
    devices = need_gpu(gpus)
    for d in devices:
        assert d.uuid.decode().startswith(("GPU-", "MIG-")) and len(d.uuid) >= 40
        assert d.total_memory > 1 << 30 and d.multiprocessors > 0 and d.compute_major >= 7
        print(f"cuda:{d.index} {d.name.decode()} {d.uuid.decode()} cc {d.compute_major}.{d.compute_minor} "
              f"{d.total_memory >> 20} MiB {d.multiprocessors} SMs")


def test_out_of_range_device(lib, gpus):
    devices = need_gpu(gpus)
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device=f"cuda:{len(devices)}")
    assert f"cuda:{len(devices)} does not exist" in e.value.message


def test_pinned_host_alloc_without_gpu_is_a_clear_error(lib, gpus):
    devices, why = gpus
    if devices:
        pytest.skip("a GPU is present: the no-GPU error path is not reachable here")
    p = ctypes.c_void_p(1)
    assert lib.lib.cinfer_cuda_host_alloc(0, 4096, ctypes.byref(p)) == 3  # CINFER_ERR_UNSUPPORTED
    assert not p.value
    assert why in lib.lib.cinfer_last_error().decode()
    lib.lib.cinfer_cuda_host_free(0, None)  # NULL is ignored


def test_pinned_host_memory_feeds_a_run(lib, gpus):
    """Inputs in cinfer_cuda_host_alloc memory (the server's batch buffers) give the same outputs as ordinary
    memory, and the memory shows in pinned_reserved_bytes until it goes back to the cache."""
    need_gpu(gpus)
    data = mlp_model()
    cpu, gpu = Session(lib, data, device="cpu"), Session(lib, data, device="cuda:0")
    before = lib.cuda_memory_stats(0).pinned_reserved_bytes
    p = ctypes.c_void_p()
    n = 64 * 16
    # more than the cache holds (earlier tests leave blocks there), so no cached block can serve it
    size = max(n * 4, before + (1 << 20))
    lib.check(lib.lib.cinfer_cuda_host_alloc(0, size, ctypes.byref(p)))
    try:
        assert p.value and p.value % 64 == 0
        x = np.ctypeslib.as_array((ctypes.c_float * n).from_address(p.value)).reshape(64, 16)
        for seed in (1, 2):
            x[:] = np.random.default_rng(seed).standard_normal((64, 16)).astype(np.float32)
            np.testing.assert_allclose(gpu.run({"x": x})[0], cpu.run({"x": x.copy()})[0], rtol=1e-5, atol=1e-6)
            st = gpu.last_run_stats()
            assert (st.host_to_device_copies, st.host_to_device_bytes) == (1, x.nbytes)
        assert lib.cuda_memory_stats(0).pinned_reserved_bytes >= before + size
    finally:
        lib.lib.cinfer_cuda_host_free(0, p)


def test_run_into_pinned_and_pageable_outputs(lib, gpus):
    """cinfer_session_run_into on a GPU: outputs land in the caller's page-locked buffer (DMA from device memory)
    or ordinary one (through the staging buffer) with the CPU's values; one device-to-host copy either way."""
    need_gpu(gpus)
    data = mlp_model()
    cpu, gpu = Session(lib, data, device="cpu"), Session(lib, data, device="cuda:0")
    x = np.random.default_rng(5).standard_normal((64, 16)).astype(np.float32)
    want = cpu.run({"x": x})[0]
    p = ctypes.c_void_p()
    lib.check(lib.lib.cinfer_cuda_host_alloc(0, want.nbytes, ctypes.byref(p)))
    try:
        pinned = np.ctypeslib.as_array((ctypes.c_float * want.size).from_address(p.value)).reshape(want.shape)
        for out in (pinned, np.empty_like(want)):
            out[:] = np.nan
            gpu.run_into({"x": x}, [out])
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
            st = gpu.last_run_stats()
            assert (st.device_to_host_copies, st.device_to_host_bytes) == (1, want.nbytes)
    finally:
        lib.lib.cinfer_cuda_host_free(0, p)


def test_run_matches_cpu_and_counts_copies(lib, gpus):
    need_gpu(gpus)
    data = mlp_model()
    cpu, gpu = Session(lib, data, device="cpu"), Session(lib, data, device="cuda:0")
    for batch in (1, 7, 64, 7):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        ref, got = cpu.run({"x": x})[0], gpu.run({"x": x})[0]
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
        st = gpu.last_run_stats()
        assert (st.host_to_device_copies, st.device_to_host_copies) == (1, 1)
        assert st.host_to_device_bytes == x.nbytes and st.device_to_host_bytes == ref.nbytes


def test_blocking_wait_gives_the_same_results(lib, gpus):
    """gpu_wait=block (cinfer-server: cinfer_gpu_wait) waits on a blocking event instead of spinning: the same outputs
    as the spinning session, bit for bit, at several batches; a bad value is refused with its name."""
    need_gpu(gpus)
    data = mlp_model()
    spin, block = Session(lib, data, device="cuda:0"), Session(lib, data, device="cuda:0", options={"gpu_wait": "block"})
    for batch in (1, 33, 256):
        x = np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)
        np.testing.assert_array_equal(block.run({"x": x})[0], spin.run({"x": x})[0])
    with pytest.raises(CinferError, match="session option 'gpu_wait': 'sleep' is not spin or block"):
        Session(lib, data, device="cuda:0", options={"gpu_wait": "sleep"})


def test_weights_shared_and_memory_returns(lib, gpus):
    """Sessions of one model share one weights upload; after they go, allocated bytes return to the baseline."""
    need_gpu(gpus)
    data = mlp_model(hidden=4096)  # 16x4096 + 4096 + 4096x4 floats = ~330 KB of weights
    before = lib.cuda_memory_stats(0).allocated_bytes
    a = Session(lib, data, device="cuda:0")
    one = lib.cuda_memory_stats(0).allocated_bytes
    second = ctypes.c_void_p()  # a second session on the same model
    lib.check(lib.lib.cinfer_session_create(a.model, b"cuda:0", None, None, 0, ctypes.byref(second)))
    two = lib.cuda_memory_stats(0).allocated_bytes
    per_session = two - one  # workspace: no second copy of the weights
    weights = one - before - per_session
    assert weights >= 330_000, (before, one, two)
    other = Session(lib, data, device="cuda:0")  # another model (same bytes): its own weights
    three = lib.cuda_memory_stats(0).allocated_bytes
    assert three - two == one - before, (before, one, two, three)
    x = np.ones((8, 16), np.float32)
    np.testing.assert_allclose(a.run({"x": x})[0], other.run({"x": x})[0], rtol=0, atol=0)
    lib.lib.cinfer_session_free(second)
    a.close()
    other.close()
    after = lib.cuda_memory_stats(0)
    assert after.allocated_bytes == before, (before, after.allocated_bytes)
    assert after.reserved_bytes >= after.allocated_bytes


def test_memory_limit_gives_clear_oom(lib, gpus):
    need_gpu(gpus)
    lib.check(lib.lib.cinfer_cuda_empty_cache(0))
    lib.check(lib.lib.cinfer_cuda_set_memory_limit(0, 1 << 20, 0.0))  # 1 MiB: less than one session's workspace
    try:
        with pytest.raises(CinferError) as e:
            Session(lib, mlp_model(), device="cuda:0")
        assert e.value.status == 4, e.value.message  # CINFER_ERR_OUT_OF_MEMORY
        assert "cuda" in e.value.message.lower()
        print(f"OOM message: {e.value.message}")
    finally:
        lib.check(lib.lib.cinfer_cuda_set_memory_limit(0, 0, 0.0))
    assert lib.cuda_memory_stats(0).num_ooms >= 1


STICKY_SCRIPT = r"""
import os, sys, numpy as np
sys.path.insert(0, %(py)r)
from cinfer_ctypes import CinferError, Library, Session
lib = Library()
data = open(%(model)r, 'rb').read()
x = np.ones((2, 16), np.float32)
healthy = Session(lib, data, device='cuda:0')
healthy.run({'x': x})
os.environ['CINFER_FAULT_NODE'] = 'Softmax_4'  # read at session creation: only this session injects
faulty = Session(lib, data, device='cuda:0')
try:
    faulty.run({'x': x})
    print('FAULTY RUN SUCCEEDED')
except CinferError as e:
    print('FAULT:', e.message)
try:
    healthy.run({'x': x})
    print('HEALTHY RUN SUCCEEDED')
except CinferError as e:
    print('REFUSED:', e.message)
try:
    Session(lib, data, device='cuda:0')
    print('NEW SESSION CREATED')
except CinferError as e:
    print('NEW SESSION REFUSED:', e.message)
print('FAILED FLAG:', lib.cuda_devices()[0][0].failed)
"""


def test_sticky_error_poisons_the_device(tmp_path, gpus):
    """An illegal address (injected) loses the context: the device is marked failed and every session refuses."""
    need_gpu(gpus)
    model = tmp_path / "mlp.onnx"
    model.write_bytes(mlp_model())
    script = STICKY_SCRIPT % {"py": str(pathlib.Path(__file__).resolve().parents[1] / "python"), "model": str(model)}
    env = dict(os.environ, CINFER_FAULT_INJECTION="1")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    lines = out.stdout
    print(lines)
    assert "FAULT:" in lines and "illegal" in lines.lower(), lines + out.stderr
    assert "REFUSED:" in lines and "marked failed" in lines, lines
    assert "NEW SESSION REFUSED:" in lines, lines
    assert "FAILED FLAG: 1" in lines, lines


def test_capacity_planning(lib, gpus):
    """max_batch: creation refuses a batch whose activations would leave less than 20% of the device free."""
    devices = need_gpu(gpus)
    total = devices[0].total_memory
    Session(lib, mlp_model(), device="cuda:0", options={"max_batch": 1024}).close()  # a few MiB: fits
    # a row needs ~352 bytes (x 64, hidden 256, logits 16, y 16): this batch wants more than the whole device
    huge = total // 256
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device="cuda:0", options={"max_batch": huge})
    assert e.value.status == 4 and "capacity planning" in e.value.message and "20%" in e.value.message, e.value.message
    print(e.value.message)


def test_cuda_visible_devices_forms(cli, gpus):
    """The process sees devices through CUDA_VISIBLE_DEVICES: by index, by GPU-<uuid>, and none at all."""
    devices = need_gpu(gpus)
    uuid = devices[-1].uuid.decode()
    for value in (str(len(devices) - 1), uuid):
        r = subprocess.run([cli, "gpus"], capture_output=True, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=value))
        assert r.returncode == 0, r.stderr
        rows = [l for l in r.stdout.splitlines() if l.startswith("cuda:")]
        assert len(rows) == 1 and uuid in rows[0] and rows[0].startswith("cuda:0"), r.stdout
    r = subprocess.run([cli, "gpus"], capture_output=True, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES="-1"))
    assert r.returncode == 1 and "no CUDA device is visible" in r.stderr and "CUDA_VISIBLE_DEVICES=-1" in r.stderr, r.stderr


def test_cuda_graphs_replay_every_bucket_after_warm_up(lib, gpus):
    """Each plan runs plain once, is captured on its second run and replayed from then on: after warm-up, zero
    graph misses at every batch size, and replays give the plain run's results bitwise."""
    need_gpu(gpus)
    data = mlp_model(hidden=256)
    plain = Session(lib, data, device="cuda:0", options={"cuda_graphs": "0"})
    graphs = Session(lib, data, device="cuda:0")
    buckets = (1, 2, 4, 8, 16, 32)
    feeds = {b: np.random.default_rng(b).standard_normal((b, 16)).astype(np.float32) for b in buckets}
    for b in buckets:  # warm-up: plain run, then capture
        for _ in range(2):
            graphs.run({"x": feeds[b]})
    assert graphs.last_run_stats().graph_captures == len(buckets)
    for _ in range(3):
        for b in buckets:
            x = np.random.default_rng(100 + b).standard_normal((b, 16)).astype(np.float32)  # new data, same plan
            got = graphs.run({"x": x})[0]
            st = graphs.last_run_stats()
            assert st.graph_replayed == 1, f"batch {b}: the run did not replay its graph"
            np.testing.assert_array_equal(got, plain.run({"x": x})[0])
    st = graphs.last_run_stats()
    assert (st.graph_captures, st.graph_fallbacks) == (len(buckets), 0)
    assert plain.last_run_stats().graph_replayed == 0


@pytest.mark.parametrize("precision", ["fp16", "bf16", "tf32"])
def test_precisions_on_the_gpu_agree_with_fp32(lib, gpus, precision):
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
    import builders
    for name in ("cnn", "transformer_block"):
        model, make_inputs = getattr(builders, name)(np.random.default_rng(3))
        feeds = make_inputs(8, np.random.default_rng(4))
        data = model.SerializeToString()
        ref = Session(lib, data, device="cpu").run(feeds)[0]
        got = Session(lib, data, device="cuda:0", options={"precision": precision}).run(feeds)[0]
        assert got.dtype == np.float32
        err = float(np.max(np.abs(got - ref)) / np.max(np.abs(ref)))
        assert err < {"fp16": 5e-3, "bf16": 4e-2, "tf32": 5e-3}[precision], f"{name} {precision}: {err:.2e}"


def test_deterministic_mode_gives_bitwise_identical_runs(lib, gpus):
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
    import builders
    for name in ("cnn", "transformer_block"):
        model, make_inputs = getattr(builders, name)(np.random.default_rng(5))
        feeds = make_inputs(16, np.random.default_rng(6))
        for precision in ("fp32", "fp16"):
            s = Session(lib, model.SerializeToString(), device="cuda:0",
                        options={"deterministic": "1", "precision": precision})
            first = s.run(feeds)[0]
            for _ in range(9):
                np.testing.assert_array_equal(s.run(feeds)[0], first)


def attention_model(rank, qh, kvh, sq, skv, hd, mask=None, scale=None):
    """One Attention node (opset 23) on float32 inputs; the sessions' precision makes it half. mask: (dtype, shape)."""
    def shape(heads, seq):
        return ["b", seq, heads * hd] if rank == 3 else ["b", heads, seq, hd]
    inputs = [helper.make_tensor_value_info("q", TensorProto.FLOAT, shape(qh, sq)),
              helper.make_tensor_value_info("k", TensorProto.FLOAT, shape(kvh, skv)),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, shape(kvh, skv))]
    names = ["q", "k", "v"]
    if mask:
        inputs.append(helper.make_tensor_value_info("m", mask[0], list(mask[1])))
        names.append("m")
    attrs = {"q_num_heads": qh, "kv_num_heads": kvh} if rank == 3 else {}
    if scale is not None:
        attrs["scale"] = scale
    node = helper.make_node("Attention", names, ["y"], **attrs)
    g = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString()


ATTENTION_CASES = {
    # name: rank, qh, kvh, sq, skv, hd, mask, scale
    "bert_fp16_float_mask": (3, 12, 12, 128, 128, 64, (TensorProto.FLOAT, (2, 1, 1, 128)), None),
    "gqa_bool_mask_partial_tiles": (3, 4, 2, 70, 130, 64, (TensorProto.BOOL, (70, 130)), None),
    "rank4_per_head_mask_hd128": (4, 2, 2, 65, 64, 128, (TensorProto.FLOAT, (2, 2, 65, 64)), 0.1),
    "one_query_hd32_no_mask": (3, 2, 1, 1, 200, 32, None, None),
    "mask_shorter_than_keys": (3, 2, 2, 20, 130, 64, (TensorProto.FLOAT, (2, 1, 20, 100)), None),
    "odd_key_count_unpaired_mask_loads": (3, 2, 2, 33, 129, 64, (TensorProto.FLOAT, (2, 1, 33, 129)), None),
    # masks staged in shared memory with each key tile (16-byte aligned rows): one row for every sequence, shorter
    # than the keys (a partial 16-byte copy); one row per sequence, bool; a bool row per query, queries past the
    # end (8 warps: over 64 queries); the per-head float mask above (half in the session) is staged a row per query
    "staged_shared_mask_shorter_than_keys": (3, 2, 2, 100, 130, 64, (TensorProto.FLOAT, (1, 1, 1, 100)), None),
    "staged_bool_mask_hd32": (3, 4, 4, 40, 128, 32, (TensorProto.BOOL, (2, 1, 1, 128)), None),
    "staged_bool_rows_per_query": (3, 2, 2, 100, 128, 64, (TensorProto.BOOL, (2, 1, 100, 128)), None),
    # more work items (16 W queries of a head) than blocks resident on an H200: each block walks several, issuing
    # the next one's Q with the current one's last key tile
    "many_items_per_block_bool_rows": (3, 4, 2, 8200, 128, 32, (TensorProto.BOOL, (2, 1, 8200, 128)), None),
    "many_items_per_block_no_mask": (3, 4, 4, 8200, 130, 64, None, None),
}


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_elementwise_chain_kernel_matches_the_cpu(lib, gpus, precision):
    """The ElementwiseChain kernel (kernels/elementwise_chain.cu) against the CPU kernel at the same precision: all
    sixteen step kinds with float io (in fp16/bf16 the chain takes in the precision casts: float in, float out), on
    147 elements per image (a tail after the 4-element chunks); and a chain between two convolutions, which in
    fp16/bf16 reads and writes the half type."""
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_fusion import ALL_STEPS, chain_model, session_ops
    x = np.random.default_rng(1).normal(40.0, 300.0, (3, 3, 7, 7)).astype(np.float32)
    m = chain_model(ALL_STEPS, x_shape=("n", 3, 7, 7)).SerializeToString()
    want = Session(lib, m, device="cpu", options={"precision": precision}).run({"x": x})[0]
    s = Session(lib, m, device="cuda:0", options={"precision": precision, "profile": "1"})
    got = s.run({"x": x})[0]
    assert session_ops(lib, s) == {"ElementwiseChain": 1}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)  # float32 math on both, libm against CUDA's
    rng = np.random.default_rng(2)
    sandwich = helper.make_model(helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Sub", ["c1", "k1"], ["s1"]), helper.make_node("Mul", ["s1", "k2"], ["s2"]),
         helper.make_node("Tanh", ["s2"], ["s3"]), helper.make_node("Conv", ["s3", "w2"], ["y"], pads=[1, 1, 1, 1])],
        "sandwich", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 7, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(v, k) for k, v in {
            "w1": (rng.standard_normal((8, 3, 3, 3)) * 0.01).astype(np.float32),
            "w2": (rng.standard_normal((4, 8, 3, 3)) * 0.2).astype(np.float32),
            "k1": np.array(0.25, np.float32), "k2": np.array(1.5, np.float32)}.items()]),
        opset_imports=[helper.make_opsetid("", 18)], ir_version=9).SerializeToString()
    want = Session(lib, sandwich, device="cpu", options={"precision": precision}).run({"x": x})[0]
    s = Session(lib, sandwich, device="cuda:0", options={"precision": precision, "profile": "1"})
    got = s.run({"x": x})[0]
    assert session_ops(lib, s).get("ElementwiseChain") == 1
    tol = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 5e-2}[precision]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_fused_attention_of_an_unguarded_legacy_export_keeps_nan_rows_on_the_gpu(lib, gpus):
    """A legacy-exported self-attention (targets computed from Shape, no value_info, no NaN guard) fuses on the GPU
    too, and the fused kernel keeps the NaN of its fully masked query row ("cinfer_empty_rows_nan") as the CPU
    reference and the unguarded Softmax give it, where Attention's own rule would write zeros."""
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_fusion import attention_feeds, self_attention_model, session_ops
    m = self_attention_model(guard=False, mask="full", legacy=True, x_shape=["batch", "seq", 128],
                             mask_shape=["batch", 1, "seq", "seq"]).SerializeToString()
    feeds = attention_feeds(mask="full")
    want = Session(lib, m, device="cpu", options={"precision": "fp16"}).run(feeds)[0]
    s = Session(lib, m, device="cuda:0", options={"precision": "fp16", "profile": "1"})
    got = s.run(feeds)[0]
    assert session_ops(lib, s).get("Attention") == 1
    assert np.isnan(got[2, 1]).all() and np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=3e-2, atol=4e-3)  # NaNs in the same places compare equal


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_fused_attention_kernel_matches_the_cpu(lib, gpus, case, precision):
    """The fused Attention kernels (half precision: kernels/attention_flash.cu; float32: attention_flash_f32.cu)
    against the CPU reference kernel at the same precision: masks of each kind (bool, float broadcast over
    heads/queries, per head, shorter than the keys, none), GQA, 3-D and 4-D layouts, head sizes 32/64/128, query and
    key counts off the 64-row tiles, fully masked rows (zeros), a first key tile wholly masked, an odd key count
    (mask rows not paired for loads), masks read from global memory and staged in shared memory (one row, or a row
    per query)."""
    need_gpu(gpus)
    rank, qh, kvh, sq, skv, hd, mask, scale = ATTENTION_CASES[case]
    rng = np.random.default_rng(7)
    def data(heads, seq):
        return rng.standard_normal((2, seq, heads * hd) if rank == 3 else (2, heads, seq, hd)).astype(np.float32)
    feeds = {"q": data(qh, sq), "k": data(kvh, skv), "v": data(kvh, skv)}
    shared = False  # one mask for every sequence: no sequence wholly masked
    if mask:
        if mask[0] == TensorProto.BOOL:
            m = rng.random(mask[1]) > 0.3
            m[3 if m.ndim == 2 else 1, :] = False  # a fully masked query (or sequence 1 wholly, for a per-key mask)
        else:
            m = rng.standard_normal(mask[1]).astype(np.float32)
            m[..., :2] = -np.inf
            shared = m.shape[0] == 1
            if not shared:
                m[0, ..., 0, :] = -np.inf  # a fully masked query (or sequence 0 wholly, when the mask is per key)
                if m.shape[-1] > 64:  # a first key tile wholly masked, later ones open (the running max starts at -inf)
                    m[-1, ..., -1, :64] = -np.inf
        feeds["m"] = m
    data_model = attention_model(rank, qh, kvh, sq, skv, hd, mask, scale)
    exact = Session(lib, data_model, device="cpu").run(feeds)[0]
    want = Session(lib, data_model, device="cpu", options={"precision": precision}).run(feeds)[0]
    got = Session(lib, data_model, device="cuda:0", options={"precision": precision}).run(feeds)[0]
    assert got.shape == want.shape
    zero_rows = np.all(want == 0, axis=-1)
    assert zero_rows.any() == (bool(mask) and not shared), "the cases with a per-sequence mask have fully masked rows"
    assert np.array_equal(np.all(got == 0, axis=-1), zero_rows), "fully masked rows must be zeros on both"
    # The kernel keeps scores and probabilities in float32 where the reference rounds them to the half type, so it
    # is held to the reference's own distance from float32 (bf16's 8-bit mantissa puts that near 0.05), not to it.
    ref_err, err = np.abs(want - exact).max(), np.abs(got - exact).max()
    print(f"{case} {precision}: max error vs float32: kernel {err:.2e}, CPU reference {ref_err:.2e}")
    assert err <= 1.5 * ref_err + 1e-3, (err, ref_err)
    if precision == "fp16":
        np.testing.assert_allclose(got, want, rtol=3e-2, atol=4e-3)
    if precision == "fp32":  # float32 on both sides: only the order of the sums differs
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision,lowest", [("fp32", float(np.finfo(np.float32).min)), ("fp32", -1e9),
                                             ("bf16", -3e38), ("bf16", -1e20), ("bf16", -1e9)])
def test_attention_rows_masked_by_a_large_finite_value_average_v(lib, gpus, precision, lowest):
    """A mask of a large finite negative value over a whole row (-FLT_MAX or -1e9: the exporters' "minus infinity")
    leaves every key equally likely once the scores are absorbed into it, so the row is the mean of V on the CPU
    reference, and must be on the fused kernels too. float32 (attention_flash_f32.cu): scaling the mask by log2(e)
    before the softmax once made -FLT_MAX rows zeros or NaN. bfloat16, whose range is float32's (-FLT_MAX itself
    rounds to -inf there): the half kernel's rows whose maximum is past 1024 take the exact subtraction, where the
    rounded -max log2(e) of its fast path had made p at the maximum 2^18 (-1e9) or inf (-1e20). Both mask paths:
    staged (rows of 128) and loaded per score (rows of 130)."""
    need_gpu(gpus)
    tol = {"fp32": (1e-4, 1e-5), "bf16": (3e-2, 2e-2)}[precision]
    rng = np.random.default_rng(3)
    for sq, skv, hd in [(64, 128, 64), (70, 130, 64)]:
        data_model = attention_model(3, 2, 2, sq, skv, hd, (TensorProto.FLOAT, (2, 1, sq, skv)))
        feeds = {"q": rng.standard_normal((2, sq, 2 * hd)).astype(np.float32),
                 "k": rng.standard_normal((2, skv, 2 * hd)).astype(np.float32),
                 "v": rng.standard_normal((2, skv, 2 * hd)).astype(np.float32),
                 "m": np.zeros((2, 1, sq, skv), np.float32)}
        feeds["m"][0] = lowest  # every query of sequence 0
        feeds["m"][1, 0, 3, :] = lowest  # one query of sequence 1
        options = {"precision": precision}
        want = Session(lib, data_model, device="cpu", options=options).run(feeds)[0]
        got = Session(lib, data_model, device="cuda:0", options=options).run(feeds)[0]
        mean_v = feeds["v"].reshape(2, skv, 2, hd).mean(axis=1)  # [sequence, head, size]
        np.testing.assert_allclose(want[0].reshape(sq, 2, hd), np.broadcast_to(mean_v[0], (sq, 2, hd)), rtol=tol[0],
                                   atol=tol[1])  # the reference's rule, which the kernel is held to below
        np.testing.assert_allclose(got, want, rtol=tol[0], atol=tol[1])


def window_model(shape):
    """The image pipeline's windowing, clip((x - 40) / 400 + 0.5, 0, 1): one ElementwiseChain node."""
    consts = {"lv": 40.0, "wd": 400.0, "hf": 0.5, "lo": 0.0, "hi": 1.0}
    g = helper.make_graph(
        [helper.make_node("Sub", ["x", "lv"], ["a"]), helper.make_node("Div", ["a", "wd"], ["b"]),
         helper.make_node("Add", ["b", "hf"], ["c"]), helper.make_node("Clip", ["c", "lo", "hi"], ["y"])],
        "window", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))],
        [onnx.numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def load_cudart():
    """The CUDA runtime as a shared library, for test-made device buffers (cinfer links it statically; a second
    runtime in the process shares the device's primary context, so its pointers are the sessions' too)."""
    import glob
    candidates = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for d in [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]:
        candidates += sorted(glob.glob(os.path.join(d, "libcudart.so*")))
        candidates += sorted(glob.glob(os.path.join(d, "..", "..", "*", "lib", "libcudart.so*")))  # nvidia/*/lib wheels
    candidates += sorted(glob.glob("/usr/local/cuda*/lib64/libcudart.so*"))
    for c in candidates:
        try:
            rt = ctypes.CDLL(c)
        except OSError:
            continue
        rt.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        rt.cudaFree.argtypes = [ctypes.c_void_p]
        return rt
    return None


def cudart_or_skip():
    rt = load_cudart()
    if rt is None:
        pytest.skip("no libcudart.so found (searched the loader path, LD_LIBRARY_PATH and the CUDA wheels beside it, "
                    "/usr/local/cuda*/lib64) to make device buffers with")
    return rt


class DeviceBuffers:
    """cudaMalloc'd buffers for a test, freed together (free_all, in a finally)."""

    def __init__(self, rt):
        self.rt, self.held = rt, []

    def __call__(self, nbytes):
        p = ctypes.c_void_p()
        assert self.rt.cudaMalloc(ctypes.byref(p), nbytes) == 0
        self.held.append(p)
        return p.value

    def free_all(self):
        for p in self.held:
            self.rt.cudaFree(p)


def device_tensor(ptr, shape):
    """A float32 cinfer_tensor over device memory at ptr."""
    t = Tensor()
    t.dtype, t.ndim, t.data = 1, len(shape), ptr
    for d, n in enumerate(shape):
        t.dims[d] = n
    return t


def test_run_device_binds_large_caller_buffers_in_place(lib, gpus):
    """cinfer_session_run_device on cudaMalloc'd buffers: a one-node plan moving 32 MiB reads the caller's input
    and writes its output in place (caller_buffers_bound, no graph replay), run after run; an output 4 bytes off
    the 256-byte alignment, and a plan moving 16 KiB, go through the plan's own buffers. Every run gives the CPU's
    result, and the caller's input is left as it was."""
    need_gpu(gpus)
    big, small = (1, 2048, 2048), (1, 64, 64)
    x_big = np.random.default_rng(4).normal(40.0, 300.0, big).astype(np.float32)
    s_big = Session(lib, window_model(big), device="cuda:0")
    s_small = Session(lib, window_model(small), device="cuda:0")
    rt = cudart_or_skip()
    device_buffer = DeviceBuffers(rt)

    def run_device(session, x, x_dev, y_dev):
        assert rt.cudaMemcpy(x_dev, x.ctypes.data, x.nbytes, 1) == 0  # host to device
        ins, outs = (Tensor * 1)(device_tensor(x_dev, x.shape)), (Tensor * 1)(device_tensor(y_dev, x.shape))
        lib.check(lib.lib.cinfer_session_run_device(session.session, ins, 1, outs, 1, None))
        y, x_after = np.empty_like(x), np.empty_like(x)
        assert rt.cudaMemcpy(y.ctypes.data, y_dev, y.nbytes, 2) == 0  # device to host, after the legacy stream
        assert rt.cudaMemcpy(x_after.ctypes.data, x_dev, x.nbytes, 2) == 0
        assert np.array_equal(x_after, x), "the caller's input changed"
        return y, session.last_run_stats()

    try:
        want = Session(lib, window_model(big), device="cpu").run({"x": x_big})[0]
        x_dev, y_dev = device_buffer(x_big.nbytes), device_buffer(x_big.nbytes + 256)
        for i in range(3):
            y, st = run_device(s_big, x_big, x_dev, y_dev)
            np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)
            assert (st.caller_buffers_bound, st.graph_replayed) == (1, 0), f"run {i}"
        y, st = run_device(s_big, x_big, x_dev, y_dev + 4)  # 4 bytes past an allocation's 256-byte alignment
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-7)
        assert st.caller_buffers_bound == 0
        x_small = x_big[:, :64, :64].copy()
        want_small = Session(lib, window_model(small), device="cpu").run({"x": x_small})[0]
        for i in range(3):
            y, st = run_device(s_small, x_small, x_dev, y_dev)
            np.testing.assert_allclose(y, want_small, rtol=1e-6, atol=1e-7)
            assert st.caller_buffers_bound == 0, f"run {i}"
        assert st.graph_replayed == 1  # the third small run replays the plan's graph
    finally:
        device_buffer.free_all()


class PinnedArrays:
    """float32 arrays over cinfer_cuda_host_alloc'd (page-locked) memory for a test, freed together (free_all)."""

    def __init__(self, lib):
        self.lib, self.held = lib, []

    def __call__(self, shape):
        n = int(np.prod(shape))
        p = ctypes.c_void_p()
        self.lib.check(self.lib.lib.cinfer_cuda_host_alloc(0, n * 4, ctypes.byref(p)))
        self.held.append(p)
        return np.ctypeslib.as_array((ctypes.c_float * n).from_address(p.value)).reshape(shape)

    def free_all(self):
        for p in self.held:
            self.lib.lib.cinfer_cuda_host_free(0, p)
        self.held = []


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_chunked_copies_from_page_locked_memory(lib, gpus, precision):
    """cinfer_session_run_into of the image windowing (8 MiB in, 8 MiB out) between cinfer_cuda_host_alloc buffers
    goes in 4 chunks (copy streams beside the compute): 4 uploads and 4 downloads of 2 MiB, the same bytes as the
    unsplit session (copy_chunks=1) and the CPU's values, run after run (chunk graphs captured and replayed). With a
    pageable output the run is not split. Run alternately with cinfer_session_run on the same session."""
    need_gpu(gpus)
    shape = (1, 1024, 2048)
    n = int(np.prod(shape))
    chunked = Session(lib, window_model(shape), device="cuda:0", options={"precision": precision})
    whole = Session(lib, window_model(shape), device="cuda:0", options={"precision": precision, "copy_chunks": "1"})
    cpu = Session(lib, window_model(shape), device="cpu")
    pinned = PinnedArrays(lib)
    try:
        x, y, y_whole = pinned(shape), pinned(shape), pinned(shape)
        for seed in range(4):
            x[:] = np.random.default_rng(seed).normal(40.0, 300.0, shape).astype(np.float32)
            y[:], y_whole[:] = np.nan, np.nan
            chunked.run_into({"x": x}, [y])
            st = chunked.last_run_stats()
            assert (st.host_to_device_copies, st.device_to_host_copies) == (4, 4), f"run {seed}"
            assert (st.host_to_device_bytes, st.device_to_host_bytes) == (n * 4, n * 4)
            assert st.graph_replayed == (seed >= 1), f"run {seed}"  # first plain, then captured (and launched), replayed
            whole.run_into({"x": x}, [y_whole])
            assert whole.last_run_stats().host_to_device_copies == 1
            np.testing.assert_array_equal(y, y_whole)
            want = cpu.run({"x": x})[0]
            np.testing.assert_allclose(y, want, rtol=1e-6 if precision == "fp32" else 1e-3, atol=1e-6 if precision == "fp32" else 1e-3)
            np.testing.assert_array_equal(chunked.run({"x": x})[0], y)  # fresh (pageable) outputs: one copy each way
            assert (chunked.last_run_stats().host_to_device_copies, chunked.last_run_stats().device_to_host_copies) == (1, 1)
        pageable = np.full(shape, np.nan, np.float32)
        chunked.run_into({"x": x}, [pageable])
        assert chunked.last_run_stats().device_to_host_copies == 1
        np.testing.assert_array_equal(pageable, y)
    finally:
        pinned.free_all()


def assert_stream_order(spans):
    """Spans queued on one stream run one after another, and every span ends after it starts (0.5 us: the events'
    resolution)."""
    for sp in spans:
        assert sp["end_us"] >= sp["start_us"] - 0.5, sp
    for stream in {sp["stream"] for sp in spans}:
        on = [sp for sp in spans if sp["stream"] == stream]
        for a, b in zip(on, on[1:]):
            assert b["start_us"] >= a["end_us"] - 0.5, (a, b)


def test_timeline_shows_chunked_copies_beside_compute(lib, gpus):
    """Session option timeline=1 on the image windowing between page-locked buffers. In 4 chunks: per chunk an upload
    of 2 MiB on the upload stream, the compute on the session's stream, a download of 2 MiB on the download stream;
    each chunk's compute starts after its upload ends and its download after its compute. Whole (copy_chunks=1): one
    upload, compute and download on the session's stream, one after another. Outputs equal the untimed session's;
    the two sessions share the device's clock (the second session's run starts after the first's ended)."""
    need_gpu(gpus)
    shape = (1, 1024, 2048)
    mib2 = 2 << 20
    timed = Session(lib, window_model(shape), device="cuda:0", options={"timeline": "1"})
    whole = Session(lib, window_model(shape), device="cuda:0", options={"timeline": "1", "copy_chunks": "1"})
    untimed = Session(lib, window_model(shape), device="cuda:0")
    pinned = PinnedArrays(lib)
    try:
        x, y, y_whole, y_untimed = pinned(shape), pinned(shape), pinned(shape), pinned(shape)
        x[:] = np.random.default_rng(5).normal(40.0, 300.0, shape).astype(np.float32)
        for run in range(3):  # plain, captured, replayed: every one is timed
            timed.run_into({"x": x}, [y])
            spans = timed.timeline()
            assert [(sp["kind"], sp["stream"], sp["bytes"]) for sp in spans] == \
                [("upload", 1, mib2), ("compute", 0, 0), ("download", 2, mib2)] * 4, f"run {run}"
            assert_stream_order(spans)
            for c in range(4):
                up, comp, down = spans[3 * c:3 * c + 3]
                assert comp["start_us"] >= up["end_us"] - 0.5, (c, up, comp)
                assert down["start_us"] >= comp["end_us"] - 0.5, (c, comp, down)
            whole.run_into({"x": x}, [y_whole])
            whole_spans = whole.timeline()
            assert [(sp["kind"], sp["stream"], sp["bytes"]) for sp in whole_spans] == \
                [("upload", 0, 4 * mib2), ("compute", 0, 0), ("download", 0, 4 * mib2)], f"run {run}"
            assert_stream_order(whole_spans)
            assert whole_spans[0]["start_us"] >= spans[-1]["end_us"] - 0.5  # one clock for both sessions
            untimed.run_into({"x": x}, [y_untimed])
            np.testing.assert_array_equal(y, y_untimed)
            np.testing.assert_array_equal(y_whole, y_untimed)
        busy = sum(sp["end_us"] - sp["start_us"] for sp in spans)
        print(f"chunked run: {spans[-1]['end_us'] - spans[0]['start_us']:.1f} us end to end, {busy:.1f} us of spans")
    finally:
        pinned.free_all()


def test_timeline_of_staged_and_device_resident_runs(lib, gpus):
    """Pageable io goes through staging on the session's stream: upload, compute, download in order, for the plain
    first run and the graph replays after it. cinfer_session_run_device's copies are device copies on the session's
    stream around the compute (the timeline waits for the run, which returned without waiting). Reading the
    timeline of a session made without the option is refused."""
    need_gpu(gpus)
    x = np.random.default_rng(6).standard_normal((8, 16)).astype(np.float32)
    s = Session(lib, mlp_model(), device="cuda:0", options={"timeline": "1"})
    for run in range(3):
        s.run({"x": x})
        spans = s.timeline()
        assert [(sp["kind"], sp["stream"], sp["bytes"]) for sp in spans] == \
            [("upload", 0, x.nbytes), ("compute", 0, 0), ("download", 0, 8 * 4 * 4)], f"run {run}"
        assert_stream_order(spans)
    rt = cudart_or_skip()
    device_buffer = DeviceBuffers(rt)
    try:
        x_dev, y_dev = device_buffer(x.nbytes), device_buffer(8 * 4 * 4)
        assert rt.cudaMemcpy(x_dev, x.ctypes.data, x.nbytes, 1) == 0
        ins, outs = (Tensor * 1)(device_tensor(x_dev, x.shape)), (Tensor * 1)(device_tensor(y_dev, (8, 4)))
        lib.check(lib.lib.cinfer_session_run_device(s.session, ins, 1, outs, 1, None))
        spans = s.timeline()
        assert [(sp["kind"], sp["bytes"]) for sp in spans] == \
            [("device_copy", x.nbytes), ("compute", 0), ("device_copy", 8 * 4 * 4)]
        assert_stream_order(spans)
    finally:
        device_buffer.free_all()
    with pytest.raises(CinferError) as e:
        Session(lib, mlp_model(), device="cuda:0").timeline()
    assert "without the option timeline=1" in e.value.message


@pytest.mark.parametrize("count", [4096, 4104, 4099])
def test_half_gelu_is_within_a_float16_rounding_of_erf(lib, gpus, count):
    """Gelu on float16 values (kernels/elementwise_unary.cu's fast erfc form above -3, erfcf below) against GELU in
    float64 rounded to float16: at most one float16 step from it everywhere, on values across [-12, 12] with -3 and 0
    themselves, and the CPU's result on +-inf, NaN and +-65504; 4096 and 4104 (an odd chunk count: a thread's second
    chunk missing) take the 16-byte kernel, 4099 the per-element one."""
    need_gpu(gpus)
    g = helper.make_graph([helper.make_node("Gelu", ["x"], ["y"])], "gelu",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [count])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [count])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()
    x = np.linspace(-12.0, 12.0, count).astype(np.float16)
    x[:3] = [-3.0, 0.0, np.float16(-3.0) - np.float16(0.002)]
    specials = np.array([np.inf, -np.inf, np.nan, 65504.0, -65504.0], np.float16)
    x[3:8] = specials
    got = Session(lib, model, device="cuda:0").run({"x": x})[0]
    want_specials = Session(lib, model, device="cpu").run({"x": x})[0][3:8]
    np.testing.assert_array_equal(got[3:8], want_specials)  # +inf stays +inf; NaN where the CPU gives NaN
    assert got[3] == np.inf
    x, got = np.delete(x, range(3, 8)), np.delete(got, range(3, 8))
    from math import erfc, sqrt
    exact = np.array([0.5 * float(v) * erfc(-float(v) / sqrt(2.0)) for v in x])
    rounded = exact.astype(np.float16)
    steps = np.abs(got.astype(np.float64) - rounded) / np.spacing(np.abs(rounded)).astype(np.float64)
    assert got.dtype == np.float16 and steps.max() <= 1.0, (steps.max(), x[steps.argmax()])
    near = np.mean(got == rounded)
    print(f"count {count}: correctly rounded {near:.4f}, worst {steps.max():.2f} float16 steps")
    assert near > 0.99


@pytest.mark.parametrize("form", ["stack", "flat", "multi"])
@pytest.mark.parametrize("dim", [8, 3])
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_lookup_concat_kernel_matches_the_cpu(lib, gpus, form, dim, precision):
    """The fused table lookups (kernels/movement_index.cu lookup_concat_kernel) against the CPU kernel: 16-byte units
    where the row width allows (dim 8 at fp16, 32 bytes a row) and elements where it does not (dim 3), negative
    indices wrapping, one and several lookups per outer index; copies, so bit for bit."""
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_fusion import lookup_feeds, lookup_model, session_ops
    m = lookup_model(form, dim=dim).SerializeToString()
    feeds = lookup_feeds(form, batch=37, dim=dim)
    want = Session(lib, m, device="cpu", options={"precision": precision}).run(feeds)[0]
    s = Session(lib, m, device="cuda:0", options={"precision": precision, "profile": "1"})
    assert session_ops(lib, s).get("LookupConcat") == 1
    np.testing.assert_array_equal(s.run(feeds)[0], want)


def test_run_device_refuses_an_input_running_past_its_allocation(lib, gpus):
    """cinfer_session_run_device with inputs a and b in cudaMalloc'd blocks of 2 MiB: in range the sum is right, run
    after run. With b's range running 4 KiB past its block's end, starting inside the block a lies in or inside a
    block above the one a lies in (whose range the copy kernel's checks remember from a, and whose end b starts
    past), the checks send b to the copy calls, which refuse it: the run fails naming the device-to-device copy,
    nothing reads past the block, and the session's next run (in range) is right again."""
    need_gpu(gpus)
    rt = cudart_or_skip()
    n = 1 << 18  # 1 MiB of floats per input; a block holds exactly two
    g = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "sum",
                          [helper.make_tensor_value_info(k, TensorProto.FLOAT, [n]) for k in ("a", "b")],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    s = Session(lib, helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(), device="cuda:0")
    device_buffer = DeviceBuffers(rt)

    def run(a_at, b_at):
        ins = (Tensor * 2)(device_tensor(a_at, [n]), device_tensor(b_at, [n]))
        outs = (Tensor * 1)(device_tensor(out, [n]))
        lib.check(lib.lib.cinfer_session_run_device(s.session, ins, 2, outs, 1, None))
        y = np.empty(n, np.float32)
        assert rt.cudaMemcpy(y.ctypes.data, out, y.nbytes, 2) == 0
        return y

    try:
        low, high = sorted(device_buffer(8 * n) for _ in range(2))
        out = device_buffer(4 * n)
        host = np.random.default_rng(9).standard_normal(2 * n).astype(np.float32)
        for block in (low, high):
            assert rt.cudaMemcpy(block, host.ctypes.data, host.nbytes, 1) == 0
        want = host[:n] + host[n:]
        for a_at, b_good, b_past in ((low, low + 4 * n, low + 4 * n + 4096), (low, high + 4 * n, high + 4 * n + 4096)):
            for _ in range(3):
                np.testing.assert_array_equal(run(a_at, b_good), want)
            with pytest.raises(CinferError) as e:
                run(a_at, b_past)
            assert "device-to-device copy" in e.value.message, e.value.message
            np.testing.assert_array_equal(run(a_at, b_good), want)
    finally:
        device_buffer.free_all()


def _index_cases():
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_index_bounds import CASES
    return CASES


INDEX_CASES = _index_cases()


@pytest.mark.parametrize("case", INDEX_CASES, ids=[c[0] for c in INDEX_CASES])
def test_index_out_of_range_fails_on_the_gpu_as_on_the_cpu(lib, gpus, case):
    """CPU/CUDA parity of the index bounds check (docs/cuda.md "Indices out of range"): the GPU's index kernels report
    an index out of range through the session's flag, so the run fails with the CPU's error category
    (CINFER_ERR_INVALID_ARGUMENT) naming the op and node, where it used to read zeros and succeed; in range the
    outputs equal the CPU's bit for bit; the flag is cleared, so the next good run succeeds. Checked on a replayed
    CUDA graph (runs 3 and later replay the plan captured on run 2) and on plain launches."""
    need_gpu(gpus)
    _, model, good, want, bad, op, node, _ = case
    cpu = Session(lib, model, device="cpu")
    with pytest.raises(CinferError) as on_cpu:
        cpu.run(bad)
    for options in ({}, {"cuda_graphs": "0"}):
        gpu = Session(lib, model, device="cuda:0", options=options)
        for _ in range(3):  # plain, captured, replayed
            np.testing.assert_array_equal(gpu.run(good)[0], want)
        assert gpu.last_run_stats().graph_replayed == (0 if options else 1)
        for _ in range(2):  # a failure clears the flag: the next bad run fails again, the next good one succeeds
            with pytest.raises(CinferError) as on_gpu:
                gpu.run(bad)
            assert on_gpu.value.status == on_cpu.value.status == 1, (on_gpu.value, on_cpu.value)
            assert f"{op} node '{node}': an index is out of range" in on_gpu.value.message, on_gpu.value.message
            np.testing.assert_array_equal(gpu.run(good)[0], want)
        gpu.close()


def test_lookup_concat_index_out_of_range_fails_on_the_gpu_as_on_the_cpu(lib, gpus):
    """The fused table lookups (LookupConcat) report an index out of range too, on both backends."""
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_fusion import lookup_feeds, lookup_model, session_ops
    m = lookup_model("flat").SerializeToString()
    good = lookup_feeds("flat", batch=8)
    bad = dict(good, i1=good["i1"].copy())
    bad["i1"][5] = 50  # the tables have 50 rows
    cpu = Session(lib, m, device="cpu")
    gpu = Session(lib, m, device="cuda:0", options={"profile": "1"})
    assert session_ops(lib, gpu).get("LookupConcat") == 1
    np.testing.assert_array_equal(gpu.run(good)[0], cpu.run(good)[0])
    for s in (cpu, gpu):
        with pytest.raises(CinferError) as e:
            s.run(bad)
        assert e.value.status == 1 and "LookupConcat node '" in e.value.message and "out of range" in e.value.message, (
            e.value)
    np.testing.assert_array_equal(gpu.run(good)[0], cpu.run(good)[0])


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("shape,size", [((2, 96, 27, 27), 5), ((3, 8, 5, 7), 4), ((2, 4, 33), 9), ((5, 6), 1)])
def test_lrn_kernel_matches_the_cpu(lib, gpus, shape, size, precision):
    """LRN (kernels/reduce_norm.cu lrn_kernel) against the CPU kernel at the same precision: an AlexNet-sized window,
    an even one (one channel more after c than before), one wider than the channels, size 1, ranks 2 to 4."""
    need_gpu(gpus)
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit"))
    from test_lrn import lrn_model
    m = lrn_model(shape, size=size, alpha=0.05, beta=0.75, bias=1.0).SerializeToString()
    feeds = {"x": (np.random.default_rng(7).standard_normal(shape) * 3).astype(np.float32)}
    want = Session(lib, m, device="cpu", options={"precision": precision}).run(feeds)[0]
    got = Session(lib, m, device="cuda:0", options={"precision": precision}).run(feeds)[0]
    tol = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1e-2}[precision]  # float32 math on both; one half rounding apart
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
