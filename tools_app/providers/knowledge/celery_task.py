"""The Celery task of a knowledge job: a job id in, the job's row updated by its worker process.

Runs in `manage.py syncworker`; the document is parsed by a child process with the job's budgets
(tools_app.ingest.worker), never in the Celery worker itself. A worker lost mid-job has its
task delivered again (acks late), which claims the job once its deadline has passed.
"""

from __future__ import annotations

import os

from celery import shared_task

from .db import claim_knowledge_job
from .jobs import KNOWLEDGE_TASK, JobBudgets, run_job_process, stale_before

__all__ = ["ingest_knowledge"]


@shared_task(  # type: ignore[untyped-decorator]  # celery ships no type hints
    name=KNOWLEDGE_TASK, acks_late=True, reject_on_worker_lost=True
)
def ingest_knowledge(job_id: int) -> str:
    budgets = JobBudgets.from_environment(os.environ)
    job = claim_knowledge_job(job_id, stale_before=stale_before(budgets))
    if job is None:
        return "not queued"  # done, failed or running elsewhere
    ended = run_job_process(job.id, budgets)
    return ended.status.value if ended is not None else "deleted"
