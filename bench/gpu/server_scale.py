#!/usr/bin/env python3
"""cinfer-server with one model behind perf_analyzer (system shared memory, so loopback is not the limit), once per
placement: by default every visible GPU (the default placement: one instance per GPU) and then the same server
restricted to GPU 0 with CUDA_VISIBLE_DEVICES. Per concurrency level: throughput, p50/p99, the GPUs' utilisation
(the server's own nv_gpu_utilization, sampled while the level runs), executions per instance (least-loaded dispatch)
and the batch sizes the batcher formed; then the engine alone (`cinfer bench`) at the most common formed batch size,
so the server's share of the engine's offline throughput shows. Prints markdown tables and writes result.json.

For the two-GPU scaling issue (nvidia-h200-x2) and the server issue's H200 goal (ResNet-50 fp16 at concurrency 64
with system shared memory >= 90% of the engine's offline throughput at the formed batch size):

  server_scale.py --server B/cinfer-server --cli B/cinfer --perf PA --onnx resnet50.onnx --precision fp16 --out DIR
  server_scale.py ... --kind cpu --placements all     # plumbing check without a GPU
"""
import argparse
import collections
import csv
import io
import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import tempfile
import threading
import urllib.request

import onnx

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "server"))
from bench_server import cpu_seconds, free_port, get_json, wait_ready  # noqa: E402

ONNX_TO_TRITON = {1: "TYPE_FP32", 10: "TYPE_FP16", 16: "TYPE_BF16", 11: "TYPE_FP64", 7: "TYPE_INT64", 6: "TYPE_INT32",
                  2: "TYPE_UINT8", 3: "TYPE_INT8", 9: "TYPE_BOOL"}


def write_repo(repo, onnx_path, name, kind, precision, max_batch, preferred, delay_us, gpu_wait):
    m = onnx.load(str(onnx_path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}

    def io_block(values, key):
        out = []
        for v in values:
            t = v.type.tensor_type
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim][1:]  # without the batch dim
            out.append(f'{key} {{ name: "{v.name}" data_type: {ONNX_TO_TRITON[t.elem_type]} dims: {dims} }}')
        return "\n".join(out)

    # Triton's model_warmup, one per batch-size bucket a GPU instance may run (bucket_sizes): every lane plans,
    # times its convolutions and captures its graphs at load, not inside the first measurement windows
    warm = []
    for b in bucket_sizes(max_batch, preferred) if kind == "gpu" else []:
        ins = " ".join(f'inputs {{ key: "{v.name}" value: {{ data_type: {ONNX_TO_TRITON[v.type.tensor_type.elem_type]} '
                       f'dims: {[d.dim_value for d in v.type.tensor_type.shape.dim][1:]} random_data: true }} }}'
                       for v in m.graph.input if v.name not in inits)
        warm.append(f'model_warmup {{ name: "b{b}" batch_size: {b} {ins} }}')
    (repo / name / "1").mkdir(parents=True)
    os.symlink(os.path.abspath(onnx_path), repo / name / "1" / "model.onnx")
    cfg = f"""name: "{name}"
platform: "onnxruntime_onnx"
max_batch_size: {max_batch}
{io_block([i for i in m.graph.input if i.name not in inits], "input")}
{io_block(m.graph.output, "output")}
instance_group [{{ kind: {"KIND_GPU" if kind == "gpu" else "KIND_CPU"} }}]
dynamic_batching {{ preferred_batch_size: {preferred} max_queue_delay_microseconds: {delay_us} }}
parameters {{ key: "cinfer_precision" value: {{ string_value: "{precision}" }} }}
parameters {{ key: "cinfer_gpu_wait" value: {{ string_value: "{gpu_wait}" }} }}
{chr(10).join(warm)}
"""
    (repo / name / "config.pbtxt").write_text(cfg)
    return cfg


