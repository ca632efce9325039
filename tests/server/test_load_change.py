"""Load under change: a mixed stream of inferences on three models from several client threads while two other
threads reload, unload and load those models, for about a minute (CINFER_LOAD_CHANGE_SECONDS, default 60), in cycles.

What is allowed, exactly:
  * every answer with status 200 is correct: it names the model asked for, and its output is x @ W + offset with that
    model's own weights W and one of the offsets that model's files have held (a reload rewrites the file with the
    other offset, so an answer from the old or the new version is right, anything else is not);
  * a request may be refused only before it was accepted, and only because the model is unloaded at that moment:
    503 with the error "model '<name>' is not ready: unloaded". A request the server accepted (looked the model up)
    is answered by that version even when the version is reloaded or unloaded meanwhile, so "unloading", a 5xx for
    any other reason, a dropped connection or a wrong answer fails the test;
  * every reload, load and unload answers 200.

At the end of each cycle the clients and the mutators pause, every model is loaded again, and the server's open
descriptors (/proc/<pid>/fd) must equal exactly the baseline taken before the first cycle (after each model answered
once): no socket, model file or engine descriptor outlives its request or version. The RSS is recorded at the same
points (printed per cycle); the first cycle is the warm-up (glibc's thread-stack cache, the allocator's arenas and
the engine's pools reach their working size). From then on:
  * RSS_BOUND_MIB: no later cycle ends more than 4 MiB above the warm-up cycle's RSS. Each model holds 1 MiB of
    weights and a cycle reloads or unloads a model 15 or more times (counted and asserted), so a leak of even a
    quarter of one version per reload grows RSS by more than the bound over the measured cycles; measured growth
    is below 1 MiB (allocator noise under the concurrent load);
  * no steady climb: the RSS does not rise by more than 256 KiB at every one of three or more successive cycles.
The server runs with MALLOC_MMAP_THRESHOLD_=131072 (as bench/soak/soak.py, which explains it): otherwise glibc's
dynamic threshold keeps freed weight buffers resident in its arenas and the RSS reflects retained free memory, not
leaks. Under the sanitizer build the RSS checks are off (ASan's quarantine holds freed memory; leaks are
LeakSanitizer's job there, through the server's exit status); the descriptor and answer checks stay.

No timing is asserted: pauses are waited for with generous timeouts, for a loaded 2-core CI machine."""
import json
import os
import random
import threading
import time

import numpy as np
import pytest
from onnx import TensorProto, helper

from conftest import _model, write_model
from proc_stats import fd_count, fd_targets, rss_bytes, settled_fd_count

SECONDS = float(os.environ.get("CINFER_LOAD_CHANGE_SECONDS", "60"))
CYCLES = 5  # one warm-up + four measured
RSS_BOUND_MIB = 4.0
STEADY_CLIMB_KIB = 256
FEATURES, OUTPUTS = 256, 1024  # W: 256 x 1024 FP32 = 1 MiB per model
MiB = 1 << 20
SANITIZED = "detect_leaks=0" in os.environ.get("ASAN_OPTIONS", "") or "asan" in os.environ.get("LD_PRELOAD", "")

# name -> (its weights' seed, its two offsets, its config.pbtxt or None to auto-complete, its input's first dim)
MODELS = {
    "lc_fixed": (1, (101, 102), """
name: "lc_fixed"
max_batch_size: 0
input [ { name: "x", data_type: TYPE_FP32, dims: [ 2, 256 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 2, 1024 ] } ]
instance_group [ { kind: KIND_CPU, count: 2 } ]
""", 2),
    "lc_batched": (2, (201, 202), """
name: "lc_batched"
max_batch_size: 8
input [ { name: "x", data_type: TYPE_FP32, dims: [ 256 ] } ]
output [ { name: "y", data_type: TYPE_FP32, dims: [ 1024 ] } ]
dynamic_batching { max_queue_delay_microseconds: 500 }
""", "n"),
    "lc_auto": (3, (301, 302), None, "n"),
}


def weights(seed):
    return np.random.default_rng(seed).integers(0, 2, (FEATURES, OUTPUTS)).astype(np.float32)


