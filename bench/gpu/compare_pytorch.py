#!/usr/bin/env python3
"""cinfer against PyTorch (eager and CUDA Graphs) in the same run, on the GPU performance issue's reference models
(bench/gpu/models.py exports them here with random weights): b1 latency and b8..b256 throughput with device-resident
inputs and outputs, a pinned-host round-trip row, the image stream against a pure copy loop, ResNet-50 load to first
inference, and fp32-vs-fp16/bf16 agreement. Prints markdown tables, writes compare.json to --out.

Exit status: 0 all gates and goals met; 1 a gate or goal missed; 2 the comparison is broken (the PyTorch side did not
run, cinfer failed, or outputs mismatch grossly).

  compare_pytorch.py --out DIR                        # CUDA, the full default set (see DEFAULT_BATCHES)
  compare_pytorch.py --quick --out DIR                # the goal rows only
  compare_pytorch.py --device cpu --out DIR           # plumbing dry run: torch CPU + cinfer CPU, small batches
"""
import argparse
import copy
import json
import math
import os
import pathlib
import platform
import statistics
import sys
import time
import traceback

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402
from cinfer_device import DeviceSession, Library  # noqa: E402

PREC_DTYPE = {"fp32": torch.float32, "tf32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
# gross-mismatch bounds on max|diff| / max|fp32 reference| (also at least 4x PyTorch's own error at that precision)
TOL = {"fp32": 1e-3, "tf32": 1e-2, "fp16": 3e-2, "bf16": 1e-1}
DEFAULT_BATCHES = {
    "cuda": {"resnet50": [1, 8, 64, 256], "bert": [1, 8, 32, 128], "dlrm": [1, 128, 2048], "image": [1]},
    "cpu": {"resnet50": [1, 2], "bert": [1, 2], "dlrm": [1, 4], "image": [1]},
}
QUICK_BATCHES = {"resnet50": [1, 256], "bert": [1, 128], "dlrm": [1, 128], "image": [1]}
STREAM_ITERS = 20  # images per timed region of the image stream and the copy loop

NOTE = ("fp32 rows: TF32 off on both sides; tf32: on. fp16/bf16 rows: PyTorch runs a .half()/.bfloat16() copy of "
        "the model with the fp32 inputs cast inside the timed region and the output cast back to fp32; cinfer takes "
        "the session option precision=fp16/bf16; so both sides take and return fp32. device = inputs and outputs "
        "already in device memory (torch tensors; cinfer_session_run_device on the same stream); pinned = pinned "
        "host inputs copied in, run, outputs copied out to pinned host memory (cinfer: the same torch copies around "
        "cinfer_session_run_device); pinned-hostapi = cinfer_session_run_into from the pinned inputs into the pinned outputs (cinfer makes the "
        "copies in and out), against PyTorch's pinned row. Each repeat: fresh random inputs, device synchronised, "
        "then the region timed with CUDA events on one stream; median of the repeats. b1 rows show ms, larger "
        "batches items/s. speedup = best PyTorch time / cinfer time; the gate needs cinfer faster than eager and "
        "CUDA Graphs. PyTorch runs with cudnn.benchmark on. torch.compile is not run here (minutes of compile; GPU.md has its figures).")


# ---------------------------------------------------------------- timing
class Bench:
    def __init__(self, device, warmup, repeats):
        self.cuda = device.startswith("cuda")
        self.device = torch.device(device)
        self.warmup, self.repeats = warmup, repeats
        self.stream = torch.cuda.Stream() if self.cuda else None

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def time(self, fn, prepare=None, repeats=None):
        """Median ms of fn() over the repeats; prepare() (fresh inputs) runs before each, outside the region."""
        for _ in range(self.warmup):
            if prepare:
                prepare()
            fn()
        self.sync()
        times, walls = [], []
        for _ in range(repeats or self.repeats):
            if prepare:
                prepare()
            self.sync()
            if self.cuda:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                a.record()
                fn()
                b.record()
                b.synchronize()
                self.sync()
                walls.append((time.perf_counter() - t0) * 1e3)
                times.append(a.elapsed_time(b))
            else:
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
        if walls and statistics.median(times) < 0.5 * statistics.median(walls) - 0.2:
            # the region's end event did not wait for the work (a stream not joined): the figure would be a lie
            raise RuntimeError(f"timing check: CUDA events say {statistics.median(times):.3f} ms but the device was "
                               f"busy for {statistics.median(walls):.3f} ms of host time")
        return statistics.median(times)


def as_list(y):
    return list(y) if isinstance(y, (list, tuple)) else [y]


def rel_err(got, ref):
    """max over outputs of max|got - ref| / max|ref| (inf when not finite)."""
    worst = 0.0
    for g, r in zip(got, ref):
        g, r = g.detach().double().cpu(), r.detach().double().cpu()
        if not torch.isfinite(g).all():
            return math.inf
        worst = max(worst, float((g - r).abs().max()) / max(float(r.abs().max()), 1e-30))
    return worst


def set_tf32(on):
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def torch_forward(module, prec):
    """fn(*inputs) -> list of fp32 outputs: the model at `prec` with casts in and out (inside the timed region)."""
    dt = PREC_DTYPE[prec]
    if dt == torch.float32:
        return lambda *xs: as_list(module(*xs))
    return lambda *xs: [y.float() for y in as_list(module(*[x.to(dt) if x.is_floating_point() else x for x in xs]))]


def _hf_capture_aware():
    """transformers skips an all-ones attention mask after a data-dependent check (a host sync, which CUDA graph
    capture forbids) unless it thinks it is tracing; releases before is_tracing() learnt about stream capture only
    ask is_torchdynamo_compiling(). Make that also say yes while capturing: the mask is then applied, same math."""
    import importlib
    for name in ("transformers.modeling_attn_mask_utils", "transformers.masking_utils",
                 "transformers.models.bert.modeling_bert", "transformers.utils.import_utils"):
        try:
            mod = importlib.import_module(name)
        except Exception:  # noqa: BLE001 - not in this release
            continue
        f = getattr(mod, "is_torchdynamo_compiling", None)
        if f is not None and not getattr(f, "_capture_aware", False):
            def g(f=f):
                return f() or torch.cuda.is_current_stream_capturing()
            g._capture_aware = True
            setattr(mod, "is_torchdynamo_compiling", g)


def capture_graph(fn, static_inputs):
    if "transformers" in sys.modules:
        _hf_capture_aware()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up off the capture (cuDNN/cuBLAS choose algorithms, allocate workspaces)
        for _ in range(3):
            fn(*static_inputs)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):  # its own memory pool, freed with the graph (a shared handle trips 2.11's allocator)
        out = fn(*static_inputs)
    torch.cuda.synchronize()
    return g, out


