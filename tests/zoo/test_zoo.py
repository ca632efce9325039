"""Model coverage (ctest label zoo): torchvision and transformers architectures with random weights, each exported
by the dynamo exporter (opset 18) and the legacy one (opset 13-17), and the onnx package's old model-zoo graphs
(opset 9, seeded random weights), run through cinfer on the CPU at 1 and 16 threads.

Each output must be within REL_TOL of PyTorch's fp32 output, err = max|cinfer - torch| / max|torch| (one scale per
output tensor, so tiny elements do not blow a per-element ratio up); onnxruntime's err on the same file is shown
beside. The light graphs have no PyTorch model: onnxruntime is their reference. Detection models (NMS inside) are
compared with onnxruntime on the same file, boxes matched by overlap.

expected_failures.txt lists the ids that fail today, with the reason ("exporter: ..." or "cinfer: ...", and the failure
must be on that side); it is checked both ways: an unlisted failure fails, and so does a listed model that passes
(remove it from the list).
"""
import pathlib
import re
import time

import numpy as np
import onnxruntime as ort
import pytest

import catalog
import exports
from conftest import ROWS
from cinfer_ctypes import Session

REL_TOL = 1e-3
BOX_IOU_MIN = 0.9       # a detection matches a reference one of the same label overlapping at least this much
SCORE_TOL = 1e-3
TIMED_RUNS = 2
EXPECTED_FAILURES = pathlib.Path(__file__).resolve().parent / "expected_failures.txt"
MODEL_IDS = catalog.model_ids()


def load_expected_failures():
    listed = {}
    for line in EXPECTED_FAILURES.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        if not reason.strip():
            raise ValueError(f"{EXPECTED_FAILURES}: entry '{name.strip()}' needs a reason after '#'")
        listed[name.strip()] = reason.strip()
    return listed


EXPECTED = load_expected_failures()


class ZooFailure(AssertionError):
    pass


def relative_error(actual, reference):
    if reference.size == 0:
        return 0.0
    scale = float(np.max(np.abs(reference)))
    return float(np.max(np.abs(actual.astype(np.float64) - reference))) / (scale if scale > 0 else 1.0)


def _timed(run, runs):
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - start)
    return result, best * 1e3


def run_onnxruntime(model, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3  # errors only: the light graphs' unused initializers would print a warning each
    try:
        sess = ort.InferenceSession(str(model.path), opts, providers=["CPUExecutionProvider"])
        sess.run(None, model.inputs)
        return _timed(lambda: sess.run(None, model.inputs), TIMED_RUNS)
    except Exception as exc:
        raise ZooFailure(f"onnxruntime fails on the file: {str(exc).splitlines()[0]}") from None


def iou(a, b):
    """Overlap of boxes a [N,4] and b [M,4] (x1, y1, x2, y2) as an [N, M] matrix."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area = lambda x: np.prod(np.clip(x[:, 2:] - x[:, :2], 0, None), axis=1)  # noqa: E731
    return inter / np.maximum(area(a)[:, None] + area(b)[None, :] - inter, 1e-12)


def match_detections(found, reference):
    """found, reference: (boxes, scores, labels). Every reference detection has its own found detection of the same
    label with IoU >= BOX_IOU_MIN and a score within SCORE_TOL, and there are no extra ones. Returns 1 - the worst
    matched IoU."""
    (boxes, scores, labels), (ref_boxes, ref_scores, ref_labels) = found, reference
    if len(boxes) != len(ref_boxes):
        raise ZooFailure(f"{len(boxes)} detections, onnxruntime has {len(ref_boxes)}")
    overlap = iou(ref_boxes.astype(np.float64), boxes.astype(np.float64))
    overlap[ref_labels[:, None] != labels[None, :]] = 0
    overlap[np.abs(ref_scores[:, None] - scores[None, :]) > SCORE_TOL] = 0
    worst, taken = 1.0, set()
    for r in np.argsort(-ref_scores):
        candidates = [(overlap[r, k], k) for k in range(len(boxes)) if k not in taken]
        best, k = max(candidates) if candidates else (0.0, -1)
        if best < BOX_IOU_MIN:
            raise ZooFailure(f"onnxruntime's detection {r} (label {ref_labels[r]}, score {ref_scores[r]:.4f}, box "
                             f"{ref_boxes[r].round(2).tolist()}) has no match (best IoU {best:.3f})")
        taken.add(k)
        worst = min(worst, best)
    return 1.0 - worst if len(ref_boxes) else 0.0


def export_failure_summary(text):
    """The exporter's error in one line: its first line, and the root cause where the traceback names one."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines[1:] if re.match(r"^[\w.]*(Error|Exception|SymNode): ", line)
              and not line.startswith(("TorchExportError", "ConversionError", "torch.onnx"))]
    return lines[0] + (f" (cause: {causes[0]})" if causes else "")