def matmul_model(name, offset):
    """x [rows, 256] @ W (0/1 entries, 1 MiB) + offset -> y [rows, 1024]: small integer inputs give exact answers."""
    seed, _, _, rows = MODELS[name]
    V = helper.make_tensor_value_info
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Add", ["m", "off"], ["y"])]
    return _model(name, nodes, [V("x", TensorProto.FLOAT, [rows, FEATURES])], [V("y", TensorProto.FLOAT, [rows, OUTPUTS])],
                  {"W": weights(seed), "off": np.array(float(offset), np.float32)})


class Gate:
    """Lets the workers run between pauses: close() waits until none is inside, reopen() lets them go on."""

    def __init__(self):
        self.cv, self.open, self.busy, self.halt = threading.Condition(), True, 0, False

    def enter(self):
        with self.cv:
            while not self.open and not self.halt:
                self.cv.wait()
            if self.halt:
                return False
            self.busy += 1
            return True

    def leave(self):
        with self.cv:
            self.busy -= 1
            self.cv.notify_all()

    def close(self, timeout=300):
        with self.cv:
            self.open = False
            assert self.cv.wait_for(lambda: self.busy == 0, timeout), "the workers did not pause within 300 s"

    def reopen(self, halt=False):
        with self.cv:
            self.open, self.halt = True, halt
            self.cv.notify_all()


@pytest.fixture
def lc_repo(tmp_path):
    repo = tmp_path / "models"
    for name, (_, offsets, config, _) in MODELS.items():
        write_model(repo, name, {1: matmul_model(name, offsets[0])}, config)
    return repo


def replace_model(repo, tmp_path, name, offset):
    """Rewrites the model's file with another offset, atomically (a concurrent load never reads half a file)."""
    tmp = tmp_path / f"{name}.{threading.get_ident()}.tmp"
    tmp.write_bytes(matmul_model(name, offset).SerializeToString())
    os.replace(tmp, repo / name / "1" / "model.onnx")


