#!/usr/bin/env python3
"""Checks that cinfer_session_run_device is timed honestly from the caller's stream: for one model and batch, the
CUDA-event time of a run on the caller's stream against the host wall time to full device idle, with CUDA graphs
on and off, and that every replay computes fresh outputs (compared with a graphs-off session on the same inputs).

  check_timing.py MODEL_NAME BATCH PRECISION WORKDIR      (models from bench/gpu/models.py)
Exit status 1 when the event time is far below the wall time (the caller's stream did not wait for the run) or a
replay returned stale outputs.
"""
import pathlib
import sys
import time

import torch

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import models  # noqa: E402
from cinfer_device import DeviceSession, Library  # noqa: E402


def main():
    name, batch, prec, work = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    spec = models.build(name, work)
    lib = Library()
    dev = torch.device("cuda:0")
    stream = torch.cuda.Stream()
    gen = torch.Generator(device=dev).manual_seed(7)
    bad = 0
    with torch.cuda.stream(stream):
        x = spec.make_inputs(batch, torch.Generator().manual_seed(1), dev)
        plain = DeviceSession(lib, str(spec.path), "cuda:0", options={"precision": prec, "cuda_graphs": "0"},
                              input_names=spec.input_names)
        ref_out = plain.empty_outputs(x)
        ref_run = plain.bind(x, ref_out, stream)
        for graphs in ("0", "1"):
            s = DeviceSession(lib, str(spec.path), "cuda:0", options={"precision": prec, "cuda_graphs": graphs},
                              input_names=spec.input_names)
            out = s.empty_outputs(x)
            run = s.bind(x, out, stream)
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            for rep in range(4):
                spec.fill_inputs(x, gen)
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0 = time.perf_counter()
                a.record()
                run()
                t1 = time.perf_counter()
                b.record()
                b.synchronize()
                t2 = time.perf_counter()
                torch.cuda.synchronize()
                t3 = time.perf_counter()
                ev = a.elapsed_time(b)
                st = s.last_run_stats()
                ref_run()
                torch.cuda.synchronize()
                same = all(torch.equal(o, r) for o, r in zip(out, ref_out))
                close = all(torch.allclose(o, r, rtol=1e-2, atol=1e-3) for o, r in zip(out, ref_out))
                print(f"{name} {prec} b{batch} graphs={graphs} rep {rep}: event {ev:.3f} ms, call {1e3 * (t1 - t0):.3f} ms, "
                      f"to event {1e3 * (t2 - t0):.3f} ms, to idle {1e3 * (t3 - t0):.3f} ms, replayed {st.graph_replayed} "
                      f"captures {st.graph_captures} fallbacks {st.graph_fallbacks}, equals graphs-off {same} close {close}",
                      flush=True)
                if ev < 0.5 * 1e3 * (t3 - t0) - 0.05:
                    print("  BAD: the caller's stream did not wait for the run", flush=True)
                    bad += 1
                if not close:
                    print("  BAD: outputs differ from the graphs-off session's", flush=True)
                    bad += 1
            s.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
