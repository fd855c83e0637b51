"""Where a sweep keeps what every node must see: Tune's storage and the stage cache, on a local (or mounted) path or
on an object store (``s3://bucket/prefix``, ``gs://bucket/prefix``), through ``pyarrow.fs``.

Credentials and endpoints come from the usual environment, never from the URI: ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_PROFILE`` / an IAM role (instance profile, IRSA, Pod Identity) and
``AWS_ENDPOINT_URL`` (``AWS_ENDPOINT_URL_S3``) for S3-compatible stores; ``GOOGLE_APPLICATION_CREDENTIALS`` or the
node's service account for GCS. A URI carrying credentials (``s3://KEY:SECRET@bucket``) is refused, so nothing secret
can reach a state file, an MLflow tag or the console.

Paths are passed around as strings: a local path (absolute) or a URI. :func:`filesystem` turns one into
``(pyarrow filesystem, path inside it)``; Tune gets exactly that (``storage_path`` / ``storage_filesystem``).
"""
from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import urllib.parse
from typing import Optional

from platform.errors import UserError
from platform.cli import check_writable_dir

SCHEMES = ("s3", "gs")


def is_uri(path: str) -> bool:
    return "://" in (path or "")


def normalise(path: str) -> str:
    """A local path made absolute; an object-store URI with its trailing slash dropped (other URIs unchanged, for
    :func:`check_storage` to refuse)."""
    if not is_uri(path):
        return os.path.abspath(os.path.expanduser(path))
    return path.rstrip("/") if path.split("://", 1)[1].strip("/") else path


def join(base: str, *parts: str) -> str:
    """``base``/``parts`` for a local path or a URI."""
    return "/".join([base.rstrip("/"), *parts]) if is_uri(base) else os.path.join(base, *parts)


def _endpoint() -> Optional[str]:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def endpoint_description(uri: str) -> str:
    """Where ``uri`` is, for messages: the S3 endpoint when one is set (an endpoint URL is no secret)."""
    if uri.startswith("s3://") and _endpoint():
        return f" at {_endpoint()}"
    return ""


def filesystem(path: str, *, quick: bool = False):
    """``(pyarrow FileSystem, path inside it)`` for a local path or an ``s3://`` / ``gs://`` URI. ``quick``: short
    timeouts and no retries (the pre-flight check, so that an unreachable endpoint fails in seconds)."""
    import pyarrow.fs as pafs

    if not is_uri(path):
        return pafs.LocalFileSystem(), normalise(path)
    parsed = urllib.parse.urlparse(path)
    inner = (parsed.netloc + parsed.path).rstrip("/")
    if parsed.scheme == "s3":
        options = {}
        endpoint = _endpoint()
        if endpoint:
            url = urllib.parse.urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
            options.update(endpoint_override=url.netloc, scheme=url.scheme or "https")
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            options["region"] = region
        if quick:
            options.update(connect_timeout=5, request_timeout=10,
                           retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=1))
        return pafs.S3FileSystem(**options), inner
    if parsed.scheme == "gs":
        import datetime

        options = {"retry_time_limit": datetime.timedelta(seconds=10)} if quick else {}
        return pafs.GcsFileSystem(**options), inner
    fs, inner = pafs.FileSystem.from_uri(path)
    return fs, inner


def tune_storage(path: str) -> tuple[str, object]:
    """Tune's ``(storage_path, storage_filesystem)`` for ``path``: a local path as it is (no filesystem), a URI as
    the path inside its bucket plus the filesystem built from the environment (endpoint, region)."""
    if not is_uri(path):
        return normalise(path), None
    fs, inner = filesystem(path)
    return inner, fs


# --- small file operations on a local path or a URI (the sweep's state file) -----------------------------------

def isfile(path: str) -> bool:
    import pyarrow.fs as pafs

    fs, inner = filesystem(path)
    return fs.get_file_info(inner).type == pafs.FileType.File


def isdir(path: str) -> bool:
    import pyarrow.fs as pafs

    fs, inner = filesystem(path)
    return fs.get_file_info(inner).type == pafs.FileType.Directory


def listdir(path: str) -> list[str]:
    """Names directly under ``path`` (empty when it does not exist)."""
    import pyarrow.fs as pafs

    fs, inner = filesystem(path)
    infos = fs.get_file_info(pafs.FileSelector(inner, allow_not_found=True))
    return sorted(info.base_name for info in infos)


def read_bytes(path: str) -> bytes:
    fs, inner = filesystem(path)
    with fs.open_input_stream(inner) as fh:
        return fh.read()


@contextlib.contextmanager
def local_lock(path: str):
    """An exclusive ``flock`` of ``<path>.lock`` on a local directory (created if missing), held for the block."""
    import fcntl

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def synced_temp_file(path: str, data: bytes) -> str:
    """A new file beside local ``path`` holding ``data``, flushed and fsynced: its name, for the caller to rename or
    link into place (it is removed if writing fails)."""
    tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(3)}"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return tmp


