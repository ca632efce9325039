"""cinfer-server's engine phase with a GPU lane's outputs in page-locked memory (the default: the engine's DMA writes
them, and gathered batches of a pointwise model get chunked copies) and in malloc'd memory
(--pinned-output-memory 0: copied out of the engine's staging buffer). The 2048x2048 image windowing (16 MiB in
and out per image) on GPU 0, dynamic batching up to 8; tritonclient HTTP clients (binary tensors) at concurrency 1
(every batch one request, its input in the request's own memory) and 4 (batches gathered into page-locked memory).
The figures are the server's own phase durations per request, which the HTTP transfers do not touch: compute input
(gathering the batch: since 62e790d a lone request's inputs are copied into the lane's page-locked buffers there),
compute infer (the engine run, its copies included) and compute output; fresh servers, the two settings alternated.

    python3 bench/gpu/server_outputs.py --server build/cinfer-server --onnx image.onnx [--repeats 2]
"""
import argparse
import pathlib
import re
import statistics
import tempfile
import threading
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from server_start import free_port, running_server

CONFIG = """name: "image"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "image", data_type: TYPE_FP32, dims: [ 1, 2048, 2048 ] } ]
output [ { name: "windowed", data_type: TYPE_FP32, dims: [ 1, 2048, 2048 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { kind: KIND_GPU, count: 1, gpus: [ 0 ] } ]
"""


def metric(text, name):
    m = re.search(rf'^{name}{{model="image",version="1"}} ([0-9.e+]+)$', text, re.M)
    if not m:
        raise RuntimeError(f"{name} for model image not in the metrics")
    return float(m.group(1))


PHASES = ("compute_input", "compute_infer", "compute_output")


def measure(server, repo, pinned, concurrency, requests):
    """Per request: the server's us in each of PHASES; and requests per execution."""
    metrics_port = free_port()
    flags = () if pinned else ("--pinned-output-memory", "0")
    with running_server(server, repo, {}, metrics_port=metrics_port, flags=flags) as (port, _):
        url = f"127.0.0.1:{port}"
        x = (np.random.default_rng(3).standard_normal((1, 1, 2048, 2048)) * 300).astype(np.float32)
        want = np.clip((x - 40.0) / 400.0 + 0.5, 0.0, 1.0)
        errors = []

        def client(n):
            c = httpclient.InferenceServerClient(url, network_timeout=120)
            inp = httpclient.InferInput("image", list(x.shape), "FP32")
            inp.set_data_from_numpy(x, binary_data=True)
            for _ in range(n):
                y = c.infer("image", [inp], outputs=[httpclient.InferRequestedOutput("windowed", binary_data=True)])
                if not np.allclose(y.as_numpy("windowed"), want, rtol=1e-6, atol=1e-6):
                    errors.append("an output differs from numpy's")

        client(4)  # warm-up: plans, graphs, pinned buffers
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
            before = r.read().decode()
        threads = [threading.Thread(target=client, args=(requests // concurrency,)) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics") as r:
            after = r.read().decode()
        if errors:
            raise RuntimeError(errors[0])
        count = metric(after, "nv_inference_count") - metric(before, "nv_inference_count")
        execs = metric(after, "nv_inference_exec_count") - metric(before, "nv_inference_exec_count")
        per_request = [(metric(after, f"nv_inference_{ph}_duration_us") -
                        metric(before, f"nv_inference_{ph}_duration_us")) / count for ph in PHASES]
        return per_request, count / execs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", required=True)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--requests", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        version = pathlib.Path(d) / "image" / "1"
        version.mkdir(parents=True)
        (version / "model.onnx").symlink_to(pathlib.Path(args.onnx).resolve())
        (pathlib.Path(d) / "image" / "config.pbtxt").write_text(CONFIG)
        results = {}
        for _ in range(args.repeats):
            for conc in (1, 4):
                for pinned in (True, False):
                    results.setdefault((conc, pinned), []).append(measure(args.server, d, pinned, conc, args.requests))
    print(f"cinfer-server, image 2048x2048 fp32 on GPU 0, {args.requests} requests a run, {args.repeats} fresh servers "
          "each, alternated\n")
    print("Per request, the median of the runs (each run's in brackets):\n")
    print("| concurrency | outputs | " + " | ".join(f"{ph} us" for ph in PHASES) + " | requests / execution |")
    print("|---|---|" + "---|" * len(PHASES) + "---|")
    for (conc, pinned), runs in sorted(results.items(), key=lambda kv: (kv[0][0], not kv[0][1])):
        label = "page-locked (default)" if pinned else "malloc'd (--pinned-output-memory 0)"
        cells = []
        for i in range(len(PHASES)):
            us = ", ".join(f"{r[0][i]:.0f}" for r in runs)
            cells.append(f"{statistics.median(r[0][i] for r in runs):.0f} ({us})")
        print(f"| {conc} | {label} | " + " | ".join(cells) + f" | {statistics.median(r[1] for r in runs):.2f} |")


if __name__ == "__main__":
    main()
