from django.apps import AppConfig


class LtiConfig(AppConfig):
    name = "courseapp.lti"
    label = "lti"
    verbose_name = "LTI 1.3 (LMS launches and grade passback)"
    default_auto_field = "django.db.models.BigAutoField"
