"""The ObjectStore contract, against every provider on a real backend: filesystem (a temp dir),
s3 and r2 (moto's S3 server), gcs (fake-gcs-server). Stores are built by `open_store`."""

from __future__ import annotations

import contextlib
import os
import stat
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from foundation.hostconfig import Persistence
from persistence_app.stores import MAX_OBJECT_BYTES, ObjectMissing, ObjectStore, StoreError, open_store, validate_key
from persistence_app.stores.filesystem import FilesystemStore
from persistence_app.stores.gcs import GCSStore
from persistence_app.stores.s3 import S3Store
from tests.fixtures.services import FakeGCS, MotoS3

PROVIDERS = ["filesystem", "s3", "r2", "gcs"]
NETWORK_PROVIDERS = ["s3", "r2", "gcs"]
OUTAGE_DEADLINE_SECONDS = 10.0  # "within a few seconds": the SDK retry budgets are ~1-3 s
R2_ACCESS_KEY_ENV = "TEST_R2_ACCESS_KEY"
R2_SECRET_KEY_ENV = "TEST_R2_SECRET_KEY"
BLOCK = bytes(range(256)) * 256  # 64 KiB of every byte value


@dataclass
class Backend:
    """Builds stores of one provider on one fresh bucket (or directory) and closes them."""

    provider: str
    settings: dict[str, Any]
    environ: dict[str, str]
    service: MotoS3 | FakeGCS | None = None
    stores: list[ObjectStore] = field(default_factory=list)

    def store(self, *, prefix: str = "", **overrides: Any) -> ObjectStore:
        settings = Persistence(**{**self.settings, "prefix": prefix, **overrides})
        store = open_store(settings, self.environ)
        self.stores.append(store)
        return store

    def outage(self) -> contextlib.AbstractContextManager[None]:
        assert self.service is not None, "the filesystem has no server to stop"
        return self.service.stopped()

    def close(self) -> None:
        for store in self.stores:
            store.close()


def _bucket_name() -> str:
    return f"brain-{uuid.uuid4().hex[:16]}"


