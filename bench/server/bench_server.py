#!/usr/bin/env python3
"""Server benchmark: cinfer-server with a tiny CPU model driven by perf_analyzer (Triton's load generator) at several
concurrency levels with binary tensors. Prints a markdown table of throughput, p50/p99 latency (client side, from
perf_analyzer) and the server's CPU time per inference, measured from /proc/<server pid>/stat (utime + stime over
the run, divided by the inferences the server's statistics counted in the same run). The client runs on the same
cores, so the machine's total CPU would mix the two: only the server process is counted.

Usage: .venv/bin/python bench/server/bench_server.py [--server build/cinfer-server] [--concurrency 1 4 8]
           [--requests 3000] [--http-threads 4] [--shared-memory] [--perf-record DIR] [--syscalls]
perf_analyzer comes from scripts/perf_analyzer.sh --install (run by scripts/setup.sh --test).
--perf-record DIR also runs `perf record -g` on the server during the concurrency-8 run (perf.data + a report).
--syscalls runs `perf stat` on the server during each run and adds its system calls and context switches per
inference (counts, so much less sensitive than CPU time to what else the machine runs; needs perf and tracepoint
access, e.g. root or kernel.perf_event_paranoid <= 1). Tracing every system call slows the server: take the CPU
times from a run without --syscalls.
"""
import argparse
import csv
import datetime
import io
import json
import os
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np
import onnx

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
import builders  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """utime + stime of the whole process (every thread), in seconds; fields 14 and 15 of /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def wait_ready(url, seconds, proc=None):
    """True once GET url answers 200 within `seconds`; False on timeout, or as soon as `proc` has exited."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            if proc is not None and proc.poll() is not None:
                return False
            time.sleep(0.05)
    return False


def inference_count(base, model):
    return get_json(f"{base}/v2/models/{model}/stats")["model_stats"][0]["inference_count"]


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} vCPUs, {platform.system()} {platform.release()}"


