"""The Celery application of `manage.py syncworker` (sync publishes and knowledge jobs): Django
settings with the CELERY_ prefix."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "brainsite.settings")

app = Celery("brain")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["persistence_app"])
app.autodiscover_tasks(["tools_app.providers.knowledge"], related_name="celery_task")
