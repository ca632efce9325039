#!/usr/bin/env python3
"""Per-kernel GPU time of cinfer beside PyTorch eager for one model, batch and precision, from torch.profiler's
CUPTI trace (it sees every kernel of the process, cinfer's included), for machines without Nsight Systems.
cinfer runs with CUDA graphs off here so each kernel shows by name; the totals are per run.

  kernel_trace.py WORKDIR model:batch:precision [...]      (models from bench/gpu/models.py)
"""
import pathlib
import sys

import torch
from torch.profiler import ProfilerActivity, profile

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare_pytorch  # noqa: E402
import models  # noqa: E402
from cinfer_device import DeviceSession, Library  # noqa: E402

RUNS = 5


def table(fn, title, top=22):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(RUNS):
            fn()
        torch.cuda.synchronize()
    rows = []
    try:
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
            if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
                rows.append((t / RUNS, e.count / RUNS, e.key))
    except Exception as err:  # noqa: BLE001 - another torch release's event fields: its own table instead
        print(f"\n### {title} ({err}; totals over {RUNS} runs)")
        print(prof.key_averages().table(sort_by="device_time_total", row_limit=top))
        return
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"\n### {title}: {total / 1e3:.3f} ms of kernels per run, {sum(r[1] for r in rows):.0f} kernels per run")
    print(f"{'us/run':>9} {'calls':>6}  kernel")
    for t, n, k in rows[:top]:
        print(f"{t:9.1f} {n:6.1f}  {k[:150]}")


def main():
    work = sys.argv[1]
    lib = Library()
    dev = torch.device("cuda:0")
    for spec_s in sys.argv[2:]:
        name, batch, prec = spec_s.split(":")
        batch = int(batch)
        spec = models.build(name, work)
        x = spec.make_inputs(batch, torch.Generator().manual_seed(1), dev)
        s = DeviceSession(lib, str(spec.path), "cuda:0", options={"precision": prec, "cuda_graphs": "0"},
                          input_names=spec.input_names)
        out = s.empty_outputs(x)
        run = s.bind(x, out, torch.cuda.current_stream())
        table(run, f"cinfer {name} {prec} b{batch}")
        s.close()
        module = spec.module.to(dev)
        if compare_pytorch.PREC_DTYPE[prec] != torch.float32:
            module = module.to(compare_pytorch.PREC_DTYPE[prec])
        fwd = compare_pytorch.torch_forward(module, prec)
        with torch.no_grad():
            table(lambda: fwd(*x), f"PyTorch eager {name} {prec} b{batch}")
        del module
        torch.cuda.empty_cache()


if __name__ == "__main__":
    torch.backends.cudnn.benchmark = True
    main()