def run_level(args, base, url, pid, concurrency, shm, out_dir, perf_record=None):
    csv_path = out_dir / f"c{concurrency}{'-shm' if shm else ''}.csv"
    cmd = [args.perf, "-m", "mlp", "-u", url, "--concurrency-range", str(concurrency), "--measurement-mode",
           "count_windows", "--measurement-request-count", str(args.requests), "--max-trials", str(args.trials),
           "--stability-percentage", str(args.stability), "--input-tensor-format", "binary",
           "--output-tensor-format", "binary", "-f", str(csv_path)]
    if shm:
        cmd += ["--shared-memory", "system", "--output-shared-memory-size", "4096"]
    rec = stat = None
    if args.syscalls:
        stat_path = out_dir / f"c{concurrency}{'-shm' if shm else ''}.perfstat"
        stat = subprocess.Popen(["perf", "stat", "-x", ",", "-o", str(stat_path), "-e", "raw_syscalls:sys_enter,context-switches",
                                 "-p", str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    if perf_record:
        rec = subprocess.Popen(["perf", "record", "-g", "-F", "2000", "-p", str(pid), "-o", str(perf_record / "perf.data")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    n0, c0 = inference_count(base, "mlp"), cpu_seconds(pid)
    r = subprocess.run(cmd, capture_output=True, text=True)
    n1, c1 = inference_count(base, "mlp"), cpu_seconds(pid)
    if rec:
        rec.send_signal(signal.SIGINT)
        rec.wait()
    syscalls = switches = None
    if stat:
        stat.send_signal(signal.SIGINT)
        stat.wait()
        counts = {}
        for line in stat_path.read_text().splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                counts[f[2]] = int(f[0])
        n = max(1, n1 - n0)  # the counts also include the stats requests around the run: a few in thousands
        syscalls = counts.get("raw_syscalls:sys_enter", 0) / n
        switches = counts.get("context-switches", 0) / n
    if r.returncode != 0:
        sys.exit(f"perf_analyzer failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    row = list(csv.DictReader(io.StringIO(csv_path.read_text())))[0]
    return {"concurrency": concurrency, "shm": shm, "throughput": float(row["Inferences/Second"]),
            "p50_us": int(row["p50 latency"]), "p99_us": int(row["p99 latency"]), "inferences": n1 - n0,
            "cpu_s": c1 - c0, "cpu_us_per_inf": (c1 - c0) / max(1, n1 - n0) * 1e6,
            "server_queue_us": int(row["Server Queue"]), "server_infer_us": int(row["Server Compute Infer"]),
            "syscalls": syscalls, "switches": switches}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", default=str(ROOT / "build" / "cinfer-server"))
    ap.add_argument("--perf", default=str(ROOT / "scripts" / "perf_analyzer.sh"))
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--requests", type=int, default=3000, help="minimum requests per measurement window")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--stability", type=int, default=25, help="perf_analyzer --stability-percentage")
    ap.add_argument("--http-threads", type=int, default=4)
    ap.add_argument("--shared-memory", action="store_true", help="also run each level with --shared-memory=system")
    ap.add_argument("--perf-record", metavar="DIR", help="perf record the server during the highest-concurrency run")
    ap.add_argument("--syscalls", action="store_true", help="perf stat the server's system calls and context switches")
    args = ap.parse_args()

    work = pathlib.Path(tempfile.mkdtemp(prefix="cinfer-bench-server-"))
    repo = work / "models"
    (repo / "mlp" / "1").mkdir(parents=True)
    model, _ = builders.mlp(np.random.default_rng(7), features=16, hidden=(32,), classes=5)
    onnx.save(model, str(repo / "mlp" / "1" / "model.onnx"))
    port = free_port()
    log = open(work / "server.log", "w")
    server = subprocess.Popen([args.server, "--model-repository", str(repo), "--http-port", str(port), "--metrics-port", "0",
                               "--threads", "1", "--http-threads", str(args.http_threads)], stdout=log, stderr=subprocess.STDOUT)
    base, url = f"http://127.0.0.1:{port}", f"127.0.0.1:{port}"
    try:
        if not wait_ready(f"{base}/v2/health/ready", 30, server):
            sys.exit(f"server not ready:\n{(work / 'server.log').read_text()}")
        rows = []
        load = os.getloadavg()[0]
        for shm in ([False, True] if args.shared_memory else [False]):
            for c in args.concurrency:
                rec = None
                if args.perf_record and not shm and c == max(args.concurrency):
                    rec = pathlib.Path(args.perf_record)
                    rec.mkdir(parents=True, exist_ok=True)
                rows.append(run_level(args, base, url, server.pid, c, shm, work, rec))
                print(f"  concurrency {c}{' shm' if shm else ''}: {rows[-1]['throughput']:.0f} infer/s", file=sys.stderr)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        log.close()
    print(f"- **Date:** {datetime.date.today().isoformat()}.")
    print(f"- **Machine:** {machine()}; 1-minute load average {load:.2f} when the runs started.")
    print(f"- **Server:** `{os.path.relpath(args.server, ROOT)} --threads 1 --http-threads {args.http_threads}`, model "
          f"`mlp` 16-32-5 FP32 (auto-completed config, max_batch_size 4, one CPU instance), batch 1.")
    print()
    extra = " system calls / inference | context switches / inference |" if args.syscalls else ""
    print("| concurrency | tensors | throughput infer/s | p50 µs | p99 µs | server CPU µs / inference | "
          "server queue µs | server compute µs |" + extra)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if args.syscalls else ""))
    for r in rows:
        cols = f" {r['syscalls']:.1f} | {r['switches']:.2f} |" if args.syscalls else ""
        print(f"| {r['concurrency']} | {'system shm' if r['shm'] else 'binary'} | {r['throughput']:.0f} | {r['p50_us']} | "
              f"{r['p99_us']} | {r['cpu_us_per_inf']:.1f} | {r['server_queue_us']} | {r['server_infer_us']} |" + cols)
    shutil.rmtree(work, ignore_errors=True)
    if args.perf_record:
        rep = subprocess.run(["perf", "report", "-i", str(pathlib.Path(args.perf_record) / "perf.data"), "--no-children",
                              "--stdio", "--sort", "dso,sym", "--percent-limit", "1"], capture_output=True, text=True)
        (pathlib.Path(args.perf_record) / "report.txt").write_text(rep.stdout)
        print(f"\nperf report: {pathlib.Path(args.perf_record) / 'report.txt'}", file=sys.stderr)


if __name__ == "__main__":
    main()
