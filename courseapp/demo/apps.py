from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class DemoConfig(AppConfig):
    name = "courseapp.demo"
    verbose_name = _("Live demo")
