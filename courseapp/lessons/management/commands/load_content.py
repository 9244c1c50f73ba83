from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from courseapp.lessons.loader import ContentError, content_load


class Command(BaseCommand):
    help = "Load (or refresh) lessons, sections, glossary and questions from courseapp/content/."

    def handle(self, *args, **options):
        try:
            report = content_load(root=settings.CONTENT_DIR)
        except ContentError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(
            f"Loaded {report.lessons} lessons, {report.sections} sections, {report.objectives} objectives, "
            f"{report.terms} glossary terms, {report.questions} questions."
        )
