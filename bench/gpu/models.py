"""Reference models of the GPU benchmark (bench/gpu/compare_pytorch.py): ResNet-50, BERT-base seq 128, a DLRM-style
recommender and a 2048x2048 image windowing model, built with random weights (fixed seeds) and exported to ONNX
(opset 18, dynamic batch). Each builder returns the eval-mode torch module too, so PyTorch times exactly the
exported model.

    spec = build("resnet50", pathlib.Path("/tmp/models"))   # exports once; reuses an existing file
    spec.module, spec.path, spec.make_inputs(batch, generator, device)
"""
import dataclasses
import pathlib
import time
from typing import Callable, List

import torch

OPSET = 18
DLRM_TABLES, DLRM_ROWS, DLRM_DIM, DLRM_DENSE = 26, 100_000, 64, 13
IMAGE_SIZE = 2048


@dataclasses.dataclass
class ModelSpec:
    name: str
    module: torch.nn.Module          # fp32, eval mode, on the CPU (the caller moves it)
    path: pathlib.Path               # the exported ONNX file
    input_names: List[str]
    output_names: List[str]
    make_inputs: Callable            # (batch, torch.Generator, device) -> list of tensors in input order
    fill_inputs: Callable            # (list of tensors, torch.Generator) -> refills them in place with fresh values
    unit: str                        # what one batch item is, for throughput ("img", "seq", "sample")
    export_s: float = 0.0            # 0 when the file was already there
    size_bytes: int = 0


def _dynamic_batch(module, n_args):
    # positional, matching forward's parameters (DLRM's forward takes *sparse: one tuple for all 26)
    batch = torch.export.Dim("batch", min=1, max=4096)
    if isinstance(module, DLRM):
        return ({0: batch}, tuple({0: batch} for _ in range(n_args - 1)))
    return tuple({0: batch} for _ in range(n_args))


def _export(module, args, path, input_names, output_names):
    # dynamo exporter: the legacy one fails on BERT and adds shape ops; one file (all < 2 GB), no external data
    torch.onnx.export(module, tuple(args), str(path), dynamo=True, opset_version=OPSET, input_names=input_names,
                      output_names=output_names, dynamic_shapes=_dynamic_batch(module, len(args)), external_data=False,
                      verbose=False)


# ---- ResNet-50 (torchvision, random weights) ----
def _resnet50():
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.resnet50(weights=None)
    # As initialised, eval-mode BatchNorm is the identity, activations grow layer by layer and a common mode decides
    # the logits: every image gets the same class, so fp16-vs-fp32 top-1 agreement would be trivially 100%.
    # Calibrate the BatchNorm statistics on random images and centre the classifier bias (as training would) so
    # activations are normalised and the top-1 depends on the image.
    g = torch.Generator().manual_seed(10)
    for bn in m.modules():
        if isinstance(bn, torch.nn.BatchNorm2d):
            bn.reset_running_stats()
            bn.momentum = None  # cumulative average over the calibration batches
    m.train()
    with torch.no_grad():
        for _ in range(2):
            m(torch.randn(16, 3, 224, 224, generator=g))
        m.eval()
        m.fc.bias -= m(torch.randn(32, 3, 224, 224, generator=g)).mean(0)

    def make(b, g, device="cpu"):
        return [torch.randn(b, 3, 224, 224, generator=g).to(device)]
    return m, ["x"], ["logits"], make, "img"


