#!/usr/bin/env python3
"""ONNX backend node tests against cinfer's CPU backend, all cases in one process.

The pinned onnx release generates the cases in memory (onnx.backend.test.loader.load_model_tests).
Every case whose ops cinfer supports is run and compared with the reference outputs at the case's
rtol/atol. Counts are printed overall and per op. The run fails when
  - fewer cases are found than the pinned release holds (MIN_CASES),
  - a case of supported ops fails and is not listed in expected_failures.txt,
  - a listed case passes (the list must not rot) or no longer exists.
Cases that use an op cinfer lacks, or a sequence/optional value, count as "unsupported". Cases whose
ops exist but whose dtype or attribute a kernel refuses with CINFER_ERR_UNSUPPORTED count as
"unsupported-variant" and are listed per op, so the gap stays visible.

With --old-opsets the cases are instead every case's variants at the earlier opsets where one of its ops changed
(old_opset_variants.py: converted down with onnx's version converter, or relabelled where the converter vouches
that nothing changed), compared with the original case's expected outputs; their failures are listed in
expected_failures_old_opsets.txt, and fewer variants than MIN_OLD_OPSET_VARIANTS, or fewer passing than
MIN_OLD_OPSET_PASSED, fails the run. Variants the converter cannot produce are counted per reason, not failed.

Usage: run_node_tests.py [--filter REGEX] [--verbose] [--list-failures] [--device cpu|cuda[:N]]
                         [--old-opsets [--jobs N] [--list-not-produced]]
(--device defaults to CINFER_TEST_DEVICE, else cpu; all cases run in this one process on that device.)
"""
import argparse
import collections
import os
import pathlib
import re
import sys
import time
import warnings

import numpy as np
import onnx
import onnx.numpy_helper

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "python"))
from cinfer_ctypes import CinferError, Library, Session, STATUS_UNSUPPORTED  # noqa: E402

MIN_CASES = 1884  # onnx 1.23.2 generates this many node cases
MIN_OLD_OPSET_VARIANTS = 3510  # the variants old_opset_variants.py makes of them with onnx 1.23.2
MIN_OLD_OPSET_PASSED = 2790  # of which pass: a mapping that starts refusing (CINFER_ERR_UNSUPPORTED) drops it
EXPECTED_FAILURES = HERE / "expected_failures.txt"
EXPECTED_FAILURES_OLD_OPSETS = HERE / "expected_failures_old_opsets.txt"
# Old ops the loader rewrites into others (src/onnx/opset_upgrade.c): supported wherever what they become is
RENAMED_AT_LOAD = {"Upsample": "Resize", "Scatter": "ScatterElements"}


def load_expected_failures(path):
    listed = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        name = name.strip()
        if not reason.strip():
            raise SystemExit(f"{path}: entry '{name}' needs a reason after '#'")
        listed[name] = reason.strip()
    return listed


def case_ops(model):
    return sorted({(n.domain or "") + ("." if n.domain else "") + n.op_type for n in model.graph.node})


def has_non_tensor_io(model):
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.WhichOneof("value") != "tensor_type":
            return True
    return False


def as_array(x):
    """Test data comes as numpy arrays, numpy scalars (0-d tensors) or TensorProtos (types numpy lacks)."""
    if isinstance(x, np.generic):
        return np.asarray(x)
    if isinstance(x, onnx.TensorProto):
        return onnx.numpy_helper.to_array(x)
    return x


def compare(name, expected, actual, rtol, atol):
    if actual is None:
        return f"output '{name}': dtype has no numpy equivalent"
    if expected.dtype != actual.dtype:
        return f"output '{name}': dtype {actual.dtype}, expected {expected.dtype}"
    if expected.shape != actual.shape:
        return f"output '{name}': shape {actual.shape}, expected {expected.shape}"
    if expected.dtype == np.bool_ or np.issubdtype(expected.dtype, np.integer):
        if not np.array_equal(expected, actual):
            bad = int(np.sum(expected != actual))
            return f"output '{name}': {bad} of {expected.size} elements differ"
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            lines = [l for l in str(e).splitlines() if l.strip()]
            return f"output '{name}': " + " | ".join(lines[1:4])
    return None


