"""What a command's start-up relies on: the workers a local instance pre-starts, which import torch before
any actor exists, become the run's actors, and the actor processes import nothing they do not use."""
import json
import subprocess
import sys
import textwrap

from tests.conftest import REPO_ROOT

# Starts a local instance as the commands do (platform.cli), with 2 CPUs, waits until the pre-started workers have
# been idle well past Ray's default keep time (1 s), reserves all but a sliver of the CPUs in a placement group, waits
# for several of Ray's idle-worker checks (every 200 ms), then creates two actors in it, as platform.run creates its
# parameter server and client actor. Prints the workers' and the actors' process ids as JSON.
_SCRIPT = textwrap.dedent("""
    import json, os, time
    import ray
    from ray.util import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    from platform import cli
    from platform.cli import descendant_processes, lean_head, ray_init_options

    cli._start_reaper()
    with lean_head():
        ray.init(**{**ray_init_options(False), "num_cpus": 2})
    cli.tell_reaper()

    def workers():  # Ray's worker processes (titled ray::IDLE, then ray::<actor>), not its agents
        found = set()
        for pid in descendant_processes(os.getpid()):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    title = fh.read()
            except OSError:
                continue
            if title.startswith(b"ray::") and b"Agent" not in title:
                found.add(pid)
        return found

    deadline = time.time() + 120
    while len(workers()) < 2 and time.time() < deadline:
        time.sleep(0.1)
    prestarted = workers()
    time.sleep(3.0)
    pg = placement_group([{"CPU": 0.01}, {"CPU": 1.98}])
    ray.get(pg.ready())
    time.sleep(1.5)

    @ray.remote
    class Probe:
        def pid(self):
            return os.getpid()

    actors = [Probe.options(num_cpus=cpus, scheduling_strategy=PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)).remote() for i, cpus in enumerate((0.01, 1.98))]
    pids = ray.get([a.pid.remote() for a in actors])
    print(json.dumps({"prestarted": sorted(prestarted), "actors": sorted(pids)}), flush=True)
    cli.tell_reaper()
    os._exit(0)  # the reaper stops the instance (platform.cli.exit_command)
""")


def test_the_pre_started_workers_become_the_actors_after_a_placement_group_takes_their_cpus():
    """Ray stops idle workers beyond one per free CPU once they have been idle 1 s (its default); a run's placement
    group takes the CPUs, so the workers it pre-started for the run's actors (and that import torch meanwhile) were
    stopped when the command took longer than that to create its actors, and an actor waited for a fresh process."""
    done = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    pids = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(pids["prestarted"]) >= 2, pids  # a third idle worker may be up when they are listed
    assert len(set(pids["actors"])) == 2 and set(pids["actors"]) <= set(pids["prestarted"]), pids


def test_actor_processes_do_not_import_scipy():
    """The workers preload platform.runtime.actors (platform.cli.WORKER_PRELOAD); scipy (0.3 s) is imported only where
    fedaux first fits its scoring weights."""
    done = subprocess.run([sys.executable, "-c", "import sys, platform.runtime.actors; "
                                                 "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy'))"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout
