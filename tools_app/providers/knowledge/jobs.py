"""Knowledge ingestion as background jobs: an upload is spooled to the data dir and queued (at
most `jobs_per_tenant` queued or running per tenant, else KnowledgeJobsBusy, 429); each job runs
in a worker process of its own (tools_app.ingest.worker) with CPU-time and memory budgets,
started by a Celery task when a broker is configured, otherwise by this server's
KnowledgeJobRunner (a few processes at once, fairest tenant first). Never parses on the event loop
or in a thread of the server. Owns no ORM code (knowledge/db.py does).
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
from channels.db import database_sync_to_async
from django.conf import settings
from django.utils import timezone

from foundation.errors import Overloaded
from foundation.logs import logger

from ...ingest.documents import (
    MAX_DOCUMENT_BYTES,
    ChunkSpan,
    KnowledgeError,
    KnowledgeJobStatus,
    ParsedDocument,
    media_type_of,
)
from .db import (
    KnowledgeJobRow,
    aclaim_next_knowledge_job,
    afail_knowledge_job,
    afail_stale_knowledge_jobs,
    aget_knowledge_job,
    arecord_knowledge_job_progress,
    complete_knowledge_job,
    count_active_knowledge_jobs,
    create_knowledge_job,
    requeue_knowledge_job,
)

__all__ = [
    "KNOWLEDGE_TASK",
    "JobBudgets",
    "KnowledgeJobRunner",
    "KnowledgeJobs",
    "KnowledgeJobsBusy",
    "ingest_file_now",
    "run_job_process",
    "submit_knowledge_job",
]

KNOWLEDGE_TASK = "brain.knowledge.ingest"  # the Celery task (knowledge/celery_task.py) of one job
ROOT = Path(__file__).resolve().parents[3]  # the project: the worker runs `-m tools_app.ingest.worker` here
# CPU seconds for one document: a 20 MiB text file takes about 2 s here and a 5,000-page PDF
# about 30 s, so a minute is ample for real documents and ends a hostile one
JOB_CPU_SECONDS = 60
# Address space of the worker: the interpreter, Django and pypdf (~250 MiB) plus a 20 MiB file,
# its text and chunks several times over, and MAX_PDF_STREAM_BYTES decoded at once
JOB_MEMORY_BYTES = 1024 * 1024 * 1024
# Wall clock per job: its CPU budget times this plus the slack below, room for a busy machine
# (the worker is niced below everything else), the database and the disk; past it the worker is killed
JOB_WALL_FACTOR = 3
JOB_WALL_SLACK_SECONDS = 60
# Queued or running jobs per tenant: one tenant's uploads can never fill the queue or the spool
MAX_JOBS_PER_TENANT = 3
# Worker processes this server runs at once without a broker; each is niced below the server
WORKER_PROCESSES = 2
POLL_SECONDS = 2.0  # jobs queued by another process (add_knowledge, an admin elsewhere) are seen this soon
RETRY_AFTER_SECONDS = 30  # a refused upload: about the time a job of a real document takes
SPOOL_DIRECTORY = "knowledge-uploads"  # under the data dir; files live there while their job does
SPOOL_CHUNK_BYTES = 1024 * 1024
# The worker's document frame: MAX_CHUNKS chunks of CHUNK_CHARS characters, in UTF-8 with JSON's
# escapes, and their offsets; a larger line stops the job
MAX_RESULT_BYTES = 96 * 1024 * 1024
INLINE_DECODE_BYTES = 64 * 1024  # frames larger than this are decoded in a thread, off the loop
CPU_ENV, MEMORY_ENV, JOBS_ENV = "BRAIN_KNOWLEDGE_CPU_SECONDS", "BRAIN_KNOWLEDGE_MEMORY_MB", "BRAIN_KNOWLEDGE_JOBS"


class KnowledgeJobsBusy(Overloaded):
    """A tenant's share of knowledge jobs is taken (429 with Retry-After)."""

    def __init__(self, tenant: str, cap: int) -> None:
        super().__init__(
            f"tenant {tenant} already has {cap} knowledge jobs queued or running; try again when one has finished"
        )

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(RETRY_AFTER_SECONDS)}


