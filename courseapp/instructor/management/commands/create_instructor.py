"""`python manage.py create_instructor USERNAME`: an account that may teach classes (asks for a
password on a terminal; `--password` or DJANGO_INSTRUCTOR_PASSWORD for scripts). A name that
already belongs to an account that does not teach is refused unless `--promote` says to give
that very account the role."""
import getpass
import os
import sys

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from courseapp.instructor.services import NameTaken, instructor_make


class Command(BaseCommand):
    help = "Make an instructor account (or give an existing account the instructor role)."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--password", help="(default: DJANGO_INSTRUCTOR_PASSWORD, else asked on the terminal)")
        parser.add_argument("--email", default="")
        parser.add_argument("--promote", action="store_true",
                            help="give an existing account that does not teach the instructor role")

    def handle(self, *args, username, password, email, promote, **options):
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
        try:
            user, created = instructor_make(username=username, password=password, email=email, promote=promote)
        except NameTaken:
            raise CommandError(
                f"{username!r} is already an account that does not teach (a learner, or someone who signed up "
                f"under that name). Choose another name, or pass --promote to give that account the "
                f"instructor role (it keeps its own password unless --password is given).") from None
        state = "made" if created else "given the instructor role"
        note = "" if password or not created else " (no password yet: set one with `manage.py changepassword`)"
        self.stdout.write(f"{user.get_username()}: {state}{note}. Their classes: /teach/")
