"""Exports the zoo's models into a cache directory (the build tree's zoo-cache, never git) with their PyTorch
fp32 reference outputs and latencies, once: a later test session reuses what the same catalog and package versions
wrote (a stamp file holds them; anything else empties the cache first).

Per model id: <id>.onnx, <id>.npz (inputs "in:<name>", PyTorch outputs "torch:<k>", latencies "torch_ms:<threads>")
or <id>.error (why the export failed: the exporter's last words, kept so a known exporter failure is not retried).
"""
import hashlib
import io
import json
import pathlib
import time
import traceback
import warnings

import numpy as np

import catalog

HERE = pathlib.Path(__file__).resolve().parent
THREAD_COUNTS = (1, 16)
TIMED_RUNS = 2


def cache_stamp():
    import onnx
    import onnxruntime
    import torch
    import torchvision
    import transformers
    digest = hashlib.sha256()
    for source in ("catalog.py", "exports.py"):
        digest.update((HERE / source).read_bytes())
    return json.dumps({"sources": digest.hexdigest(), "torch": torch.__version__, "onnx": onnx.__version__,
                       "torchvision": torchvision.__version__, "transformers": transformers.__version__,
                       "onnxruntime": onnxruntime.__version__})


def open_cache(directory):
    """The cache directory, emptied when its stamp is not this catalog's and these packages'."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = directory / "stamp.json"
    current = cache_stamp()
    if not stamp.exists() or stamp.read_text() != current:
        for stale in directory.iterdir():
            if stale.suffix in (".onnx", ".npz", ".error", ".data"):
                stale.unlink()
        stamp.write_text(current)
    return directory


class Exported:
    """One model of the zoo as the tests see it: the ONNX file, its inputs, PyTorch's outputs and latencies (None
    for the light graphs, whose oracle is onnxruntime), the export's duration, or the reason the export failed."""

    def __init__(self, model_id, path, inputs=None, torch_outputs=None, torch_ms=None, export_s=0.0, error=None,
                 detection=False, output_names=None):
        self.model_id, self.path, self.inputs, self.torch_outputs = model_id, path, inputs, torch_outputs
        self.torch_ms, self.export_s, self.error, self.detection = torch_ms or {}, export_s, error, detection
        self.output_names = output_names or []


def _time_torch(model, args):
    import torch
    out = {}
    for threads in THREAD_COUNTS:
        torch.set_num_threads(threads)
        best = float("inf")
        with torch.inference_mode():
            for _ in range(TIMED_RUNS):
                start = time.perf_counter()
                model(*args)
                best = min(best, time.perf_counter() - start)
        out[threads] = best * 1e3
    torch.set_num_threads(1)
    return out


def _flatten(outputs):
    if isinstance(outputs, (tuple, list)):
        return [t.detach().numpy() for t in outputs]
    return [outputs.detach().numpy()]


def _export_torch(spec, exporter, opset, path):
    import torch
    model, args, input_names, output_names = spec.build()
    torch.set_num_threads(1)
    with torch.inference_mode():
        reference = _flatten(model(*args))
    torch_ms = _time_torch(model, args)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            program = torch.onnx.export(model, args, dynamo=True, opset_version=opset, input_names=input_names,
                                        output_names=output_names, verbose=False, report=False)
            program.save(str(path))
        else:
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=opset, input_names=input_names,
                              output_names=output_names)
    inputs = {name: a.detach().numpy() for name, a in zip(input_names, args)}
    return inputs, reference, torch_ms, output_names


def _export_light(name, opset, path):
    """The light graph name with seeded random weights, as shipped (opset None: opset 9) or converted to opset by
    onnx's version converter."""
    import onnx
    from onnx import version_converter
    model = catalog.randomize_light_model(onnx.load(str(catalog.light_model_path(name))), seed=9)
    if opset is not None:
        model = version_converter.convert_version(model, opset)
    onnx.save(model, str(path))
    rng = np.random.default_rng(10)
    inputs = {}
    initialized = {t.name for t in model.graph.initializer}
    for value in model.graph.input:
        if value.name not in initialized:
            shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
            inputs[value.name] = rng.standard_normal(shape).astype(np.float32)
    return inputs, [o.name for o in model.graph.output]


def export(model_id, specs, directory):
    """The Exported for model_id, from the cache or exported now."""
    directory = pathlib.Path(directory)
    path, saved, failed = (directory / f"{model_id}{suffix}" for suffix in (".onnx", ".npz", ".error"))
    spec = specs.get(model_id.rsplit("-", 1)[0])
    detection = bool(spec and spec.detection)
    if failed.exists():
        return Exported(model_id, path, error=failed.read_text(), detection=detection)
    if path.exists() and saved.exists():
        with np.load(saved, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"]))
            inputs = {k[3:]: z[k] for k in meta["inputs"]}
            torch_outputs = [z[f"torch:{k}"] for k in range(meta["torch_outputs"])] if meta["torch_outputs"] else None
        return Exported(model_id, path, inputs, torch_outputs, {int(k): v for k, v in meta["torch_ms"].items()},
                        meta["export_s"], detection=detection, output_names=meta["output_names"])
    start = time.perf_counter()
    torch_outputs, torch_ms = None, {}
    try:
        if model_id.startswith("light_"):
            name, _, converted = model_id[len("light_"):].partition("-opset")
            inputs, output_names = _export_light(name, int(converted) if converted else None, path)
        else:
            exporter = "dynamo" if model_id.endswith("-dynamo18") else "legacy"
            opset = int(model_id.rsplit(exporter, 1)[1])
            inputs, torch_outputs, torch_ms, output_names = _export_torch(spec, exporter, opset, path)
    except Exception as exc:  # the exporter's failure, cached with its traceback's last lines
        text = io.StringIO()
        traceback.print_exception(exc, limit=-3, file=text)
        failed.write_text(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}\n{text.getvalue()}")
        path.unlink(missing_ok=True)
        return Exported(model_id, path, error=failed.read_text(), detection=detection)
    export_s = time.perf_counter() - start
    arrays = {f"in:{k}": v for k, v in inputs.items()}
    arrays.update({f"torch:{k}": v for k, v in enumerate(torch_outputs or [])})
    meta = {"inputs": list(arrays)[:len(inputs)], "torch_outputs": len(torch_outputs or []),
            "torch_ms": torch_ms, "export_s": export_s, "output_names": output_names}
    np.savez(saved, meta=np.array(json.dumps(meta)), **arrays)
    return Exported(model_id, path, inputs, torch_outputs, torch_ms, export_s, detection=detection,
                    output_names=output_names)
