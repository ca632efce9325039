"""Engine precision per model: the config parameters cinfer_precision / cinfer_deterministic / cinfer_cuda_graphs (and
cinfer_gpu_wait, checked here) and
the --precision flag reach the engine; the wire keeps the model's dtypes; a bad value fails that model's load with the
engine's message while the others serve. Any other option the engine lists passes through as cinfer_<key> too."""
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


def test_every_listed_engine_option_passes_through(start_server, tmp_path, lib):
    """A config parameter cinfer_<key> reaches the engine for any key the engine lists (cinfer_session_option_info),
    not only the four above; the engine alone checks it. Other cinfer_* parameters are not session options and, as
    before, do not fail the load."""
    keys = {o["key"] for o in lib.session_options()}
    assert {"threads", "copy_chunks", "timeline"} <= keys
    repo = tmp_path / "models"
    cpu = 'instance_group [ { kind: KIND_CPU count: 1 } ]\n'
    write_model(repo, "threads", {1: mlp_model()}, params(cinfer_threads="1", **{"cinfer_dim.batch": "8"}) + cpu)
    write_model(repo, "bad_chunks", {1: mlp_model()}, params(cinfer_copy_chunks="lots") + cpu)
    write_model(repo, "bad_threads", {1: mlp_model()}, params(cinfer_threads="-3") + cpu)
    write_model(repo, "timeline_on_cpu", {1: mlp_model()}, params(cinfer_timeline="1") + cpu)
    write_model(repo, "not_an_option", {1: mlp_model()}, params(cinfer_no_such_option="1") + cpu)
    s = start_server(repo, "--strict-readiness", "false")
    c = httpclient.InferenceServerClient(s.url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["threads"]["state"] == "READY" and index["not_an_option"]["state"] == "READY"
    assert "session option 'copy_chunks': 'lots' is not a count from 0 to 64" in index["bad_chunks"]["reason"]
    assert "session option 'threads': '-3' is not a count from 0 to 1024" in index["bad_threads"]["reason"]
    assert "session option 'timeline': the cpu backend has no streams to time" in index["timeline_on_cpu"]["reason"]
    x = np.random.default_rng(2).standard_normal((2, 16)).astype(np.float32)
    np.testing.assert_array_equal(probs(c, "threads", x), probs(c, "not_an_option", x))


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
