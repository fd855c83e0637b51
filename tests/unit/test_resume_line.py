"""The printed resume line works from any directory: it names the storage, the default one included."""
import os
import shlex

from platform.sweep.command import main
from platform.sweep.state import default_storage, resume_command


def test_the_resume_line_names_the_default_storage_too(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FEDSWEEP_HOME", raising=False)
    monkeypatch.delenv("FEDSWEEP_STORAGE", raising=False)
    line = resume_command("smoke-20261128-010203-abcdef", default_storage())
    argv = shlex.split(line)
    assert argv[3:5] == ["--resume", "smoke-20261128-010203-abcdef"]
    assert argv[5] == "--storage-path" and argv[6] == os.path.join(str(tmp_path), "ray_results")


def test_an_unknown_sweep_id_is_not_called_a_space(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["--resume", "smoke-20261128-010203-abcdef", "--storage-path", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --resume: no sweep 'smoke-20261128-010203-abcdef' under ") and "storage-path" in err
