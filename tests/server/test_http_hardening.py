"""The HTTP front end against hostile clients, over raw sockets: connection limits, idle timeouts and request
deadlines (--http-max-connections, --http-max-connections-per-ip, --http-idle-timeout, --http-header-timeout,
--http-body-timeout), clients that close after their headers or in the middle of their body, request framing
(RFC 9112 6.3: no request smuggling), a too large body refused before it is read, and routing on the exact decoded
path."""
import http.client
import json
import os
import socket
import time

import pytest

from conftest import mlp_model, write_model


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    r = tmp_path_factory.mktemp("hardening") / "models"
    write_model(r, "mlp", {1: mlp_model()})
    return r


def descriptors(s):
    return len(os.listdir(f"/proc/{s.proc.pid}/fd"))


def baseline(s):
    """The server's descriptors once the start-up probes' connections are closed (a count taken too early included
    one the server had not yet seen closed)."""
    time.sleep(0.2)
    return descriptors(s)


def wait_for(cond, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def connect(s, timeout=5):
    c = socket.create_connection(("127.0.0.1", s.port), timeout=timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return c


def read_all(c):
    """Everything the server sends until it closes (or the socket's timeout: socket.timeout propagates)."""
    out = b""
    while True:
        try:
            b = c.recv(65536)
        except ConnectionResetError:
            return out
        if not b:
            return out
        out += b


def responses(data):
    """The status codes of the HTTP responses in data (each with a Content-Length), and the headers of the first."""
    codes, first = [], None
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        assert sep, data
        lines = head.decode().split("\r\n")
        hdrs = {k.strip().lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        codes.append(int(lines[0].split()[1]))
        first = first or (hdrs, rest[:int(hdrs.get("content-length", 0))])
        data = rest[int(hdrs.get("content-length", 0)):]
    return codes, first


def exchange(s, raw):
    c = connect(s)
    try:
        c.sendall(raw)
        return responses(read_all(c))
    finally:
        c.close()


def test_connection_limit_closes_new_connections_and_idle_ones_time_out(repo, start_server):
    s = start_server(repo, "--http-max-connections", "50", "--http-idle-timeout", "1", "--http-threads", "2")
    base = baseline(s)
    idle = [connect(s) for _ in range(60)]  # never send a byte
    time.sleep(0.3)
    # at most the limit (a few more when the pool's threads accept at once), the rest closed at once
    assert descriptors(s) - base <= 50 + 2
    closed = 0
    for c in idle:
        c.settimeout(0.5)
        try:
            closed += c.recv(1) == b""
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed += 1
    assert closed >= 8, "connections past --http-max-connections were not closed at once"
    # the idle ones are closed after --http-idle-timeout, and a new client is answered
    assert wait_for(lambda: descriptors(s) <= base, 5), f"{descriptors(s) - base} connections still open"
    for c in idle:
        c.settimeout(5)
        assert read_all(c) == b""
        c.close()
    assert s.request("GET", "/v2/health/ready")[0] == 200


def test_per_address_connection_limit(repo, start_server):
    """--http-max-connections-per-ip: past it a new connection from that address is closed at once, one from another
    address is still served, and a freed slot is taken again."""
    s = start_server(repo, "--http-max-connections-per-ip", "5", "--http-threads", "2")
    baseline(s)  # the start-up probes' connections closed
    held = [connect(s) for _ in range(5)]
    time.sleep(0.3)
    extra = connect(s)
    assert closed_by_server(extra, 2), "a sixth connection from 127.0.0.1 was not closed"
    extra.close()
    # the five are served (kept alive), and another loopback address is a different client
    for c in held:
        c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.recv(65536).startswith(b"HTTP/1.1 200")
    other = socket.socket()
    other.settimeout(5)
    other.bind(("127.0.0.2", 0))
    other.connect(("127.0.0.1", s.port))
    other.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert read_all(other).startswith(b"HTTP/1.1 200")
    other.close()
    held.pop().close()
    # the closed slot is free again once the server has seen the close
    def served():
        try:
            return s.request("GET", "/v2/health/live", timeout=2)[0] == 200
        except (ConnectionError, http.client.HTTPException):
            return False
    assert wait_for(served, 5)
    logs = s.logs()
    assert "--http-max-connections-per-ip" in logs and "Server reached connection limit" not in logs, logs[-2000:]
    for c in held:
        c.close()


def test_stalled_headers_and_body_time_out(repo, start_server):
    s = start_server(repo, "--http-idle-timeout", "1")
    base = baseline(s)
    half_headers = connect(s)
    half_headers.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n")
    half_body = connect(s)
    half_body.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
    t0 = time.time()
    assert read_all(half_headers) == b"" and read_all(half_body) == b""
    assert time.time() - t0 < 4
    assert wait_for(lambda: descriptors(s) <= base)
    # a kept-alive connection is closed after the timeout too
    c = connect(s)
    c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
    assert c.recv(65536).startswith(b"HTTP/1.1 200")
    assert read_all(c) == b""
    c.close()


def trickle(c, data, every):
    """Sends data a byte at a time, `every` seconds apart (each byte resets the idle timeout), until the server
    closes; returns how many bytes went out."""
    for i, b in enumerate(data):
        try:
            c.sendall(bytes([b]))
        except (BrokenPipeError, ConnectionResetError):
            return i
        time.sleep(every)
    return len(data)


def closed_by_server(c, timeout=5):
    """True once the server closed the connection without an answer."""
    c.settimeout(timeout)
    try:
        return read_all(c) == b""
    except socket.timeout:
        return False


@pytest.mark.parametrize("phase", ["headers", "body", "kept-alive headers"])
def test_trickling_client_is_cut_at_the_deadline(repo, start_server, phase):
    """A byte every 0.3 s never trips the idle timeout (60 s); --http-header-timeout / --http-body-timeout end the
    connection at their deadline, while a client sending at a normal pace is served."""
    s = start_server(repo, "--http-header-timeout", "2", "--http-body-timeout", "2", "--http-threads", "2")
    base = baseline(s)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}).encode()
    head = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
    c = connect(s)
    if phase == "kept-alive headers":
        # a first request answered, then longer idle than the header timeout: the silence before a request is the
        # idle timeout's business, the clock starts with the next request's first byte
        c.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n")
        assert c.recv(65536).startswith(b"HTTP/1.1 200")
        time.sleep(3)
    if phase == "body":
        c.sendall(head)
        data = body
    else:
        data = head + body
    t0 = time.time()
    sent = trickle(c, data, 0.3)
    took = time.time() - t0
    assert sent < len(data), "the whole request trickled in: no deadline"
    assert closed_by_server(c), "the server answered the trickled request"
    c.close()
    # cut at the deadline: 2 s, plus at most a watcher tick and a trickle step (and slack for a loaded machine)
    assert 1.8 <= took <= 3.5, took
    assert "within 2 s" in s.logs() and ("--http-body-timeout" if phase == "body" else "--http-header-timeout") in s.logs()
    assert wait_for(lambda: descriptors(s) <= base), f"{descriptors(s) - base} descriptors still held"
    # a client at a normal pace is served: the body 1 s after the headers, within the 2 s deadline
    c = connect(s)
    c.sendall(head)
    time.sleep(1)
    c.sendall(body)
    assert c.recv(65536).startswith(b"HTTP/1.1 200")
    # and its kept-alive connection may stay silent longer than the header timeout, then send a request
    time.sleep(2.5)
    c.sendall(head + body)
    assert c.recv(65536).startswith(b"HTTP/1.1 200")
    c.close()


def test_deadlines_off(repo, start_server):
    """0 turns a deadline off: a request trickled over more than 2 s is answered."""
    s = start_server(repo, "--http-header-timeout", "0", "--http-body-timeout", "0")
    c = connect(s)
    t0 = time.time()
    req = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert trickle(c, req, 2.5 / len(req)) == len(req)
    assert time.time() - t0 > 2
    c.settimeout(5)
    assert read_all(c).startswith(b"HTTP/1.1 200")
    c.close()


def test_slow_inference_is_not_idle(repo, start_server, monkeypatch):
    """A request waiting on its inference (a suspended connection) is never timed out."""
    monkeypatch.setenv("CINFER_SERVE_TEST_SLOW_INSTANCE", "mlp:0:2500")  # each execution then takes 2.5 s
    s = start_server(repo, "--http-idle-timeout", "1")
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]})
    t0 = time.time()
    status, _, data = s.request("POST", "/v2/models/mlp/infer", body)
    assert status == 200, data
    assert time.time() - t0 > 2


