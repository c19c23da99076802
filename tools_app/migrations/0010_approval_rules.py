from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tools_app", "0009_admin_labels"),
    ]

    operations = [
        migrations.CreateModel(
            name="ApprovalRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "tools",
                    models.JSONField(default=list, help_text='patterns on the name the model sees, e.g. ["runtime_*"]'),
                ),
                (
                    "kinds",
                    models.JSONField(default=list, help_text="config, provider, runtime (empty: every kind)"),
                ),
                (
                    "providers",
                    models.JSONField(blank=True, help_text="installed providers (empty: any tool)", null=True),
                ),
                ("tenants", models.JSONField(blank=True, help_text="tenant IDs (empty: every tenant)", null=True)),
                ("approval_timeout_seconds", models.PositiveIntegerField(default=600)),
            ],
        ),
    ]
