"""The sign-up form: Django's, less the usernames reserved for LMS accounts."""
from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.utils.translation import gettext_lazy as _

from courseapp.learners.models import LTI_USERNAME_PREFIX


class SignupForm(UserCreationForm):
    def clean_username(self):
        username = super().clean_username()
        if username.lower().startswith(LTI_USERNAME_PREFIX):
            raise forms.ValidationError(
                _("Names beginning with “%(prefix)s” are kept for accounts made by an LMS: choose another."),
                code="reserved", params={"prefix": LTI_USERNAME_PREFIX})
        return username
