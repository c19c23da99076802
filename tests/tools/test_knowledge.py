"""Knowledge search: documents of each media type read and chunked within bounds, ranked lexical
search per tenant (FTS5 BM25 here, ts_rank_cd on PostgreSQL), the add_knowledge command, the
admin upload, and `knowledge_search` called through real turns of a real runbrain."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from tests.fixtures.server import ROOT, BrainServer, create_session, make_server
from tests.tools.test_builtin_tools import call
from tools_app.ingest import documents
from tools_app.ingest.documents import CHUNK_CHARS, OVERLAP_CHARS, KnowledgeError, chunk_text, parse_document
from tools_app.models import Chunk, Document, KnowledgeBase, KnowledgeJob
from tools_app.providers.knowledge import KnowledgeProvider, db

PROVIDERS = {"knowledge": {"class": "tools_app.providers.knowledge.KnowledgeProvider"}}


def make_pdf(pages: list[str], *, title: str = "") -> bytes:
    """A minimal PDF with one line of Helvetica text per page, its xref offsets computed."""
    count = len(pages)
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(b"%d 0 R" % (4 + 2 * i) for i in range(count))
        + b"] /Count %d >>" % count,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for index, text in enumerate(pages):
        escaped = text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")
        stream = b"BT /F1 12 Tf 72 720 Td (" + escaped + b") Tj ET"
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
            b" /Contents %d 0 R >>" % (5 + 2 * index)
        )
        objects.append(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
    info = len(objects) + 1
    objects.append(b"<< /Title (" + title.encode("latin-1") + b") >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        info,
        xref,
    )
    return bytes(out)


# --- reading and chunking ------------------------------------------------------------------------


def test_plain_text_is_read_as_utf8_and_titled_by_its_file_name() -> None:
    # when
    document = parse_document("Crème brûlée needs a blowtorch.\r\n".encode(), "desserts.txt")
    # then
    assert (document.title, document.media_type) == ("desserts", "text/plain")
    assert [chunk.text for chunk in document.chunks] == ["Crème brûlée needs a blowtorch."]


def test_markdown_is_titled_by_its_first_heading() -> None:
    # when
    document = parse_document(b"Intro line\n\n# Refund policy\n\nRefunds within 30 days.\n", "policy.md")
    # then
    assert (document.title, document.media_type) == ("Refund policy", "text/markdown")
    assert "Refunds within 30 days." in document.chunks[0].text


def test_html_keeps_visible_text_and_headings_and_drops_scripts_and_styles() -> None:
    # given
    page = (
        b"<html><head><title>Shipping  guide</title><style>p{color:red}</style></head><body>"
        b"<h1>Shipping</h1><p>Parcels leave <b>daily</b> &amp; arrive in 2 days.</p>"
        b"<script>track('secret')</script><ul><li>EU</li><li>UK</li></ul></body></html>"
    )
    # when
    document = parse_document(page, "ship.html")
    # then
    text = document.chunks[0].text
    assert document.title == "Shipping guide"
    assert "# Shipping" in text and "Parcels leave daily & arrive in 2 days." in text
    assert "EU\n" in text and "UK" in text
    assert "track" not in text and "color" not in text


def test_a_pdf_is_read_page_by_page_with_its_title_and_each_chunk_knows_its_page() -> None:
    # given
    pages = ["Warranty covers " + "parts and labour " * 60, "Exclusions: water damage " + "is excluded " * 150]
    data = make_pdf(pages, title="Warranty terms")
    # when
    document = parse_document(data, "warranty.bin")
    # then
    assert (document.title, document.media_type) == ("Warranty terms", "application/pdf")
    assert document.chunks[0].text.startswith("Warranty covers parts and labour")
    assert document.chunks[0].page == 1
    assert [chunk.page for chunk in document.chunks][-1] == 2  # the last chunk starts on page 2
    assert "is excluded" in document.chunks[-1].text
    assert all(document.text[chunk.start : chunk.end] == chunk.text for chunk in document.chunks)


@pytest.mark.parametrize(
    ("data", "name", "message"),
    [
        (b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog", "broken.pdf", "unreadable PDF"),
        (b"\xff\xfe\x00bad", "latin.txt", "not UTF-8 text"),
        (b"PK\x03\x04", "sheet.xlsx", "unsupported file type"),
        (b"", "empty.md", "the file is empty"),
        (b"  \n\n  ", "blank.txt", "no text found"),
    ],
)
def test_unreadable_files_are_refused_naming_why(data: bytes, name: str, message: str) -> None:
    # when
    with pytest.raises(KnowledgeError) as caught:
        parse_document(data, name)
    # then
    assert message in str(caught.value)


def test_a_pdf_without_text_asks_for_text_recognition() -> None:
    with pytest.raises(KnowledgeError, match="no text found .a scanned PDF"):
        parse_document(make_pdf([""]), "scan.pdf")


def test_a_file_over_the_size_bound_and_a_document_over_the_chunk_bound_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given
    monkeypatch.setattr(documents, "MAX_DOCUMENT_BYTES", 1000)
    monkeypatch.setattr(documents, "MAX_CHUNKS", 3)
    # when / then
    with pytest.raises(KnowledgeError, match="file too large: 1001 bytes"):
        parse_document(b"a" * 1001, "big.txt")
    with pytest.raises(KnowledgeError, match="more than 3 chunks"):
        documents.chunk_text("word " * 1000)


def test_chunks_stay_within_bounds_cover_the_text_and_overlap_at_words() -> None:
    # given: no paragraph or sentence breaks, only words
    text = " ".join(f"w{i}" for i in range(3000))
    # when
    chunks = chunk_text(text)
    # then
    assert len(chunks) > 10
    assert all(len(chunk.text) <= CHUNK_CHARS for chunk in chunks)
    assert [chunk.position for chunk in chunks] == list(range(len(chunks)))
    assert chunks[0].start == 0 and chunks[-1].end == len(text)
    for before, after in zip(chunks, chunks[1:], strict=False):
        assert 0 < before.end - after.start <= OVERLAP_CHARS  # overlap, never a gap
        assert text[after.start - 1] == " "  # the next chunk starts at a word
        assert text[after.start : after.end] == after.text


def test_chunks_end_at_headings_and_paragraphs_and_a_heading_starts_without_overlap() -> None:
    # given
    section = "Sentence about billing cycles. " * 20  # 620 characters
    text = f"# Billing\n\n{section}\n\n# Shipping\n\n{section}\n\nA closing paragraph {section}"
    # when
    chunks = chunk_text(text)
    # then
    assert chunks[0].text.startswith("# Billing") and chunks[0].text.endswith("cycles.")
    assert chunks[1].text.startswith("# Shipping")
    assert chunks[1].start > chunks[0].end  # no overlap across a heading
    assert all(len(chunk.text) <= CHUNK_CHARS for chunk in chunks)


# --- storing and searching -----------------------------------------------------------------------


def add(tenant: str, base: str, name: str, content: str) -> db.DocumentRow:
    row = db.ensure_knowledge_base(tenant, base)
    return db.add_document(row.pk, parse_document(content.encode(), name), source=name)


@pytest.mark.django_db
def test_search_ranks_the_chunk_matching_more_and_rarer_words_first() -> None:
    # given
    add("acme", "handbook", "invoices.md", "# Invoices\n\nInvoices go out monthly to every customer.")
    add("acme", "handbook", "overdue.md", "# Overdue\n\nOverdue invoices get a reminder; overdue means 30 days late.")
    add("acme", "handbook", "office.md", "# Office\n\nThe office opens at nine.")
    # when
    hits = db.search_knowledge("acme", ["handbook"], "overdue invoices?", limit=10)
    # then
    assert [hit.source for hit in hits] == ["overdue.md", "invoices.md"]
    assert hits[0].score > hits[1].score
    assert hits[0].title == "Overdue" and hits[0].position == 0 and hits[0].start == 0


@pytest.mark.django_db
def test_search_never_reaches_another_tenants_base_of_the_same_name_or_an_unnamed_base() -> None:
    # given
    add("acme", "handbook", "a.txt", "The vault code is kept by finance.")
    add("globex", "handbook", "g.txt", "The vault code is 1234.")
    add("acme", "private", "p.txt", "The vault code rotates weekly.")
    # when
    hits = db.search_knowledge("acme", ["handbook"], "vault code", limit=10)
    none = db.search_knowledge("initech", ["handbook"], "vault code", limit=10)
    # then
    assert [hit.source for hit in hits] == ["a.txt"]
    assert none == []


@pytest.mark.django_db
def test_deleting_a_document_removes_its_chunks_from_the_index() -> None:
    # given
    stored = add("acme", "handbook", "gone.txt", "Quokkas are marsupials.")
    # when
    Document.objects.filter(pk=stored.id).delete()
    # then
    assert db.search_knowledge("acme", ["handbook"], "quokkas", limit=5) == []
    assert Chunk.objects.count() == 0


@pytest.mark.django_db(transaction=True)
async def test_the_provider_returns_ranked_chunks_with_title_source_and_position() -> None:
    # given
    from asgiref.sync import sync_to_async

    from tools_app.providers.base import ProviderCall

    await sync_to_async(add)("acme", "faq", "faq.md", "# Returns\n\nReturns are free within 30 days of delivery.")
    provider = KnowledgeProvider("knowledge", {})
    descriptors = await provider.bind(tenant="acme", operations=[], parameters={"bases": ["faq"]})

    def make(tenant: str, arguments: dict[str, Any]) -> ProviderCall:
        return ProviderCall(tenant, "s" * 32, "call-1", "knowledge_search", "knowledge_search", arguments,
                            {"bases": ["faq"]}, None, lambda _: None)  # fmt: skip

    # when
    result = await provider.handle(make("acme", {"query": "free returns", "limit": 3}))
    foreign = await provider.handle(make("globex", {"query": "free returns"}))
    # then
    assert [descriptor["name"] for descriptor in descriptors] == ["knowledge_search"]
    (hit,) = result["structured_content"]["results"]
    assert hit["document"]["title"] == "Returns" and hit["document"]["source"] == "faq.md"
    assert hit["position"] == {"chunk": 0, "start": 0, "end": len(hit["text"])}
    assert result["content"][0]["text"].startswith("[1] Returns (faq.md, chunk 1, characters 0-")
    assert foreign["structured_content"] == {"results": []}


@pytest.mark.parametrize(
    "parameters", [None, {}, {"bases": []}, {"bases": ["bad name"]}, {"bases": ["a"], "space": "x"}, {"bases": "a"}]
)
async def test_a_binding_must_name_its_knowledge_bases(parameters: Any) -> None:
    with pytest.raises(ValueError, match="parameters"):
        await KnowledgeProvider("knowledge", {}).bind(tenant="acme", operations=[], parameters=parameters)


# --- adding documents: the command and the admin -------------------------------------------------


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "brain.json"
    path.write_text(json.dumps(make_server(tmp_path).config))
    return path


def test_the_command_adds_each_file_with_progress_and_reports_the_ones_it_could_not_read(
    server: BrainServer, tmp_path: Path
) -> None:
    # given
    (tmp_path / "guide.md").write_text("# Guide\n\nPress the red button to start.")
    (tmp_path / "terms.pdf").write_bytes(make_pdf(["Terms apply to every order."], title="Terms"))
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.4 nothing else")
    paths = [str(tmp_path / name) for name in ("guide.md", "terms.pdf", "broken.pdf")]
    # when: each file is a job run at once in a budgeted worker process
    result = subprocess.run(
        [sys.executable, "manage.py", "add_knowledge", "--config", str(server.config_path),
         "--tenant", "acme", "--base", "handbook", *paths],
        cwd=ROOT, env=server.env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    # then
    out, err = result.stdout, result.stderr
    assert result.returncode == 1 and "1 of 3 files were not added" in err
    assert "[1/3]" in out and "added 'Guide' (text/markdown" in out and "to acme/handbook" in out
    assert "[2/3]" in out and "added 'Terms' (application/pdf" in out
    assert "[3/3]" in err and "not added: unreadable PDF" in err
    session = create_session(server, "alice", tools=["knowledge_search"])["id"]
    found = call(server, session, "knowledge_search", {"query": "red button"})
    assert [hit["document"]["title"] for hit in found["result"]["structured_content"]["results"]] == ["Guide"]


@pytest.mark.django_db
def test_the_admin_queues_an_uploaded_document_as_a_job_and_refuses_a_file_it_cannot_read(
    admin_client: Client, settings: Any, tmp_path: Path
) -> None:
    # given
    settings.DATA_DIR = tmp_path
    upload = SimpleUploadedFile("onboarding.html", b"<h1>Onboarding</h1><p>Laptops ship on day one.</p>")
    bad = SimpleUploadedFile("sheet.xlsx", b"PK\x03\x04")
    # when
    created = admin_client.post(
        "/admin/tools_app/knowledgebase/add/",
        {"tenant": "acme", "name": "hr", "description": "People team", "upload": upload, **_empty_inline()},
    )
    refused = admin_client.post(
        "/admin/tools_app/knowledgebase/add/", {"tenant": "acme", "name": "ops", "upload": bad, **_empty_inline()}
    )
    # then: the job waits for a worker (a server's runner or a Celery worker); nothing is parsed here
    assert created.status_code == 302, created.content.decode()[:2000]
    job = KnowledgeJob.objects.get()
    assert (job.tenant, job.source, job.status, job.base.name) == ("acme", "onboarding.html", "queued", "hr")
    assert Path(job.spool_path).read_bytes() == b"<h1>Onboarding</h1><p>Laptops ship on day one.</p>"
    assert Path(job.spool_path).parent == tmp_path / "knowledge-uploads"
    assert refused.status_code == 200 and "sheet.xlsx: unsupported file type" in refused.content.decode()
    assert not KnowledgeBase.objects.filter(name="ops").exists()
    page = admin_client.get(f"/admin/tools_app/knowledgebase/{job.base.pk}/change/")
    assert page.status_code == 200 and "onboarding.html" in page.content.decode() and "queued" in page.content.decode()
    assert 'enctype="multipart/form-data"' in page.content.decode()


def _empty_inline() -> dict[str, str]:
    return {
        f"{prefix}-{field}": value
        for prefix in ("jobs", "documents")
        for field, value in (("TOTAL_FORMS", "0"), ("INITIAL_FORMS", "0"), ("MAX_NUM_FORMS", "1000"))
    }


# --- end to end through runbrain -----------------------------------------------------------------


def knowledge_tool(bases: list[str]) -> dict[str, Any]:
    return {
        "name": "knowledge_search",
        "transport": "provider",
        "provider": "knowledge",
        "operation": "knowledge_search",
        "parameters": {"bases": bases},
        "tenants": ["acme", "globex"],
    }


def add_with_command(server: BrainServer, tenant: str, base: str, *paths: Path) -> str:
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "add_knowledge",
            "--config",
            str(server.config_path),
            "--tenant",
            tenant,
            "--base",
            base,
            *map(str, paths),
        ],  # fmt: skip
        cwd=ROOT,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return result.stdout


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrainServer]:
    brain = make_server(tmp_path_factory.mktemp("brain"), tools=[knowledge_tool(["handbook"])])
    brain.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    brain.start()
    yield brain
    brain.stop(signal.SIGKILL)


def test_knowledge_search_in_a_real_session_returns_the_tenants_best_chunks(
    server: BrainServer, tmp_path: Path
) -> None:
    # given
    (tmp_path / "leave.md").write_text("# Leave\n\nEmployees get 25 days of paid leave a year.\n")
    (tmp_path / "expenses.pdf").write_bytes(make_pdf(["Expenses are paid monthly.", "Paid leave is not an expense."]))
    (tmp_path / "globex.txt").write_text("Globex employees get 40 days of paid leave.")
    progress = add_with_command(server, "acme", "handbook", tmp_path / "leave.md", tmp_path / "expenses.pdf")
    add_with_command(server, "globex", "handbook", tmp_path / "globex.txt")
    acme = create_session(server, "alice", tools=["knowledge_search"])["id"]
    globex = create_session(server, "charlie", tools=["knowledge_search"])["id"]
    # when
    found = call(server, acme, "knowledge_search", {"query": "paid leave days", "limit": 2})
    other = call(server, globex, "knowledge_search", {"query": "paid leave days"}, "charlie")
    refused = call(server, acme, "knowledge_search", {"query": "leave", "limit": 11})
    # then
    assert "[1/2]" in progress and "[2/2]" in progress
    assert found["outcome"] == "ok"
    results = found["result"]["structured_content"]["results"]
    assert [(r["document"]["source"], r["position"].get("page")) for r in results] == [
        ("leave.md", None),
        ("expenses.pdf", 1),
    ]
    assert "[1] Leave (leave.md, chunk 1" in found["result"]["content"][0]["text"]
    assert [r["document"]["source"] for r in other["result"]["structured_content"]["results"]] == ["globex.txt"]
    assert refused["outcome"] != "ok"


# --- PostgreSQL ------------------------------------------------------------------------------------


def test_postgresql_ranks_and_scopes_the_same_way(postgres_server: Any, tmp_path: Path) -> None:
    # given: the same searches, run in a process whose database is PostgreSQL
    url = postgres_server.create_database("brain_knowledge")
    env = {
        **os.environ,
        "BRAIN_DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "brainsite.settings",
        "PYTHONPATH": str(ROOT),
    }
    script = tmp_path / "search.py"
    script.write_text(POSTGRES_SCRIPT)
    # when
    result = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    # then
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.splitlines()[-1]) == {
        "ranked": ["overdue.md", "invoices.md"],
        "scoped": ["a.txt"],
        "vendor": "postgresql",
    }


POSTGRES_SCRIPT = """
import json
import django
django.setup()
from django.core.management import call_command
from django.db import connection
from tools_app.providers.knowledge import db
from tools_app.ingest.documents import parse_document
call_command("migrate", verbosity=0)

def add(tenant, base, name, content):
    row = db.ensure_knowledge_base(tenant, base)
    db.add_document(row.pk, parse_document(content.encode(), name), source=name)

add("acme", "handbook", "invoices.md", "# Invoices\\n\\nInvoices go out monthly to every customer.")
add("acme", "handbook", "overdue.md", "# Overdue\\n\\nOverdue invoices get a reminder; overdue means 30 days late.")
add("acme", "handbook", "office.md", "# Office\\n\\nThe office opens at nine.")
add("acme", "vault", "a.txt", "The vault code is kept by finance.")
add("globex", "vault", "g.txt", "The vault code is 1234.")
ranked = [hit.source for hit in db.search_knowledge("acme", ["handbook"], "overdue invoices?", limit=10)]
scoped = [hit.source for hit in db.search_knowledge("acme", ["vault"], "vault code", limit=10)]
print(json.dumps({"ranked": ranked, "scoped": scoped, "vendor": connection.vendor}))
"""