@pytest.fixture
def s3_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """boto3's default chain finds moto's keys in the process environment, and nothing else."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", MotoS3.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", MotoS3.secret_key)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def _backend(provider: str, request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if provider == "filesystem":
        return Backend(provider, {"provider": "filesystem", "directory": str(tmp_path / "archive")}, {})
    if provider in ("s3", "r2"):
        request.getfixturevalue("s3_environment")
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        bucket = moto.create_bucket(_bucket_name())
        if provider == "s3":  # default credential chain
            settings = {"provider": "s3", "bucket": bucket, "endpoint": moto.endpoint, "region": moto.region}
            return Backend(provider, settings, {}, moto)
        settings = {
            "provider": "r2",
            "bucket": bucket,
            "endpoint": moto.endpoint,
            "access_key_env": R2_ACCESS_KEY_ENV,
            "secret_key_env": R2_SECRET_KEY_ENV,
        }
        environ = {R2_ACCESS_KEY_ENV: "r2-access-key-id", R2_SECRET_KEY_ENV: "r2-secret-access-key"}
        return Backend(provider, settings, environ, moto)
    gcs: FakeGCS = request.getfixturevalue("fake_gcs")
    bucket = gcs.create_bucket(_bucket_name())
    return Backend(provider, {"provider": "gcs", "bucket": bucket}, {"STORAGE_EMULATOR_HOST": gcs.emulator_host}, gcs)


@pytest.fixture(params=PROVIDERS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    built = _backend(request.param, request, tmp_path)
    yield built
    built.close()


@pytest.fixture(params=NETWORK_PROVIDERS)
def network_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    built = _backend(request.param, request, tmp_path)
    yield built
    built.close()


# --- round trips and immutability ------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [b"", b"{}", BLOCK, bytes(MAX_OBJECT_BYTES)],
    ids=["empty_case", "small_case", "block_case", "at_the_limit_case"],
)
@pytest.mark.parametrize("immutable", [True, False], ids=["immutable_case", "mutable_case"])
def test_a_put_object_reads_back_byte_for_byte(backend: Backend, data: bytes, immutable: bool) -> None:
    # given
    store = backend.store()

    # when
    store.put("sessions/abc/blocks/g1/0", data, immutable=immutable)

    # then
    assert store.get("sessions/abc/blocks/g1/0") == data


def test_it_opens_the_store_its_provider_names(backend: Backend) -> None:
    # when
    store = backend.store()

    # then
    expected = {"filesystem": FilesystemStore, "s3": S3Store, "r2": S3Store, "gcs": GCSStore}[backend.provider]
    assert type(store) is expected


def test_an_immutable_put_repeated_with_the_same_content_succeeds(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/checkpoints/c1", b"manifest", immutable=True)
    version = _object_version(backend, "sessions/abc/checkpoints/c1")

    # when
    store.put("sessions/abc/checkpoints/c1", b"manifest", immutable=True)

    # then: the same object, not a rewrite with equal bytes
    assert store.get("sessions/abc/checkpoints/c1") == b"manifest"
    assert _object_version(backend, "sessions/abc/checkpoints/c1") == version


def _object_version(backend: Backend, name: str) -> object:
    """What changes whenever the provider writes the object: inode, generation, modification time."""
    if backend.provider == "filesystem":
        status = (Path(backend.settings["directory"]) / name).stat()
        return (status.st_ino, status.st_mtime_ns)
    if isinstance(backend.service, MotoS3):
        time.sleep(1.1)  # LastModified has one-second resolution
        return backend.service.client().head_object(Bucket=backend.settings["bucket"], Key=name)["LastModified"]
    assert isinstance(backend.service, FakeGCS)
    return _gcs_client(backend.service).bucket(backend.settings["bucket"]).get_blob(name).generation


def test_an_immutable_put_never_replaces_an_existing_object(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/checkpoints/c1", b"first", immutable=True)

    # when
    store.put("sessions/abc/checkpoints/c1", b"second, different", immutable=True)

    # then
    assert store.get("sessions/abc/checkpoints/c1") == b"first"


def test_an_immutable_put_keeps_an_object_a_mutable_put_wrote(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/latest", b"c1", immutable=False)

    # when
    store.put("sessions/abc/latest", b"c2", immutable=True)

    # then
    assert store.get("sessions/abc/latest") == b"c1"


def test_a_mutable_put_replaces_the_object(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/latest", b"c1", immutable=False)

    # when
    store.put("sessions/abc/latest", b"c2-longer", immutable=False)
    store.put("sessions/abc/latest", b"c3", immutable=False)

    # then
    assert store.get("sessions/abc/latest") == b"c3"


def test_racing_immutable_puts_of_one_key_all_succeed_and_one_content_wins(backend: Backend) -> None:
    # given
    store = backend.store()
    contents = [f"writer-{index}".encode() * 100 for index in range(8)]

    # when
    with ThreadPoolExecutor(max_workers=len(contents)) as pool:
        results = list(pool.map(lambda data: store.put("sessions/abc/tails/c1/g1", data, immutable=True), contents))

    # then
    assert results == [None] * len(contents)
    assert store.get("sessions/abc/tails/c1/g1") in contents


# --- errors ----------------------------------------------------------------------------------


def test_a_missing_key_is_object_missing_and_not_retryable(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # when
    with pytest.raises(ObjectMissing) as raised:
        store.get("sessions/abc/blocks/g1/1")

    # then
    assert isinstance(raised.value, StoreError)
    assert raised.value.retryable is False


def test_a_key_that_is_only_a_prefix_of_other_keys_is_missing(backend: Backend) -> None:
    # given
    store = backend.store()
    store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # when
    with pytest.raises(ObjectMissing):
        store.get("sessions/abc/blocks")


def test_an_object_over_2_mib_is_refused_before_any_io(network_backend: Backend) -> None:
    # given: the server is down, so any request would fail as retryable
    store = network_backend.store()
    with network_backend.outage():
        # when
        with pytest.raises(StoreError) as raised:
            store.put("sessions/abc/blocks/g1/0", bytes(MAX_OBJECT_BYTES + 1), immutable=True)

        # then
        assert raised.value.retryable is False
        assert "byte limit" in str(raised.value)
    with pytest.raises(ObjectMissing):
        store.get("sessions/abc/blocks/g1/0")


def test_an_oversized_object_already_in_the_bucket_is_refused_by_get(network_backend: Backend) -> None:
    # given: written around the store, as a foreign or damaged object would be
    store = network_backend.store(prefix="p")
    _put_raw(network_backend, "p/sessions/abc/blocks/g1/0", bytes(MAX_OBJECT_BYTES + 1))

    # when
    with pytest.raises(StoreError) as raised:
        store.get("sessions/abc/blocks/g1/0")

    # then
    assert raised.value.retryable is False
    assert not isinstance(raised.value, ObjectMissing)


def _put_raw(backend: Backend, name: str, data: bytes) -> None:
    bucket = backend.settings["bucket"]
    if isinstance(backend.service, MotoS3):
        backend.service.client().put_object(Bucket=bucket, Key=name, Body=data)
        return
    assert isinstance(backend.service, FakeGCS)
    client = _gcs_client(backend.service)
    client.bucket(bucket).blob(name).upload_from_string(data)
    client.close()


def _gcs_client(service: FakeGCS) -> Any:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(
        project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": service.emulator_host}
    )


def test_a_filesystem_object_over_2_mib_is_refused_before_any_io(tmp_path: Path) -> None:
    # given
    store = FilesystemStore(tmp_path / "archive")

    # when
    with pytest.raises(StoreError) as raised:
        store.put("sessions/abc/blocks/g1/0", bytes(MAX_OBJECT_BYTES + 1), immutable=False)

    # then
    assert raised.value.retryable is False
    assert not (tmp_path / "archive").exists()


@pytest.mark.parametrize(
    "key",
    ["", "/a", "a\\b", "a/../b", "..", "a//b", "a/", "a/./b", "a\x00b"],
    ids=["empty_case", "leading_slash_case", "backslash_case", "dotdot_case", "bare_dotdot_case",
         "empty_segment_case", "trailing_slash_case", "dot_case", "nul_case"],
)  # fmt: skip
def test_an_invalid_key_is_refused_by_put_and_get(backend: Backend, key: str) -> None:
    # given
    store = backend.store()

    # when
    with pytest.raises(StoreError) as put_error:
        store.put(key, b"x", immutable=True)
    with pytest.raises(StoreError) as get_error:
        store.get(key)

    # then
    assert put_error.value.retryable is False
    assert get_error.value.retryable is False
    assert not isinstance(get_error.value, ObjectMissing)


def test_validate_key_returns_a_valid_key_and_refuses_traversal() -> None:
    # when / then
    assert validate_key("sessions/0123/blocks/g1/17") == "sessions/0123/blocks/g1/17"
    assert validate_key("a..b/.hidden") == "a..b/.hidden"
    with pytest.raises(StoreError) as raised:
        validate_key("sessions/../../etc/passwd")
    assert raised.value.retryable is False


def test_a_stopped_server_is_a_retryable_error_within_seconds_and_the_store_recovers(
    network_backend: Backend,
) -> None:
    # given
    store = network_backend.store()
    store.put("sessions/abc/latest", b"c1", immutable=False)

    # when
    with network_backend.outage():
        began = time.monotonic()
        with pytest.raises(StoreError) as put_error:
            store.put("sessions/abc/blocks/g1/0", BLOCK, immutable=True)
        with pytest.raises(StoreError) as get_error:
            store.get("sessions/abc/latest")
        elapsed = time.monotonic() - began

    # then
    assert put_error.value.retryable is True
    assert get_error.value.retryable is True
    assert not isinstance(get_error.value, ObjectMissing)
    assert elapsed < 2 * OUTAGE_DEADLINE_SECONDS
    store.put("sessions/abc/blocks/g1/0", BLOCK, immutable=True)  # the same store, after the outage
    assert store.get("sessions/abc/blocks/g1/0") == BLOCK


@pytest.mark.parametrize("provider", ["s3", "r2"])
def test_a_closed_s3_port_is_a_retryable_error_within_seconds(
    provider: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # given
    backend = _backend(provider, request, tmp_path)
    store = backend.store(endpoint=f"http://127.0.0.1:{_closed_port()}")

    # when
    began = time.monotonic()
    with pytest.raises(StoreError) as raised:
        store.get("sessions/abc/latest")

    # then
    assert raised.value.retryable is True
    assert time.monotonic() - began < OUTAGE_DEADLINE_SECONDS
    backend.close()


def test_a_closed_gcs_port_is_a_retryable_error_within_seconds(fake_gcs: FakeGCS) -> None:
    # given
    settings = Persistence(provider="gcs", bucket="brain-archive")
    store = open_store(settings, {"STORAGE_EMULATOR_HOST": f"127.0.0.1:{_closed_port()}"})

    # when
    began = time.monotonic()
    with pytest.raises(StoreError) as raised:
        store.put("sessions/abc/latest", b"c1", immutable=False)

    # then
    assert raised.value.retryable is True
    assert time.monotonic() - began < OUTAGE_DEADLINE_SECONDS
    store.close()


def _closed_port() -> int:
    from tests.fixtures.server import free_port

    return free_port()  # bound and released: nothing listens there


# --- configuration problems are permanent ----------------------------------------------------


def test_a_filesystem_root_that_is_a_file_is_a_permanent_error(tmp_path: Path) -> None:
    # given: as root, permission bits do not stop writes; a root that cannot be a directory does
    (tmp_path / "archive").write_bytes(b"not a directory")
    store = open_store(Persistence(provider="filesystem", directory=str(tmp_path / "archive")), {})

    # when
    with pytest.raises(StoreError) as raised:
        store.put("sessions/abc/latest", b"c1", immutable=False)

    # then
    assert raised.value.retryable is False
    assert str(tmp_path) not in str(raised.value)  # no server paths in sync errors


def test_a_missing_gcs_bucket_is_a_permanent_error(fake_gcs: FakeGCS) -> None:
    # given
    settings = Persistence(provider="gcs", bucket=_bucket_name())
    store = open_store(settings, {"STORAGE_EMULATOR_HOST": fake_gcs.emulator_host})

    # when
    with pytest.raises(StoreError) as immutable_error:
        store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)
    with pytest.raises(StoreError) as mutable_error:
        store.put("sessions/abc/latest", b"c1", immutable=False)

    # then
    assert immutable_error.value.retryable is False
    assert mutable_error.value.retryable is False
    store.close()


@pytest.mark.usefixtures("s3_environment")
def test_a_missing_s3_bucket_is_a_permanent_error_not_a_missing_object(moto_s3: MotoS3) -> None:
    # given
    settings = Persistence(provider="s3", bucket=_bucket_name(), endpoint=moto_s3.endpoint, region=moto_s3.region)
    store = open_store(settings, {})

    # when
    with pytest.raises(StoreError) as put_error:
        store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)
    with pytest.raises(StoreError) as get_error:
        store.get("sessions/abc/latest")

    # then
    assert put_error.value.retryable is False
    assert get_error.value.retryable is False
    assert not isinstance(get_error.value, ObjectMissing)
    assert "NoSuchBucket" in str(put_error.value)
    store.close()


def test_an_r2_key_variable_that_is_not_set_is_a_permanent_error(moto_s3: MotoS3) -> None:
    # given
    settings = Persistence(
        provider="r2",
        bucket="brain-archive",
        endpoint=moto_s3.endpoint,
        access_key_env=R2_ACCESS_KEY_ENV,
        secret_key_env=R2_SECRET_KEY_ENV,
    )

    # when
    with pytest.raises(StoreError) as raised:
        open_store(settings, {R2_ACCESS_KEY_ENV: "r2-access-key-id"})

    # then
    assert raised.value.retryable is False
    assert R2_SECRET_KEY_ENV in str(raised.value)


def test_r2_credentials_come_from_the_named_variables_and_never_reach_errors(
    moto_s3: MotoS3, monkeypatch: pytest.MonkeyPatch
) -> None:
    # given: no AWS credentials in the process environment at all
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    bucket = moto_s3.create_bucket(_bucket_name())
    secret = "r2-secret-value-never-logged"
    settings = Persistence(
        provider="r2",
        bucket=bucket,
        endpoint=moto_s3.endpoint,
        access_key_env=R2_ACCESS_KEY_ENV,
        secret_key_env=R2_SECRET_KEY_ENV,
    )
    store = open_store(settings, {R2_ACCESS_KEY_ENV: "r2-access-key-id", R2_SECRET_KEY_ENV: secret})

    # when
    store.put("sessions/abc/latest", b"c1", immutable=False)
    with pytest.raises(ObjectMissing) as raised:
        store.get("sessions/abc/missing")

    # then
    assert store.get("sessions/abc/latest") == b"c1"
    assert secret not in str(raised.value)
    assert secret not in repr(store)
    store.close()


# --- prefixes --------------------------------------------------------------------------------


def test_the_prefix_isolates_stores_sharing_a_bucket(backend: Backend) -> None:
    # given
    tenant_a = backend.store(prefix="brain/a")
    tenant_b = backend.store(prefix="brain/b/")
    unprefixed = backend.store()

    # when
    tenant_a.put("sessions/abc/latest", b"from a", immutable=False)
    tenant_b.put("sessions/abc/latest", b"from b", immutable=False)
    tenant_a.put("sessions/abc/checkpoints/c1", b"a's manifest", immutable=True)

    # then
    assert tenant_a.get("sessions/abc/latest") == b"from a"
    assert tenant_b.get("sessions/abc/latest") == b"from b"
    with pytest.raises(ObjectMissing):
        tenant_b.get("sessions/abc/checkpoints/c1")
    with pytest.raises(ObjectMissing):
        unprefixed.get("sessions/abc/latest")
    assert unprefixed.get("brain/a/sessions/abc/latest") == b"from a"
    assert unprefixed.get("brain/b/sessions/abc/latest") == b"from b"


def test_a_prefix_with_an_empty_segment_is_refused_at_open(tmp_path: Path) -> None:
    # when
    with pytest.raises(StoreError) as raised:
        open_store(Persistence(provider="filesystem", directory=str(tmp_path), prefix="a//b"), {})

    # then
    assert raised.value.retryable is False


# --- filesystem specifics --------------------------------------------------------------------


def test_filesystem_objects_are_0600_in_0700_directories_and_leave_no_temp_files(tmp_path: Path) -> None:
    # given
    root = tmp_path / "archive"
    store = FilesystemStore(root, prefix="p")

    # when
    store.put("sessions/abc/blocks/g1/0", BLOCK, immutable=True)
    store.put("sessions/abc/latest", b"c1", immutable=False)
    store.put("sessions/abc/latest", b"c2", immutable=False)
    store.put("sessions/abc/blocks/g1/0", b"other", immutable=True)

    # then
    files = sorted(path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file())
    assert files == ["p/sessions/abc/blocks/g1/0", "p/sessions/abc/latest"]
    for path in root.rglob("*"):
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == expected, path
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    assert (root / "p/sessions/abc/blocks/g1/0").read_bytes() == BLOCK


def test_filesystem_refuses_to_follow_a_symlinked_directory_out_of_its_root(tmp_path: Path) -> None:
    # given
    root, outside = tmp_path / "archive", tmp_path / "outside"
    (root / "sessions").mkdir(parents=True)
    (outside / "abc").mkdir(parents=True)
    (outside / "abc" / "latest").write_bytes(b"outside secret")
    (root / "sessions" / "abc").symlink_to(outside / "abc", target_is_directory=True)
    store = FilesystemStore(root)

    # when
    with pytest.raises(StoreError) as put_error:
        store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)
    with pytest.raises(StoreError) as get_error:
        store.get("sessions/abc/latest")

    # then
    assert put_error.value.retryable is False
    assert get_error.value.retryable is False
    assert not isinstance(get_error.value, ObjectMissing)
    assert sorted(path.name for path in (outside / "abc").iterdir()) == ["latest"]


def test_filesystem_refuses_a_symlinked_object(tmp_path: Path) -> None:
    # given
    root = tmp_path / "archive"
    (root / "sessions" / "abc").mkdir(parents=True)
    (tmp_path / "secret").write_bytes(b"outside secret")
    (root / "sessions" / "abc" / "latest").symlink_to(tmp_path / "secret")
    store = FilesystemStore(root)

    # when
    with pytest.raises(StoreError) as get_error:
        store.get("sessions/abc/latest")
    with pytest.raises(StoreError) as put_error:
        store.put("sessions/abc/latest", b"c2", immutable=True)

    # then
    assert get_error.value.retryable is False
    assert put_error.value.retryable is False
    assert (tmp_path / "secret").read_bytes() == b"outside secret"


def test_filesystem_follows_a_symlinked_root(tmp_path: Path) -> None:
    # given: the configured directory itself may be a link (e.g. to a mounted volume)
    (tmp_path / "volume").mkdir()
    (tmp_path / "archive").symlink_to(tmp_path / "volume", target_is_directory=True)
    store = FilesystemStore(tmp_path / "archive")

    # when
    store.put("sessions/abc/latest", b"c1", immutable=False)

    # then
    assert (tmp_path / "volume" / "sessions" / "abc" / "latest").read_bytes() == b"c1"


def test_filesystem_immutable_put_onto_a_directory_is_an_error_not_a_success(tmp_path: Path) -> None:
    # given
    store = FilesystemStore(tmp_path / "archive")
    store.put("sessions/abc/blocks/g1/0", b"x", immutable=True)

    # when
    with pytest.raises(StoreError) as raised:
        store.put("sessions/abc/blocks", b"y", immutable=True)

    # then
    assert raised.value.retryable is False


def test_filesystem_get_of_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    # given
    root = tmp_path / "archive"
    (root / "sessions").mkdir(parents=True)
    os.mkfifo(root / "sessions" / "latest")
    store = FilesystemStore(root)

    # when
    with pytest.raises(StoreError) as raised:
        store.get("sessions/latest")

    # then
    assert raised.value.retryable is False


def test_filesystem_get_refuses_an_oversized_file(tmp_path: Path) -> None:
    # given
    root = tmp_path / "archive"
    root.mkdir()
    (root / "big").write_bytes(bytes(MAX_OBJECT_BYTES + 1))

    # when
    with pytest.raises(StoreError) as raised:
        FilesystemStore(root).get("big")

    # then
    assert raised.value.retryable is False
