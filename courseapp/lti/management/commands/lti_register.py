"""Register an LMS (an LTI 1.3 platform) with the values its administrator gives, and print the
tool's URLs to enter on the LMS's side."""
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction
from django.urls import reverse
from lti_tool.models import LtiDeployment, LtiRegistration


class Command(BaseCommand):
    help = "Register an LTI 1.3 platform (LMS) and print the tool's URLs for it."

    def add_arguments(self, parser):
        parser.add_argument("name")
        parser.add_argument("--issuer", required=True)
        parser.add_argument("--client-id", required=True)
        parser.add_argument("--auth-url", required=True, help="the platform's OIDC authorization URL")
        parser.add_argument("--token-url", required=True, help="the platform's OAuth2 access token URL")
        parser.add_argument("--keyset-url", required=True, help="the platform's public keys (JWKS)")
        parser.add_argument("--deployment-id", action="append", default=[], help="activate this deployment (repeatable)")
        parser.add_argument("--base-url", default="http://127.0.0.1:8000", help="where LMS users reach this site")

    @transaction.atomic
    def handle(self, *args, **options):
        fields = {"name": options["name"], "auth_url": options["auth_url"], "token_url": options["token_url"],
                  "keyset_url": options["keyset_url"], "is_active": True}
        for field in ("auth_url", "token_url", "keyset_url"):
            if not fields[field].startswith(("https://", "http://")):
                raise CommandError(f"--{field.replace('_', '-')} must be an http(s) URL, not {fields[field]!r}")
        registration, created = LtiRegistration.objects.update_or_create(
            issuer=options["issuer"], client_id=options["client_id"], defaults=fields)
        for deployment_id in options["deployment_id"]:
            LtiDeployment.objects.update_or_create(registration=registration, deployment_id=deployment_id,
                                                   defaults={"is_active": True})
        base = options["base_url"].rstrip("/")
        self.stdout.write(f"{'Registered' if created else 'Updated'} {registration.name} ({registration.issuer}, client {registration.client_id})\n"
                          f"  Initiate login URL: {base}{reverse('lti:login', args=[registration.uuid])}\n"
                          f"  Tool / redirect URL: {base}{reverse('lti:launch')}\n"
                          f"  Public keyset URL:  {base}{reverse('lti:jwks')}")
        if not options["deployment_id"]:
            self.stdout.write("  No deployment activated: a launch's deployment is recorded inactive until you "
                              "activate it in the admin (or run this again with --deployment-id).")
