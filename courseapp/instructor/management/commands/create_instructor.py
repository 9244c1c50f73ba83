"""`python manage.py create_instructor USERNAME`: an account that may teach classes (asks for a
password on a terminal; `--password` or DJANGO_INSTRUCTOR_PASSWORD for scripts)."""
import getpass
import os
import sys

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from courseapp.instructor.services import instructor_make


class Command(BaseCommand):
    help = "Make an instructor account (or give an existing account the instructor role)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", help="(default: DJANGO_INSTRUCTOR_PASSWORD, else asked on the terminal)")
        parser.add_argument("--email", default="")

    def handle(self, *args, username, password, email, **options):
        password = password or os.environ.get("DJANGO_INSTRUCTOR_PASSWORD")
        if not password and sys.stdin.isatty():
            password = getpass.getpass("Password: ")
            if password != getpass.getpass("Password (again): "):
                raise CommandError("The two passwords differ.")
        if password:
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError(" ".join(exc.messages)) from None
        user, created = instructor_make(username=username, password=password, email=email)
        state = "made" if created else "given the instructor role"
        note = "" if password or not created else " (no password yet: set one with `manage.py changepassword`)"
        self.stdout.write(f"{user.get_username()}: {state}{note}. Their classes: /teach/")