# ---------------------------------------------------------------- one model
class Runner:
    def __init__(self, args, lib):
        self.args, self.lib = args, lib
        self.bench = Bench(args.device, args.warmup, args.repeats)
        self.cuda = self.bench.cuda
        self.dev = self.bench.device
        self.rows, self.errors, self.loads, self.agreement, self.exports, self.copy_loops = [], [], [], [], [], []
        self.gen = torch.Generator(device=self.dev).manual_seed(1234)

    def error(self, where, e, side):
        msg = f"{where}: {type(e).__name__}: {str(e)[-400:]}"
        print(f"ERROR ({side}) {msg}", flush=True)
        if self.args.verbose:
            traceback.print_exc()
        self.errors.append({"where": where, "side": side, "error": msg})

    def session(self, spec, prec):
        return DeviceSession(self.lib, str(spec.path), self.args.device, options={**self.args.session_options, "precision": prec},
                             input_names=spec.input_names)

    def pinned(self, t):
        return t.cpu().pin_memory() if self.cuda else t.cpu().clone()

    def run_model(self, name, batches):
        t0 = time.perf_counter()
        spec = models.build(name, self.args.work)
        self.exports.append({"model": name, "export_s": round(spec.export_s, 2), "build_s": round(time.perf_counter() - t0, 2),
                             "size_mb": round(spec.size_bytes / 1e6, 1), "file": str(spec.path)})
        print(f"## {name}: {spec.path} {spec.size_bytes / 1e6:.1f} MB, export {spec.export_s:.1f} s", flush=True)
        ref_module = spec.module.to(self.dev)
        if name == "resnet50":
            self.load_time(spec)
        for prec in self.args.precisions:
            try:
                self.run_precision(spec, ref_module, prec, batches)
            except Exception as e:  # noqa: BLE001 - record, go on with the next precision
                self.error(f"{name} {prec}", e, "setup")
            if self.cuda:
                torch.cuda.empty_cache()
                self.lib.lib.cinfer_cuda_empty_cache(self.dev.index or 0)
        if name in ("resnet50", "bert"):
            try:
                self.agree(spec, ref_module)
            except Exception as e:  # noqa: BLE001
                self.error(f"{name} agreement", e, "agreement")
        del ref_module
        spec.module = None

    def load_time(self, spec):
        """Model load + session creation + first inference (b1, device-resident io) for each precision. The file
        was just written, so it is in the page cache."""
        for prec in self.args.precisions:
            try:
                x = spec.make_inputs(1, torch.Generator().manual_seed(5), self.dev)
                self.bench.sync()
                t0 = time.perf_counter()
                s = self.session(spec, prec)
                outs = s.empty_outputs(x)
                s.bind(x, outs, self.bench.stream)()
                self.bench.sync()
                t = time.perf_counter() - t0
                s.close()
                self.loads.append({"model": spec.name, "precision": prec, "load_to_first_s": round(t, 3),
                                   "how": "in this process (CUDA context already up; the first also loads the "
                                          "CUDA module)"})
                print(f"load to first inference {spec.name} {prec}: {t:.3f} s", flush=True)
            except Exception as e:  # noqa: BLE001
                self.error(f"{spec.name} {prec} load", e, "cinfer")
        self.cold_load(spec)

    def cold_load(self, spec):
        """A fresh process: `cinfer run` (the CLI, fp32, b1) from exec to the output written, CUDA init included."""
        cli = self.args.cli
        if not cli or not os.path.exists(cli):
            print("cold-process load: no cinfer CLI (--cli or CINFER_CLI), skipped", flush=True)
            return
        import subprocess
        import tempfile
        import numpy as np
        with tempfile.TemporaryDirectory() as d:
            x = spec.make_inputs(1, torch.Generator().manual_seed(6), "cpu")
            feeds = []
            for name, t in zip(spec.input_names, x):
                np.save(f"{d}/{name}.npy", t.numpy())
                feeds += ["--input", f"{name}={d}/{name}.npy"]
            cmd = [cli, "run", str(spec.path), *feeds, "--output-dir", f"{d}/out", "--device", self.args.device]
            t0 = time.perf_counter()
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            t = time.perf_counter() - t0
        if p.returncode != 0:
            self.error(f"{spec.name} cold load", RuntimeError((p.stderr or p.stdout)[-300:]), "cinfer")
            return
        self.loads.append({"model": spec.name, "precision": "fp32", "load_to_first_s": round(t, 3),
                           "how": "fresh process: cinfer run CLI, exec to output written (CUDA init included)"})
        print(f"load to first inference {spec.name} fp32, fresh process (cinfer run): {t:.3f} s", flush=True)

    def run_precision(self, spec, ref_module, prec, batches):
        module = ref_module if PREC_DTYPE[prec] == torch.float32 else copy.deepcopy(ref_module).to(PREC_DTYPE[prec])
        fwd = torch_forward(module, prec)
        ref_fwd = torch_forward(ref_module, "fp32")
        try:
            sess = self.session(spec, prec)
        except Exception as e:  # noqa: BLE001
            self.error(f"{spec.name} {prec} session", e, "cinfer")
            sess = None
        for b in batches:
            try:
                self.run_batch(spec, prec, b, fwd, ref_fwd, sess)
            except Exception as e:  # noqa: BLE001
                self.error(f"{spec.name} {prec} b{b}", e, "run")
            if self.cuda:
                torch.cuda.empty_cache()
        if sess is not None:
            sess.close()

    def run_batch(self, spec, prec, b, fwd, ref_fwd, sess):
        bench, where = self.bench, f"{spec.name} {prec} b{b}"
        row = {"model": spec.name, "precision": prec, "batch": b, "unit": spec.unit}
        ctx = torch.cuda.stream(bench.stream) if self.cuda else _Null()
        with ctx:
            inputs = spec.make_inputs(b, torch.Generator().manual_seed(b), self.dev)
            prepare = lambda: spec.fill_inputs(inputs, self.gen)  # noqa: E731
            # correctness on one input set: fp32 (TF32 off) reference, PyTorch at prec, cinfer at prec
            set_tf32(False)
            ref = [y.clone() for y in ref_fwd(*inputs)]
            set_tf32(prec == "tf32")
            pt = fwd(*inputs)
            row["pytorch_err"] = rel_err(pt, ref)
            ci_out = run = None
            if sess is not None:
                try:
                    ci_out = sess.empty_outputs(inputs)
                    run = sess.bind(inputs, ci_out, bench.stream)
                    run()
                    bench.sync()
                    row["cinfer_err"] = rel_err(ci_out, ref)
                    bound = max(TOL[prec], 4 * row["pytorch_err"])
                    row["err_bound"] = bound
                    if not row["cinfer_err"] <= bound:
                        self.error(where, RuntimeError(f"cinfer output mismatch: max rel err {row['cinfer_err']:.3e} "
                                                       f"> {bound:.1e} (PyTorch {prec}: {row['pytorch_err']:.3e})"),
                                   "mismatch")
                except Exception as e:  # noqa: BLE001
                    self.error(where + " cinfer", e, "cinfer")
                    run = None
            del ref, pt

            # device-resident rows
            dev_row = dict(row, metric="device")
            try:
                dev_row["eager_ms"] = bench.time(lambda: fwd(*inputs), prepare)
            except Exception as e:  # noqa: BLE001
                self.error(where + " eager", e, "pytorch")
            graph = gout = None
            if self.cuda:
                try:
                    graph, gout = capture_graph(fwd, inputs)
                    dev_row["graphs_ms"] = bench.time(graph.replay, prepare)
                    graph.replay()
                    bench.sync()
                    dev_row["graphs_vs_eager_err"] = rel_err(gout, fwd(*inputs))
                except Exception as e:  # noqa: BLE001
                    self.error(where + " graphs", e, "pytorch")
                    graph = None
            if run is not None:
                try:
                    dev_row["cinfer_ms"] = bench.time(run, prepare)
                except Exception as e:  # noqa: BLE001
                    self.error(where + " cinfer", e, "cinfer")
            self.add_row(dev_row)

            # pinned-host round trip: fresh values are made on the device and copied to the pinned buffers
            pin_in = [self.pinned(x) for x in inputs]
            out_shapes = [y.shape for y in fwd(*inputs)]
            pin_out = [self.pinned(torch.empty(s)) for s in out_shapes]

            def prepare_pinned():
                prepare()
                for p, x in zip(pin_in, inputs):
                    p.copy_(x)

            def eager_rt():
                ys = fwd(*[p.to(self.dev, non_blocking=True) for p in pin_in])
                for o, y in zip(pin_out, ys):
                    o.copy_(y, non_blocking=True)

            def graph_rt():
                for x, p in zip(inputs, pin_in):
                    x.copy_(p, non_blocking=True)
                graph.replay()
                for o, y in zip(pin_out, gout):
                    o.copy_(y, non_blocking=True)

            def cinfer_rt():
                for x, p in zip(inputs, pin_in):
                    x.copy_(p, non_blocking=True)
                run()
                for o, y in zip(pin_out, ci_out):
                    o.copy_(y, non_blocking=True)

            pin_row = dict(row, metric="pinned")
            for key, fn, ok, side in (("eager_ms", eager_rt, True, "pytorch"), ("graphs_ms", graph_rt, graph is not None, "pytorch"),
                                      ("cinfer_ms", cinfer_rt, run is not None, "cinfer")):
                if ok:
                    try:
                        pin_row[key] = bench.time(fn, prepare_pinned)
                    except Exception as e:  # noqa: BLE001
                        self.error(f"{where} pinned {key}", e, side)
            self.add_row(pin_row)
            if sess is not None:
                host_row = dict(row, metric="pinned-hostapi", eager_ms=pin_row.get("eager_ms"),
                                graphs_ms=pin_row.get("graphs_ms"))
                try:
                    from cinfer_device import _tensor_array  # noqa: PLC0415 - prebuilt arrays for the timed call
                    ins, _keep = _tensor_array(pin_in, spec.input_names)
                    outs, _okeep = _tensor_array(pin_out)  # the same pinned outputs PyTorch's pinned row fills
                    host_row["cinfer_ms"] = bench.time(lambda: sess.run_into_raw(ins, outs), prepare_pinned)
                    sess.run_into_raw(ins, outs)
                    got = [o.clone() for o in pin_out]
                    if run is not None:  # pin_in holds what inputs hold (prepare_pinned copied them)
                        host_row["hostapi_vs_device_err"] = rel_err(got, _run_device_copy(run, ci_out, bench))
                except Exception as e:  # noqa: BLE001
                    self.error(where + " cinfer host api", e, "cinfer")
                self.add_row(host_row)

            if spec.name == "image":
                self.image_stream(spec, prec, b, inputs, pin_in, pin_out, fwd, graph, gout, run, ci_out, sess)
            graph = gout = None  # free the graph (and its pool memory) before the next batch

    def image_stream(self, spec, prec, b, inputs, pin_in, pin_out, fwd, graph, gout, run, ci_out, sess):
        """STREAM_ITERS batches back to back from pinned host memory (two pinned buffer sets in turn), no sync
        inside; against a pure copy loop (H2D + D2H of the same bytes)."""
        bench, where = self.bench, f"{spec.name} {prec} b{b} stream"
        pins = [(pin_in, pin_out), ([self.pinned(x) for x in pin_in], [self.pinned(o) for o in pin_out])]
        n = STREAM_ITERS
        reps = max(3, self.args.repeats // 5)

        def loop(body):
            def f():
                for i in range(n):
                    body(*pins[i % 2])
            return f

        def copy_body(pi, po):
            for x, p in zip(inputs, pi):
                x.copy_(p, non_blocking=True)
            for o, x in zip(po, inputs):  # the output has the input's bytes here
                o.copy_(x, non_blocking=True)

        def eager_body(pi, po):
            ys = fwd(*[p.to(self.dev, non_blocking=True) for p in pi])
            for o, y in zip(po, ys):
                o.copy_(y, non_blocking=True)

        def graph_body(pi, po):
            for x, p in zip(inputs, pi):
                x.copy_(p, non_blocking=True)
            graph.replay()
            for o, y in zip(po, gout):
                o.copy_(y, non_blocking=True)

        def cinfer_body(pi, po):
            for x, p in zip(inputs, pi):
                x.copy_(p, non_blocking=True)
            run()
            for o, y in zip(po, ci_out):
                o.copy_(y, non_blocking=True)

        try:
            copy_ms = bench.time(loop(copy_body), repeats=reps)
            nbytes = sum(p.numel() * p.element_size() for p in pin_in) + sum(p.numel() * p.element_size() for p in pin_out)
            self.copy_loops.append({"model": spec.name, "precision": prec, "batch": b, "iters": n,
                                    "copy_loop_ms": copy_ms, "items_per_s": n * b / copy_ms * 1e3,
                                    "round_trip_GBps": n * nbytes / copy_ms / 1e6})
        except Exception as e:  # noqa: BLE001
            self.error(where + " copy loop", e, "pytorch")
        row = {"model": spec.name, "precision": prec, "batch": b, "unit": spec.unit, "metric": "stream",
               "stream_iters": n, "always_throughput": True}
        for key, body, ok, side in (("eager_ms", eager_body, True, "pytorch"), ("graphs_ms", graph_body, graph is not None, "pytorch"),
                                    ("cinfer_ms", cinfer_body, run is not None, "cinfer")):
            if ok:
                try:
                    row[key] = bench.time(loop(body), repeats=reps) / n  # per batch
                except Exception as e:  # noqa: BLE001
                    self.error(f"{where} {key}", e, side)
        self.add_row(row)
        if sess is not None:
            from cinfer_device import _tensor_array  # noqa: PLC0415
            arrays = [(_tensor_array(pi, spec.input_names)[0], _tensor_array(po)[0]) for pi, po in pins]

            def host_loop():
                for i in range(n):
                    sess.run_into_raw(*arrays[i % 2])
            hrow = dict(row, metric="stream-hostapi", cinfer_ms=None)
            try:
                hrow["cinfer_ms"] = bench.time(host_loop, repeats=reps) / n
            except Exception as e:  # noqa: BLE001
                self.error(where + " host api", e, "cinfer")
            self.add_row(hrow)

    def add_row(self, r):
        best = min([v for v in (r.get("eager_ms"), r.get("graphs_ms")) if v], default=None)
        if best and r.get("cinfer_ms"):
            r["speedup"] = best / r["cinfer_ms"]
            need = ["eager_ms", "graphs_ms"] if self.cuda else ["eager_ms"]
            r["gate"] = all(r.get(k) and r["cinfer_ms"] < r[k] for k in need)
        else:
            r["gate"] = False
        self.rows.append(r)
        print(fmt_row(r), flush=True)

    # ------------------------------------------------------------ agreement
    def agree(self, spec, ref_module):
        """fp32 vs each of --agree-precisions on random inputs, from cinfer (and PyTorch's cast model for context):
        ResNet-50 top-1 agreement, BERT last_hidden_state cosine similarity per sequence (min and mean)."""
        n = self.args.agree_images if spec.name == "resnet50" else self.args.agree_seqs
        chunk = min(n, 64 if self.cuda else 4)
        gen = torch.Generator().manual_seed(77)
        batches = [spec.make_inputs(chunk, gen, self.dev) for _ in range(max(1, n // chunk))]
        self.bench.sync()  # made on the default stream; cinfer runs on the benchmark stream

        def cinfer_outs(prec):
            s = self.session(spec, prec)
            res = []
            for xs in batches:
                o = s.empty_outputs(xs)
                s.bind(xs, o, self.bench.stream)()
                self.bench.sync()
                res.append(o[0].float())
            s.close()
            return torch.cat(res)

        def torch_outs(prec):
            set_tf32(False)
            m = ref_module if prec == "fp32" else copy.deepcopy(ref_module).to(PREC_DTYPE[prec])
            f = torch_forward(m, prec)
            return torch.cat([f(*xs)[0].float() for xs in batches])

        def compare(a, b):
            if spec.name == "resnet50":  # a: the fp32 logits; random weights leave small top-1/top-2 margins
                top2 = a.topk(2, 1).values
                return {"top1_agreement": float((a.argmax(1) == b.argmax(1)).double().mean()),
                        "top1_in_top5": float((b.topk(5, 1).indices == a.argmax(1, keepdim=True)).any(1).double().mean()),
                        "distinct_top1": int(a.argmax(1).unique().numel()),
                        "median_margin_rel": float(((top2[:, 0] - top2[:, 1]) / a.std(1)).median())}
            cos = torch.nn.functional.cosine_similarity(a.flatten(1).double(), b.flatten(1).double(), dim=1)
            return {"cos_min": float(cos.min()), "cos_mean": float(cos.mean())}

        base, first = {}, len(self.agreement)
        for side, outs in (("cinfer", cinfer_outs), ("pytorch", torch_outs)):
            try:
                base[side] = outs("fp32")
            except Exception as e:  # noqa: BLE001
                self.error(f"{spec.name} agreement {side} fp32", e, side)
        if "cinfer" in base and "pytorch" in base:
            self.agreement.append({"model": spec.name, "precision": "fp32", "against": "pytorch fp32", "n": len(base["cinfer"]),
                                   **{f"cinfer_{k}": v for k, v in compare(base["pytorch"], base["cinfer"]).items()}})
        for prec in self.args.agree_precisions:
            rec = {"model": spec.name, "precision": prec, "against": "fp32 of the same side"}
            for side, outs in (("cinfer", cinfer_outs), ("pytorch", torch_outs)):
                if side not in base:
                    continue
                try:
                    o = outs(prec)
                    rec["n"] = len(o)
                    rec.update({f"{side}_{k}": v for k, v in compare(base[side], o).items()})
                except Exception as e:  # noqa: BLE001
                    self.error(f"{spec.name} agreement {side} {prec}", e, side)
            self.agreement.append(rec)
        print(fmt_agreement(self.agreement[first:]), flush=True)


def _run_device_copy(run, ci_out, bench):
    run()
    bench.sync()
    return [y.clone() for y in ci_out]


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------- report
def fmt_val(ms, r):
    if not ms:
        return "—"
    if r["batch"] == 1 and not r.get("always_throughput"):
        return f"{ms:.3f} ms"
    v = r["batch"] / ms * 1e3
    return f"{v:,.0f} {r['unit']}/s" if v >= 100 else f"{v:.3g} {r['unit']}/s"


def fmt_row(r):
    metric = ("latency" if r["batch"] == 1 and not r.get("always_throughput") else "throughput") + f" ({r['metric']})"
    sp = f"{r['speedup']:.2f}x" if r.get("speedup") else "—"
    err = f"{r['cinfer_err']:.1e}" if r.get("cinfer_err") is not None else "—"
    perr = f"{r['pytorch_err']:.1e}" if r.get("pytorch_err") is not None else "—"
    return (f"| {r['model']} | {r['precision']} | {r['batch']} | {metric} | {fmt_val(r.get('eager_ms'), r)} | "
            f"{fmt_val(r.get('graphs_ms'), r)} | {fmt_val(r.get('cinfer_ms'), r)} | {sp} | "
            f"{'pass' if r['gate'] else 'FAIL'} | {err} / {perr} |")


TABLE_HEAD = ("| model | precision | batch | metric | PyTorch eager | PyTorch graphs | cinfer | cinfer vs best PyTorch "
              "(speedup) | gate | max rel err cinfer / PyTorch |\n|---|---|---|---|---|---|---|---|---|---|")


def fmt_agreement(recs):
    lines = ["| model | precision | against | n | cinfer | PyTorch (cast model) | target |", "|---|---|---|---|---|---|---|"]
    for a in recs:
        if a["model"] == "resnet50":
            key, target, f = "top1_agreement", ">= 99%", (lambda v: f"top-1 {100 * v:.1f}%")
        else:
            key, target, f = "cos_min", ">= 0.999", (lambda v: f"cos min {v:.5f}")
        c = a.get(f"cinfer_{key}")
        p = a.get(f"pytorch_{key}")
        def extra(s):
            if f"{s}_cos_mean" in a:
                return f" (mean {a[s + '_cos_mean']:.5f})"
            if f"{s}_distinct_top1" in a:
                return (f", in top-5 {100 * a[s + '_top1_in_top5']:.1f}% ({a[s + '_distinct_top1']} classes, median "
                        f"top-1 margin {a[s + '_median_margin_rel']:.2f} logit std)")
            return ""
        lines.append(f"| {a['model']} | {a['precision']} | {a['against']} | {a.get('n', '—')} | "
                     f"{f(c) + extra('cinfer') if c is not None else '—'} | {f(p) + extra('pytorch') if p is not None else '—'} | "
                     f"{target} |")
    return "\n".join(lines)


def goals(runner):
    """The issue's goals, each against the rows measured (None = not measured in this run)."""
    def ms(model, prec, batch, metric="device"):
        for r in runner.rows:
            if (r["model"], r["precision"], r["batch"], r["metric"]) == (model, prec, batch, metric):
                return r.get("cinfer_ms")
        return None

    out = []

    def add(name, value, target, ok):
        out.append({"goal": name, "value": value, "target": target, "pass": ok if value is not None else None})

    v = ms("resnet50", "fp16", 1)
    add("ResNet-50 fp16 b1 latency (ms)", v, "<= 0.6", v is not None and v <= 0.6)
    v = ms("resnet50", "fp16", 256)
    add("ResNet-50 fp16 b256 throughput (img/s)", v and 256e3 / v, ">= 33000", v is not None and 256e3 / v >= 33000)
    v = ms("bert", "fp16", 1)
    add("BERT-base fp16 b1 latency (ms)", v, "<= 0.75", v is not None and v <= 0.75)
    v = ms("bert", "fp16", 128)
    add("BERT-base fp16 b128 throughput (seq/s)", v and 128e3 / v, ">= 20000", v is not None and 128e3 / v >= 20000)
    for prec in runner.args.precisions:
        v = ms("dlrm", prec, 128)
        if v is not None or prec == "fp32":
            add(f"DLRM-style {prec} b128 latency (ms)", v, "<= 0.10", v is not None and v <= 0.10)
    for c in runner.copy_loops:
        for metric in ("stream", "stream-hostapi"):
            v = ms("image", c["precision"], c["batch"], metric)
            ratio = v and (c["copy_loop_ms"] / c["iters"]) / v
            add(f"image {c['precision']} b{c['batch']} {metric} / pure copy loop throughput", ratio, ">= 0.80",
                ratio is not None and ratio >= 0.8)
    for ld in runner.loads:
        how = " (fresh process)" if ld["how"].startswith("fresh") else ""
        add(f"ResNet-50 {ld['precision']} load to first inference{how} (s)", ld["load_to_first_s"], "<= 1.0",
            ld["load_to_first_s"] <= 1.0)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="resnet50,bert,dlrm,image")
    ap.add_argument("--batches", help="comma list for every model, or model:b,b;model:b (default: per model)")
    ap.add_argument("--precisions", default="fp32,fp16", help="fp32,tf32,fp16,bf16")
    ap.add_argument("--agree-precisions", default="fp16,bf16")
    ap.add_argument("--agree-images", type=int, default=None, help="ResNet-50 agreement images (cuda 256, cpu 8)")
    ap.add_argument("--agree-seqs", type=int, default=None, help="BERT agreement sequences (cuda 64, cpu 2)")
    ap.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (cuda 50, cpu 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (cuda 10, cpu 1)")
    ap.add_argument("--quick", action="store_true", help="the goal rows only, fewer repeats")
    ap.add_argument("--no-agreement", action="store_true")
    ap.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu (a plumbing dry run)")
    ap.add_argument("--out", default="/tmp/cinfer-compare", help="folder for compare.json (and models/ unless --work)")
    ap.add_argument("--work", help="folder for the exported models (default OUT/models; files there are reused)")
    ap.add_argument("--lib", help="libcinfer.so (default CINFER_LIB, else build/libcinfer.so)")
    ap.add_argument("--cli", default=os.environ.get("CINFER_CLI"), help="the cinfer CLI, for the fresh-process load "
                    "time (default CINFER_CLI; skipped without)")
    ap.add_argument("--session-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a cinfer session option for every model (A/B runs, e.g. copy_chunks=1); repeatable")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    if any("=" not in o for o in args.session_option):
        ap.error("--session-option takes KEY=VALUE")
    args.session_options = dict(o.split("=", 1) for o in args.session_option)
    cuda = args.device.startswith("cuda")
    kind = "cuda" if cuda else "cpu"
    if cuda and not torch.cuda.is_available():
        print("ERROR: --device cuda but torch sees no GPU (use --device cpu for the dry run)")
        return 2
    args.precisions = [p for p in args.precisions.split(",") if p]
    args.agree_precisions = [p for p in args.agree_precisions.split(",") if p]
    for p in args.precisions + args.agree_precisions:
        if p not in PREC_DTYPE:
            ap.error(f"unknown precision {p}")
    args.repeats = args.repeats or ((20 if args.quick else 50) if cuda else 3)
    args.warmup = args.warmup if args.warmup is not None else (10 if cuda else 1)
    args.agree_images = args.agree_images or (256 if cuda else 8)
    args.agree_seqs = args.agree_seqs or (64 if cuda else 2)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.work = pathlib.Path(args.work) if args.work else out / "models"
    names = [m for m in args.models.split(",") if m]
    per_model = dict(QUICK_BATCHES if args.quick and cuda else DEFAULT_BATCHES[kind])
    if args.batches:
        if ":" in args.batches:
            for part in args.batches.split(";"):
                m, bs = part.split(":")
                per_model[m] = [int(x) for x in bs.split(",")]
        else:
            per_model = {m: [int(x) for x in args.batches.split(",")] for m in names}

    torch.manual_seed(0)
    if cuda:
        torch.backends.cudnn.benchmark = True  # what a PyTorch user tuning for speed sets: the bar is PyTorch's best
    lib = Library(args.lib)
    env = {"torch": torch.__version__, "python": platform.python_version(), "device": args.device,
           "cinfer": lib.lib.cinfer_version().decode(), "cinfer_lib": lib.lib._name,
           "gpu": torch.cuda.get_device_name(torch.device(args.device)) if cuda else platform.processor() or "cpu",
           "argv": sys.argv[1:], "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
    print(f"# cinfer vs PyTorch: {env}\n\n{NOTE}\n\n{TABLE_HEAD}", flush=True)
    runner = Runner(args, lib)

    def report(final):
        res = {"env": env, "note": NOTE, "rows": runner.rows, "goals": goals(runner), "load": runner.loads,
               "agreement": runner.agreement, "exports": runner.exports, "copy_loops": runner.copy_loops,
               "errors": runner.errors, "finished": final}
        (out / "compare.json").write_text(json.dumps(res, indent=1, default=str))
        return res

    t_all = time.perf_counter()
    with torch.inference_mode():
        for name in names:
            if name not in models.BUILDERS:
                ap.error(f"unknown model {name} (known: {', '.join(models.BUILDERS)})")
            try:
                runner.run_model(name, per_model.get(name, DEFAULT_BATCHES[kind][name]))
            except Exception as e:  # noqa: BLE001
                runner.error(name, e, "setup")
            report(False)
            if cuda:
                torch.cuda.empty_cache()

    res = report(True)
    print("\n# Summary\n")
    print(f"{NOTE}\n\n{TABLE_HEAD}")
    for r in runner.rows:
        print(fmt_row(r))
    print("\n| model | export s | file MB |\n|---|---|---|")
    for e in runner.exports:
        print(f"| {e['model']} | {e['export_s']:.1f} (0 = reused) | {e['size_mb']:.1f} |")
    if runner.copy_loops:
        print("\n| pure copy loop (H2D + D2H, pinned) | iters | items/s | round trip GB/s |\n|---|---|---|---|")
        for c in runner.copy_loops:
            print(f"| image {c['precision']} b{c['batch']} | {c['iters']} | {c['items_per_s']:,.0f} | {c['round_trip_GBps']:.1f} |")
    print("\n## Goals" + ("" if cuda else " (cpu dry run: not meaningful)") + "\n\n| goal | value | target | pass |\n|---|---|---|---|")
    for g in res["goals"]:
        v = g["value"]
        print(f"| {g['goal']} | {'—' if v is None else f'{v:.4g}'} | {g['target']} | "
              f"{'not measured' if g['pass'] is None else 'pass' if g['pass'] else 'FAIL'} |")
    if runner.agreement:
        print("\n## Agreement (random inputs)\n")
        print(fmt_agreement(runner.agreement))
        print("\nRandom weights: the ResNet-50 top-1/top-2 margins are a small fraction of a logit std, far smaller than "
              "a trained network's, so PyTorch's own cast model is the yardstick for the 99% target here.")

    # the verdict: broken comparisons first
    broken = [e for e in runner.errors]
    need = ["eager_ms", "graphs_ms"] if cuda else ["eager_ms"]
    for r in runner.rows:
        if r["metric"] in ("device", "pinned", "stream") and any(r.get(k) is None for k in need + ["cinfer_ms"]):
            broken.append({"where": f"{r['model']} {r['precision']} b{r['batch']} {r['metric']}",
                           "error": "a side did not run: " + ", ".join(k for k in need + ["cinfer_ms"] if r.get(k) is None)})
    if not runner.rows:
        broken.append({"where": "all", "error": "no rows measured"})
    print(f"\ntotal {time.perf_counter() - t_all:.0f} s; json: {out / 'compare.json'}")
    if broken:
        print(f"\nBROKEN: {len(broken)} problem(s):")
        for e in broken:
            print(f"  {e['where']}: {e['error']}")
        return 2
    missed = [r for r in runner.rows if not r["gate"]] + [g for g in res["goals"] if g["pass"] is False]
    gates = sum(r["gate"] for r in runner.rows)
    print(f"\ngates passed {gates}/{len(runner.rows)}; goals passed {sum(bool(g['pass']) for g in res['goals'])}/"
          f"{sum(g['pass'] is not None for g in res['goals'])}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
