"""A cluster address where no Ray cluster answers: nothing listening, a host that drops the connection attempt, a
port that accepts connections but is no cluster. The command ends in one line naming the flag within a bounded time
(a TCP probe of PROBE_TIMEOUT_S, then a join of at most JOIN_TIMEOUT_S), and Ctrl-C during either stops it at once
(exit 130, one line). Real sockets and a real Ray cluster."""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO_ROOT

# connect_ray to the address in argv[1], as a command: one line and exit 2 for a UserError, 130 for Ctrl-C;
# argv[2]: JOIN_TIMEOUT_S. Prints "joining" first, and "<mode> <a value put and got back>" once joined.
JOIN = """
import sys
import platform.cli as cli
cli.JOIN_TIMEOUT_S = float(sys.argv[2])

def main(argv):
    print("joining", flush=True)
    mode = cli.connect_ray(sys.argv[1])
    import ray
    print(mode, ray.get(ray.put(41)) + 1, flush=True)
    return 0

cli.run_command(cli.main_wrapper(main))
"""


def _refused_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections and never answers: no Ray cluster, though a TCP connect succeeds."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server.getsockname()[1]


@pytest.fixture
def dropping_port():
    """A port whose accept queue is full: Linux drops each new connection attempt unanswered, as a firewalled or
    unreachable host does, so a TCP connect to it waits until its timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    time.sleep(0.2)
    yield port
    for sock in (*fillers, server):
        sock.close()


def test_the_probe_refuses_an_address_nothing_answers_at_and_passes_a_listener(silent_port, dropping_port,
                                                                               monkeypatch):
    from platform import cli
    from platform.errors import UserError

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    refused = _refused_port()
    with pytest.raises(UserError, match=rf"^--address: no Ray cluster at 127.0.0.1:{refused} \(tried a TCP connect "
                                        rf"to 127.0.0.1:{refused}: Connection refused\); give the address of a "):
        cli.check_address(f"127.0.0.1:{refused}")
    monkeypatch.setattr(cli, "PROBE_TIMEOUT_S", 0.5)
    started = time.monotonic()
    with pytest.raises(UserError, match=rf"^--address: no Ray cluster at ray://127.0.0.1:{dropping_port} \(tried a "
                                        rf"TCP connect to 127.0.0.1:{dropping_port}: no answer in 0.5 s\)"):
        cli.check_address(f"ray://127.0.0.1:{dropping_port}")
    assert time.monotonic() - started < 30  # bounded by the probe's timeout, not by the kernel's retries
    for bad in ("nowhere", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", ":6379"):
        with pytest.raises(UserError, match=r"^--address: .* is not a cluster address; allowed: host:port"):
            cli.check_address(bad)
    cli.check_address(f"127.0.0.1:{silent_port}")  # something answers: the join decides
    with pytest.raises(UserError, match=rf"^--address: no Ray cluster at \[::1\]:{refused} \(tried a TCP connect to "
                                        rf"::1:{refused}: "):  # an IPv6 host in brackets
        cli.check_address(f"[::1]:{refused}")
    for left_to_ray in ("local", "auto", None):
        cli.check_address(left_to_ray)
    monkeypatch.setenv("RAY_ADDRESS", "")  # set but empty: no address
    cli.check_address(None)
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{refused}")
    with pytest.raises(UserError, match=rf"^RAY_ADDRESS: no Ray cluster at 127.0.0.1:{refused}"):
        cli.check_address(None)


def _join(address: str, timeout_s: float) -> subprocess.Popen:
    env = {**os.environ, "RAY_ADDRESS": "", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.Popen([sys.executable, "-c", JOIN, address, str(timeout_s)], cwd=REPO_ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_join_that_finds_no_cluster_ends_in_one_line_at_its_bound(silent_port):
    """The port accepts connections, so the probe passes; ray.init then retries it without end. The command gives up
    at JOIN_TIMEOUT_S (3 s here) with one line naming the flag."""
    done = _join(f"127.0.0.1:{silent_port}", 3)
    out, err = done.communicate(timeout=120)
    lines = [line for line in err.splitlines() if line.strip()]
    assert done.returncode == 2, out + err
    assert lines == [f"error: --address: no Ray cluster answered at 127.0.0.1:{silent_port} within 3 s (its port "
                     f"accepts connections); give the address of a running cluster's head, or 'local' for a new "
                     f"instance"], err


@pytest.mark.slow
def test_ctrl_c_stops_the_join_at_once(silent_port):
    """Ctrl-C while ray.init retries an address: exit 130 and the interrupt's line, seconds after the signal (Ray's
    C++ retry loop held it back until it gave up, minutes later)."""
    join = _join(f"127.0.0.1:{silent_port}", 300)
    assert join.stdout.readline().strip() == "joining"
    time.sleep(3)  # ray imported, ray.init retrying
    join.send_signal(signal.SIGINT)
    signalled = time.monotonic()
    out, err = join.communicate(timeout=120)
    waited = time.monotonic() - signalled
    lines = [line for line in err.splitlines() if line.strip()]
    assert join.returncode == 130, out + err
    assert lines[-1].startswith("interrupted") and "Traceback" not in err, err
    assert waited < 20, f"{waited:.1f} s from Ctrl-C to exit"  # generous: at once, on a busy machine


@pytest.mark.slow
def test_ctrl_c_stops_the_probe_at_once(dropping_port, tmp_path):
    """Ctrl-C while the command's probe waits for an answer: exit 130 and one line."""
    command = subprocess.Popen([sys.executable, "-m", "platform.sweep", "smoke", "--address",
                                f"127.0.0.1:{dropping_port}"], cwd=str(tmp_path), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "FEDSWEEP_HOME": str(tmp_path), "MLFLOW_TRACKING_URI": ""})
    time.sleep(2)  # the probe waits PROBE_TIMEOUT_S (5 s) for its answer
    command.send_signal(signal.SIGINT)
    out, err = command.communicate(timeout=60)
    lines = [line for line in err.splitlines() if line.strip()]
    assert command.returncode == 130, out + err
    assert len(lines) == 1 and lines[0].startswith("interrupted"), err
    assert os.listdir(tmp_path) == []


@pytest.mark.slow
def test_a_running_cluster_is_joined(ray_local):
    """The bounded join (ray.init in its own thread) joins a real cluster: a second driver connects to this
    process's local instance and moves an object through its store."""
    address = ray_local.get_runtime_context().gcs_address
    join = _join(address, 60)
    out, err = join.communicate(timeout=120)
    assert join.returncode == 0, out + err
    assert out.splitlines()[-1] == "connected 42", out + err
