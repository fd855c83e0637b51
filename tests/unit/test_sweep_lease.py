"""The lease that makes one driver per sweep (platform/stages/lease.py), with real processes: of several that race for
it exactly one holds it; a holder that was killed leaves a stale lease that the next one takes over; a holder on
another host is live until its lease is a minute old; the holder renews it and removes it when it lets go; on a bucket
(a real S3-compatible server) the lease is read back after it is written."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from platform.stages import lease as lease_module
from platform.stages.lease import Lease, LeaseHeld, live_holder, read_holder
from tests.conftest import REPO_ROOT

HOLD = """
import sys, time
from platform.stages.lease import Lease, LeaseHeld
try:
    lease = Lease.acquire(sys.argv[1])
except LeaseHeld as held:
    print("held", held.holder.pid, flush=True)
    sys.exit(3)
print("won", flush=True)
sys.stdin.readline()  # held until the test closes stdin
lease.release()
"""


def _holder(path: str, env=None) -> subprocess.Popen:
    """A real process that takes the lease ``path`` (prints ``won``, holds it until its stdin closes, lets it go) or
    is refused (prints ``held <pid of the holder>``, exit 3)."""
    return subprocess.Popen([sys.executable, "-c", HOLD, path], cwd=REPO_ROOT, text=True, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env={**os.environ, **(env or {})})


def test_of_processes_racing_for_the_lease_exactly_one_holds_it(tmp_path):
    path = str(tmp_path / "sweep" / "fedsweep_driver.lease")
    procs = [_holder(path) for _ in range(4)]
    firsts = [p.stdout.readline().split() for p in procs]  # each has tried: the winner holds it until told
    outs = [first + p.communicate("", timeout=60)[0].split() for first, p in zip(firsts, procs)]
    winners = [p.pid for p, out in zip(procs, outs) if out[:1] == ["won"]]
    assert len(winners) == 1, outs
    assert sorted(out for out in outs if out[0] == "held") == [["held", str(winners[0])]] * 3, outs
    assert [p.returncode for p in procs].count(0) == 1
    assert not os.path.exists(path)  # the winner let it go


def test_a_killed_holders_lease_is_taken_over_and_a_stopped_holders_is_not(tmp_path):
    path = str(tmp_path / "fedsweep_driver.lease")
    proc = _holder(path)
    assert proc.stdout.readline().strip() == "won"
    proc.send_signal(signal.SIGSTOP)  # stopped (renews nothing) but alive: still its lease
    try:
        with pytest.raises(LeaseHeld) as held:
            Lease.acquire(path)
        assert held.value.holder.pid == proc.pid and live_holder(path).pid == proc.pid
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert live_holder(path) is None  # kill -9 left the file, stale
    lease = Lease.acquire(path)
    try:
        holder, why = lease.taken_from
        assert holder.pid == proc.pid and why == f"its process {proc.pid} is gone"
        assert read_holder(path)[1].pid == os.getpid()
    finally:
        lease.release()
    assert not os.path.exists(path)


@pytest.mark.parametrize("age, live", [(5, True), (lease_module.STALE_AFTER + 30, False)])
def test_a_lease_of_another_host_is_live_until_it_is_a_minute_old(tmp_path, age, live):
    path = str(tmp_path / "fedsweep_driver.lease")
    now = time.time()
    with open(path, "w") as fh:
        json.dump({"host": "another-host", "pid": 4242, "identity": None, "since": now - 3600,
                   "renewed": now - age, "token": "theirs"}, fh)
    if live:
        with pytest.raises(LeaseHeld) as held:
            Lease.acquire(path)
        assert held.value.holder.describe().startswith("another-host:4242 since ")
        return
    lease = Lease.acquire(path)
    try:
        assert lease.taken_from[1] == f"not renewed for {age:.0f} s"
    finally:
        lease.release()


def test_the_holder_renews_its_lease_and_leaves_anothers_alone(tmp_path, monkeypatch):
    monkeypatch.setattr(lease_module, "RENEW_EVERY", 0.1)
    path = str(tmp_path / "fedsweep_driver.lease")
    lease = Lease.acquire(path)
    first = read_holder(path)[1].renewed
    deadline = time.time() + 10
    while read_holder(path)[1].renewed == first and time.time() < deadline:
        time.sleep(0.05)
    assert read_holder(path)[1].renewed > first
    lease.release()
    assert not os.path.exists(path)
    other = Lease.acquire(path)
    try:
        lease.release()  # a second release, of a lease someone else holds now: theirs stays
        assert read_holder(path)[1].token == other.holder.token
    finally:
        other.release()


def test_a_bucket_lease_is_read_back_and_refuses_a_second_driver(s3_bucket, s3_server, monkeypatch):
    monkeypatch.setattr(lease_module, "SETTLE", 0.5)
    path = f"s3://{s3_bucket}/tune/sweep-1/fedsweep_driver.lease"
    proc = _holder(path, env=s3_server["env"])
    try:
        assert proc.stdout.readline().strip() == "won"
        with pytest.raises(LeaseHeld) as held:
            Lease.acquire(path)
        assert held.value.holder.pid == proc.pid
    finally:
        proc.kill()
        proc.wait()
    lease = Lease.acquire(path)
    assert lease.taken_from[0].pid == proc.pid
    lease.release()
    assert read_holder(path) == (False, None)


def test_repair_leaves_a_sweep_whose_lease_is_live_alone(tracking_uri, tmp_path, capsys):
    """``--repair`` of a sweep whose parent names a driver that is gone, while another driver holds the sweep's lease
    (a resumed driver that has not tagged the parent yet): left alone, naming the lease's holder. Once the lease is
    let go, the same ``--repair`` closes it."""
    import argparse
    import socket

    from platform.config.run_schema import TAG_DRIVER, TAG_SEARCH_SPACE, TAG_SWEEP_DIR
    from platform.results.tracking import Tracker
    from platform.sweep.state import LEASE_FILE, repair_sweep

    sweep_dir = tmp_path / "tune" / "leased-20261128-110000-abcdef"
    tracker = Tracker(tracking_uri, "leased")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    parent = tracker.start_run("sweep-1", {TAG_SEARCH_SPACE: "leased", TAG_SWEEP_DIR: str(sweep_dir),
                                           TAG_DRIVER: f"{socket.gethostname()}:{dead.stdout.strip()}"})
    holder = _holder(str(sweep_dir / LEASE_FILE))
    try:
        assert holder.stdout.readline().strip() == "won"
        assert repair_sweep(argparse.Namespace(tracking_uri=tracking_uri)) == 0
        out = capsys.readouterr().out
        assert f"running: leased sweep-1 ({parent}), driver {socket.gethostname()}:{holder.pid} since " in out, out
        assert "repaired 0 sweep(s)" in out and tracker.client.get_run(parent).info.status == "RUNNING"
    finally:
        holder.communicate("", timeout=60)
    assert repair_sweep(argparse.Namespace(tracking_uri=tracking_uri)) == 0
    assert "repaired 1 sweep(s)" in capsys.readouterr().out
    assert tracker.client.get_run(parent).info.status == "KILLED"