class MetricsSampler(threading.Thread):
    """Averages nv_gpu_utilization per gpu_uuid from the server's metrics port while it runs."""

    def __init__(self, url, period=0.25):
        super().__init__(daemon=True)
        self.url, self.period = url, period
        self.samples = collections.defaultdict(list)
        self.stop_event = threading.Event()

    def run(self):
        pat = re.compile(r'^nv_gpu_utilization\{gpu_uuid="([^"]+)"\} ([0-9.eE+-]+)$')
        while not self.stop_event.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    for line in r.read().decode().splitlines():
                        mm = pat.match(line)
                        if mm:
                            self.samples[mm.group(1)].append(float(mm.group(2)))
            except OSError:
                pass
            self.stop_event.wait(self.period)

    def means(self):
        """Percent per GPU (the metric is Triton's fraction 0..1)."""
        return {u: 100 * sum(v) / len(v) for u, v in self.samples.items() if v}


def stats(base, name):
    s = get_json(f"{base}/v2/models/{name}/stats")["model_stats"][0]
    inst = {i["name"]: (i.get("device"), i.get("execution_count", 0), i.get("inference_count", 0))
            for i in s.get("instance_stats", [])}
    batches = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in s.get("batch_stats", [])}
    phases = {k: (int(s["inference_stats"][k]["count"]), int(s["inference_stats"][k]["ns"]))
              for k in ("queue", "compute_input", "compute_infer", "compute_output")}
    return s["inference_count"], s["execution_count"], inst, batches, phases


def diff(after, before):
    n = after[0] - before[0]
    ex = after[1] - before[1]
    inst = {k: (v[0], v[1] - before[2].get(k, (None, 0, 0))[1], v[2] - before[2].get(k, (None, 0, 0))[2])
            for k, v in after[2].items()}
    batches = {b: c - before[3].get(b, 0) for b, c in after[3].items() if c - before[3].get(b, 0)}
    # per request, the mean of each phase (compute_* are its batch's: gather, session run, scatter), in ms
    phases = {k: (after[4][k][1] - before[4][k][1]) / max(1, after[4][k][0] - before[4][k][0]) / 1e6 for k in after[4]}
    return n, ex, inst, batches, phases


