"""Storage locations for Tune and the stage cache: paths and s3:// URIs, checked before a sweep writes anything,
against a real S3-compatible server (moto's server mode)."""
import os

import pyarrow.fs as pafs
import pytest

from platform.errors import UserError
from platform.stages.storage import check_storage, filesystem, is_uri, join, normalise, read_json, tune_storage, write_bytes


def _objects(bucket: str, fs=None) -> list[str]:
    fs = fs or filesystem(f"s3://{bucket}")[0]
    return [i.path for i in fs.get_file_info(pafs.FileSelector(bucket, recursive=True)) if i.type == pafs.FileType.File]


def test_paths_and_uris():
    assert normalise("s3://b/prefix/") == "s3://b/prefix" and is_uri("gs://b/p") and not is_uri("/tmp/x")
    assert join("s3://b/p", "sweep", "f.json") == "s3://b/p/sweep/f.json"
    assert normalise("rel") == os.path.abspath("rel") and join("/a", "b") == "/a/b"


def test_a_writable_bucket_passes_and_the_probe_is_deleted(s3_bucket):
    check_storage(f"s3://{s3_bucket}/sweeps", "--storage-path")
    assert _objects(s3_bucket) == []


def test_tune_gets_the_path_in_the_bucket_and_an_s3_filesystem_on_the_endpoint(s3_bucket, s3_server):
    path, fs = tune_storage(f"s3://{s3_bucket}/tune")
    assert path == f"{s3_bucket}/tune" and isinstance(fs, pafs.S3FileSystem)
    write_bytes(f"s3://{s3_bucket}/tune/x/state.json", b'{"a": 1}')
    assert read_json(f"s3://{s3_bucket}/tune/x/state.json") == {"a": 1}
    assert fs.get_file_info(f"{s3_bucket}/tune/x/state.json").size == 8  # the same object, through Tune's filesystem


@pytest.mark.parametrize("uri, env, message", [
    ("s3://fedsweep-no-such-bucket/p", {}, "--cache-dir: bucket 'fedsweep-no-such-bucket' does not exist at http://"),
    ("s3://{bucket}/p", {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "--cache-dir: cannot reach s3://{bucket}/p at "
                                                                     "http://127.0.0.1:9: "),
    ("s3://{bucket}/p", {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None, "AWS_EC2_METADATA_DISABLED": "true",
                         "HOME": "/nonexistent"}, "--cache-dir: no AWS credentials for s3://{bucket}/p"),
    ("s3://AKIAKEY:topsecret@{bucket}/p", {}, "--cache-dir: s3://{bucket}/p: credentials in the URI are not accepted"),
    ("s3:///p", {}, "--cache-dir: s3:///p names no bucket"),
    ("ftp://{bucket}/p", {}, "--cache-dir: ftp:// is not supported"),
])
def test_unusable_storage_is_one_line_naming_the_option(s3_bucket, monkeypatch, uri, env, message):
    fs, _ = filesystem(f"s3://{s3_bucket}")  # the server's, before the environment changes
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    with pytest.raises(UserError) as err:
        check_storage(uri.format(bucket=s3_bucket), "--cache-dir")
    text = str(err.value)
    assert text.startswith(message.format(bucket=s3_bucket)) and "\n" not in text and "topsecret" not in text
    assert _objects(s3_bucket, fs) == []


MISSING = "s3://fedsweep-no-such-bucket"


@pytest.mark.parametrize("flags, env, expected", [
    (["--storage-path", f"{MISSING}/tune"], {}, "--storage-path: bucket 'fedsweep-no-such-bucket' does not exist"),
    (["--cache-dir", f"{MISSING}/cache"], {}, "--cache-dir: bucket 'fedsweep-no-such-bucket' does not exist"),
    ([], {"FEDSWEEP_STORAGE": f"{MISSING}/tune"}, "FEDSWEEP_STORAGE: bucket 'fedsweep-no-such-bucket' does not"),
    ([], {"FEDSWEEP_CACHE": f"{MISSING}/cache"}, "FEDSWEEP_CACHE: bucket 'fedsweep-no-such-bucket' does not exist"),
    (["--storage-path", "s3://{bucket}/tune"], {"AWS_ENDPOINT_URL": "http://127.0.0.1:9"},
     "--storage-path: cannot reach s3://{bucket}/tune at http://127.0.0.1:9"),
    (["--cache-dir", "s3://{bucket}/cache"], {"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None,
                                               "AWS_EC2_METADATA_DISABLED": "true", "HOME": "/nonexistent"},
     "--cache-dir: no AWS credentials for s3://{bucket}/cache"),
])
def test_sweep_refuses_unusable_storage_before_writing_anything(s3_bucket, tmp_path, monkeypatch, capsys, flags, env,
                                                                 expected):
    from platform.sweep.command import main

    monkeypatch.setenv("FEDSWEEP_HOME", str(tmp_path / "home"))
    for key, value in env.items():
        if value is None:
            monkeypatch.delenv(key, raising=False)
        else:
            monkeypatch.setenv(key, value)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert main(["smoke", "--tracking-uri", uri, *(f.format(bucket=s3_bucket) for f in flags)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {expected.format(bucket=s3_bucket)}"), err
    assert not os.path.exists(tmp_path / "mlflow.db") and not os.path.exists(tmp_path / "home")  # nothing written


def test_the_filesystem_tune_pickles_carries_no_credentials(s3_bucket, monkeypatch):
    """Tune pickles storage_filesystem into the experiment (tuner.pkl, in the bucket) and ships it to every trial:
    the keys must stay in the environment of each node, not travel with it."""
    import pickle

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAFEDSWEEPTESTKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fedsweep-secret-never-pickled")
    _, fs = tune_storage(f"s3://{s3_bucket}/tune")
    data = pickle.dumps(fs)
    assert b"fedsweep-secret-never-pickled" not in data and b"AKIAFEDSWEEPTESTKEY" not in data
    restored = pickle.loads(data)
    write_bytes(f"s3://{s3_bucket}/tune/probe", b"x")  # the keys still work, from the environment
    assert restored.get_file_info(f"{s3_bucket}/tune/probe").size == 1


def test_resume_finds_the_newest_unfinished_sweep_in_a_bucket(s3_bucket):
    """``--resume <space>`` lists the sweeps under an s3:// storage and reads their state files through pyarrow."""
    from platform.sweep.state import STATE_FILE, latest_unfinished, read_state

    tune = f"s3://{s3_bucket}/tune"
    for sweep, status in (("smoke-20261126-010000-aaaaaa", "interrupted"), ("smoke-20261126-020000-bbbbbb", "running"),
                          ("smoke-20261126-030000-cccccc", "completed"), ("other-20261126-040000-dddddd", "running")):
        write_bytes(join(tune, sweep, STATE_FILE), f'{{"status": "{status}", "parent_run_id": "{sweep}"}}'.encode())
    found = latest_unfinished(tune, "smoke")
    assert found == f"{tune}/smoke-20261126-020000-bbbbbb"
    assert read_state(found)["parent_run_id"] == "smoke-20261126-020000-bbbbbb"
    assert latest_unfinished(f"s3://{s3_bucket}/nothing-here", "smoke") is None