# ---- BERT-base, seq 128 (transformers, random weights) ----
class _BertHidden(torch.nn.Module):
    """last_hidden_state only; keyword arguments because forward's positional order changes between releases."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask, return_dict=True).last_hidden_state


def _bert():
    import transformers
    torch.manual_seed(1)
    cfg = transformers.BertConfig()
    m = _BertHidden(transformers.BertModel(cfg, add_pooling_layer=False)).eval()
    vocab = cfg.vocab_size

    def make(b, g, device="cpu"):
        # all-ones mask: every sequence full length (the benchmark times dense seq-128 batches)
        return [torch.randint(0, vocab, (b, 128), generator=g).to(device), torch.ones(b, 128, dtype=torch.int64,
                                                                                     device=device)]
    return m, ["input_ids", "attention_mask"], ["last_hidden_state"], make, "seq"


# ---- DLRM-style: bottom MLP, 26 Gather lookups, dot-product interaction, top MLP, sigmoid ----
def _mlp(sizes, last_act=True):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_act:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    """dense (B,13) -> bottom MLP 512-256-64; 26 index inputs (B,) -> one row each of a 100000x64 table (Gather;
    nn.EmbeddingBag would export as Loop); the 27 vectors' pairwise dot products (351, upper triangle) + the bottom
    output -> top MLP 512-256-1 -> sigmoid."""

    def __init__(self):
        super().__init__()
        n = DLRM_TABLES + 1
        self.bottom = _mlp([DLRM_DENSE, 512, 256, DLRM_DIM])
        self.tables = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.randn(DLRM_ROWS, DLRM_DIM) * 0.35) for _ in range(DLRM_TABLES)])  # dots ~ N(0, 1)
        iu = torch.triu_indices(n, n, offset=1)
        self.register_buffer("pairs", iu[0] * n + iu[1], persistent=False)  # flat indices into the n x n products
        self.top = _mlp([DLRM_DIM + n * (n - 1) // 2, 512, 256, 1], last_act=False)

    def forward(self, dense, *sparse):
        x = self.bottom(dense)
        t = torch.stack([x] + [torch.nn.functional.embedding(i, w) for i, w in zip(sparse, self.tables)], dim=1)
        z = torch.bmm(t, t.transpose(1, 2)).flatten(1)
        return torch.sigmoid(self.top(torch.cat([x, z.index_select(1, self.pairs)], dim=1)))


def _dlrm():
    torch.manual_seed(2)
    m = DLRM().eval()

    def make(b, g, device="cpu"):
        return [torch.randn(b, DLRM_DENSE, generator=g).to(device)] + \
               [torch.randint(0, DLRM_ROWS, (b,), generator=g).to(device) for _ in range(DLRM_TABLES)]
    names = ["dense"] + [f"sparse_{i}" for i in range(DLRM_TABLES)]
    return m, names, ["prob"], make, "sample"


# ---- image windowing: clip((x - level) / width + 0.5, 0, 1) on 2048x2048 fp32 ----
class Window(torch.nn.Module):
    def __init__(self, level=40.0, width=400.0):
        super().__init__()
        self.level, self.width = level, width

    def forward(self, x):
        return torch.clamp((x - self.level) / self.width + 0.5, 0.0, 1.0)


def _image():
    m = Window().eval()

    def make(b, g, device="cpu"):  # CT-like values: most of the range maps inside the window, some clips
        return [(torch.randn(b, 1, IMAGE_SIZE, IMAGE_SIZE, generator=g) * 300.0).to(device)]
    return m, ["image"], ["windowed"], make, "img"


BUILDERS = {"resnet50": _resnet50, "bert": _bert, "dlrm": _dlrm, "image": _image}


def _fill(tensors, g, model_name):
    """Fresh random values in place (same buffers, so CUDA graphs and prebuilt cinfer tensors stay valid)."""
    for k, t in enumerate(tensors):
        if t.dtype == torch.int64:
            if model_name == "bert" and k == 1:
                continue  # attention mask stays all ones
            hi = 30522 if model_name == "bert" else DLRM_ROWS
            t.random_(0, hi, generator=g)
        else:
            t.normal_(0.0, 300.0 if model_name == "image" else 1.0, generator=g)


def build(name, folder, export=True):
    """The model `name` (resnet50, bert, dlrm, image) with its ONNX file in `folder` (exported unless there)."""
    module, in_names, out_names, make, unit = BUILDERS[name]()
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.onnx"
    spec = ModelSpec(name, module, path, in_names, out_names, make, lambda ts, g: _fill(ts, g, name), unit)
    if export and not path.exists():
        t0 = time.perf_counter()
        tmp = path.with_suffix(".onnx.tmp")
        with torch.no_grad():
            _export(module, make(2, torch.Generator().manual_seed(0)), tmp, in_names, out_names)
        tmp.rename(path)  # a half-written file is never taken for a finished export
        spec.export_s = time.perf_counter() - t0
    if path.exists():
        spec.size_bytes = path.stat().st_size
    return spec


if __name__ == "__main__":
    import sys
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/cinfer-models")
    for n in (sys.argv[2].split(",") if len(sys.argv) > 2 else BUILDERS):
        s = build(n, out)
        print(f"{n:<10} {s.path}  {s.size_bytes / 1e6:8.1f} MB  export {s.export_s:6.1f} s")