def test_clients_closing_after_headers_release_their_descriptors(repo, start_server):
    # idle timeout off: the close itself must be noticed
    s = start_server(repo, "--http-idle-timeout", "0", "--http-threads", "2")
    base = baseline(s)
    for i in range(200):
        c = connect(s)
        body = b"" if i % 2 else b'{"inputs": '
        c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n" + body)
        c.close()
    assert wait_for(lambda: descriptors(s) <= base, 5), f"{descriptors(s) - base} descriptors still held"
    assert s.request("GET", "/v2/health/ready")[0] == 200


@pytest.mark.parametrize("pace", ["bulk", "equal pieces"])
def test_clients_closing_mid_body_release_their_descriptors(repo, start_server, pace):
    """The client's end is not looked at after every body chunk (http_server.c peer_probe_due), yet a close in the
    middle of a body is still seen at once: after a bulk of full reads (1 MiB of a declared 2 MiB), and after equal
    pieces smaller than the read buffer, 0.15 s apart (the probe's period is 0.1 s). Idle timeout and body deadline
    off, so only the probe can free the connection."""
    s = start_server(repo, "--http-idle-timeout", "0", "--http-body-timeout", "0", "--http-threads", "2")
    base = baseline(s)
    clients = []
    for _ in range(4):
        c = connect(s)
        c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (2 << 20))
        clients.append(c)
    for c in clients:
        if pace == "bulk":
            c.sendall(b" " * (1 << 20))
        else:
            for _ in range(5):
                c.sendall(b" " * 1000)
                time.sleep(0.15)
        c.close()
    assert wait_for(lambda: descriptors(s) <= base, 5), f"{descriptors(s) - base} descriptors still held"
    assert s.request("GET", "/v2/health/ready")[0] == 200