def write_bytes(path: str, data: bytes) -> None:
    """Write ``path`` whole or not at all: a local file through a temporary file in its directory (flushed and
    fsynced) renamed into place, then the directory fsynced; an object by one PUT (an object store never shows a
    partial object)."""
    if is_uri(path):
        fs, inner = filesystem(path)
        with fs.open_output_stream(inner) as fh:
            fh.write(data)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = synced_temp_file(path, data)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself survives a power loss
        fd = os.open(os.path.dirname(path), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_json(path: str) -> dict:
    return json.loads(read_bytes(path))


def makedirs(path: str) -> None:
    """A local directory (an object store needs none: a prefix exists once an object is under it)."""
    if not is_uri(path):
        os.makedirs(path, exist_ok=True)


# --- the pre-flight check --------------------------------------------------------------------------------------

def _aws_credentials_configured() -> bool:
    """Whether the AWS default chain can find credentials: the environment, a profile, web identity (IRSA), the
    container endpoint (ECS, EKS Pod Identity), or an instance profile (EC2 metadata, 1 s probe)."""
    env = os.environ
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        return True
    if env.get("AWS_WEB_IDENTITY_TOKEN_FILE") or env.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") \
            or env.get("AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        return True
    for name, default in (("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"), ("AWS_CONFIG_FILE", "~/.aws/config")):
        if os.path.isfile(os.path.expanduser(env.get(name, default))):
            return True
    if env.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true":
        return False
    return _metadata_server_answers("169.254.169.254")


def _gcp_credentials_configured() -> bool:
    env = os.environ
    if env.get("GOOGLE_APPLICATION_CREDENTIALS") or os.path.isfile(
            os.path.expanduser("~/.config/gcloud/application_default_credentials.json")):
        return True
    return _metadata_server_answers(env.get("GCE_METADATA_HOST", "169.254.169.254"))


def _metadata_server_answers(host: str) -> bool:
    try:
        with socket.create_connection((host, 80), timeout=1):
            return True
    except OSError:
        return False


def check_storage(path: str, flag: str) -> None:
    """Refuse, before anything is written, a storage location the sweep cannot use: for a URI, an unknown scheme,
    credentials in the URI, no bucket, no credentials in the environment, an unreachable endpoint, a missing bucket,
    or no write permission (a probe object is written and deleted). One line naming ``flag``; a local path is checked
    by :func:`platform.cli.check_writable_dir`."""
    if not is_uri(path):
        check_writable_dir(path, flag)
        return
    parsed = urllib.parse.urlparse(path)
    bucket = parsed.netloc.rpartition("@")[2]
    shown = f"{parsed.scheme}://{bucket}{parsed.path}"  # never the user-info part
    if parsed.scheme not in SCHEMES:
        raise UserError(f"{flag}: {parsed.scheme}:// is not supported; use s3://bucket/prefix, gs://bucket/prefix "
                        f"or a path")
    if parsed.username or parsed.password:
        raise UserError(f"{flag}: {shown}: credentials in the URI are not accepted; put them in the environment "
                        f"(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, a profile or an IAM role; "
                        f"GOOGLE_APPLICATION_CREDENTIALS or a service account)")
    if not bucket:
        raise UserError(f"{flag}: {shown} names no bucket; use {parsed.scheme}://bucket/prefix")
    if parsed.scheme == "s3" and not _aws_credentials_configured():
        raise UserError(f"{flag}: no AWS credentials for {shown} (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                        f"AWS_PROFILE, or run with an IAM role)")
    if parsed.scheme == "gs" and not _gcp_credentials_configured():
        raise UserError(f"{flag}: no Google credentials for {shown} (set GOOGLE_APPLICATION_CREDENTIALS or run with "
                        f"a service account)")
    where = endpoint_description(path)
    import pyarrow.fs as pafs

    try:
        fs, inner = filesystem(path, quick=True)
        info = fs.get_file_info(bucket)
    except Exception as err:  # noqa: BLE001 - the SDK's error, reduced to its reason
        raise UserError(f"{flag}: cannot reach {shown}{where}: {_reason(err)}") from None
    if info.type == pafs.FileType.NotFound:
        raise UserError(f"{flag}: bucket {bucket!r} does not exist{where}; create it first (see "
                        f"docs/how-to/clusters.md, \"Storage every node sees\")")
    probe = f"{inner}/.fedsweep-probe-{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
    try:
        with fs.open_output_stream(probe) as fh:
            fh.write(b"fedsweep write probe\n")
        fs.delete_file(probe)
    except Exception as err:  # noqa: BLE001
        raise UserError(f"{flag}: cannot write to {shown}{where}: {_reason(err)}") from None


def _reason(err: Exception) -> str:
    """The first line of an SDK error without request ids (no secrets are in it: the SDK never prints keys)."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    return text.split(" (Request ID")[0][:300]