def run_placement(args, label, visible, work):
    repo = work / f"repo-{label}"
    write_repo(repo, args.onnx, args.name, args.kind, args.precision, args.max_batch, args.preferred, args.delay_us,
               args.gpu_wait)
    port, mport = free_port(), free_port()
    env = dict(os.environ)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    log = open(work / f"server-{label}.log", "w")
    server = subprocess.Popen([args.server, "--model-repository", str(repo), "--http-port", str(port), "--metrics-port",
                               str(mport), "--http-threads", str(args.http_threads)], stdout=log, stderr=subprocess.STDOUT,
                              env=env)
    base, url = f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"
    rows = []
    try:
        if not wait_ready(f"{base}/v2/models/{args.name}/ready", 120, server):
            sys.exit(f"{label}: model not ready (server {'exited' if server.poll() is not None else 'running'}):\n"
                     f"{(work / f'server-{label}.log').read_text()[-3000:]}")
        out_bytes = 1
        size = {"FP16": 2, "BF16": 2, "FP32": 4, "INT32": 4, "FP64": 8, "INT64": 8, "UINT8": 1, "INT8": 1, "BOOL": 1}
        for o in get_json(f"{base}/v2/models/{args.name}")["outputs"]:
            n = size.get(o["datatype"], 8)
            for d in o["shape"][1:]:
                n *= max(1, int(d))
            out_bytes = max(out_bytes, n)
        for c in args.concurrency:
            csv_path = work / f"{label}-c{c}.csv"
            cmd = [args.perf, "-m", args.name, "-u", url, "--concurrency-range", str(c), "--measurement-mode",
                   "count_windows", "--measurement-request-count", str(args.requests), "--max-trials", str(args.trials),
                   "--stability-percentage", str(args.stability), "--shared-memory", "system",
                   "--output-shared-memory-size", str(out_bytes), "-f", str(csv_path)]
            sampler = MetricsSampler(f"http://127.0.0.1:{mport}/metrics")
            before, cpu0 = stats(base, args.name), cpu_seconds(server.pid)
            sampler.start()
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.level_timeout)
            sampler.stop_event.set()
            sampler.join()
            after, cpu1 = stats(base, args.name), cpu_seconds(server.pid)
            if r.returncode != 0:  # reported in the table; the other levels still run
                print(f"{label} c{c}: perf_analyzer failed ({r.returncode}):\n{r.stdout[-1500:]}\n{r.stderr[-1500:]}",
                      file=sys.stderr, flush=True)
                rows.append({"placement": label, "visible": visible, "concurrency": c, "failed": r.returncode,
                             "gpu_util": sampler.means(), "instances": {}, "batches": {}})
                continue
            row = list(csv.DictReader(io.StringIO(csv_path.read_text())))[0]
            n, ex, inst, batches, phases = diff(after, before)
            rows.append({"placement": label, "visible": visible, "concurrency": c,
                         "throughput": float(row["Inferences/Second"]), "p50_us": int(row["p50 latency"]),
                         "p99_us": int(row["p99 latency"]), "inferences": n, "executions": ex,
                         "mean_batch": n / ex if ex else 0, "batches": batches, "instances": inst, "phases_ms": phases,
                         "gpu_util": sampler.means(), "server_cpu_us_per_inf": (cpu1 - cpu0) / max(1, n) * 1e6})
            print(f"  {label} c{c}: {rows[-1]['throughput']:.0f} infer/s, mean batch {rows[-1]['mean_batch']:.1f}, "
                  f"GPU util {rows[-1]['gpu_util']}", file=sys.stderr, flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(120)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()
    return rows


def bucket_sizes(max_batch, preferred):
    """A GPU instance's default batch-size buckets (docs/server.md cinfer_batch_buckets): powers of two, the
    preferred sizes and max_batch_size."""
    sizes = {max_batch} | {int(v) for v in preferred.strip("[]").split(",") if v.strip()}
    b = 1
    while b < max_batch:
        sizes.add(b)
        b *= 2
    return sorted(sizes)


def bucket_of(args, rows):
    """The batch a GPU instance really runs for `rows` requests: the smallest bucket that holds them. CPU instances
    do not pad."""
    if args.kind == "cpu":
        return rows
    return min(s for s in bucket_sizes(args.max_batch, args.preferred) if s >= rows)


def engine_offline(args, batch, visible):
    """`cinfer bench` (host api, the same copies the server makes) at `batch`: items per second."""
    env = dict(os.environ)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    dev = "cpu" if args.kind == "cpu" else "cuda"
    r = subprocess.run([args.cli, "bench", str(args.onnx), "--device", dev, "--batch", str(batch), "--precision",
                        args.precision, "--iters", "30", "--warmup", "5"], capture_output=True, text=True, env=env,
                       timeout=600)
    if r.returncode != 0:
        return None, r.stderr[-500:]
    m = re.search(r"^latency\s+([0-9.]+)\s+([0-9.]+)", r.stdout, re.M)
    return (batch * 1e3 / float(m.group(2)) if m else None), r.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--cli", required=True, help="the cinfer CLI, for the engine's offline figure")
    ap.add_argument("--perf", required=True, help="perf_analyzer (or scripts/perf_analyzer.sh)")
    ap.add_argument("--onnx", required=True, type=pathlib.Path)
    ap.add_argument("--name", default="model")
    ap.add_argument("--kind", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--precision", default="fp16")
    ap.add_argument("--placements", default="all,0",
                    help="comma list: all (every visible GPU) or a CUDA_VISIBLE_DEVICES value for a restricted run")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 128, 256])
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--preferred", default="[32, 64, 128]",
                    help="preferred_batch_size: small enough that a GPU's two lanes (docs/server.md) each get a batch "
                         "at concurrency 64")
    ap.add_argument("--delay-us", type=int, default=2000)
    ap.add_argument("--gpu-wait", choices=["spin", "block"], default="spin",
                    help="config parameter cinfer_gpu_wait: how a lane waits for its GPU (docs/server.md)")
    ap.add_argument("--requests", type=int, default=8000)
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--stability", type=int, default=25)
    ap.add_argument("--http-threads", type=int, default=8)
    ap.add_argument("--level-timeout", type=int, default=240)
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("/tmp/cinfer-server-scale"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="cinfer-scale-"))
    rows = []
    for p in args.placements.split(","):
        rows += run_placement(args, p, None if p == "all" else p, work)
    # the engine alone at the batch size the batcher formed most often, on the placement it can be compared with:
    # the restricted one (one GPU) when there is one, at its lowest concurrency
    ok = [r for r in rows if not r.get("failed")]
    if not ok:
        sys.exit("every perf_analyzer run failed (above)")
    first = next((r for r in ok if r["visible"] is not None), ok[0])
    formed = max(first["batches"].items(), key=lambda kv: kv[1])[0] if first["batches"] else 1
    formed = bucket_of(args, formed)  # batch_stats count request rows; the instance ran its bucket
    offline, detail = engine_offline(args, formed, None if first["visible"] is None else first["visible"])
    json.dump({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows, "offline_batch": formed,
               "offline_items_per_s": offline, "offline_detail": detail}, open(args.out / "result.json", "w"), indent=1)

    print(f"model {args.onnx.name} ({args.precision}), {args.kind} instances, system shared memory, "
          f"max_batch_size {args.max_batch}, preferred {args.preferred}, delay {args.delay_us} us, "
          f"gpu_wait {args.gpu_wait}\n")
    print("| placement | concurrency | infer/s | p50 ms | p99 ms | mean batch | GPU utilisation % (per GPU) | "
          "executions per instance | queue / gather / run / scatter ms | server CPU us / inference |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r.get("failed"):
            print(f"| {r['placement']} | {r['concurrency']} | perf_analyzer failed ({r['failed']}) | | | | "
                  f"{', '.join(f'{v:.0f}' for _, v in sorted(r['gpu_util'].items())) or '—'} | | | |")
            continue
        util = ", ".join(f"{v:.0f}" for _, v in sorted(r["gpu_util"].items())) or "—"
        inst = ", ".join(f"{d}: {e}" for _, (d, e, _) in sorted(r["instances"].items()))
        print(f"| {r['placement']} | {r['concurrency']} | {r['throughput']:,.0f} | {r['p50_us'] / 1e3:.2f} | "
              f"{r['p99_us'] / 1e3:.2f} | {r['mean_batch']:.1f} | {util} | {inst} | "
              f"{' / '.join('%.2f' % r['phases_ms'][k] for k in ('queue', 'compute_input', 'compute_infer', 'compute_output'))} | "
              f"{r['server_cpu_us_per_inf']:.1f} |")
    placements = args.placements.split(",")
    if len(placements) > 1:
        best = {p: max([r["throughput"] for r in ok if r["placement"] == p] or [0]) for p in placements}
        print(f"\nscaling: best {placements[0]} {best[placements[0]]:,.0f} infer/s vs best {placements[1]} "
              f"{best[placements[1]]:,.0f} infer/s = {best[placements[0]] / max(1e-9, best[placements[1]]):.2f}x")
    if offline:
        c0 = first["throughput"]
        print(f"\nengine offline (`cinfer bench`, host api, page-locked io) at the batch the instance ran ({formed}): {offline:,.0f} items/s; server at "
              f"concurrency {first['concurrency']} ({first['placement']}): {c0:,.0f} infer/s = {c0 / offline:.0%}")
    else:
        print(f"\nengine offline at batch {formed}: failed: {detail}")


if __name__ == "__main__":
    main()
