from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LearnersConfig(AppConfig):
    name = "courseapp.learners"
    verbose_name = _("Learners and progress")