def check_model(lib, model, threads, row):
    """Runs model through cinfer at threads, fills row, raises ZooFailure with what is wrong."""
    if model.error:
        raise ZooFailure(f"export failed: {export_failure_summary(model.error)}")
    row["export s"] = model.export_s
    ort_outputs, row["ort ms"] = run_onnxruntime(model, threads)
    start = time.perf_counter()
    try:
        sess = Session(lib, path=model.path, threads=threads, device="cpu")
    except Exception as exc:
        raise ZooFailure(f"cinfer refuses the file: {exc}") from None
    row["load ms"] = (time.perf_counter() - start) * 1e3
    try:
        sess.run(model.inputs)  # plans for these shapes
        outputs, row["cinfer ms"] = _timed(lambda: sess.run(model.inputs), TIMED_RUNS)
    except Exception as exc:
        raise ZooFailure(f"cinfer run fails: {exc}") from None
    finally:
        sess.close()
    if len(outputs) != len(ort_outputs):
        raise ZooFailure(f"{len(outputs)} outputs, the file declares {len(ort_outputs)}")
    if model.detection:
        row["cinfer err"] = match_detections(outputs, ort_outputs)
        return
    reference = model.torch_outputs if model.torch_outputs is not None else ort_outputs
    row["torch ms"] = model.torch_ms.get(threads)
    errors, ort_errors = [], []
    for k, (got, ref, theirs) in enumerate(zip(outputs, reference, ort_outputs)):
        name = model.output_names[k] if k < len(model.output_names) else str(k)
        if got.shape != ref.shape:
            raise ZooFailure(f"output {name}: shape {got.shape}, reference {ref.shape}")
        if not np.any(ref):
            raise ZooFailure(f"output {name}: the reference is all zeros, so a comparison would mean nothing")
        if not np.all(np.isfinite(got)):
            raise ZooFailure(f"output {name}: {np.sum(~np.isfinite(got))} non-finite values")
        errors.append(relative_error(got, ref))
        ort_errors.append(relative_error(theirs, ref) if model.torch_outputs is not None else 0.0)
    row["cinfer err"], row["ort err"] = max(errors), max(ort_errors)
    if row["cinfer err"] > REL_TOL:
        raise ZooFailure(f"error {row['cinfer err']:.3g} vs {'PyTorch' if model.torch_outputs else 'onnxruntime'} "
                         f"exceeds {REL_TOL} (onnxruntime's: {row['ort err']:.3g})")


def check_listed_side(model_id, reason, failure):
    """A listed model fails on the side its reason names ("exporter: ..." or "cinfer: ..."): an exporter failure
    that starts to export and then fails in cinfer, or the reverse, is a new failure, not the listed one."""
    side = reason.split(":", 1)[0]
    if side not in ("exporter", "cinfer"):
        raise ValueError(f"expected_failures.txt: the reason of {model_id} starts with 'exporter:' or 'cinfer:'")
    if (side == "exporter") != failure.startswith("export failed"):
        raise ZooFailure(f"listed as failing in the {side}, but: {failure}")


@pytest.mark.parametrize("model_id,threads", [(m, t) for m in MODEL_IDS for t in exports.THREAD_COUNTS])
def test_model(lib, zoo, model_id, threads):
    row = {"model": model_id, "thr": threads}
    ROWS.append(row)
    reason = EXPECTED.get(model_id)
    try:
        check_model(lib, zoo.get(model_id), threads, row)
    except Exception as failure:  # ZooFailure says what is wrong; anything else is a failure of the suite itself
        row["why"] = str(failure)[:400]
        if reason:
            row["result"] = "FAIL"
            check_listed_side(model_id, reason, str(failure))
            row["result"] = "xfail"
            pytest.xfail(f"{reason} -- {failure}")
        row["result"] = "FAIL"
        raise
    if reason:
        row["result"] = "XPASS"
        pytest.fail(f"{model_id} passes at {threads} threads but expected_failures.txt lists it ({reason}): "
                    "remove it from the list")
    row["result"] = "pass"


def test_expected_failures_name_models():
    unknown = sorted(set(EXPECTED) - set(MODEL_IDS))
    assert not unknown, f"expected_failures.txt names models the catalog does not have: {unknown}"
