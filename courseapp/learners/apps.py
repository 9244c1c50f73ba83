from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class LearnersConfig(AppConfig):
    name = "courseapp.learners"
    verbose_name = _("Learners and progress")

    def ready(self):
        from django.contrib.auth.signals import user_login_failed

        from courseapp.learners import login_throttle

        user_login_failed.connect(login_throttle.count_failure, dispatch_uid="login-failures-per-address")
