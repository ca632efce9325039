#!/usr/bin/env python3
"""Writes the allocation trace a per-op allocating runtime (PyTorch eager style) makes for one run of an ONNX model:
every node output is allocated when its node runs and freed after its last consumer, in topological order.
Shapes come from onnx shape inference at the given batch size. Output lines: "a ID BYTES" and "f ID".
Used by bench_alloc (bench/gpu/bench_alloc.c), which replays it on two streams through the caching allocator and
through cudaMalloc/cudaFree.

Usage: alloc_trace.py MODEL.onnx BATCH OUT.trace
"""
import sys

import numpy as np
import onnx
from onnx import shape_inference


def main():
    path, batch, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    model = onnx.load(path)
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].dim_value = batch
    model = shape_inference.infer_shapes(model, data_prop=True)
    sizes = {}
    for vi in list(model.graph.value_info) + list(model.graph.output):
        t = vi.type.tensor_type
        if not all(d.HasField("dim_value") for d in t.shape.dim):
            continue
        elem = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
        sizes[vi.name] = int(np.prod([d.dim_value for d in t.shape.dim], dtype=np.int64)) * elem
    last_use = {}
    for i, node in enumerate(model.graph.node):
        for name in node.input:
            last_use[name] = i
    outputs = {o.name for o in model.graph.output}
    ids, lines, live = {}, [], 0
    for i, node in enumerate(model.graph.node):
        for name in node.output:
            if name in sizes and sizes[name] > 0:
                ids[name] = len(ids)
                lines.append(f"a {ids[name]} {sizes[name]}")
        for name in set(node.input):
            if name in ids and last_use.get(name) == i and name not in outputs:
                lines.append(f"f {ids[name]}")
        for name in node.output:  # outputs nobody reads die at once
            if name in ids and name not in last_use and name not in outputs:
                lines.append(f"f {ids[name]}")
    for name in outputs:
        if name in ids:
            lines.append(f"f {ids[name]}")
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    allocs = [int(l.split()[2]) for l in lines if l[0] == "a"]
    print(f"{path} batch {batch}: {len(allocs)} allocations, sizes {min(allocs)}..{max(allocs)} bytes, "
          f"median {int(np.median(allocs))}, total {sum(allocs) / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
