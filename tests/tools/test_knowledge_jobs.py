"""Knowledge ingestion as background jobs on a real runbrain: a large upload through the admin
(past the API's body cap, which stays as it was) indexed by a worker process; hostile documents
ending as failed jobs within their budgets while another tenant's turns go on; a tenant's share
of jobs refused with a clear reason while another tenant uploads; the worker's budgets alone."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.admin.support import AdminClient, create_superuser
from tests.fixtures.server import ROOT, BrainServer, create_session, make_server, send_ok
from tests.persistence.test_sync_services import SyncWorker
from tests.tools.test_builtin_tools import call
from tests.tools.test_knowledge import PROVIDERS, knowledge_tool, make_pdf
from tools_app.providers.knowledge.jobs import KnowledgeJobsBusy

ADD_PATH = "/admin/tools_app/knowledgebase/add/"
JOB_WAIT_SECONDS = 120.0  # a bounded wait for a job to end, never a timing assertion
HOSTILE_CPU_SECONDS = 2  # the test servers' CPU budget per document


def start_server(directory: Path, **environment: str) -> BrainServer:
    server = make_server(directory, tools=[knowledge_tool(["handbook", "manuals"])])
    server.env["BRAIN_TOOL_PROVIDERS"] = json.dumps(PROVIDERS)
    server.env.update(environment)
    server.directory.mkdir(parents=True, exist_ok=True)
    server.start()
    create_superuser(server)
    return server


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Callable[..., BrainServer]]:
    started: list[BrainServer] = []

    def factory(**environment: str) -> BrainServer:
        server = start_server(tmp_path / f"brain{len(started)}", **environment)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop(signal.SIGKILL)


def upload(admin: AdminClient, tenant: str, base: str, name: str, content: bytes) -> httpx.Response:
    """The admin's add form with one file, as a browser posts it (multipart, CSRF token)."""
    admin.get(ADD_PATH)
    data = {
        "csrfmiddlewaretoken": admin.http.cookies.get("csrftoken", ""),
        "tenant": tenant,
        "name": base,
        "description": "",
        "document_title": "",
        **{f"{prefix}-{field}": value for prefix in ("jobs", "documents")
           for field, value in (("TOTAL_FORMS", "0"), ("INITIAL_FORMS", "0"), ("MAX_NUM_FORMS", "1000"))},
    }  # fmt: skip
    return admin.http.post(ADD_PATH, data=data, files={"upload": (name, content)}, timeout=120)


def jobs(server: BrainServer) -> list[dict[str, Any]]:
    """The server's knowledge job rows, read from its database."""
    uri = f"file:{server.data_dir / 'metadata.sqlite'}?mode=ro"
    with sqlite3.connect(uri, uri=True, timeout=30) as connection:
        connection.row_factory = sqlite3.Row
        rows = connection.execute(
            "SELECT id, tenant, source, status, progress, error, document_id FROM tools_app_knowledgejob ORDER BY id"
        ).fetchall()
    return [dict(row) for row in rows]


def base_names(server: BrainServer) -> list[str]:
    uri = f"file:{server.data_dir / 'metadata.sqlite'}?mode=ro"
    with sqlite3.connect(uri, uri=True, timeout=30) as connection:
        rows = connection.execute("SELECT tenant, name FROM tools_app_knowledgebase ORDER BY name").fetchall()
    return [f"{tenant}/{name}" for tenant, name in rows]


