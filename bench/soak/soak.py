#!/usr/bin/env python3
"""Soak test of cinfer-server: perf_analyzer keeps a first model ("mlp") under load for --duration seconds while the
soak repeatedly loads a second model ("second", ~8 MiB of weights) through the explicit-mode repository API, runs a few
inferences on it, and unloads it. It asserts:

  * zero failed requests: every perf_analyzer run exits 0, every request to the second model succeeds, and the
    server's nv_inference_request_failure counters are all 0 at the end;
  * after each unload the memory the server reports for models returns exactly to its baseline: the
    cinfer_model_memory_bytes series are exactly those (and the values) of the baseline taken before the first
    cycle, and, when the server exposes cinfer_gpu_allocator_allocated_bytes (a GPU build with GPU instances), every
    allocator series equals its baseline exactly;
  * process RSS growth across the load/unload cycles stays under --rss-bound-mib (default 6 MiB), measured from
    the RSS after the warm-up cycles (--warmup-cycles, default 2: the first cycles grow the engine's thread pools and
    the small-object heap to their working size) to the largest RSS after any later unload. 6 MiB is less than ONE
    leaked copy of the second model's weights (8 MiB), so a leak of the weights on any single unload fails the run;
    the measured growth is ~0.5 MiB over 100+ cycles (small-object fragmentation under the concurrent load).

    The server runs with MALLOC_MMAP_THRESHOLD_=131072 (glibc's initial threshold, fixed): by default glibc raises
    the mmap threshold after the first large free, so later 8 MiB weight buffers come from its up to 8 x cores
    arenas and their freed pages stay resident. Without the setting RSS climbs to a plateau of about
    arenas x model size (measured: 12 -> 156 MiB over the first ~30 cycles on 2 cores, then flat): retained free
    memory, not a leak, but it would hide a real one. --glibc-default runs without it (and skips the RSS bound).

Each cycle prints a table row (stderr): time, RSS, the server's open descriptors (/proc/<pid>/fd), requests; the
summary holds both trends (rss_after_unload_mib, fds_after_unload).

Reload mode (--reload-every SECS): client threads keep every model under load (--model NAME=PATH.onnx, repeatable;
without one, the CPU models "mlp" and "second") while the soak, every SECS seconds, takes the next model in turn
and reloads it (POST load of the loaded model: the old version serves until the new one is ready, then drains),
then unloads it, reads the metrics, and loads it again. Checked:
  * zero failed requests: every answer is 200 and matches the model's first answer to the same input (within
    --rtol/--atol: on a GPU the batch a request joins may change the kernels); the one refusal allowed is 503
    "model '<name>' is not ready: unloaded" for a request that arrived while its model was unloaded (counted as
    refused, not failed: it was never accepted);
  * at the end, with the clients stopped and every model unloaded, the GPU allocator's allocated bytes
    (cinfer_gpu_allocator_allocated_bytes, per GPU) are exactly 0 (per cycle they are printed: after an unload they are
    the other models' weights and cached plans, which move with the batches those meet); reserved and pinned host memory
    (cinfer_gpu_allocator_reserved_bytes, ..._pinned_reserved_bytes) are printed per cycle beside it and, with
    --reserved-growth-mib X, may not exceed that baseline by more than X MiB;
  * the descriptors return exactly to their count before the clients started, once they stopped; RSS growth after
    the warm-up stays under --rss-bound-mib (when given; the default in this mode is none: large models' host
    staging depends on the batches formed).
The summary has a per-cycle list (cycles) with rss, descriptors, allocator, reserved and pinned bytes.

Usage:
  bench/soak/soak.py --duration 120                     # CI (the ctest server_soak runs this)
  bench/soak/soak.py --duration 1800 --json out.json    # the 30-minute soak recorded in bench/BENCHMARKS.md
  bench/soak/soak.py --reload-every 3 --duration 180    # reload mode on the CPU models
  bench/soak/soak.py --reload-every 5 --duration 540 --device cuda --model resnet50=W/models/resnet50.onnx \
      --model bert=W/models/bert.onnx --json gpu_soak.json   # the GPU soak (ResNet-50 + BERT on one GPU)
Exit status 0 when every check holds; the summary (JSON) goes to stdout and --json."""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "server"))
sys.path.insert(0, str(ROOT / "tests" / "models"))
sys.path.insert(0, str(ROOT / "tests" / "python"))
import builders  # noqa: E402
from conftest import Server, mlp_model, write_model  # noqa: E402
from proc_stats import fd_count, rss_bytes, settled_fd_count  # noqa: E402

