#!/usr/bin/env python3
"""Reference workloads on the GPU machine: exports ResNet-50 (torchvision) and BERT-base (transformers) with random
weights, runs them with cinfer on CUDA and with onnxruntime (CPU) on the same random inputs, and prints the relative
error (max |diff| / max |reference|) and the host/device copies per run. Fails when an error exceeds 1e-3.
Needs torch, torchvision, transformers, onnxruntime (all present on the lent H200).

Usage: check_models.py WORKDIR
"""
import pathlib
import sys
import time

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "python"))
from cinfer_ctypes import Library, Session  # noqa: E402


def export_resnet50(work):
    import torch
    import torchvision
    path = work / "resnet50.onnx"
    if not path.exists():
        m = torchvision.models.resnet50(weights=None).eval()
        torch.onnx.export(m, torch.randn(1, 3, 224, 224), str(path), dynamo=False, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    return path, lambda b, rng: {"x": rng.standard_normal((b, 3, 224, 224)).astype(np.float32)}


def export_bert(work):
    import torch
    import transformers
    path = work / "bert.onnx"
    if not path.exists():
        cfg = transformers.BertConfig()
        bert = transformers.BertModel(cfg).eval()

        class Bert(torch.nn.Module):  # keyword arguments: forward's positional order changes between releases
            def forward(self, input_ids, attention_mask):
                out = bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
                return out.last_hidden_state, out.pooler_output

        ids = torch.randint(0, cfg.vocab_size, (2, 128))
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(Bert().eval(), (ids, torch.ones_like(ids)), str(path), dynamo=True, opset_version=18,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "pooler"],
                          dynamic_shapes={"input_ids": {0: batch}, "attention_mask": {0: batch}}, external_data=False)
    return path, lambda b, rng: {"input_ids": rng.integers(0, 30522, (b, 128)).astype(np.int64),
                                 "attention_mask": np.ones((b, 128), np.int64)}


EXPORTERS = {"resnet50": export_resnet50, "bert": export_bert}


def main():
    work = pathlib.Path(sys.argv[1])
    work.mkdir(parents=True, exist_ok=True)
    lib = Library()
    worst = 0.0
    print(f"{'model':<10}{'batch':>6}{'rel err':>12}{'h2d':>5}{'d2h':>5}{'load s':>8}{'cuda ms':>10}")
    for name, exporter in EXPORTERS.items():
        try:
            path, make = exporter(work)
        except Exception as e:  # noqa: BLE001 - report the export problem briefly, go on with the next model
            print(f"{name}: export failed: {type(e).__name__}: {str(e)[-300:]}")
            worst = float("inf")
            continue
        t0 = time.time()
        sess = Session(lib, path=str(path), device="cuda:0")
        load_s = time.time() - t0
        ref = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        for batch in (1, 8):
            feeds = make(batch, np.random.default_rng(batch))
            expected = ref.run(None, feeds)
            got = sess.run(feeds)
            t0 = time.time()
            for _ in range(10):
                sess.run(feeds)
            ms = (time.time() - t0) * 100
            st = sess.last_run_stats()
            err = max(float(np.max(np.abs(g.astype(np.float64) - e))) / max(float(np.max(np.abs(e))), 1e-30)
                      for g, e in zip(got, expected))
            worst = max(worst, err)
            print(f"{name:<10}{batch:>6}{err:>12.2e}{st.host_to_device_copies:>5}{st.device_to_host_copies:>5}"
                  f"{load_s:>8.2f}{ms:>10.2f}")
        sess.close()
    print(f"worst relative error {worst:.2e}")
    return 0 if worst < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