def run_case(lib, case):
    """Returns (status, detail) with status in passed/failed/unsupported/unsupported-variant."""
    model = case.model
    if has_non_tensor_io(model):
        return "unsupported", "sequence/optional/map input or output"
    try:
        sess = Session(lib, model.SerializeToString(), threads=1)
    except CinferError as e:
        return ("unsupported-variant" if e.status == STATUS_UNSUPPORTED else "failed"), "load: " + e.message
    try:
        out_names = [o.name for o in model.graph.output]
        in_names = [i.name for i in model.graph.input]
        for inputs, outputs in case.data_sets:
            inputs = [as_array(x) for x in inputs]
            outputs = [as_array(x) for x in outputs]
            if any(not isinstance(x, np.ndarray) for x in list(inputs) + list(outputs)):
                return "unsupported", "non-tensor test data"
            feeds = dict(zip(in_names, inputs))
            try:
                got = sess.run(feeds)
            except CinferError as e:
                return ("unsupported-variant" if e.status == STATUS_UNSUPPORTED else "failed"), "run: " + e.message
            for name, exp, act in zip(out_names, outputs, got):
                problem = compare(name, exp, act, case.rtol, case.atol)
                if problem:
                    return "failed", problem
        return "passed", ""
    finally:
        sess.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--filter", help="only cases whose name matches this regex (skips the count check)")
    ap.add_argument("--verbose", action="store_true", help="print each case before running it")
    ap.add_argument("--list-failures", action="store_true", help="print every failed case with its detail")
    ap.add_argument("--device", help="cpu (default: CINFER_TEST_DEVICE or cpu), cuda or cuda:N")
    ap.add_argument("--old-opsets", action="store_true", help="run the cases' variants at earlier opsets instead")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes making the variants (default 2)")
    ap.add_argument("--list-not-produced", action="store_true", help="print every variant the converter cannot make")
    args = ap.parse_args()
    if args.device:
        os.environ["CINFER_TEST_DEVICE"] = args.device
    device = os.environ.get("CINFER_TEST_DEVICE", "cpu")

    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    total_found = len(cases)
    if args.filter:
        rx = re.compile(args.filter)
        cases = [c for c in cases if rx.search(c.name)]
    expected_failures, floor, what = EXPECTED_FAILURES, MIN_CASES, "node cases"
    if args.old_opsets:
        import old_opset_variants
        made_start = time.time()
        cases, not_produced = old_opset_variants.produce_all(cases, args.jobs)
        made_seconds = time.time() - made_start
        total_found = len(cases)
        expected_failures, floor, what = EXPECTED_FAILURES_OLD_OPSETS, MIN_OLD_OPSET_VARIANTS, "old-opset variants"

    lib = Library()
    supported = set(lib.supported_ops())
    supported |= {old for old, new in RENAMED_AT_LOAD.items() if new in supported}
    listed = load_expected_failures(expected_failures)
    counts = collections.Counter()
    per_op = collections.defaultdict(collections.Counter)
    results = {}
    start = time.time()
    for case in cases:
        ops = case_ops(case.model)
        missing = [op for op in ops if op not in supported]
        if missing:
            status, detail = "unsupported", "ops: " + ",".join(missing)
        else:
            if args.verbose:
                print(f"  running {case.name} ...", flush=True)
            status, detail = run_case(lib, case)
        results[case.name] = (status, detail)
        counts[status] += 1
        for op in ops:
            if op in supported:
                per_op[op][status] += 1

    # ---- report ----
    print(f"{'op':<28}{'passed':>8}{'failed':>8}{'variant':>9}{'unsup.':>8}")
    for op in sorted(per_op):
        c = per_op[op]
        print(f"{op:<28}{c['passed']:>8}{c['failed']:>8}{c['unsupported-variant']:>9}{c['unsupported']:>8}")
    print(f"\ndevice: {device}")
    if args.old_opsets:
        by_how = collections.Counter(c.how for c in cases)
        by_opset = collections.Counter(c.opset for c in cases)
        print(f"old-opset variants made in {made_seconds:.1f}s: " +
              ", ".join(f"{how} {n}" for how, n in sorted(by_how.items())) + f"; not produced {len(not_produced)}")
        print("variants per opset: " + ", ".join(f"{o}: {by_opset[o]}" for o in sorted(by_opset)))
        reasons = collections.Counter(reason for _, reason in not_produced)
        print("not produced, most common reasons:")
        for reason, n in reasons.most_common(10):
            print(f"  {n:>5}  {reason}")
        if args.list_not_produced:
            for name, reason in not_produced:
                print(f"  not produced {name}: {reason}")
        print(f"variants: {total_found} (pinned onnx gives at least {floor}); run: {len(cases)} in "
              f"{time.time()-start:.1f}s")
    else:
        print(f"cases found: {total_found} (pinned onnx holds at least {MIN_CASES}); run: {len(cases)} in "
              f"{time.time()-start:.1f}s")
    print(f"passed {counts['passed']}, failed {counts['failed']}, unsupported-variant (dtype/attribute) "
          f"{counts['unsupported-variant']}, unsupported (ops or non-tensor values) {counts['unsupported']}")

    problems = []
    if not args.filter and total_found < floor:
        problems.append(f"only {total_found} {what} found, expected at least {floor}")
    if not args.filter and args.old_opsets and counts["passed"] < MIN_OLD_OPSET_PASSED:
        problems.append(f"only {counts['passed']} old-opset variants passed, expected at least {MIN_OLD_OPSET_PASSED}")
    for name, (status, detail) in sorted(results.items()):
        if status == "failed" and name not in listed:
            problems.append(f"UNEXPECTED FAILURE {name}: {detail}")
        elif status != "failed" and name in listed:
            problems.append(f"LISTED BUT {status.upper()} {name}: remove it from {expected_failures.name}")
        elif args.list_failures and status in ("failed", "unsupported-variant"):
            print(f"  {status} {name}: {detail}")
    if not args.filter:
        for name in listed:
            if name not in results:
                problems.append(f"LISTED BUT NOT FOUND {name}")
    if problems:
        print("\n" + "\n".join(problems))
        print(f"\nFAIL: {len(problems)} problem(s)")
        return 1
    print("\nOK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
