"""`python manage.py create_api_token NAME [--scope read|grade] [--class ID …]`: a token for the
quiz grading API, printed once (only its hash is kept)."""
from django.core.management.base import BaseCommand, CommandError

from courseapp.api.models import ApiClient
from courseapp.instructor.models import Cohort


class Command(BaseCommand):
    help = "Make an API token for the quiz grading API (printed once)."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--scope", choices=[s.value for s in ApiClient.Scope], default=ApiClient.Scope.READ)
        parser.add_argument("--class", dest="classes", type=int, action="append", default=[],
                            help="a class id the token may see (repeat for several; default: every class)")

    def handle(self, *args, name, scope, classes, **options):
        cohorts = list(Cohort.objects.filter(pk__in=classes)) if classes else list(Cohort.objects.all())
        missing = set(classes) - {c.pk for c in cohorts}
        if missing:
            raise CommandError(f"No class with id {', '.join(map(str, sorted(missing)))}.")
        if not cohorts:
            raise CommandError("There is no class yet: an instructor makes one at /teach/ (or in the admin).")
        _client, token = ApiClient.issue(name=name, scope=scope, cohorts=cohorts)
        self.stderr.write(f"{name}: scope {scope}, classes {', '.join(c.name for c in cohorts)}. "
                          "The token (shown this once; only its hash is kept):")
        self.stdout.write(token)
