from django.apps import AppConfig


class InstructorConfig(AppConfig):
    name = "courseapp.instructor"
    verbose_name = "Classes and instructors"
    default_auto_field = "django.db.models.BigAutoField"
