#!/usr/bin/env python3
"""Seed corpus for the model fuzzer: the bundled examples, the test models, and a sample of small ONNX node
test models (one per op), written as files into the folder given."""
import pathlib
import sys
import warnings

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "models"))
import builders  # noqa: E402


def main(out):
    out = pathlib.Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for p in (ROOT / "examples" / "models").glob("*.onnx"):
        (out / p.name).write_bytes(p.read_bytes())
    for name, build in builders.ALL.items():
        kwargs = {"size": 16} if name in ("cnn", "image_window") else {}
        model, _ = build(np.random.default_rng(0), **kwargs)
        (out / f"{name}.onnx").write_bytes(model.SerializeToString())
    import onnx.backend.test.loader as loader
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = loader.load_model_tests(kind="node")
    seen = set()
    for case in cases:
        ops = tuple(sorted({n.op_type for n in case.model.graph.node}))
        data = case.model.SerializeToString()
        if ops in seen or len(data) > 4096:
            continue
        seen.add(ops)
        (out / f"{case.name}.onnx").write_bytes(data)
    print(f"corpus: {len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build-fuzz/corpus")
