from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("fleet_app", "0002_journal_cancelled"),
    ]

    operations = [
        migrations.AddField(
            model_name="sessionlease",
            name="incarnation",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
    ]
