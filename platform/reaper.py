"""Stops the local Ray cluster a driver started, once that driver has gone, however it went (kill -9 included).

Run by :func:`platform.cli.connect_ray` as ``python -S platform/reaper.py [PID:START ...]`` with a pipe from the
driver on stdin; standard library only, so it starts in milliseconds and never imports our ``platform``. The driver
may write more ``PID:START`` lines to the pipe at any time (it does once Ray is up, and again just before it exits).
The reaper blocks until the pipe closes (the driver exited: the kernel closes its end), then sends SIGTERM, and
after a grace period SIGKILL, to every listed process still alive. ``START`` is the process's start time
(``/proc/PID/stat`` field 22), so a reused pid is never signalled.

Why: after a kill -9 of the driver, Ray's GCS and raylet die at once, but its dashboard and runtime-env agents try
to report the raylet's death to the dead GCS with a hard-coded 60 s timeout (``ray._private.utils.
publish_error_to_driver``) and linger that long. A command that ends normally also leaves its local instance to
this process instead of ``ray.shutdown`` (``platform.cli.exit_command``: seconds saved at every exit), and a
command that refuses its input while Ray is still starting (Ray starts in the background while the config is
checked) leaves the half-started instance here.
"""
import os
import signal
import sys
import time

GRACE_S = 3.0


def start_time(pid: int):
    """The process's start time in clock ticks since boot (``/proc/PID/stat`` field 22: a reused pid has another),
    or None once it is gone or a zombie (it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(processes):
    return [pid for pid, start in processes if start_time(pid) == start]


def stop(processes, grace: float = GRACE_S) -> None:
    """SIGTERM every (pid, start time) still alive, then SIGKILL what is left after ``grace`` seconds."""
    for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 0.0)):
        targets = alive(processes)
        for pid in targets:
            try:
                os.kill(pid, signum)
            except OSError:
                pass
        deadline = time.monotonic() + wait
        while targets and time.monotonic() < deadline:
            time.sleep(0.1)
            targets = alive(processes)
        if not targets:
            return


def parse(text: str):
    """``PID:START`` items (whitespace-separated) as (pid, start) pairs; anything else is skipped."""
    found = []
    for item in text.split():
        try:
            pid, start = (int(part) for part in item.split(":"))
        except ValueError:
            continue
        found.append((pid, start))
    return found


def main(argv) -> int:
    processes = dict.fromkeys(parse(" ".join(argv)))
    pending = b""
    try:
        while True:  # the driver writes PID:START lines; b"" once it has exited
            chunk = os.read(0, 4096)
            if not chunk:
                break
            pending += chunk
            complete, _, pending = pending.rpartition(b"\n")
            processes.update(dict.fromkeys(parse(complete.decode("ascii", "replace"))))
    except OSError:
        pass
    processes.update(dict.fromkeys(parse(pending.decode("ascii", "replace"))))
    stop(list(processes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
