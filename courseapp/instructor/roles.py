"""Who may teach: an active account in the "instructors" group (or a superuser). The group holds
the permission; `manage.py create_instructor` puts an account in it."""
from django.contrib.auth.models import Group, Permission

INSTRUCTORS = "instructors"


def instructors_group() -> Group:
    group, _ = Group.objects.get_or_create(name=INSTRUCTORS)
    permission = Permission.objects.get(codename="teach_cohort", content_type__app_label="instructor")
    group.permissions.add(permission)
    return group


def is_instructor(user) -> bool:
    return bool(user and user.is_authenticated and user.is_active and user.has_perm("instructor.teach_cohort"))
