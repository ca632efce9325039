"""Copy/compute overlap on the GPU, shown with CUDA event timestamps (session option timeline=1, read with
cinfer_session_timeline) beside PyTorch's pinned round trip timed with CUDA events in the same run:

1. the 2048x2048 fp32 image windowing from page-locked memory through cinfer_session_run_into, in chunks (upload
   stream, compute, download stream) and whole (copy_chunks=1), and PyTorch (copy in, model, copy out on a stream);
2. ResNet-50 fp16 b32 from page-locked memory on one lane and on two (a lane: a thread with its own session, what
   cinfer-server's two lanes per instance do; for PyTorch a thread with its own stream and CUDA graph).

For each it prints spans (the median run's; with two lanes 3 runs of each around the middle; start and end in us from
the first span shown), then a summary: end to end, the spans' summed time (what one stream would take), the share of
the time with two or more spans at once, the host wall time per run (for the image also without the timeline: its
cost) and the throughput.

    python3 bench/gpu/overlap_timeline.py --work /tmp/models [--out DIR] [--runs 50]
"""
import argparse
import json
import pathlib
import statistics
import sys
import threading
import time

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import models  # noqa: E402
from cinfer_device import DeviceSession, Library, _tensor_array  # noqa: E402


def active_share(spans, at_least=2):
    """Share of [first start, last end] with at least `at_least` spans running."""
    edges = sorted([(s["start_us"], 1) for s in spans] + [(s["end_us"], -1) for s in spans])
    t0, t1 = edges[0][0], edges[-1][0]
    level, last, covered = 0, t0, 0.0
    for t, d in edges:
        if level >= at_least:
            covered += t - last
        level += d
        last = t
    return covered / (t1 - t0) if t1 > t0 else 0.0


def summary(label, spans, walls):
    t0 = min(s["start_us"] for s in spans)
    end_to_end = max(s["end_us"] for s in spans) - t0
    serial = sum(s["end_us"] - s["start_us"] for s in spans)
    return {"case": label, "spans": len(spans), "end_to_end_us": end_to_end, "serial_us": serial,
            "overlap_share": active_share(spans), "wall_us": 1e6 * statistics.median(walls)}


def print_spans(label, spans):
    t0 = min(s["start_us"] for s in spans)
    print(f"\n#### {label}: spans (us from the first)\n")
    print("| # | lane | kind | stream | MiB | start | end | us |\n|---|---|---|---|---|---|---|---|")
    for i, s in enumerate(sorted(spans, key=lambda s: s["start_us"])):
        lane = s.get("lane", "-")
        print(f"| {i} | {lane} | {s['kind']} | {s['stream']} | {s['bytes'] / 2**20:.2f} | {s['start_us'] - t0:.1f} | "
              f"{s['end_us'] - t0:.1f} | {s['end_us'] - s['start_us']:.1f} |")


def print_summary(rows):
    print("\n| case | spans | end to end us | summed spans us | >= 2 at once | wall/run us | untimed wall us |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        untimed = f"{r['wall_untimed_us']:.1f}" if "wall_untimed_us" in r else "-"
        print(f"| {r['case']} | {r['spans']} | {r['end_to_end_us']:.1f} | {r['serial_us']:.1f} | "
              f"{100 * r['overlap_share']:.0f}% | {r['wall_us']:.1f} | {untimed} |")


class PinnedRun:
    """One model's pinned input and output and a prebuilt cinfer_session_run_into call on them; a call runs it and
    returns the run's host wall seconds and its spans (read after the clock stops)."""

    def __init__(self, lib, spec, batch, options, gen):
        self.sess = DeviceSession(lib, spec.path, "cuda:0", options=options, input_names=spec.input_names)
        self.inputs = [t.pin_memory() for t in spec.make_inputs(batch, gen, "cpu")]
        self.outputs = [torch.empty(shape, dtype=dt).pin_memory()
                        for dt, shape in self.sess.output_info(self.inputs)]
        self.ins, self._keep = _tensor_array(self.inputs, spec.input_names)
        self.outs, _ = _tensor_array(self.outputs)
        self.timed = options.get("timeline") == "1"

    def __call__(self):
        t = time.perf_counter()
        self.sess.run_into_raw(self.ins, self.outs)
        wall = time.perf_counter() - t
        return wall, self.sess.timeline() if self.timed else []


class TorchLane:
    """PyTorch's pinned round trip at its best (as compare_pytorch.py's "PyTorch graphs" column): the model captured
    in a CUDA graph on the lane's stream; a call copies in, replays, copies out, and returns its host wall seconds and
    spans from CUDA events around each step, in us from `ref` (an event recorded before any lane started, so lanes
    share a clock)."""

    def __init__(self, spec, module, batch, dtype, gen, ref):
        self.ref = ref
        self.x_host = [t.pin_memory() for t in spec.make_inputs(batch, gen, "cpu")]
        self.in_bytes = sum(h.numel() * h.element_size() for h in self.x_host)
        self.stream = torch.cuda.Stream()

        def forward(x_dev):  # casts in and out inside, so outputs keep the model's dtype, as cinfer's do
            return module(*[x.to(dtype) for x in x_dev]).float()

        with torch.no_grad(), torch.cuda.stream(self.stream):
            self.x_dev = [h.to("cuda") for h in self.x_host]
            for _ in range(3):  # cudnn.benchmark picks its algorithms before the capture
                forward(self.x_dev)
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph, stream=self.stream):
                self.y_dev = forward(self.x_dev)
            self.y_host = torch.empty(self.y_dev.shape, dtype=self.y_dev.dtype).pin_memory()
        self.stream.synchronize()

    def __call__(self):
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        t = time.perf_counter()
        with torch.cuda.stream(self.stream):
            ev[0].record()
            for dev, host in zip(self.x_dev, self.x_host):
                dev.copy_(host, non_blocking=True)
            ev[1].record()
            self.graph.replay()
            ev[2].record()
            self.y_host.copy_(self.y_dev, non_blocking=True)
            ev[3].record()
        self.stream.synchronize()
        wall = time.perf_counter() - t
        at = [1e3 * self.ref.elapsed_time(e) for e in ev]
        nbytes = (self.in_bytes, 0, self.y_host.numel() * self.y_host.element_size())
        return wall, [{"kind": k, "stream": 0, "bytes": nbytes[j], "start_us": at[j], "end_us": at[j + 1]}
                      for j, k in enumerate(("upload", "compute", "download"))]


