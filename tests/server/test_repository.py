"""Model repository: explicit load/unload/reload through tritonclient, the index with states and reasons, a broken
model that does not stop the others, config errors with positions, version policies, poll mode."""
import time

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from conftest import ADD_CONFIG, add_model, broken_model, mlp_model, write_model


def add_infer(client, version=""):
    a = httpclient.InferInput("a", [2, 3], "FP32")
    a.set_data_from_numpy(np.zeros((2, 3), np.float32))
    b = httpclient.InferInput("b", [2, 3], "FP32")
    b.set_data_from_numpy(np.ones((2, 3), np.float32))
    res = client.infer("add", [a, b], model_version=version)
    return float(res.as_numpy("sum")[0, 0]) - 1.0  # the version's offset


def failure_lines(server, model):
    """The server's log lines reporting a failed load or reload of `model`."""
    return [l for l in server.logs().splitlines() if f" error model '{model}' " in l and " failed to " in l]


def assert_logged_once(server, model, what, reason, timeout=0.0, times=1):
    """Exactly one error line (`times` lines: one per failed attempt) says `model` ... `what` ... `reason`, waiting up
    to `timeout` s for it to appear."""
    deadline = time.time() + timeout
    while True:
        lines = [l for l in failure_lines(server, model) if what in l and reason in l]
        if lines or time.time() >= deadline:
            break
        time.sleep(0.1)
    assert len(lines) == times, f"expected {times} line(s) with {what!r} and {reason!r} for '{model}':\n{server.logs()}"


def test_explicit_load_unload_reload(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add", {1: add_model(1)}, ADD_CONFIG)
    write_model(repo, "mlp", {1: mlp_model()})
    s = start_server(repo, "--model-control-mode", "explicit", "--load-model", "mlp")
    c = httpclient.InferenceServerClient(s.url)
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["mlp"] == {"name": "mlp", "version": "1", "state": "READY", "reason": ""}
    assert index["add"]["state"] == "UNAVAILABLE" and "not loaded" in index["add"]["reason"]
    assert [m["name"] for m in s.json("POST", "/v2/repository/index", {"ready": True})[1]] == ["mlp"]
    assert not c.is_model_ready("add")
    with pytest.raises(InferenceServerException, match="model 'add' is not ready"):
        add_infer(c)
    c.load_model("add")
    assert c.is_model_ready("add") and add_infer(c) == 1.0
    # reload picks up a new version (policy all): both served, the unversioned request goes to the highest
    write_model(repo, "add", {2: add_model(2)})
    c.load_model("add")
    assert add_infer(c) == 2.0 and add_infer(c, "1") == 1.0
    assert sorted(m["version"] for m in c.get_model_repository_index() if m["name"] == "add") == ["1", "2"]
    c.unload_model("add")
    assert not c.is_model_ready("add") and not c.is_model_ready("add", "1")
    index = [m for m in c.get_model_repository_index() if m["name"] == "add"]
    assert [(m["version"], m["state"], m["reason"]) for m in index] == [("1", "UNAVAILABLE", "unloaded"),
                                                                         ("2", "UNAVAILABLE", "unloaded")]
    with pytest.raises(InferenceServerException, match="model 'add' is not in the model repository|not ready"):
        add_infer(c)
    with pytest.raises(InferenceServerException, match="model 'ghost' is not in the model repository"):
        c.load_model("ghost")
    status, body = s.json("POST", "/v2/repository/models/ghost/load")
    assert status == 404 and "ghost" in body["error"]
    status, body = s.json("POST", "/v2/repository/models/add/load", {"parameters": {"config": "{}"}})
    assert status == 501 and "not supported yet" in body["error"]
    # a failing reload keeps the loaded versions serving
    c.load_model("add")
    (repo / "add" / "config.pbtxt").write_text(ADD_CONFIG + "\nbogus_field: 1\n")
    with pytest.raises(InferenceServerException, match=r"config.pbtxt: line \d+, column 1: field 'ModelConfig': unknown field 'bogus_field'"):
        c.load_model("add")
    assert add_infer(c) == 2.0
    assert_logged_once(s, "add", "failed to reload: ", "response_cache); the versions already loaded stay in service")
    assert_logged_once(s, "ghost", "failed to load: ", "model 'ghost' is not in the model repository", times=2)  # loaded twice
    c.close()


def test_explicit_load_of_a_broken_model_is_logged(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "garbage", {1: b"this is not an onnx file"})
    write_model(repo, "badconfig", {1: mlp_model()}, "max_batch_size: 4\nmax_batch_size: 8\n")
    s = start_server(repo, "--model-control-mode", "explicit")
    assert failure_lines(s, "garbage") == [] and failure_lines(s, "badconfig") == []  # not loaded at startup
    status, body = s.json("POST", "/v2/repository/models/garbage/load")
    assert status == 400 and "garbage/1/model.onnx" in body["error"]
    assert_logged_once(s, "garbage", "version 1 failed to load: ", "garbage/1/model.onnx")
    status, body = s.json("POST", "/v2/repository/models/badconfig/load")
    assert status == 400 and "given more than once" in body["error"]
    assert_logged_once(s, "badconfig", "failed to load: ", "badconfig/config.pbtxt: line 2, column 1: field 'ModelConfig': 'max_batch_size' is not a repeated field")


def test_poll_mode_logs_why_a_changed_model_fails(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "add", {1: add_model(1)}, ADD_CONFIG)
    s = start_server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "1")
    c = httpclient.InferenceServerClient(s.url)
    assert add_infer(c) == 1.0
    (repo / "add" / "config.pbtxt").write_text(ADD_CONFIG + "\nbogus_field: 1\n")
    assert_logged_once(s, "add", "failed to reload: ", "config.pbtxt: line", timeout=20)
    assert_logged_once(s, "add", "failed to reload: ", "response_cache); the versions already loaded stay in service")
    assert add_infer(c) == 1.0  # still served
    write_model(repo, "late", {1: b"garbage that poll mode finds"})
    assert_logged_once(s, "late", "version 1 failed to load: ", "late/1/model.onnx", timeout=20)
    c.close()


