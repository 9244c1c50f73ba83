"""The sign-up and login forms: Django's, less the usernames reserved for LMS accounts, and a
login error worded without a particle placeholder (Django's Korean reads "이름와/과")."""
from django import forms
from django.contrib.auth.forms import AuthenticationForm, UserCreationForm
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


class LoginForm(AuthenticationForm):
    error_messages = {
        **AuthenticationForm.error_messages,
        "invalid_login": _("The username or the password is wrong. Both are case-sensitive."),
    }
