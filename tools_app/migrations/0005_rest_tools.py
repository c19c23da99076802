"""Declarative REST tools: the request templates of `transport: rest` bindings."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tools_app", "0003_memory_tasks"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolbinding",
            name="method",
            field=models.CharField(
                blank=True, help_text="transport rest: GET, POST, PUT, PATCH or DELETE", max_length=8
            ),
        ),
        migrations.AddField(
            model_name="toolbinding",
            name="query",
            field=models.JSONField(blank=True, help_text="transport rest: query parameter templates", null=True),
        ),
        migrations.AddField(
            model_name="toolbinding",
            name="headers",
            field=models.JSONField(blank=True, help_text="transport rest: header templates", null=True),
        ),
        migrations.AddField(
            model_name="toolbinding",
            name="body",
            field=models.JSONField(blank=True, help_text="transport rest: the JSON body template", null=True),
        ),
    ]
