"""The tool's first signing key (its JWKS): every fresh install can be registered in an LMS at
once. `manage.py rotate_keys` (django-lti) adds a new one later."""
from django.db import migrations


def make_key(apps, schema_editor):
    from jwcrypto.jwk import JWK

    Key = apps.get_model("lti_tool", "Key")
    if Key.objects.filter(is_active=True).exists():
        return
    key = JWK.generate(kty="RSA", size=2048)
    Key.objects.create(public_key=key.export_to_pem().decode(),
                       private_key=key.export_to_pem(private_key=True, password=None).decode())


class Migration(migrations.Migration):
    dependencies = [("lti", "0001_initial"), ("lti_tool", "0008_ltideployment_pns_url_and_more")]
    operations = [migrations.RunPython(make_key, migrations.RunPython.noop)]
