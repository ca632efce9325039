"""Model tests: cinfer's CPU outputs vs onnxruntime (CPU) on generated reference-shaped models, batch 1 and 5.
Float outputs must agree to a relative error under 1e-4 (max |diff| / max |reference|)."""
import sys
import pathlib

import numpy as np
import onnxruntime as ort
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import builders  # noqa: E402
from cinfer_ctypes import Session  # noqa: E402

REL_TOL = 1e-4


def relative_error(actual, expected):
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    return float(np.max(np.abs(actual.astype(np.float64) - expected))) / (scale if scale > 0 else 1.0) if expected.size else 0.0


@pytest.fixture(scope="module", params=sorted(builders.ALL))
def built(request, lib):
    model, make_inputs = builders.ALL[request.param](np.random.default_rng(7))
    data = model.SerializeToString()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    reference = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return request.param, Session(lib, data), reference, make_inputs


@pytest.mark.parametrize("batch", [1, 5])
def test_matches_onnxruntime(built, batch):
    name, sess, reference, make_inputs = built
    feeds = make_inputs(batch, np.random.default_rng(100 + batch))
    expected = reference.run(None, feeds)
    actual = sess.run(feeds)
    assert len(actual) == len(expected)
    if sess.device != "cpu":  # no hidden host round trips: each input goes up once, each output comes down once
        stats = sess.last_run_stats()
        assert stats.host_to_device_copies == sum(1 for a in feeds.values() if a.size), stats.host_to_device_copies
        assert stats.device_to_host_copies == sum(1 for a in expected if a.size), stats.device_to_host_copies
    for out, (a, e) in zip(reference.get_outputs(), zip(actual, expected)):
        assert a.dtype == e.dtype, f"{name}/{out.name}: dtype {a.dtype} vs {e.dtype}"
        assert a.shape == e.shape, f"{name}/{out.name}: shape {a.shape} vs {e.shape}"
        if np.issubdtype(e.dtype, np.floating):
            err = relative_error(a, e)
            assert err < REL_TOL, f"{name}/{out.name} batch {batch}: relative error {err:.3g}"
        else:
            # quantised outputs: a float landing within rounding of a step boundary may floor differently
            diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
            assert diff.max() <= 1 and np.mean(diff > 0) < 1e-3, f"{name}/{out.name}: {np.sum(diff > 0)} values differ"


def test_batch_sizes_interleave(built):
    """Plans are cached per shape: alternating batch sizes must keep giving the right answers."""
    name, sess, reference, make_inputs = built
    for batch in (2, 3, 2, 1, 3):
        feeds = make_inputs(batch, np.random.default_rng(batch))
        expected = reference.run(None, feeds)[0]
        actual = sess.run(feeds)[0]
        if np.issubdtype(expected.dtype, np.floating):
            assert relative_error(actual, expected) < REL_TOL, f"{name} batch {batch}"


def test_concurrent_runs(lib):
    """Threads sharing one session (runs serialised) and threads with their own sessions of one model
    (runs in parallel: ctypes drops the GIL) all get the single-threaded answers."""
    import threading
    model, make_inputs = builders.transformer_block(np.random.default_rng(3))
    data = model.SerializeToString()
    shared = Session(lib, data, threads=1)
    feeds = [make_inputs(b, np.random.default_rng(b)) for b in (1, 2, 3, 4)]
    expected = [shared.run(f)[0] for f in feeds]
    own = [Session(lib, data, threads=1) for _ in range(2)]
    errors = []

    def worker(sess, offset):
        try:
            for i in range(24):
                k = (i + offset) % len(feeds)
                np.testing.assert_array_equal(sess.run(feeds[k])[0], expected[k])
        except Exception as e:  # reported below: an assert in a thread would be lost
            errors.append(repr(e))

    threads = [threading.Thread(target=worker, args=(shared, t)) for t in range(3)]
    threads += [threading.Thread(target=worker, args=(own[t], t)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