def drive(lanes, runs, warmup=10):
    """Each lane (a callable doing one round trip, returning its wall seconds and spans) on its own thread, `runs`
    times after `warmup`. Returns the spans shown (one lane: its median run; more: 3 runs of each around the middle,
    tagged with the lane), every run's wall seconds, and the round trips per second of all lanes together (from the
    common start to the last lane's end, reading the timelines included)."""
    per_lane, walls, ends, started = [[] for _ in lanes], [], [0.0] * len(lanes), []
    start = threading.Barrier(len(lanes), action=lambda: started.append(time.perf_counter()))  # all warm: go

    def loop(i):
        for _ in range(warmup):
            lanes[i]()
        start.wait()
        for _ in range(runs):
            wall, spans = lanes[i]()
            walls.append(wall)
            per_lane[i].append(spans)
        ends[i] = time.perf_counter()

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(len(lanes))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lane_seconds = max(ends) - started[0]
    if len(lanes) == 1:  # an untimed lane gives no spans
        ordered = sorted((r for r in per_lane[0] if r),
                         key=lambda r: max(s["end_us"] for s in r) - min(s["start_us"] for s in r))
        return ordered[len(ordered) // 2] if ordered else [], walls, runs / lane_seconds
    middle, window = runs // 2, []
    for i, timelines in enumerate(per_lane):
        for j in (middle - 1, middle, middle + 1):
            window += [{**s, "lane": i} for s in timelines[j]]
    return window, walls, len(lanes) * runs / lane_seconds


def torch_lanes(spec, batch, precision, gen, n):
    dtype = torch.float16 if precision == "fp16" else torch.float32
    module = spec.module.to("cuda", dtype).eval()
    ref = torch.cuda.Event(enable_timing=True)
    ref.record()
    ref.synchronize()
    return [TorchLane(spec, module, batch, dtype, gen, ref) for _ in range(n)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", required=True, help="folder for the exported models (reused when there)")
    ap.add_argument("--out", default=None, help="writes overlap.json (every span printed) there")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--resnet-batch", type=int, default=32)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("overlap_timeline: no CUDA device for PyTorch")
    torch.backends.cudnn.benchmark = True  # PyTorch's best eager setting, as compare_pytorch.py runs it
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    lib = Library()
    gen = torch.Generator().manual_seed(11)
    print(f"# Copy/compute overlap with CUDA event timestamps ({torch.cuda.get_device_name(0)}, torch {torch.__version__})")
    record = {"device": torch.cuda.get_device_name(0), "cases": []}

    def case(label, lanes, batch, untimed=None):
        spans, walls, per_s = drive(lanes, args.runs)
        row = {**summary(label, spans, walls), "per_s": batch * per_s}
        if untimed is not None:  # the same session setup without the timeline: what timing the run costs
            row["wall_untimed_us"] = 1e6 * statistics.median(drive([untimed], args.runs)[1])
        print_spans(label, spans)
        record["cases"].append({"case": label, "spans": spans, "summary": row})
        return row

    image = models.build("image", work)
    rows = []
    for label, options in (("cinfer image fp32, chunked (default)", {}),
                           ("cinfer image fp32, whole (copy_chunks=1)", {"copy_chunks": "1"})):
        rows.append(case(label, [PinnedRun(lib, image, 1, {**options, "timeline": "1"}, gen)], 1,
                         untimed=PinnedRun(lib, image, 1, options, gen)))
    rows.append(case("PyTorch graphs image fp32, one stream", torch_lanes(image, 1, "fp32", gen, 1), 1))
    image.module.to("cpu")
    print("\n### image 2048x2048 fp32, page-locked round trip")
    print_summary(rows)

    resnet = models.build("resnet50", work)
    b = args.resnet_batch
    rows = []
    for n in (1, 2):
        lanes = [PinnedRun(lib, resnet, b, {"precision": "fp16", "timeline": "1"}, gen) for _ in range(n)]
        rows.append(case(f"cinfer resnet50 fp16 b{b}, {n} lane(s)", lanes, b))
    for n in (1, 2):
        rows.append(case(f"PyTorch graphs resnet50 fp16 b{b}, {n} lane(s)", torch_lanes(resnet, b, "fp16", gen, n), b))
    print(f"\n### ResNet-50 fp16 b{b}, page-locked round trips (a lane: a thread with its own session, or its own "
          "torch stream and graph; more than one lane: 3 runs of each around the middle)")
    print("\n| case | spans | window us | summed spans us | >= 2 at once | wall/run us | img/s |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['spans']} | {r['end_to_end_us']:.1f} | {r['serial_us']:.1f} | "
              f"{100 * r['overlap_share']:.0f}% | {r['wall_us']:.1f} | {r['per_s']:.0f} |")
    if args.out:
        out = pathlib.Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "overlap.json").write_text(json.dumps(record, indent=1))
    print("\noverlap timeline: done")


if __name__ == "__main__":
    main()