def test_broken_model_does_not_stop_the_others(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "good", {1: mlp_model()})
    write_model(repo, "broken", {1: broken_model()})
    write_model(repo, "garbage", {1: b"this is not an onnx file"})
    write_model(repo, "badconfig", {1: mlp_model()}, 'name: "badconfig"\nmax_batch_size: 4\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 16 ] }\n')
    write_model(repo, "mismatch", {1: mlp_model()}, 'max_batch_size: 2\ninput [ { name: "x" data_type: TYPE_INT32 dims: [ 16 ] } ]\n')
    write_model(repo, "noversions", {})
    s = start_server(repo, "--strict-readiness", "false")
    c = httpclient.InferenceServerClient(s.url)
    assert c.is_server_ready() and c.is_model_ready("good")
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["good"]["state"] == "READY"
    assert index["broken"]["state"] == "UNAVAILABLE" and "NotAnOp" in index["broken"]["reason"]
    assert index["garbage"]["state"] == "UNAVAILABLE" and index["garbage"]["reason"]
    assert index["badconfig"]["state"] == "UNAVAILABLE"
    assert "badconfig/config.pbtxt: line 4, column 1: expected ',' or ']' in the list of field 'input'" in index["badconfig"]["reason"]
    assert "config input 'x' has data_type TYPE_INT32 but the model's is TYPE_FP32" in index["mismatch"]["reason"]
    assert "has no version folders" in index["noversions"]["reason"]
    # every failure is in the log once, with the model, the version where one was tried, and the reason
    assert failure_lines(s, "good") == []
    assert_logged_once(s, "badconfig", "failed to load: ",
                       "badconfig/config.pbtxt: line 4, column 1: expected ',' or ']' in the list of field 'input'")
    assert_logged_once(s, "garbage", "version 1 failed to load: ", "garbage/1/model.onnx")
    assert_logged_once(s, "broken", "version 1 failed to load: ", "NotAnOp")
    assert_logged_once(s, "mismatch", "version 1 failed to load: ", "config input 'x' has data_type TYPE_INT32")
    assert_logged_once(s, "noversions", "failed to load: ", "has no version folders")
    status, body = s.json("POST", "/v2/models/broken/infer", {"inputs": []})
    assert status == 503 and "not ready" in body["error"]
    t = httpclient.InferInput("x", [1, 16], "FP32")
    t.set_data_from_numpy(np.ones((1, 16), np.float32))
    assert c.infer("good", [t]).as_numpy("probs").shape == (1, 5)
    c.close()


@pytest.mark.parametrize("policy,versions", [("", ["3"]), ("version_policy: { latest { num_versions: 2 } }", ["2", "3"]),
                                             ("version_policy: { all { } }", ["1", "2", "3"]),
                                             ("version_policy: { specific { versions: [1, 3] } }", ["1", "3"])])
def test_version_policy(start_server, tmp_path, policy, versions):
    repo = tmp_path / "models"
    config = ADD_CONFIG.replace("version_policy: { all { } }", policy)
    write_model(repo, "add", {1: add_model(1), 2: add_model(2), 3: add_model(3)}, config)
    s = start_server(repo)
    c = httpclient.InferenceServerClient(s.url)
    ready = [m["version"] for m in c.get_model_repository_index() if m["state"] == "READY"]
    assert ready == versions
    for v in ("1", "2", "3"):
        assert c.is_model_ready("add", v) == (v in versions)
        if v in versions:
            assert add_infer(c, v) == float(v)
    assert add_infer(c) == 3.0
    c.close()


def test_poll_mode_picks_up_changes(start_server, tmp_path):
    repo = tmp_path / "models"
    write_model(repo, "mlp", {1: mlp_model()})
    s = start_server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "1")
    c = httpclient.InferenceServerClient(s.url)
    write_model(repo, "add", {1: add_model(1)}, ADD_CONFIG)
    deadline = time.time() + 20
    while time.time() < deadline and not c.is_model_ready("add"):
        time.sleep(0.1)
    assert c.is_model_ready("add") and add_infer(c) == 1.0
    import shutil
    shutil.rmtree(repo / "mlp")
    while time.time() < deadline and c.is_model_ready("mlp"):
        time.sleep(0.1)
    assert not c.is_model_ready("mlp")
    index = {m["name"]: m for m in c.get_model_repository_index()}
    assert index["mlp"]["reason"] == "removed from the repository"
    c.close()
