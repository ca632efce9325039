"""Free loopback ports for the test suites that start servers (tests/server, tests/deploy)."""
import socket


def free_ports(count):
    """`count` distinct free loopback ports: each socket stays bound until all are picked, as one closed at once can
    be handed out again by the next bind (CI once got the same port for --http-port and --metrics-port)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
