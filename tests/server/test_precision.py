"""Engine precision per model: the config parameters cinfer_precision / cinfer_deterministic / cinfer_cuda_graphs (and
cinfer_gpu_wait, checked here) and
the --precision flag reach the engine; the wire keeps the model's dtypes; a bad value fails that model's load with the
engine's message while the others serve."""
import numpy as np
import tritonclient.http as httpclient

from conftest import mlp_model, write_model


def params(**kv):
    return "".join(f'parameters {{ key: "{k}" value {{ string_value: "{v}" }} }}\n' for k, v in kv.items())


def probs(client, model, x):
    inp = httpclient.InferInput("x", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    return client.infer(model, [inp]).as_numpy("probs")


def test_config_and_flag_choose_the_precision(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "fp32", {1: mlp_model()})
    write_model(repo, "fp16", {1: mlp_model()}, params(cinfer_precision="fp16", cinfer_deterministic="1"))
    write_model(repo, "bf16", {1: mlp_model()}, params(cinfer_precision="bf16", cinfer_cuda_graphs="0"))
    write_model(repo, "bad", {1: mlp_model()}, params(cinfer_precision="fp8"))
    write_model(repo, "spin", {1: mlp_model()}, params(cinfer_gpu_wait="block"))
    write_model(repo, "bad_wait", {1: mlp_model()}, params(cinfer_gpu_wait="poll"))
    write_model(repo, "nographs", {1: mlp_model()}, "optimization { cuda { graphs: false } }\n")
    s = start_server(repo, "--strict-readiness", "false")
    c = httpclient.InferenceServerClient(s.url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["bad"]["state"] == "UNAVAILABLE" and "'fp8' is not fp32, tf32, fp16 or bf16" in index["bad"]["reason"]
    assert index["bad_wait"]["state"] == "UNAVAILABLE"
    assert "session option 'gpu_wait': 'poll' is not spin or block" in index["bad_wait"]["reason"]
    assert index["spin"]["state"] == "READY"
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    ref = probs(c, "fp32", x)
    for name, tol in (("fp16", 2e-3), ("bf16", 2e-2)):
        got = probs(c, name, x)
        assert got.dtype == np.float32 and got.shape == ref.shape  # the wire keeps the model's dtypes
        assert np.max(np.abs(got - ref)) < tol and not np.array_equal(got, ref), name
    np.testing.assert_array_equal(probs(c, "fp16", x), probs(c, "fp16", x))
    np.testing.assert_array_equal(probs(c, "nographs", x), ref)  # Triton's graphs: false reaches the engine as cuda_graphs=0


def test_precision_flag_is_the_default_and_checked(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    write_model(repo, "pinned", {1: mlp_model()}, params(cinfer_precision="fp32"))
    s = start_server(repo, "--precision", "fp16")
    c = httpclient.InferenceServerClient(s.url)
    x = np.random.default_rng(1).standard_normal((2, 16)).astype(np.float32)
    half, full = probs(c, "mlp", x), probs(c, "pinned", x)  # the config's parameter wins over the flag
    assert np.max(np.abs(half - full)) < 2e-3 and not np.array_equal(half, full)


def test_bad_precision_flag_exits_2(tmp_path):
    import subprocess
    from conftest import SERVER
    p = subprocess.run([SERVER, "--model-repository", str(tmp_path), "--precision", "fp12"], capture_output=True,
                       text=True, timeout=30)
    assert p.returncode == 2 and "--precision 'fp12': use fp32, tf32, fp16 or bf16" in p.stderr