def test_load_under_change(start_server, lc_repo, tmp_path):
    env_before = os.environ.get("MALLOC_MMAP_THRESHOLD_")
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"
    try:
        s = start_server(lc_repo, "--model-control-mode", "explicit", "--load-model", "*", "--http-threads", "4")
    finally:
        if env_before is None:
            os.environ.pop("MALLOC_MMAP_THRESHOLD_")
        else:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = env_before
    pid = s.proc.pid
    names = sorted(MODELS)
    W = {n: weights(MODELS[n][0]) for n in names}
    gate = Gate()
    lock = threading.Lock()
    answered = {n: 0 for n in names}
    refused = {n: 0 for n in names}
    changes = {"reload": 0, "unload": 0, "load": 0}
    errors = []

    def infer(name, rng):
        rows = MODELS[name][3] if MODELS[name][3] != "n" else int(rng.integers(1, 5))
        x = rng.integers(-2, 3, (rows, FEATURES)).astype(np.float32)
        body = json.dumps({"inputs": [{"name": "x", "shape": [rows, FEATURES], "datatype": "FP32", "data": x.ravel().tolist()}]})
        try:
            status, _, data = s.request("POST", f"/v2/models/{name}/infer", body, timeout=300)
        except OSError as e:
            return f"{name}: connection failed: {e}"
        if status == 503 and json.loads(data).get("error") == f"model '{name}' is not ready: unloaded":
            with lock:
                refused[name] += 1
            return None
        if status != 200:
            return f"{name}: {status} {data[:200]!r}"
        reply = json.loads(data)
        out = reply["outputs"][0]
        y = np.array(out["data"], np.float64).reshape(out["shape"]) - x.astype(np.float64) @ W[name]
        if reply["model_name"] != name or not any(np.all(y == o) for o in MODELS[name][1]):
            return f"{name}: wrong answer from {reply['model_name']}: y - x @ W = {np.unique(y)[:4]}"
        with lock:
            answered[name] += 1
        return None

    def client(k):
        rng = np.random.default_rng(100 + k)
        while gate.enter():
            try:
                err = infer(names[int(rng.integers(len(names)))], rng)
            finally:
                gate.leave()
            if err:
                with lock:
                    errors.append(err)

    def post(path, what):
        status, body = s.json("POST", path)
        with lock:
            if status != 200:
                errors.append(f"{what}: {status} {body}")
            else:
                changes[what] += 1

    def reloader():
        r, offset_index = random.Random(1), {n: 0 for n in names}
        while gate.enter():
            try:
                name = r.choice(names)
                offset_index[name] ^= 1
                replace_model(lc_repo, tmp_path, name, MODELS[name][1][offset_index[name]])
                post(f"/v2/repository/models/{name}/load", "reload")
            finally:
                gate.leave()
            time.sleep(r.uniform(0.05, 0.3))

    def unloader():
        r = random.Random(2)
        while gate.enter():
            try:
                name = r.choice(names)
                post(f"/v2/repository/models/{name}/unload", "unload")
                time.sleep(r.uniform(0.05, 0.3))  # clients meet the unloaded model meanwhile
                post(f"/v2/repository/models/{name}/load", "load")
            finally:
                gate.leave()
            time.sleep(r.uniform(0.05, 0.3))

    # the baseline: every model loaded and answering once, no client connection open
    rng = np.random.default_rng(0)
    for n in names:
        assert infer(n, rng) is None
    fd_base, rss = settled_fd_count(pid), []
    workers = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(6)]
    workers += [threading.Thread(target=reloader, daemon=True), threading.Thread(target=unloader, daemon=True)]
    for t in workers:
        t.start()
    per_cycle = []
    try:
        for cycle in range(CYCLES):
            before = dict(changes)
            time.sleep(SECONDS / CYCLES)
            gate.close()
            for n in names:  # every model back in service, as at the baseline
                status, body = s.json("POST", f"/v2/repository/models/{n}/load")
                assert status == 200, body
            deadline = time.time() + 60  # a closed connection's descriptor goes once the server noticed the close
            while fd_count(pid) != fd_base and time.time() < deadline:
                time.sleep(0.1)
            fds = fd_count(pid)
            rss.append(rss_bytes(pid))
            done = {k: changes[k] - before[k] for k in changes}
            per_cycle.append(done)
            print(f"cycle {cycle}{' (warm-up)' if cycle == 0 else ''}: rss {rss[-1] / MiB:.1f} MiB, descriptors {fds} "
                  f"(baseline {fd_base}), answered {sum(answered.values())}, refused while unloaded "
                  f"{sum(refused.values())}, {done}", flush=True)
            assert fds == fd_base, f"cycle {cycle}: {fds} descriptors open, baseline {fd_base}: {fd_targets(pid)}"
            assert not errors, f"cycle {cycle}: {len(errors)} failures, e.g. {errors[:5]}"
            gate.reopen()
    finally:
        gate.reopen(halt=True)
        for t in workers:
            t.join(timeout=300)
    assert not errors, f"{len(errors)} failures, e.g. {errors[:5]}"
    assert all(answered[n] > 0 for n in names), f"a model was never answered: {answered}"
    assert settled_fd_count(pid) == fd_base
    if SANITIZED:
        print("sanitizer build: RSS checks off (ASan's quarantine holds freed memory)")
        return
    # the bound means something only when every measured cycle changed the models often enough
    assert all(c["reload"] + c["unload"] >= 15 for c in per_cycle[1:]) or SECONDS < 60, \
        f"too few changes per cycle to bound a per-reload leak: {per_cycle}"
    growth = [(r - rss[0]) / MiB for r in rss[1:]]
    assert max(growth) <= RSS_BOUND_MIB, f"RSS grew {max(growth):.1f} MiB after the warm-up (bound {RSS_BOUND_MIB}): " \
        f"{[round(r / MiB, 1) for r in rss]}"
    steps = [(b - a) / 1024 for a, b in zip(rss[1:], rss[2:])]
    assert not all(st > STEADY_CLIMB_KIB for st in steps), f"RSS climbs at every cycle: {[round(r / MiB, 2) for r in rss]}"