MiB = 1 << 20


class SoakFailure(AssertionError):
    pass


def parse_metrics(text):
    """{(family, ((label, value), ...)): float} for every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or "")))
        out[(m.group(1), labels)] = float(m.group(4))
    return out


def family(metrics, name):
    return {k: v for k, v in metrics.items() if k[0] == name}


def second_model():
    """x [batch, 512] -> 2048 -> 512 classes: 8 MiB of FP32 weights, so a leaked copy shows in RSS."""
    model, _ = builders.mlp(np.random.default_rng(11), features=512, hidden=(2048,), classes=512)
    return model


class PerfLoad(threading.Thread):
    """perf_analyzer against "mlp", one short run after another until stop() (each run must exit 0)."""

    def __init__(self, perf, url, concurrency, workdir):
        super().__init__(daemon=True)
        self.perf, self.url, self.concurrency, self.workdir = perf, url, concurrency, workdir
        self.runs, self.requests, self.errors = 0, 0, []
        self._halt = threading.Event()

    def stop(self):
        self._halt.set()

    def run(self):
        while not self._halt.is_set():
            cmd = [self.perf, "-m", "mlp", "-u", self.url, "-i", "http", "--concurrency-range", str(self.concurrency),
                   "--measurement-mode", "time_windows", "--measurement-interval", "2000", "--max-trials", "3",
                   "--stability-percentage", "1000", "--input-tensor-format", "binary", "--output-tensor-format", "binary"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=self.workdir)
            self.runs += 1
            m = re.search(r"Client:\s*\n\s*Request count: (\d+)", r.stdout)
            if r.returncode != 0 or not m:
                self.errors.append(f"perf_analyzer run {self.runs} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
                return
            self.requests += int(m.group(1))


def infer_second(server, batch):
    x = np.random.default_rng(batch).standard_normal((batch, 512)).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}]})
    status, data = server.json("POST", "/v2/models/second/infer", body)
    if status != 200:
        raise SoakFailure(f"inference on the freshly loaded model failed with {status}: {data}")
    out = np.array(data["outputs"][0]["data"], np.float32).reshape(batch, 512)
    if not np.allclose(out.sum(axis=1), 1, atol=1e-3):  # softmax rows
        raise SoakFailure("the second model's outputs are not probabilities")


def allocator_equal(server, baseline_alloc, tries=20):
    """GPU path: every cinfer_gpu_allocator_allocated_bytes series equals its baseline. Sessions keep their activation
    arenas for their lifetime, so the first model's load does not move it; a few samples cover a batch's staging."""
    for _ in range(tries):
        now = family(parse_metrics(server.metrics()), "cinfer_gpu_allocator_allocated_bytes")
        if now == baseline_alloc:
            return None
        time.sleep(0.1)
    return now


def run(server_bin, perf, duration, cycle_pause=1.0, warmup_cycles=2, rss_bound_mib=6.0, concurrency=2, log=print,
        glibc_default=False):
    os.environ["CINFER_SERVER"] = server_bin
    import conftest
    conftest.SERVER = server_bin
    with tempfile.TemporaryDirectory(prefix="cinfer-soak-") as tmp:
        repo = pathlib.Path(tmp) / "models"
        write_model(repo, "mlp", {1: mlp_model()})
        write_model(repo, "second", {1: second_model()})
        saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
        if not glibc_default:
            os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"
        try:
            server = Server(repo, ("--model-control-mode", "explicit", "--load-model", "mlp", "--http-threads", "4"))
        finally:
            if saved is None:
                os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
            else:
                os.environ["MALLOC_MMAP_THRESHOLD_"] = saved
        summary = {"duration_s": duration, "glibc_default_malloc": glibc_default, "cycles": 0, "perf_runs": 0, "perf_requests": 0, "second_requests": 0,
                   "rss_bound_mib": rss_bound_mib}
        load = None
        try:
            base = parse_metrics(server.metrics())
            base_mem = family(base, "cinfer_model_memory_bytes")
            base_alloc = family(base, "cinfer_gpu_allocator_allocated_bytes")
            summary["gpu_allocator_checked"] = bool(base_alloc)
            if not base_mem or any(dict(k[1]).get("model") == "second" for k in base_mem):
                raise SoakFailure(f"unexpected baseline cinfer_model_memory_bytes: {base_mem}")
            summary["rss_start_mib"] = rss_bytes(server.proc.pid) / MiB
            load = PerfLoad(perf, server.url, concurrency, tmp)
            load.start()
            t0 = time.time()
            rss_after, fds_after = [], []
            log(f"{'cycle':>6} {'t s':>6} {'rss MiB':>8} {'fds':>5} {'perf runs':>9} {'perf requests':>13}")
            while time.time() - t0 < duration:
                cycle = summary["cycles"] + 1
                status, data = server.json("POST", "/v2/repository/models/second/load")
                if status != 200:
                    raise SoakFailure(f"cycle {cycle}: load of 'second' answered {status}: {data}")
                loaded = family(parse_metrics(server.metrics()), "cinfer_model_memory_bytes")
                held = sum(v for k, v in loaded.items() if dict(k[1]).get("model") == "second")
                if held < 8 * MiB:
                    raise SoakFailure(f"cycle {cycle}: the loaded model reports {held} bytes (expected >= 8 MiB)")
                for b in (1, 3, 4):
                    infer_second(server, b)
                    summary["second_requests"] += 1
                status, data = server.json("POST", "/v2/repository/models/second/unload")
                if status != 200:
                    raise SoakFailure(f"cycle {cycle}: unload of 'second' answered {status}: {data}")
                mem = family(parse_metrics(server.metrics()), "cinfer_model_memory_bytes")
                if mem != base_mem:
                    raise SoakFailure(f"cycle {cycle}: cinfer_model_memory_bytes after unload {mem} != baseline {base_mem}")
                if base_alloc:
                    bad = allocator_equal(server, base_alloc)
                    if bad is not None:
                        raise SoakFailure(f"cycle {cycle}: GPU allocator bytes after unload {bad} != baseline {base_alloc}")
                rss_after.append(rss_bytes(server.proc.pid))
                fds_after.append(fd_count(server.proc.pid))  # perf_analyzer's connections come and go: a trend
                summary["cycles"] = cycle
                if load.errors:
                    raise SoakFailure(load.errors[0])
                if not load.is_alive():
                    raise SoakFailure("perf_analyzer load stopped early")
                log(f"{cycle:>6} {time.time() - t0:>6.0f} {rss_after[-1] / MiB:>8.1f} {fds_after[-1]:>5} {load.runs:>9} "
                    f"{load.requests:>13}")
                time.sleep(cycle_pause)
            load.stop()
            load.join(timeout=300)
            if load.errors:
                raise SoakFailure(load.errors[0])
            summary["perf_runs"], summary["perf_requests"] = load.runs, load.requests
            if load.runs < 1 or load.requests < 1:
                raise SoakFailure(f"perf_analyzer completed no run in {duration} s")
            if summary["cycles"] <= warmup_cycles:
                raise SoakFailure(f"only {summary['cycles']} load/unload cycles (need more than {warmup_cycles})")
            ref = rss_after[warmup_cycles - 1]
            growth = (max(rss_after[warmup_cycles:]) - ref) / MiB
            summary.update(rss_reference_mib=ref / MiB, rss_end_mib=rss_after[-1] / MiB, rss_growth_mib=growth,
                           rss_after_unload_mib=[round(r / MiB, 1) for r in rss_after], fds_after_unload=fds_after)
            if rss_bound_mib is not None and growth > rss_bound_mib and not glibc_default:
                raise SoakFailure(f"RSS grew {growth:.1f} MiB across {summary['cycles'] - warmup_cycles} load/unload cycles "
                                  f"after warm-up (bound {rss_bound_mib} MiB): {summary['rss_after_unload_mib']}")
            final = parse_metrics(server.metrics())
            failures = {k: v for k, v in family(final, "nv_inference_request_failure").items() if v}
            if failures:
                raise SoakFailure(f"the server counted failed requests: {failures}")
            success = sum(v for k, v in family(final, "nv_inference_request_success").items() if dict(k[1])["model"] == "mlp")
            summary["server_mlp_successes"] = int(success)
            if success < load.requests:
                raise SoakFailure(f"the server counted {success} successful mlp requests, perf_analyzer {load.requests}")
        finally:
            if load:
                load.stop()
            rc = server.stop()
            summary["server_exit"] = rc
        if rc != 0:
            raise SoakFailure(f"server exit status {rc} after SIGTERM:\n{server.logs()[-4000:]}")
        return summary


GPU_FAMILIES = {"allocated": "cinfer_gpu_allocator_allocated_bytes", "reserved": "cinfer_gpu_allocator_reserved_bytes",
                "pinned": "cinfer_gpu_allocator_pinned_reserved_bytes"}


def gpu_memory(metrics):
    """{"allocated"|"reserved"|"pinned": {labels: bytes}} (empty dicts without GPU allocator metrics)."""
    return {k: {labels: v for (_, labels), v in family(metrics, f).items()} for k, f in GPU_FAMILIES.items()}


def failure_counts(metrics, name):
    return sum(v for k, v in family(metrics, "nv_inference_request_failure").items() if dict(k[1]).get("model") == name)


class ModelClients(threading.Thread):
    """One client thread on one model: the same inputs (from the model's metadata: floats random, integers 1,
    -1 dims 1) over and over through tritonclient's binary tensors; every answer is compared with the first."""

    UNLOADED = "is not ready: unloaded"

    def __init__(self, url, name, rtol, atol):
        super().__init__(daemon=True)
        import tritonclient.http as httpclient
        self.httpclient, self.url, self.name, self.rtol, self.atol = httpclient, url, name, rtol, atol
        self.ok = self.refused = 0
        self.failures, self.reference = [], None
        self._halt = threading.Event()
        from tritonclient.utils import triton_to_np_dtype
        meta_client = httpclient.InferenceServerClient(url)  # tritonclient's clients stay on the thread that made them
        meta = meta_client.get_model_metadata(name)
        meta_client.close()
        rng = np.random.default_rng(len(name))
        self.inputs = []
        for i in meta["inputs"]:
            shape = [1 if d < 0 else d for d in i["shape"]]
            dt = triton_to_np_dtype(i["datatype"])
            x = rng.standard_normal(shape).astype(dt) if np.issubdtype(dt, np.floating) else np.ones(shape, dt)
            t = httpclient.InferInput(i["name"], shape, i["datatype"])
            t.set_data_from_numpy(x, binary_data=True)
            self.inputs.append(t)
        self.outputs = [o["name"] for o in meta["outputs"]]

    def stop(self):
        self._halt.set()

    def run(self):
        from tritonclient.utils import InferenceServerException
        client = self.httpclient.InferenceServerClient(self.url, connection_timeout=300, network_timeout=300)
        while not self._halt.is_set():
            try:
                r = client.infer(self.name, self.inputs, outputs=[self.httpclient.InferRequestedOutput(o, binary_data=True)
                                                                        for o in self.outputs])
            except InferenceServerException as e:
                if str(e.status()) == "503" and f"model '{self.name}' {self.UNLOADED}" in (e.message() or ""):
                    self.refused += 1
                else:
                    self.failures.append(f"{self.name}: {e.status()} {e.message()}")
                continue
            except Exception as e:  # a dropped connection or a time-out is a failed request too
                self.failures.append(f"{self.name}: {type(e).__name__}: {e}")
                continue
            outs = [r.as_numpy(o) for o in self.outputs]
            if self.reference is None:
                self.reference = outs
            bad = [o for o, x, ref in zip(self.outputs, outs, self.reference)
                   if x.shape != ref.shape or not np.allclose(x.astype(np.float64), ref.astype(np.float64), rtol=self.rtol,
                                                              atol=self.atol, equal_nan=False)]
            if bad:
                self.failures.append(f"{self.name}: output {bad[0]} differs from the model's first answer to the same input")
            else:
                self.ok += 1
        client.close()


