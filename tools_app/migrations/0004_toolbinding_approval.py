from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tools_app", "0005_rest_tools"),
    ]

    operations = [
        migrations.AddField(
            model_name="toolbinding",
            name="require_approval",
            field=models.BooleanField(default=False, help_text="each call waits for a person's decision"),
        ),
        migrations.AddField(
            model_name="toolbinding",
            name="approval_timeout_seconds",
            field=models.PositiveIntegerField(default=600),
        ),
    ]
