"""Ids in paths past the databases' integers are a plain 404, for guests and instructors alike."""
import pytest
from django.test import Client

from courseapp.instructor import services as classes

HUGE = "9" * 25


@pytest.mark.django_db
def test_a_25_digit_id_in_any_path_is_a_404(lesson):
    guest = Client()
    assert guest.post(f"/lessons/{HUGE}/s1/read/").status_code == 404
    assert guest.get(f"/lessons/{HUGE}/").status_code == 404
    teacher, _ = classes.instructor_make(username="teacher", password="a-long-passphrase-9")
    cohort = classes.cohort_create(instructor=teacher, name="A", lesson=lesson)
    staff = Client()
    staff.force_login(teacher)
    for path in (f"/teach/classes/{cohort.pk}/learners/{HUGE}/", f"/teach/classes/{HUGE}/",
                 f"/teach/classes/{cohort.pk}/lms-grades/{HUGE}/retry/"):
        answer = staff.post(path) if path.endswith("retry/") else staff.get(path)
        assert answer.status_code == 404, path
    assert staff.get(f"/teach/classes/{cohort.pk}/").status_code == 200, "an ordinary id still resolves"