@dataclass(frozen=True, slots=True)
class JobBudgets:
    cpu_seconds: int = JOB_CPU_SECONDS
    memory_bytes: int = JOB_MEMORY_BYTES
    jobs_per_tenant: int = MAX_JOBS_PER_TENANT

    @property
    def wall_seconds(self) -> float:
        return float(self.cpu_seconds * JOB_WALL_FACTOR + JOB_WALL_SLACK_SECONDS)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> JobBudgets:
        """BRAIN_KNOWLEDGE_CPU_SECONDS, BRAIN_KNOWLEDGE_MEMORY_MB and BRAIN_KNOWLEDGE_JOBS (positive
        integers), or the defaults; ValueError naming the variable otherwise."""

        def read(name: str, default: int) -> int:
            raw = environ.get(name, "")
            if not raw:
                return default
            if not raw.isdigit() or int(raw) < 1:
                raise ValueError(f"{name} must be a positive integer, not {raw!r}")
            return int(raw)

        return cls(
            cpu_seconds=read(CPU_ENV, JOB_CPU_SECONDS),
            memory_bytes=read(MEMORY_ENV, JOB_MEMORY_BYTES // (1024 * 1024)) * 1024 * 1024,
            jobs_per_tenant=read(JOBS_ENV, MAX_JOBS_PER_TENANT),
        )


# -- submitting -------------------------------------------------------------------------------------


def spool_directory() -> Path:
    directory = Path(settings.DATA_DIR) / SPOOL_DIRECTORY
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return directory


def _spool(chunks: Iterable[bytes], source: str) -> tuple[Path, int]:
    """The upload written to a private file of the spool, counted as it goes; KnowledgeError
    (and no file) past MAX_DOCUMENT_BYTES."""
    path = spool_directory() / f"{secrets.token_hex(16)}{Path(source).suffix.lower()[:16]}"
    size = 0
    try:
        with path.open("xb") as stream:
            path.chmod(0o600)
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_DOCUMENT_BYTES:
                    raise KnowledgeError(f"file too large: more than {MAX_DOCUMENT_BYTES} bytes")
                stream.write(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    if size == 0:
        path.unlink(missing_ok=True)
        raise KnowledgeError("the file is empty")
    return path, size


def submit_knowledge_job(
    base_id: int,
    tenant: str,
    chunks: Iterable[bytes],
    *,
    source: str,
    title: str,
    budgets: JobBudgets,
    dispatch: Callable[[int], None] | None,
) -> KnowledgeJobRow:
    """Queue a file for `base_id`: refused at once (KnowledgeJobsBusy) when the tenant's share of
    jobs is taken, or (KnowledgeError) for a file type Brain does not read; otherwise spooled,
    recorded as a queued job and handed to `dispatch` (None: a runner's poll finds it)."""
    media_type_of(source)  # an unknown extension is refused before anything is written
    if count_active_knowledge_jobs(tenant) >= budgets.jobs_per_tenant:
        raise KnowledgeJobsBusy(tenant, budgets.jobs_per_tenant)
    path, size = _spool(chunks, source)
    job = create_knowledge_job(
        base_id, source=source, title=title, size=size, spool_path=str(path), cap=budgets.jobs_per_tenant
    )
    if job is None:  # another upload of the tenant took the last share meanwhile
        path.unlink(missing_ok=True)
        raise KnowledgeJobsBusy(tenant, budgets.jobs_per_tenant)
    if dispatch is not None:
        dispatch(job.id)
    return job


def ingest_file_now(
    base_id: int, path: Path, *, source: str, title: str, budgets: JobBudgets
) -> KnowledgeJobRow | None:
    """An operator's file (the add_knowledge command): recorded as a job like an upload, outside
    the tenant's share, and run in a budgeted worker process at once; the ended job."""
    media_type_of(source)
    with path.open("rb") as stream:
        spooled, size = _spool(iter(lambda: stream.read(SPOOL_CHUNK_BYTES), b""), source)
    job = create_knowledge_job(
        base_id, source=source, title=title, size=size, spool_path=str(spooled), cap=None, running=True
    )
    assert job is not None  # no cap: always created
    return run_job_process(job.id, budgets)


# -- running ------------------------------------------------------------------------------------


def worker_command(job: KnowledgeJobRow, budgets: JobBudgets) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tools_app.ingest.worker",
        job.spool_path,
        job.source,
        "--title",
        job.title,
        "--cpu-seconds",
        str(budgets.cpu_seconds),
        "--memory-bytes",
        str(budgets.memory_bytes),
    ]


async def run_job(job_id: int, budgets: JobBudgets) -> KnowledgeJobRow | None:
    """Run a claimed (running) job: its worker process parses, this stores what it returns or
    records why it failed (its error frame, or how it died); the spooled file goes. Awaits the
    worker on the loop; decoding a large result and every database write run in threads."""
    job: KnowledgeJobRow | None = await aget_knowledge_job(job_id)
    if job is None or job.status is not KnowledgeJobStatus.RUNNING:
        return job
    result: dict[str, Any] | None = None
    error = ""
    child = await asyncio.create_subprocess_exec(
        *worker_command(job, budgets),
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        limit=MAX_RESULT_BYTES,
    )
    try:
        result, error = await asyncio.wait_for(_read_frames(child, job_id), budgets.wall_seconds)
        returncode: int | None = await child.wait()
    except TimeoutError:
        returncode = None
    except ValueError:  # a line past the stream's limit
        error = f"stopped: the parsed document exceeds {MAX_RESULT_BYTES} bytes"
        returncode = 0
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    try:
        if result is not None:
            stored = await database_sync_to_async(complete_knowledge_job)(job_id, _parsed(result))
            error = "" if stored is not None else error
        elif not error:
            error = _exit_reason(returncode, budgets)
    except (KeyError, TypeError, ValueError) as exc:
        error = f"the worker's result was malformed ({type(exc).__name__})"
    if error:
        await afail_knowledge_job(job_id, f"{job.source}: {error}")
    Path(job.spool_path).unlink(missing_ok=True)
    ended: KnowledgeJobRow | None = await aget_knowledge_job(job_id)
    return ended


async def _read_frames(child: asyncio.subprocess.Process, job_id: int) -> tuple[dict[str, Any] | None, str]:
    """The worker's document frame (or None) and error (or "") once its stdout ends."""
    assert child.stdout is not None
    result: dict[str, Any] | None = None
    error = ""
    while line := await child.stdout.readline():
        frame = orjson.loads(line) if len(line) < INLINE_DECODE_BYTES else await asyncio.to_thread(orjson.loads, line)
        if "progress" in frame:
            await arecord_knowledge_job_progress(job_id, int(frame["progress"]), str(frame["stage"]))
        elif "error" in frame:
            error = str(frame["error"])
        elif "document" in frame:
            result = frame
    return result, error


def _parsed(frame: dict[str, Any]) -> ParsedDocument:
    meta = frame["document"]
    chunks = tuple(
        ChunkSpan(int(p), int(s), int(e), str(t), None if g is None else int(g)) for p, s, e, g, t in frame["chunks"]
    )
    return ParsedDocument(str(meta["title"]), str(meta["media_type"]), int(meta["size"]), "", chunks)


def _exit_reason(returncode: int | None, budgets: JobBudgets) -> str:
    if returncode is None:
        return f"stopped: took longer than {budgets.wall_seconds:g} s"
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        return f"stopped: CPU time budget of {budgets.cpu_seconds} s exceeded"
    # a failed allocation may crash C code (SIGSEGV) rather than raise MemoryError
    budget = f"its budgets: {budgets.cpu_seconds} s CPU, {budgets.memory_bytes >> 20} MiB memory"
    if returncode < 0:
        return f"stopped: the worker process was killed by signal {-returncode} ({budget})"
    return f"stopped: the worker process ended with status {returncode} ({budget})"


def run_job_process(job_id: int, budgets: JobBudgets) -> KnowledgeJobRow | None:
    """run_job for a caller without an event loop (the command, a Celery task); blocking."""
    return asyncio.run(run_job(job_id, budgets))


def stale_before(budgets: JobBudgets) -> datetime:
    """Jobs running since before this have lost their worker: none lives past its wall deadline."""
    return timezone.now() - timedelta(seconds=budgets.wall_seconds + POLL_SECONDS * 2)


class KnowledgeJobs:
    """The server's side of knowledge jobs: the budgets, where a new job goes (`dispatch`, safe
    from any thread: the broker, or a wake-up of the runner) and the runner itself."""

    def __init__(self, budgets: JobBudgets, *, broker_send: Callable[[int], None] | None) -> None:
        self.budgets = budgets
        self.broker_send = broker_send
        self.runner = KnowledgeJobRunner(budgets, processes=0 if broker_send is not None else WORKER_PROCESSES)

    def dispatch(self, job_id: int) -> None:
        if self.broker_send is not None:
            self.broker_send(job_id)
        else:
            self.runner.wake_threadsafe()

    async def start(self) -> None:
        await self.runner.start()

    async def stop(self) -> None:
        await self.runner.stop()


class KnowledgeJobRunner:
    """Runs queued jobs in up to `processes` worker processes (0: only fails the jobs whose worker
    was lost), woken by new jobs and every POLL_SECONDS. Its children are awaited on the loop, never
    waited for in it; a stopped server's running jobs are queued again for the next start."""

    def __init__(self, budgets: JobBudgets, *, processes: int) -> None:
        self.budgets = budgets
        self.processes = processes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._main: asyncio.Task[None] | None = None
        self._running: dict[int, asyncio.Task[None]] = {}

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._main = asyncio.create_task(self._supervise(), name="knowledge-jobs")

    def wake_threadsafe(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake.set)

    async def stop(self) -> None:
        if self._main is not None:
            self._main.cancel(msg="server stopping")
            await asyncio.gather(self._main, return_exceptions=True)
        for task in list(self._running.values()):
            task.cancel(msg="server stopping")
        await asyncio.gather(*self._running.values(), return_exceptions=True)
        for job_id in list(self._running):
            await asyncio.to_thread(requeue_knowledge_job, job_id)

    async def _supervise(self) -> None:
        while True:
            try:
                await self._tick()
            except Exception as exc:  # a database hiccup: try again at the next poll
                logger.warning("knowledge jobs: poll failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), POLL_SECONDS)
            except TimeoutError:
                pass

    async def _tick(self) -> None:
        for job in await afail_stale_knowledge_jobs(
            stale_before(self.budgets), error="stopped: its worker was lost (a restart or a crash)"
        ):
            Path(job.spool_path).unlink(missing_ok=True)
        while len(self._running) < self.processes:
            job = await aclaim_next_knowledge_job()
            if job is None:
                return
            self._running[job.id] = asyncio.create_task(self._run(job.id), name=f"knowledge-job-{job.id}")

    async def _run(self, job_id: int) -> None:
        try:
            await run_job(job_id, self.budgets)
        except asyncio.CancelledError:
            raise  # stop() queues the job again
        except Exception as exc:  # a supervision boundary: the job fails, the runner goes on
            logger.error("knowledge job failed to run", extra={"job": job_id, "error": f"{type(exc).__name__}: {exc}"})
            await afail_knowledge_job(job_id, f"the worker could not run: {type(exc).__name__}")
        self._running.pop(job_id, None)
        self._wake.set()
