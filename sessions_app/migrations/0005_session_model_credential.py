from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('sessions_app', '0004_session_parent'),
    ]

    operations = [
        migrations.AddField(
            model_name='session',
            name='model_credential',
            field=models.JSONField(default=dict),
        ),
    ]
