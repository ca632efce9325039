"""A real trained model end to end (ctest label zoo): all-MiniLM-L6-v2 exported to ONNX (tests/zoo/minilm.py), its
sentence embeddings from cinfer against PyTorch's: within 1e-4 in fp32 on the CPU; on a GPU, fp16 and bf16 embeddings
keep cosine >= 0.999 with fp32 over 300 sentences (skipped, with the reason, where no CUDA device is usable)."""
import os
import pathlib

import numpy as np
import pytest

import minilm
from cinfer_ctypes import Session

HERE = pathlib.Path(__file__).resolve().parent
FP32_TOL = 1e-4        # max|cinfer - torch| / max|torch| over a batch of embeddings
LOW_PRECISION_COSINE = 0.999
PARAPHRASE_COSINE = 0.3    # a sentence and its paraphrase (sentences.txt's first four: two pairs)
UNRELATED_COSINE = 0.15    # sentences of the two different pairs
GPU_SENTENCES = 300
BATCH = 32

SUBJECTS = ("The engineer", "A small child", "My neighbour", "The old fisherman", "Our team", "The new manager",
            "A tired student", "The museum guide", "Her brother", "The pilot")
ACTIONS = ("repaired the broken fence", "read a long novel", "cooked dinner for everyone", "missed the last bus",
           "painted a portrait", "planted tomatoes", "wrote a report about climate change", "lost the car keys",
           "won a chess tournament", "fixed a memory leak in the server")
WHEN = ("yesterday", "before sunrise", "during the storm", "last summer", "after lunch", "on a quiet Sunday",
        "in the middle of the night", "while it was snowing")


def sentences(count):
    """The real sentences of sentences.txt, then varied generated ones (seeded) up to count."""
    real = [line.strip() for line in (HERE / "sentences.txt").read_text().splitlines() if line.strip()]
    rng = np.random.default_rng(11)
    while len(real) < count:
        subject, action, when = (SUBJECTS[rng.integers(len(SUBJECTS))], ACTIONS[rng.integers(len(ACTIONS))],
                                 WHEN[rng.integers(len(WHEN))])
        real.append(f"{subject} {action} {when}." if rng.integers(2) else f"{when.capitalize()}, "
                    f"{subject[0].lower()}{subject[1:]} {action}.")
    return real[:count]


CACHE = pathlib.Path(os.environ.get("CINFER_ZOO_CACHE", HERE.parents[1] / "build" / "zoo-cache")) / "trained"


@pytest.fixture(scope="module")
def trained():
    cache = CACHE
    cache.mkdir(parents=True, exist_ok=True)
    path = minilm.export(cache)
    directory = minilm.model_dir(cache)
    return path, minilm.tokenizer(directory), minilm.embedder(directory)


def relative_error(actual, reference):
    return float(np.max(np.abs(actual.astype(np.float64) - reference)) / np.max(np.abs(reference)))


def test_wrapper_is_the_sentence_transformers_pipeline(trained):
    """The exported module's embeddings are what sentence-transformers itself computes for this model."""
    st = pytest.importorskip("sentence_transformers")
    _, tok, module = trained
    texts = sentences(8)
    ours = minilm.torch_embeddings(module, minilm.tokenize(tok, texts))
    theirs = st.SentenceTransformer(str(minilm.model_dir(CACHE)), device="cpu").encode(texts)
    assert relative_error(ours, theirs) < 1e-5


@pytest.mark.parametrize("threads", [1, 16])
def test_cpu_fp32_embeddings_match_pytorch(lib, trained, threads):
    path, tok, module = trained
    sess = Session(lib, path=path, threads=threads, device="cpu")
    texts = sentences(48)
    for batch in (texts[:16], texts[16:17], texts[17:48]):  # padded batches and a single unpadded sentence
        feeds = minilm.tokenize(tok, batch)
        got = sess.run(feeds)[0]
        expected = minilm.torch_embeddings(module, feeds)
        assert got.shape == expected.shape == (len(batch), 384)
        err = relative_error(got, expected)
        assert err < FP32_TOL, f"{len(batch)} sentences of {feeds['input_ids'].shape[1]} tokens: error {err:.3g}"


def test_embeddings_are_the_trained_ones(lib, trained):
    """Paraphrases land close together and unrelated sentences apart: the weights are the trained ones, not noise
    (random weights give every pair of mean-pooled sentences a cosine near 1). PyTorch has 0.57 and 0.38 for the two
    paraphrase pairs and |cosine| < 0.07 for the four unrelated ones."""
    path, tok, _ = trained
    sess = Session(lib, path=path, threads=2, device="cpu")
    e = sess.run(minilm.tokenize(tok, sentences(4)))[0]  # guitar, instrument, stock market, shares sold
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    cosine = e @ e.T
    paraphrases, unrelated = [(0, 1), (2, 3)], [(0, 2), (0, 3), (1, 2), (1, 3)]
    assert all(cosine[a, b] > PARAPHRASE_COSINE for a, b in paraphrases), np.round(cosine, 3)
    assert all(abs(cosine[a, b]) < UNRELATED_COSINE for a, b in unrelated), np.round(cosine, 3)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_gpu_low_precision_embeddings_keep_cosine(lib, trained, precision):
    devices, reason = lib.cuda_devices()
    if not devices:
        pytest.skip(f"no CUDA device: {reason}")
    path, tok, module = trained
    reduced = Session(lib, path=path, device="cuda", options={"precision": precision})
    full = Session(lib, path=path, device="cuda")
    texts = sentences(GPU_SENTENCES)
    worst = 1.0
    for start in range(0, len(texts), BATCH):
        feeds = minilm.tokenize(tok, texts[start:start + BATCH])
        low, fp32 = reduced.run(feeds)[0].astype(np.float64), full.run(feeds)[0].astype(np.float64)
        assert relative_error(fp32, minilm.torch_embeddings(module, feeds)) < FP32_TOL
        cosine = np.sum(low * fp32, 1) / (np.linalg.norm(low, axis=1) * np.linalg.norm(fp32, axis=1))
        worst = min(worst, float(cosine.min()))
    print(f"{precision}: worst cosine with fp32 over {len(texts)} sentences: {worst:.6f}")
    assert worst >= LOW_PRECISION_COSINE
