#!/usr/bin/env python3
"""CPU benchmark: `cinfer bench` vs onnxruntime (CPU provider) on the same generated models, same thread
count, same machine, one after the other. Prints a markdown table of p50 latencies and the ratio.

Usage: .venv/bin/python bench/cpu/bench_cpu.py [--threads 1 2] [--iters 50] [--rounds 3] [--models mlp cnn ...]
Per-op time of one model: build/cinfer bench bench/out/<model>.onnx --threads 1 --profile
"""
import argparse
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
import builders  # noqa: E402

CASES = {  # name -> (builder, kwargs, batch, cinfer --dim args)
    "mlp": (builders.mlp, {}, 1, []),
    "mlp_b64": (builders.mlp, {}, 64, []),
    "cnn": (builders.cnn, {"size": 64}, 1, []),
    "cnn224": (builders.cnn, {"size": 224}, 1, []),
    "cnn224_b8": (builders.cnn, {"size": 224}, 8, []),
    "transformer": (builders.transformer_block, {"hidden": 256, "heads": 4, "ffn": 1024, "seq": 128}, 1, ["--dim", "seq=128"]),
    "recommender_b128": (builders.recommender, {}, 128, []),
}


def bench_ort(path, feeds_dir, threads, iters, warmup):
    """onnxruntime in a child process, like cinfer: no thread pool of one lingers while the other runs."""
    out = subprocess.run([sys.executable, __file__, "--ort-worker", str(path), str(feeds_dir), str(threads), str(iters),
                          str(warmup)], capture_output=True, text=True, check=True).stdout
    return float(out.strip().splitlines()[-1])


def ort_worker(path, feeds_dir, threads, iters, warmup):
    feeds = {name[:-4]: np.load(pathlib.Path(feeds_dir) / name) for name in os.listdir(feeds_dir)}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1e3)
    print(float(np.median(times)))


def bench_cinfer(cli, path, batch, threads, iters, warmup, extra, feeds_dir):
    args = [cli, "bench", str(path), "--batch", str(batch), "--iters", str(iters), "--warmup", str(warmup),
            "--threads", str(threads)] + extra
    for name in sorted(os.listdir(feeds_dir)):
        args += ["--input", f"{name[:-4]}={feeds_dir / name}"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    row = next(l for l in out.splitlines() if l.startswith("latency"))
    return float(row.split()[2])  # p50


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--ort-worker":
        path, feeds_dir, threads, iters, warmup = sys.argv[2:7]
        return ort_worker(path, feeds_dir, int(threads), int(iters), int(warmup))
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--models", nargs="+", default=list(CASES))
    ap.add_argument("--cli", default=str(ROOT / "build" / "cinfer"))
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate cinfer and onnxruntime this many times; the table shows the median p50 of the rounds")
    args = ap.parse_args()
    out_dir = ROOT / "bench" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
    print(f"# {time.strftime('%Y-%m-%d')}, {cpu}, {os.cpu_count()} cores, onnxruntime {ort.__version__}")
    print(f"# command: {' '.join(sys.argv)}\n")
    print("| model | batch | threads | cinfer p50 ms | onnxruntime p50 ms | cinfer / ort |")
    print("|---|---|---|---|---|---|")
    for name in args.models:
        build, kwargs, batch, extra = CASES[name]
        model, make_inputs = build(np.random.default_rng(0), **kwargs)
        path = out_dir / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        feeds = make_inputs(batch, np.random.default_rng(1))
        feeds_dir = out_dir / f"{name}_inputs"
        feeds_dir.mkdir(exist_ok=True)
        for old in feeds_dir.iterdir():
            old.unlink()
        for k, v in feeds.items():
            np.save(feeds_dir / f"{k}.npy", v)
        for threads in args.threads:
            cs, os_ = [], []
            for _ in range(args.rounds):
                cs.append(bench_cinfer(args.cli, path, batch, threads, args.iters, args.warmup, extra, feeds_dir))
                os_.append(bench_ort(path, feeds_dir, threads, args.iters, args.warmup))
            c, o = float(np.median(cs)), float(np.median(os_))
            print(f"| {name} | {batch} | {threads} | {c:.3f} | {o:.3f} | {c / o:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