def wait_for_jobs(server: BrainServer, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + JOB_WAIT_SECONDS
    while time.monotonic() < deadline:
        rows = jobs(server)
        if len(rows) >= count and all(row["status"] in ("done", "failed") for row in rows):
            return rows
        time.sleep(0.2)
    raise AssertionError(f"knowledge jobs never ended: {jobs(server)}")


def pathological_html(pairs: int) -> bytes:
    """Unclosed `<a` tags: Python's html.parser rescans them quadratically (CPU, not memory)."""
    return b"<a" * pairs


def bomb_pdf() -> bytes:
    """One page whose Flate content stream (~200 KB) inflates to 200 MiB of text operators."""
    content = zlib.compress(b"BT /F1 12 Tf 72 720 Td (bomb) Tj ET\n" * (200 * 1024 * 1024 // 36), 9)
    return _pdf_with_stream(content, b"/Filter /FlateDecode ")


def many_pages_pdf(pages: int) -> bytes:
    """A page tree naming one page `pages` times: a few KB claiming a huge document."""
    body = make_pdf(["one page"])
    kids = b" ".join([b"4 0 R"] * pages)
    return body.replace(b"/Kids [4 0 R] /Count 1", b"/Kids [" + kids + b"] /Count %d" % pages)


def _pdf_with_stream(stream: bytes, filters: bytes) -> bytes:
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [4 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >>"
        b" /Contents 5 0 R >>",
        b"<< " + filters + b"/Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


class TurnClock:
    """Turns of another tenant's session, one after another, each one's latency recorded."""

    def __init__(self, server: BrainServer, session_id: str, name: str) -> None:
        self.server, self.session_id, self.name = server, session_id, name
        self.latencies: list[float] = []
        self.cursor = ""  # events already read: each poll reads only the newer ones
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.monotonic()
            accepted = send_ok(self.server, self.session_id, f"turn {len(self.latencies)}", self.name)
            self._wait_for_idle(accepted["id"])
            self.latencies.append(time.monotonic() - started)

    def _wait_for_idle(self, input_id: str) -> None:
        deadline = time.monotonic() + JOB_WAIT_SECONDS
        with self.server.client(self.name) as client:
            while time.monotonic() < deadline:
                page = client.get(
                    f"/sessions/{self.session_id}/events", params={"after": self.cursor, "limit": 1000}
                ).json()
                if page["events"]:
                    self.cursor = page["next_cursor"]
                if any(
                    event["type"] == "session.status"
                    and event.get("input_id") == input_id
                    and event["data"]["status"] == "idle"
                    for event in page["events"]
                ):
                    return
                time.sleep(0.01)
        raise AssertionError(f"the turn of {input_id} never ended")

    def __enter__(self) -> TurnClock:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=90)

    def summary(self) -> str:
        if not self.latencies:
            return "no turn completed"
        ordered = sorted(self.latencies)
        return (
            f"{len(ordered)} turns, median {ordered[len(ordered) // 2] * 1000:.0f} ms, max {ordered[-1] * 1000:.0f} ms"
        )


# --- through the admin of a real server -----------------------------------------------------------


def test_a_5_mib_document_uploaded_through_the_admin_is_indexed_by_a_job_and_searchable(
    servers: Callable[..., BrainServer],
) -> None:
    # given: a Markdown manual of 5 MiB, far past the API's body cap
    server = servers()
    section = "# Pump maintenance\n\nReplace the impeller gasket every spring. " + "Routine check. " * 60 + "\n\n"
    manual = (section * (5 * 1024 * 1024 // len(section) + 1)).encode()
    manual += b"\n\n# Appendix\n\nThe zirconium flange torque is 42 newton metres.\n"
    session = create_session(server, "alice", tools=["knowledge_search"])["id"]
    # when
    with AdminClient(server) as admin:
        admin.login()
        response = upload(admin, "acme", "manuals", "pump.md", manual)
        (job,) = wait_for_jobs(server, 1)
        listing = admin.page("/admin/tools_app/knowledgejob/")
        detail = admin.page(f"/admin/tools_app/knowledgejob/{job['id']}/change/")
    found = call(server, session, "knowledge_search", {"query": "zirconium flange torque", "limit": 1})
    # then
    assert len(manual) > 5 * 1024 * 1024
    assert response.status_code == 302, response.text[:2000]
    assert (job["tenant"], job["source"], job["status"], job["progress"], job["error"]) == (
        "acme", "pump.md", "done", 100, ""
    )  # fmt: skip
    assert job["document_id"] is not None
    assert "pump.md" in listing and "done" in listing
    assert "chunks indexed" in detail
    (hit,) = found["result"]["structured_content"]["results"]
    assert hit["document"]["source"] == "pump.md"
    assert "zirconium flange torque is 42 newton metres" in hit["text"]
    assert list((server.data_dir / "knowledge-uploads").iterdir()) == []  # the spooled file went with its job


def test_the_api_body_cap_stays_and_only_a_signed_in_admin_upload_may_pass_it(brain: BrainServer) -> None:
    # given: 2 MiB, past input_bytes + 16 KiB
    body = b"x" * (2 * 1024 * 1024)
    # when
    with brain.client() as client:
        api = client.post("/sessions", content=body, headers={"Content-Type": "application/json"})
    anonymous = httpx.post(brain.url + ADD_PATH, files={"upload": ("big.txt", body)}, timeout=30)
    forged = httpx.post(
        brain.url + ADD_PATH, files={"upload": ("big.txt", body)}, cookies={"sessionid": "forged"}, timeout=30
    )
    # then
    assert api.status_code == 413 and api.json()["error"]["code"] == "invalid_request"
    assert anonymous.status_code == 413
    assert forged.status_code == 403  # past the size check, Django refuses it (no CSRF token, no login)
    assert not (brain.data_dir / "knowledge-uploads").exists()


def test_hostile_documents_end_as_failed_jobs_within_their_budgets_while_another_tenant_turns(
    servers: Callable[..., BrainServer],
) -> None:
    # given: budgets small enough to reach, and room for every job at once
    server = servers(BRAIN_KNOWLEDGE_CPU_SECONDS=str(HOSTILE_CPU_SECONDS), BRAIN_KNOWLEDGE_JOBS="10")
    other = create_session(server, "charlie")["id"]
    hostile = {
        "tags.html": pathological_html(200_000),  # minutes of CPU in html.parser
        "bomb.pdf": bomb_pdf(),
        "pages.pdf": many_pages_pdf(6_000),
        "heading.md": b"# a" + b" " * (3 * 1024 * 1024) + b"b\n\nRefund policy: thirty days.\n",
        "blanks.txt": b"x" + b" \t" * (1024 * 1024) + b"y\nShipping takes two days.\n",
    }
    # when
    with AdminClient(server) as admin, TurnClock(server, other, "charlie") as clock:
        admin.login()
        statuses = [upload(admin, "acme", f"hostile{index}", name, content).status_code
                    for index, (name, content) in enumerate(hostile.items())]  # fmt: skip
        rows = wait_for_jobs(server, len(hostile))
    print(f"\nother tenant's turns while hostile documents were parsed: {clock.summary()}")
    # then
    assert statuses == [302] * len(hostile)
    outcome = {row["source"]: (row["status"], row["error"]) for row in rows}
    assert outcome["tags.html"] == (
        "failed",
        f"tags.html: stopped: CPU time budget of {HOSTILE_CPU_SECONDS} s exceeded",
    )
    assert outcome["bomb.pdf"][0] == "failed"
    assert outcome["bomb.pdf"][1].startswith("bomb.pdf: decompressed PDF content exceeds")
    assert outcome["pages.pdf"] == ("failed", "pages.pdf: the PDF has 6000 pages; at most 5000 are read")
    assert outcome["heading.md"] == ("done", "")  # linear normalisation: indexed, not a stall
    assert outcome["blanks.txt"] == ("done", "")
    assert clock.latencies, "the other tenant's turns never completed"
    assert server.process is not None and server.process.poll() is None


def test_a_tenants_share_of_knowledge_jobs_is_refused_while_another_tenant_uploads(
    servers: Callable[..., BrainServer],
) -> None:
    # given: one job per tenant, and acme's running for its whole CPU budget
    server = servers(BRAIN_KNOWLEDGE_CPU_SECONDS="4", BRAIN_KNOWLEDGE_JOBS="1")
    with AdminClient(server) as admin:
        admin.login()
        first = upload(admin, "acme", "slow", "slow.html", pathological_html(300_000))
        # when
        refused = upload(admin, "acme", "more", "more.md", b"# More\n\nAnother acme document.\n")
        other = upload(admin, "globex", "handbook", "globex.md", b"# Leave\n\nGlobex staff get 30 days.\n")
        rows = wait_for_jobs(server, 2)
    # then
    assert (first.status_code, refused.status_code, other.status_code) == (302, 200, 302)
    message = "tenant acme already has 1 knowledge jobs queued or running; try again when one has finished"
    assert message in refused.text
    assert [(row["tenant"], row["source"], row["status"]) for row in rows] == [
        ("acme", "slow.html", "failed"),
        ("globex", "globex.md", "done"),
    ]
    assert base_names(server) == ["globex/handbook", "acme/slow"]  # the refused form saved nothing


@pytest.mark.django_db
def test_a_tenant_past_its_share_is_refused_with_429_and_retry_after(settings: Any, tmp_path: Path) -> None:
    # given
    from tools_app.providers.knowledge import db
    from tools_app.providers.knowledge.jobs import JobBudgets, submit_knowledge_job

    settings.DATA_DIR = tmp_path
    base = db.ensure_knowledge_base("acme", "handbook")
    budgets = JobBudgets(jobs_per_tenant=2)
    dispatched: list[int] = []

    def submit() -> None:
        submit_knowledge_job(base.pk, "acme", [b"# A\n\ntext"], source="a.md", title="", budgets=budgets,
                             dispatch=dispatched.append)  # fmt: skip

    submit()
    submit()
    # when
    with pytest.raises(KnowledgeJobsBusy) as caught:
        submit()
    # then
    error = caught.value
    assert (error.status, error.code, error.headers()) == (429, "overloaded", {"Retry-After": "30"})
    assert len(dispatched) == 2 and db.count_active_knowledge_jobs("acme") == 2
    assert len(list((tmp_path / "knowledge-uploads").iterdir())) == 2  # nothing spooled for the refusal


# --- the worker process and its budgets ------------------------------------------------------------


def run_worker(path: Path, name: str, *, cpu_seconds: int = 10, memory_mib: int = 1024) -> list[dict[str, Any]]:
    completed = subprocess.run(
        [sys.executable, "-m", "tools_app.ingest.worker", str(path), name,
         "--cpu-seconds", str(cpu_seconds), "--memory-bytes", str(memory_mib * 1024 * 1024)],
        cwd=ROOT, capture_output=True, timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr.decode()[-2000:]
    return [json.loads(line) for line in completed.stdout.splitlines()]


@pytest.mark.parametrize(
    ("content", "name"),
    [
        (b"x" + b" " * (4 * 1024 * 1024) + b"y\n", "blanks_case.txt"),  # [ \t]+\n rescanned every blank
        (b"# a" + b" " * (4 * 1024 * 1024) + b"b\n", "heading_case.md"),  # the title regex backtracked
    ],
)
def test_pathological_whitespace_and_headings_are_read_well_within_a_cpu_budget(
    tmp_path: Path, content: bytes, name: str
) -> None:
    # given
    path = tmp_path / name
    path.write_bytes(content)
    # when
    frames = run_worker(path, name, cpu_seconds=5)
    # then
    assert "error" not in frames[-1], frames[-1]
    assert frames[-1]["document"]["size"] == len(content)


def test_a_document_past_the_memory_budget_is_refused_by_the_worker(tmp_path: Path) -> None:
    # given: 9.4 MiB of text with characters outside the BMP (4 bytes each in memory): a few copies
    # of it do not fit in 90 MiB of address space beside the interpreter
    path = tmp_path / "big.txt"
    path.write_bytes(("Lorem ipsum dolor sit amet, \U0001f600. " * 290_000).encode())
    # when
    frames = run_worker(path, "big.txt", memory_mib=90)
    # then
    assert frames[-1] == {"error": "stopped: memory budget of 90 MiB exceeded"}


# --- with a broker: Celery workers run the jobs -----------------------------------------------------


@pytest.fixture
def redis_broker(redis_server: Any) -> str:
    """A Redis database of its own for this test's broker, emptied first."""
    import redis

    url = redis_server.url.rsplit("/", 1)[0] + "/15"
    with redis.Redis.from_url(url) as connection:
        connection.flushdb()
    return url


def test_with_a_broker_a_celery_worker_runs_the_jobs_with_the_same_budgets(
    servers: Callable[..., BrainServer], redis_broker: str, tmp_path: Path
) -> None:
    # given: a server that hands jobs to Redis, and a worker (no persistence block: jobs only)
    server = servers(BRAIN_CELERY_BROKER=redis_broker, BRAIN_KNOWLEDGE_CPU_SECONDS=str(HOSTILE_CPU_SECONDS))
    worker = SyncWorker(server, tmp_path / "syncworker.log")
    worker.start()
    try:
        _run_jobs_through(server, worker)
    finally:
        worker.stop()


def _run_jobs_through(server: BrainServer, worker: SyncWorker) -> None:
    session = create_session(server, "alice", tools=["knowledge_search"])["id"]
    # when
    with AdminClient(server) as admin:
        admin.login()
        good = upload(admin, "acme", "handbook", "leave.md", b"# Leave\n\nStaff get 25 days of paid leave.\n")
        bad = upload(admin, "acme", "hostile", "tags.html", pathological_html(200_000))
        rows = wait_for_jobs(server, 2)
    found = call(server, session, "knowledge_search", {"query": "paid leave"})
    # then
    assert (good.status_code, bad.status_code) == (302, 302)
    assert [(row["source"], row["status"], row["error"]) for row in rows] == [
        ("leave.md", "done", ""),
        ("tags.html", "failed", f"tags.html: stopped: CPU time budget of {HOSTILE_CPU_SECONDS} s exceeded"),
    ]
    assert [hit["document"]["source"] for hit in found["result"]["structured_content"]["results"]] == ["leave.md"]
    assert worker.log().count("brain.knowledge.ingest[") >= 4  # each job received and succeeded there
    assert "this worker runs knowledge jobs only" in worker.log()