def test_half_closed_client_with_whole_request_is_answered(repo, start_server):
    """A client that sends its whole request and shuts down its side still gets the answer."""
    s = start_server(repo)
    body = json.dumps({"inputs": [{"name": "x", "shape": [1, 16], "datatype": "FP32", "data": [0.5] * 16}]}).encode()
    c = connect(s)
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    c.shutdown(socket.SHUT_WR)
    codes, (_, data) = responses(read_all(c))
    c.close()
    assert codes == [200], data


SMUGGLED = b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.mark.parametrize("framing", [
    b"Content-Length: 5\r\nContent-Length: %d\r\n" % len(SMUGGLED),
    b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % len(SMUGGLED),
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
], ids=["two-content-lengths", "cl-and-te", "te-and-cl"])
def test_ambiguous_framing_is_refused_and_the_rest_never_runs(repo, start_server, framing):
    s = start_server(repo)
    codes, (hdrs, data) = exchange(s, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n" +
                                   b"0\r\n\r\n" + SMUGGLED)
    assert codes == [400], codes  # one answer: the smuggled GET never got one
    assert hdrs.get("connection", "").lower() == "close"
    assert "ambiguous framing" in json.loads(data)["error"]


def test_same_content_length_twice_is_one(repo, start_server):
    s = start_server(repo)
    codes, _ = exchange(s, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
    assert codes == [200]


@pytest.mark.parametrize("te", [b"gzip", b"chunked, gzip", b"identity"])
def test_unknown_transfer_encoding_is_refused_at_once(repo, start_server, te):
    s = start_server(repo)
    c = connect(s, timeout=5)  # before: no answer, the connection held until the client left
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: " + te + b"\r\n\r\nabc")
    codes, (hdrs, data) = responses(read_all(c))
    c.close()
    assert codes == [501] and "Transfer-Encoding" in json.loads(data)["error"]
    assert hdrs.get("connection", "").lower() == "close"


def test_large_content_length_is_refused_before_the_body(repo, start_server):
    s = start_server(repo, "--max-input-bytes", "4096")
    # 1 TiB declared, nothing sent: the answer comes at once and the connection is closed
    c = connect(s, timeout=5)
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (1 << 40))
    codes, (hdrs, data) = responses(read_all(c))
    c.close()
    assert codes == [413] and "exceeds the limit of 4096 bytes (--max-input-bytes)" in json.loads(data)["error"]
    assert hdrs.get("connection", "").lower() == "close"
    # Expect: 100-continue gets the 413, never a 100
    c = connect(s, timeout=5)
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n")
    data = read_all(c)
    c.close()
    assert data.startswith(b"HTTP/1.1 413"), data[:80]
    # within the limit, 100-continue still works
    c = connect(s, timeout=5)
    c.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n")
    assert c.recv(65536).startswith(b"HTTP/1.1 100")
    c.close()


