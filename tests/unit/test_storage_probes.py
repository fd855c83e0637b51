"""Every location a command writes (Tune storage, stage cache, MLflow store, Optuna storage) is probed by really
creating and removing a file before anything starts: ``os.access`` says yes to procfs and sysfs
for root, where the first real write then failed inside the sweep (a traceback, a FAILED parent run)."""
import os

import pytest

from platform.cli import check_writable_dir, probe_write
from platform.errors import UserError
from platform.results.tracking import check_tracking_uri
from platform.stages.storage import check_storage
from platform.sweep.optuna_store import check_storage as check_optuna_storage

# procfs and sysfs refuse every new file, whoever asks (root included)
UNWRITABLE = ["/proc/x", "/sys/x", "/proc/sys/vm/x/y"]


def _message(call, *args) -> str:
    with pytest.raises(UserError) as info:
        call(*args)
    text = str(info.value)
    assert "\n" not in text and info.value.exit_code == 2, text
    return text


@pytest.mark.skipif(os.geteuid() != 0, reason="the fault is root's: os.access says yes to /proc only for root")
def test_os_access_says_yes_to_procfs_for_root_which_is_why_a_file_is_written():
    assert os.access("/proc", os.W_OK | os.X_OK)  # the old check passed here
    assert probe_write("/proc") is not None and probe_write("/sys") is not None  # a real write does not


@pytest.mark.parametrize("path", UNWRITABLE)
@pytest.mark.parametrize("flag", ["--storage-path", "--cache-dir", "FEDSWEEP_STORAGE"])
def test_a_path_on_procfs_or_sysfs_is_refused_naming_the_flag(path, flag):
    text = _message(check_storage, path, flag)
    assert text.startswith(f"{flag}: {path} is not writable (cannot create a file in /"), text
    assert "give a directory this user can write" in text


@pytest.mark.parametrize("uri", ["sqlite:////proc/m.db", "sqlite:////proc/nonexistent/dir/m.db", "sqlite:////sys/m.db",
                                 "file:///proc/mlruns"])
def test_a_tracking_store_on_procfs_or_sysfs_is_refused_as_tracking_uri(uri):
    text = _message(check_tracking_uri, uri)
    assert text.startswith("--tracking-uri: ") and "is not writable" in text and "optuna" not in text, text


def test_an_optuna_storage_on_procfs_is_refused_as_optuna_storage(tmp_path):
    text = _message(check_optuna_storage, "sqlite:////proc/optuna.db")
    assert text.startswith("--optuna-storage: directory /proc is not writable"), text
    text = _message(check_optuna_storage, f"sqlite:///{tmp_path}/no/such/optuna.db")
    assert text.startswith(f"--optuna-storage: directory {tmp_path}/no/such does not exist"), text


def test_a_writable_location_passes_and_the_probe_leaves_nothing(tmp_path):
    check_writable_dir(str(tmp_path / "new" / "deeper"), "--storage-path")  # to be created: its ancestor probed
    check_storage(str(tmp_path), "--cache-dir")
    check_tracking_uri(f"sqlite:///{tmp_path}/m.db")
    check_optuna_storage(f"sqlite:///{tmp_path}/optuna.db")
    assert probe_write(str(tmp_path)) is None
    assert os.listdir(tmp_path) == []  # no probe file left, nothing created


def test_a_path_under_a_file_is_still_refused_as_before(tmp_path):
    (tmp_path / "f").write_text("x")
    text = _message(check_storage, str(tmp_path / "f" / "tune"), "--storage-path")
    assert text == f"--storage-path: {tmp_path}/f/tune is not a directory ({tmp_path}/f is a file)"
