"""What /proc says about a server process, for the suites and the soak that watch its resources: open descriptors
(and what they point at), the count once it settles, and resident memory."""
import os
import time


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_targets(pid):
    """'fd->target' for each open descriptor (a descriptor closed while listing is skipped)."""
    out = []
    for fd in sorted(os.listdir(f"/proc/{pid}/fd"), key=int):
        try:
            out.append(f"{fd}->{os.readlink(f'/proc/{pid}/fd/{fd}')}")
        except OSError:
            pass
    return out


def settled_fd_count(pid, quiet=1.0, timeout=60):
    """The descriptor count once it stayed the same for `quiet` seconds (the server closes a connection's socket
    shortly after the client's close)."""
    deadline, last, since = time.time() + timeout, fd_count(pid), time.time()
    while time.time() < deadline and time.time() - since < quiet:
        time.sleep(0.05)
        now = fd_count(pid)
        if now != last:
            last, since = now, time.time()
    return last


def rss_bytes(pid):
    """VmRSS of the process in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")