def run_reload(server_bin, models, duration, reload_every, clients_per_model=2, warmup_cycles=None, rss_bound_mib=None,
               reserved_growth_mib=None, device=None, precision=None, rtol=1e-2, atol=1e-2, log=print):
    """Reload mode (see the module's docstring). models: {name: ONNX path}, or None for the CPU models."""
    os.environ["CINFER_SERVER"] = server_bin
    import conftest
    conftest.SERVER = server_bin
    with tempfile.TemporaryDirectory(prefix="cinfer-soak-") as tmp:
        repo = pathlib.Path(tmp) / "models"
        if models:
            for name, path in models.items():
                (repo / name / "1").mkdir(parents=True)
                os.symlink(pathlib.Path(path).resolve(), repo / name / "1" / "model.onnx")
        else:
            write_model(repo, "mlp", {1: mlp_model()})
            write_model(repo, "second", {1: second_model()})
        names = sorted(p.name for p in repo.iterdir())
        warmup_cycles = len(names) if warmup_cycles is None else warmup_cycles  # one round: each model once
        args = ["--model-control-mode", "explicit", "--load-model", "*", "--http-threads", str(4 + 2 * len(names))]
        if device:
            args += ["--device", device]
        if precision:
            args += ["--precision", precision]
        saved = os.environ.get("MALLOC_MMAP_THRESHOLD_")
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"
        try:
            server = Server(repo, args)
        finally:
            if saved is None:
                os.environ.pop("MALLOC_MMAP_THRESHOLD_", None)
            else:
                os.environ["MALLOC_MMAP_THRESHOLD_"] = saved
        pid = server.proc.pid
        summary = {"mode": "reload", "models": names, "duration_s": duration, "reload_every_s": reload_every,
                   "device": device or "auto", "precision": precision, "cycles": [], "reloads": 0, "unloads": 0,
                   "server_failures": 0}
        clients = []
        try:
            fds_start = settled_fd_count(pid)
            summary["fds_start"] = fds_start
            for name in names:
                clients += [ModelClients(server.url, name, rtol, atol) for _ in range(clients_per_model)]
            for c in clients:
                c.start()
            time.sleep(min(reload_every, 5))  # every model answered before the first change
            baselines = {}  # per model: GPU memory after its first unload past the warm-up
            t0, cycle = time.time(), 0
            log(f"{'cycle':>5} {'t s':>6} {'model':>10} {'rss MiB':>8} {'fds':>5} {'alloc MiB':>10} {'reserved MiB':>12} "
                f"{'pinned MiB':>10} {'ok':>8} {'refused':>7} {'failed':>6}")
            while time.time() - t0 < duration:
                name = names[cycle % len(names)]
                cycle += 1
                summary["server_failures"] += failure_counts(parse_metrics(server.metrics()), name)
                status, data = server.json("POST", f"/v2/repository/models/{name}/load")  # reload under load
                if status != 200:
                    raise SoakFailure(f"cycle {cycle}: reload of '{name}' answered {status}: {data}")
                summary["reloads"] += 1
                time.sleep(reload_every / 2)
                summary["server_failures"] += failure_counts(parse_metrics(server.metrics()), name)
                status, data = server.json("POST", f"/v2/repository/models/{name}/unload")
                if status != 200:
                    raise SoakFailure(f"cycle {cycle}: unload of '{name}' answered {status}: {data}")
                summary["unloads"] += 1
                # The allocator's bytes after an unload are the other models' weights plus their sessions' cached plans,
                # which change with the batch sizes they meet and drop when those models are reloaded: no fixed value to
                # hold them to while the others run (the H100 run showed 838 -> 246 MiB). They are printed per cycle;
                # the exact check is at the end, with every model unloaded.
                mem = gpu_memory(parse_metrics(server.metrics()))
                if cycle > warmup_cycles and name in baselines and reserved_growth_mib is not None:
                    for kind in ("reserved", "pinned"):
                        for labels, v in mem[kind].items():
                            base = baselines[name][kind].get(labels, 0)
                            if v - base > reserved_growth_mib * MiB:
                                raise SoakFailure(f"cycle {cycle}: GPU {kind} bytes {dict(labels)} after unloading '{name}' "
                                                  f"grew {(v - base) / MiB:.1f} MiB over its baseline (bound "
                                                  f"{reserved_growth_mib} MiB)")
                if cycle > warmup_cycles and name not in baselines:
                    baselines[name] = mem
                status, data = server.json("POST", f"/v2/repository/models/{name}/load")
                if status != 200:
                    raise SoakFailure(f"cycle {cycle}: load of '{name}' after its unload answered {status}: {data}")
                row = {"cycle": cycle, "t_s": round(time.time() - t0, 1), "model": name, "rss_mib": round(rss_bytes(pid) / MiB, 1),
                       "fds": fd_count(pid), "ok": sum(c.ok for c in clients), "refused": sum(c.refused for c in clients),
                       "failed": sum(len(c.failures) for c in clients),
                       **{f"{k}_bytes": int(sum(v.values())) for k, v in mem.items()}}
                summary["cycles"].append(row)
                log(f"{cycle:>5} {row['t_s']:>6.0f} {name[:10]:>10} {row['rss_mib']:>8.1f} {row['fds']:>5} "
                    f"{row['allocated_bytes'] / MiB:>10.1f} {row['reserved_bytes'] / MiB:>12.1f} {row['pinned_bytes'] / MiB:>10.1f} "
                    f"{row['ok']:>8} {row['refused']:>7} {row['failed']:>6}")
                failures = [f for c in clients for f in c.failures]
                if failures:
                    raise SoakFailure(f"cycle {cycle}: {len(failures)} failed requests, e.g. {failures[:3]}")
                if not all(c.is_alive() for c in clients):
                    raise SoakFailure("a client thread stopped")
                time.sleep(reload_every / 2)
            for c in clients:
                c.stop()
            for c in clients:
                c.join(timeout=300)
            failures = [f for c in clients for f in c.failures]
            if failures:
                raise SoakFailure(f"{len(failures)} failed requests, e.g. {failures[:3]}")
            final = parse_metrics(server.metrics())
            summary["server_failures"] += sum(failure_counts(final, n) for n in names)
            summary.update(requests_ok=sum(c.ok for c in clients), requests_refused_unloaded=sum(c.refused for c in clients),
                           requests_failed=0, gpu_allocator_checked=bool(baselines and any(b["allocated"] for b in baselines.values())))
            if summary["server_failures"]:
                raise SoakFailure(f"the server counted {summary['server_failures']} failed requests")
            if any(c.ok == 0 for c in clients):
                raise SoakFailure(f"a model was never answered: {[(c.name, c.ok) for c in clients]}")
            # every model unloaded, nothing may stay allocated on any GPU: what a reload or an unload leaked shows here
            for name in names:
                status, data = server.json("POST", f"/v2/repository/models/{name}/unload")
                if status != 200:
                    raise SoakFailure(f"final unload of '{name}' answered {status}: {data}")
            left = gpu_memory(parse_metrics(server.metrics()))["allocated"]
            for _ in range(50):
                if not any(left.values()):
                    break
                time.sleep(0.1)
                left = gpu_memory(parse_metrics(server.metrics()))["allocated"]
            summary["gpu_allocated_after_unloading_all"] = {str(dict(k)): v for k, v in left.items()}
            if any(left.values()):
                raise SoakFailure(f"GPU allocator bytes with every model unloaded: {summary['gpu_allocated_after_unloading_all']} "
                                  f"(expected 0)")
            summary["fds_end"] = settled_fd_count(pid)
            if summary["fds_end"] != fds_start:
                raise SoakFailure(f"{summary['fds_end']} descriptors open once the clients stopped, {fds_start} before")
            rss = [row["rss_mib"] for row in summary["cycles"]]
            if len(rss) > warmup_cycles:
                ref = rss[warmup_cycles - 1] if warmup_cycles else rss[0]
                summary["rss_growth_mib"] = round(max(rss[warmup_cycles:]) - ref, 1)
                if rss_bound_mib is not None and summary["rss_growth_mib"] > rss_bound_mib:
                    raise SoakFailure(f"RSS grew {summary['rss_growth_mib']} MiB after the warm-up (bound {rss_bound_mib}): {rss}")
            elif rss_bound_mib is not None:
                raise SoakFailure(f"only {len(rss)} cycles: more than the {warmup_cycles} warm-up cycles are needed")
        finally:
            for c in clients:
                c.stop()
            rc = server.stop()
            summary["server_exit"] = rc
        if rc != 0:
            raise SoakFailure(f"server exit status {rc} after SIGTERM:\n{server.logs()[-4000:]}")
        return summary


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=os.environ.get("CINFER_SERVER", str(ROOT / "build" / "cinfer-server")))
    ap.add_argument("--perf", default=os.environ.get("CINFER_PERF_ANALYZER", str(ROOT / "scripts" / "perf_analyzer.sh")))
    ap.add_argument("--duration", type=float, default=120, help="seconds of load (default 120)")
    ap.add_argument("--warmup-cycles", type=int, help="default 2; reload mode: one per model")
    ap.add_argument("--rss-bound-mib", type=float, help="default 6; reload mode: none")
    ap.add_argument("--glibc-default", action="store_true", help="leave glibc's dynamic mmap threshold on (RSS bound off)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--json", help="also write the summary here")
    ap.add_argument("--reload-every", type=float, metavar="SECS",
                    help="reload mode: every SECS s reload the next model under load, unload it, check, load it again")
    ap.add_argument("--model", action="append", default=[], metavar="NAME=PATH",
                    help="reload mode: an ONNX model to serve (repeatable; default the CPU models mlp and second)")
    ap.add_argument("--device", help="reload mode: the server's --device (e.g. cuda)")
    ap.add_argument("--precision", help="reload mode: the server's --precision (e.g. fp16)")
    ap.add_argument("--clients-per-model", type=int, default=2)
    ap.add_argument("--reserved-growth-mib", type=float,
                    help="reload mode: bound on GPU reserved and pinned bytes above their baseline after an unload")
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--atol", type=float, default=1e-2)
    a = ap.parse_args()
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if a.reload_every:
            models = dict(m.split("=", 1) for m in a.model) if a.model else None
            s = run_reload(a.server, models, a.duration, a.reload_every, clients_per_model=a.clients_per_model,
                           warmup_cycles=a.warmup_cycles, rss_bound_mib=a.rss_bound_mib,
                           reserved_growth_mib=a.reserved_growth_mib, device=a.device, precision=a.precision, rtol=a.rtol,
                           atol=a.atol, log=log)
        else:
            s = run(a.server, a.perf, a.duration, warmup_cycles=2 if a.warmup_cycles is None else a.warmup_cycles,
                    rss_bound_mib=6.0 if a.rss_bound_mib is None else a.rss_bound_mib,
                    concurrency=a.concurrency, log=log, glibc_default=a.glibc_default)
    except SoakFailure as e:
        print(f"soak FAILED: {e}", file=sys.stderr)
        return 1
    text = json.dumps(s, indent=1)
    print(text)
    if a.json:
        pathlib.Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
