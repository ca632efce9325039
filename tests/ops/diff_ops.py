#!/usr/bin/env python3
"""Differential op tests (after ggml's test-backend-ops): every ONNX node-test case, CUDA against the CPU reference.

Each case of the pinned onnx release whose ops cinfer has is run on both backends with fresh random float inputs
(shape-deciding and index-like inputs keep the case's own values), the CUDA session with guard bytes around every
value so an out-of-bounds write fails the case. Outputs are compared by normalised mean squared error
sum((cuda - cpu)^2) / sum(cpu^2): below 1e-7 for float32/float64, 1e-3 for float16/bfloat16; integers and bools
must be equal. Cases whose CPU run is refused (unsupported dtype/attribute) are skipped; a case the CPU runs but
CUDA refuses is a failure (every CPU op must run on CUDA). Exit status 0 only when nothing failed.

Without a usable CUDA device it prints why and exits 77, which ctest reports as skipped (CI has no GPU).
Usage: diff_ops.py [--filter REGEX] [--device cuda:N] [--guard-bytes N] [--seed S] [--list]
"""
import argparse
import collections
import pathlib
import re
import sys
import time
import warnings

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
sys.path.insert(0, str(HERE.parent / "onnx_node"))
from cinfer_ctypes import CinferError, Library, Session, STATUS_UNSUPPORTED  # noqa: E402
from run_node_tests import as_array, case_ops, has_non_tensor_io  # noqa: E402

# Inputs that keep the case's values: they decide shapes or coordinates, so random values would make another case.
KEEP_INPUTS = {
    "Resize": {1, 2, 3}, "Upsample": {1}, "MelWeightMatrix": {0, 1, 2, 3, 4}, "RoiAlign": {1, 2},
    "MaxRoiPool": {1}, "Range": {0, 1, 2}, "GridSample": {1}, "AffineGrid": {0, 1}, "STFT": {1, 3},
    "Clip": {1, 2}, "DFT": {1, 2}, "Pad": {1, 2, 3}, "CenterCropPad": {1}, "HannWindow": {0},
    "HammingWindow": {0}, "BlackmanWindow": {0}, "Attention": {3}, "QuantizeLinear": {1, 2},
    "DequantizeLinear": {1, 2}, "Det": set(),
}
NMSE_LIMIT = {np.dtype(np.float32): 1e-7, np.dtype(np.float64): 1e-7, np.dtype(np.float16): 1e-3}


def fresh_inputs(case, inputs, rng):
    node_ops = [n.op_type for n in case.model.graph.node]
    keep = set()
    if len(node_ops) == 1:
        keep = KEEP_INPUTS.get(node_ops[0], set())
    fed = []
    for i, x in enumerate(inputs):
        if i in keep or x.ndim == 0 or not np.issubdtype(x.dtype, np.floating) or x.dtype.itemsize < 2:
            fed.append(x)
        else:
            fed.append(rng.standard_normal(x.shape).astype(x.dtype))
    return fed


def compare(name, ref, got):
    if got is None or ref is None:
        return None if got is ref else f"output '{name}': missing"
    if ref.dtype != got.dtype or ref.shape != got.shape:
        return f"output '{name}': {got.dtype}{got.shape} on CUDA, {ref.dtype}{ref.shape} on the CPU"
    if not np.issubdtype(ref.dtype, np.floating):
        bad = int(np.sum(ref != got))
        return f"output '{name}': {bad} of {ref.size} elements differ" if bad else None
    r, g = ref.astype(np.float64), got.astype(np.float64)
    nan_r, nan_g = np.isnan(r), np.isnan(g)
    if not np.array_equal(nan_r, nan_g):
        return f"output '{name}': NaN at {int(np.sum(nan_r != nan_g))} positions differ"
    finite = ~nan_r & np.isfinite(r) & np.isfinite(g)
    if not np.array_equal(np.isinf(r) & ~nan_r, np.isinf(g) & ~nan_g) or not np.array_equal(r[np.isinf(r)], g[np.isinf(g)]):
        return f"output '{name}': infinities differ"
    err = float(np.sum((r[finite] - g[finite]) ** 2)) / max(float(np.sum(r[finite] ** 2)), 1e-30)
    limit = NMSE_LIMIT.get(ref.dtype, 1e-3)
    if err > limit:
        return f"output '{name}': NMSE {err:.3g} > {limit:g}"
    return None


def run_case(lib, case, device, guard, rng):
    model = case.model
    if has_non_tensor_io(model):
        return "skipped", "non-tensor values"
    data = model.SerializeToString()
    try:
        cpu = Session(lib, data, threads=1, device="cpu")
    except CinferError as e:
        return "skipped", "CPU refuses: " + e.message
    try:
        try:
            gpu = Session(lib, data, device=device, options={"guard_bytes": guard} if guard else None)
        except CinferError as e:
            return "failed", "CUDA session: " + e.message
        try:
            for inputs, _ in case.data_sets[:1]:
                inputs = [as_array(x) for x in inputs]
                if any(not isinstance(x, np.ndarray) for x in inputs):
                    return "skipped", "non-tensor test data"
                feeds = dict(zip([i.name for i in model.graph.input], fresh_inputs(case, inputs, rng)))
                try:
                    ref = cpu.run(feeds)
                except CinferError as e:
                    return "skipped", ("CPU refuses: " if e.status == STATUS_UNSUPPORTED else "CPU fails: ") + e.message
                try:
                    got = gpu.run(feeds)
                except CinferError as e:
                    return "failed", "CUDA run: " + e.message
                for out, r, g in zip(model.graph.output, ref, got):
                    problem = compare(out.name, r, g)
                    if problem:
                        return "failed", problem
            return "passed", ""
        finally:
            gpu.close()
    finally:
        cpu.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", help="only cases whose name matches this regex")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--guard-bytes", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--list", action="store_true", help="print every failed case with its detail")
    args = ap.parse_args()

    lib = Library()
    devices, why = lib.cuda_devices()
    if not devices:
        print(f"SKIP differential CUDA op tests: {why}")
        return 77
    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    if args.filter:
        cases = [c for c in cases if re.search(args.filter, c.name)]
    supported = lib.supported_ops()
    rng = np.random.default_rng(args.seed)
    counts, per_op, failures = collections.Counter(), collections.defaultdict(collections.Counter), []
    start = time.time()
    for case in cases:
        ops = case_ops(case.model)
        if any(op not in supported for op in ops):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            status, detail = run_case(lib, case, args.device, args.guard_bytes, rng)
        counts[status] += 1
        for op in ops:
            per_op[op][status] += 1
        if status == "failed":
            failures.append((case.name, detail))
    print(f"{'op':<28}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for op in sorted(per_op):
        c = per_op[op]
        print(f"{op:<28}{c['passed']:>8}{c['failed']:>8}{c['skipped']:>9}")
    print(f"\ndevice {args.device} ({devices[0].name.decode()}), guard bytes {args.guard_bytes}, seed {args.seed}: "
          f"passed {counts['passed']}, failed {counts['failed']}, skipped {counts['skipped']} in {time.time()-start:.1f}s")
    for name, detail in failures:
        print(f"  FAILED {name}: {detail}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
