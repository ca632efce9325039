"""cinfer-server start to ready on a GPU: a one-model repository (an exported ONNX file, KIND_AUTO placement) and
the wall time from the process start to GET /v2/health/ready answering 200, with the devices started beside the
repository load (the default) and without (CINFER_SERVER_EARLY_DEVICES=0), alternated in fresh processes.

    python3 bench/gpu/server_start.py --server build/cinfer-server --onnx resnet50.onnx [--repeats 3]
"""
import argparse
import contextlib
import os
import pathlib
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_server(server, repo, env, metrics_port=0, flags=(), timeout_s=120.0):
    """cinfer-server on `repo` with `env` added to the environment and `flags` to its command line: yields (its HTTP port, seconds from the process
    start to /v2/health/ready answering 200) once ready, and stops it on exit."""
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([server, "--model-repository", str(repo), "--http-port", str(port), "--metrics-port",
                          str(metrics_port), *flags], env=dict(os.environ, **env), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        while True:
            if p.poll() is not None:
                raise RuntimeError(f"cinfer-server exited with {p.returncode}: {p.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.perf_counter() - t0 > timeout_s:
                raise RuntimeError(f"not ready within {timeout_s} s")
            time.sleep(0.005)
        yield port, time.perf_counter() - t0
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def time_to_ready(server, repo, early):
    with running_server(server, repo, {"CINFER_SERVER_EARLY_DEVICES": "1" if early else "0"}) as (_, seconds):
        return seconds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        name = pathlib.Path(args.onnx).stem
        version = pathlib.Path(d) / name / "1"
        version.mkdir(parents=True)
        (version / "model.onnx").symlink_to(pathlib.Path(args.onnx).resolve())
        times = {True: [], False: []}
        for _ in range(args.repeats):
            for early in (True, False):
                times[early].append(time_to_ready(args.server, d, early))
    print(f"cinfer-server start to ready, model {name} ({pathlib.Path(args.onnx).stat().st_size / 1e6:.1f} MB), "
          f"{args.repeats} fresh processes each, alternated\n")
    print("| devices | median s | runs s |")
    print("|---|---|---|")
    for early, label in ((False, "started by the first session (CINFER_SERVER_EARLY_DEVICES=0)"),
                         (True, "started beside the repository load (default)")):
        runs = ", ".join(f"{t:.3f}" for t in times[early])
        print(f"| {label} | {statistics.median(times[early]):.3f} | {runs} |")


if __name__ == "__main__":
    main()
