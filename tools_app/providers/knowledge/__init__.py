"""The built-in `knowledge` tool: the provider (provider.py), its queries (db.py), the ingestion
jobs (jobs.py, run in the server or by the Celery task in celery_task.py). Documents are parsed
by tools_app.ingest, which imports no Django. Operators install it as
`tools_app.providers.knowledge.KnowledgeProvider`; the models stay in tools_app.models."""

from __future__ import annotations

from .provider import BASE_NAME, MAX_BASES, MAX_RESULTS, KnowledgeOptions, KnowledgeProvider

__all__ = ["BASE_NAME", "MAX_BASES", "MAX_RESULTS", "KnowledgeOptions", "KnowledgeProvider"]
