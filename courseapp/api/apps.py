from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "courseapp.api"
    label = "grading_api"
    verbose_name = "Quiz grading API"
    default_auto_field = "django.db.models.BigAutoField"
