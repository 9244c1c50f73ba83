from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "courseapp.lab"
    verbose_name = "§6 lab"
    default_auto_field = "django.db.models.BigAutoField"
