"""``--resume`` with a ``--set`` given again: one that says what the interrupted sweep's own
``--set`` says (in another order, another spelling of the same number, or only some of them) is accepted and the
stored invocation reused; one that says something else is refused in one line naming ``--set``."""
import types

import pytest

from platform.errors import UserError
from platform.sweep.command import resolve_resume, build_parser
from platform.sweep.state import STATE_FILE, start_state

SWEEP = "smoke-20261128-110000-abcdef"
STORED = ["rounds=6", "clients.lr=0.1", "clients.augment=none"]


@pytest.fixture
def storage(tmp_path):
    invocation = {"name": "smoke", "overrides": STORED, "num_samples": 2, "repeats": None,
                  "tracking_uri": f"sqlite:///{tmp_path}/m.db", "cache_dir": None, "no_cache": False,
                  "optuna_storage": None, "preset": None, "stand_in": False}
    start_state(str(tmp_path / "tune" / SWEEP), "parent-run-id", invocation["tracking_uri"],
                 types.SimpleNamespace(path="search_spaces/smoke.yaml"), invocation)
    assert (tmp_path / "tune" / SWEEP / STATE_FILE).is_file()
    return str(tmp_path / "tune")


def _resume(storage: str, *sets: str):
    args = build_parser().parse_args(["--resume", SWEEP, "--storage-path", storage,
                                      *[part for s in sets for part in ("--set", s)]])
    return args, resolve_resume(args)


@pytest.mark.parametrize("sets", [STORED, STORED[::-1], ["rounds=6"], ["rounds=6.0", "clients.lr=1e-1"], []])
def test_a_set_that_agrees_with_the_stored_one_is_accepted(storage, sets):
    args, resume_dir = _resume(storage, *sets)
    assert resume_dir.endswith(SWEEP)
    assert args.overrides == STORED and args.name == "smoke" and args.num_samples == 2  # the stored invocation


@pytest.mark.parametrize("sets", [["rounds=7"], ["rounds=6", "seed=3"], ["clients.augment=flip"]])
def test_a_set_that_disagrees_is_refused_naming_set(storage, sets):
    with pytest.raises(UserError) as info:
        _resume(storage, *sets)
    text = str(info.value)
    assert text.startswith(f"--resume: --set {sets!r} conflicts with the interrupted sweep's {STORED!r}"), text
    assert "\n" not in text