def test_encoded_nul_in_the_path_is_refused(repo, start_server):
    s = start_server(repo)
    assert s.request("GET", "/v2/models/mlp/ready")[0] == 200
    status, _, data = s.request("GET", "/v2/models/mlp%00evil/ready")
    assert status == 400 and "encoded NUL" in json.loads(data)["error"], data
    # other escapes are decoded and routed as the whole name: no such model
    status, _, data = s.request("GET", "/v2/models/ml%70/ready")
    assert status == 200
    status, _, data = s.request("GET", "/v2/models/mlp%3Fevil/ready")
    assert status != 200, data
    assert s.request("GET", "/v2/models/mlp%3F")[0] == 404


def test_long_path_is_refused_not_cut(repo, start_server):
    s = start_server(repo)
    # before: the path was cut at 2 KiB, and this answered as /v2/models/mlp/ready
    path = "/v2/models/mlp/ready" + "/" * (2048 - len("/v2/models/mlp/ready")) + "bogus"
    status, _, data = s.request("GET", path)
    assert status == 414 and "too long" in json.loads(data)["error"], (status, data)
    # a path of exactly the limit is routed whole
    path = "/v2/models/mlp/ready" + "/" * (2048 - len("/v2/models/mlp/ready") - 5) + "bogus"
    status, _, data = s.request("GET", path)
    assert status == 404, (status, data)
    status, _, _ = s.request("GET", "/v2/models/mlp" + "/" * (2048 - len("/v2/models/mlp/ready")) + "/ready")
    assert status == 200
    # the metrics page routes on the whole path too (it cut at 256 bytes)
    status, _, _ = s.request("GET", "/metrics" + "/" * 300 + "x", port=s.metrics_port)
    assert status == 404


def test_flag_values_are_checked(repo, start_server):
    import subprocess
    from conftest import SERVER
    for flag, value in (("--http-idle-timeout", "-1"), ("--http-max-connections", "0"), ("--http-header-timeout", "-1"),
                        ("--http-body-timeout", "x"), ("--http-max-connections-per-ip", "-1")):
        p = subprocess.run([SERVER, "--model-repository", str(repo), flag, value], capture_output=True, text=True)
        assert p.returncode == 2 and flag in p.stderr, p.stderr
