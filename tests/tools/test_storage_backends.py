"""The storage tools on each backend (moto's S3 server, fake-gcs-server, a directory): a round
trip, pages of 100 with a cursor, the 128 KiB text limit, non-UTF-8 objects, and tenant roots
that a crafted key cannot leave."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.services import FakeGCS, MotoS3
from tests.support.storage import Settings, fresh_bucket
from toolkits.storage.backends import FilesystemSettings, GCSSettings, S3Settings
from toolkits.storage.keys import tenant_root
from toolkits.storage.tools import PAGE_SIZE, TEXT_LIMIT_BYTES, StorageTools, open_backend

BACKENDS = ["s3_case", "gcs_case", "filesystem_case"]


@pytest.fixture
async def tools() -> AsyncIterator[StorageTools]:
    made = StorageTools()
    yield made
    made.close()


@pytest.fixture
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if request.param == "s3_case":
        moto: MotoS3 = request.getfixturevalue("moto_s3")
        return S3Settings(
            bucket=fresh_bucket(moto),
            region=moto.region,
            endpoint=moto.endpoint,
            access_key=moto.access_key,
            secret_key=moto.secret_key,
        )
    if request.param == "gcs_case":
        gcs: FakeGCS = request.getfixturevalue("fake_gcs")
        return GCSSettings(bucket=fresh_bucket(gcs), project=gcs.project, endpoint=gcs.emulator_host)
    return FilesystemSettings(tmp_path / "objects")


Call = Callable[..., Any]


def caller(tools: StorageTools, settings: Settings, tenant: str = "acme", prefix: str = "agents") -> Call:
    async def call(operation: str, **arguments: Any) -> dict[str, Any]:
        root = tenant_root(prefix, tenant)
        return await tools.call(settings, root=root, operation=operation, arguments=arguments)

    return call


def text(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"])


async def raw_write(tools: StorageTools, settings: Settings, key: str, data: bytes) -> None:
    """An object written past the tools' checks (bytes no tool call can produce)."""
    backend = open_backend(settings)
    await tools._run(lambda: backend.write(key, data), mutation=True)  # noqa: SLF001


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_text_written_is_listed_read_and_deleted(tools: StorageTools, backend: Settings) -> None:
    # given
    call = caller(tools, backend)
    # when
    written = await call("write", key="notes/today.md", content="Kjøp melk ✓")
    listed = await call("list")
    read = await call("read", key="notes/today.md")
    deleted = await call("delete", key="notes/today.md")
    after = await call("list")
    missing = await call("read", key="notes/today.md")
    # then
    size = len("Kjøp melk ✓".encode())
    assert written["structured_content"] == {"key": "notes/today.md", "bytes": size}
    assert listed["structured_content"] == {"keys": [{"key": "notes/today.md", "size": size}], "next_cursor": None}
    assert text(read) == "Kjøp melk ✓" and read["structured_content"] == {"key": "notes/today.md", "bytes": size}
    assert deleted["structured_content"] == {"key": "notes/today.md", "deleted": True}
    assert after["structured_content"] == {"keys": [], "next_cursor": None}
    assert missing["is_error"] is True and text(missing) == "No object has the key notes/today.md."


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_a_list_comes_in_pages_of_100_with_a_cursor_and_a_prefix(tools: StorageTools, backend: Settings) -> None:
    # given: 205 objects under logs/ and one elsewhere
    call = caller(tools, backend)
    for index in range(205):
        await call("write", key=f"logs/{index:04d}.txt", content=str(index))
    await call("write", key="other.txt", content="x")
    # when
    pages, cursor = [], None
    while True:
        arguments = {"prefix": "logs/", **({"cursor": cursor} if cursor else {})}
        page = (await call("list", **arguments))["structured_content"]
        pages.append([item["key"] for item in page["keys"]])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    everything = (await call("list"))["structured_content"]
    # then
    assert [len(page) for page in pages] == [PAGE_SIZE, PAGE_SIZE, 5]
    assert [key for page in pages for key in page] == [f"logs/{index:04d}.txt" for index in range(205)]
    assert len(everything["keys"]) == PAGE_SIZE and everything["next_cursor"] is not None


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_reads_stop_at_128_kib_and_at_text_that_is_not_utf_8(tools: StorageTools, backend: Settings) -> None:
    # given
    call = caller(tools, backend)
    root = tenant_root("agents", "acme")
    await raw_write(tools, backend, root + "limit.txt", b"a" * TEXT_LIMIT_BYTES)
    await raw_write(tools, backend, root + "over.txt", b"a" * (TEXT_LIMIT_BYTES + 1))
    await raw_write(tools, backend, root + "latin1.txt", "blåbær".encode("latin-1"))
    await raw_write(tools, backend, root + "empty.txt", b"")
    # when
    at_limit = await call("read", key="limit.txt")
    over = await call("read", key="over.txt")
    latin1 = await call("read", key="latin1.txt")
    empty = await call("read", key="empty.txt")
    too_big = await call("write", key="big.txt", content="é" * (TEXT_LIMIT_BYTES // 2 + 1))
    # then
    assert at_limit.get("is_error") is None and len(text(at_limit)) == TEXT_LIMIT_BYTES
    assert over["is_error"] is True
    assert text(over) == f"over.txt is larger than {TEXT_LIMIT_BYTES} bytes; only text up to 128 KiB is read."
    assert latin1["is_error"] is True and text(latin1) == "latin1.txt is not UTF-8 text; only UTF-8 text is read."
    assert text(empty) == "" and empty["structured_content"] == {"key": "empty.txt", "bytes": 0}
    assert too_big["is_error"] is True and "at most 131072 are stored" in text(too_big)
    assert (await call("read", key="big.txt"))["is_error"] is True  # nothing was stored


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
async def test_another_tenant_sees_none_of_a_tenants_keys_even_with_crafted_keys(
    tools: StorageTools, backend: Settings
) -> None:
    # given: acme's secret, and globex's own object
    acme, globex = caller(tools, backend, "acme"), caller(tools, backend, "globex")
    await acme("write", key="secret.txt", content="acme only")
    await globex("write", key="mine.txt", content="globex")
    acme_encoded = tenant_root("", "acme").rstrip("/")
    crafted = [
        "../" + acme_encoded + "/secret.txt",
        f"agents/{acme_encoded}/secret.txt",
        "/" + f"agents/{acme_encoded}/secret.txt",
        f"..\\{acme_encoded}\\secret.txt",
        "secret.txt",
    ]
    # when
    reads = [await globex("read", key=key) for key in crafted]
    listed = await globex("list")
    prefixed = await globex("list", prefix="../")
    # then
    assert all(result["is_error"] is True for result in reads)
    assert "acme only" not in " ".join(text(result) for result in reads)
    assert [item["key"] for item in listed["structured_content"]["keys"]] == ["mine.txt"]
    assert prefixed["is_error"] is True
    assert text(await acme("read", key="secret.txt")) == "acme only"
