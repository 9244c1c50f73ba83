from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "courseapp.lab"
    verbose_name = "§6 lab"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        from courseapp.learners.signals import move_on_merge

        move_on_merge("lab.LabRun", "learner")  # a guest who logs in keeps their lab runs and reports
