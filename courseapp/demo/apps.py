from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DemoConfig(AppConfig):
    name = "courseapp.demo"
    verbose_name = _("Live demo")

    def ready(self):
        from courseapp.learners.signals import move_on_merge

        move_on_merge("demo.DemoRun", "owner")  # a guest who logs in keeps their demo runs
