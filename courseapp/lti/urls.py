from django.urls import path
from lti_tool.views import jwks

import courseapp.converters  # noqa: F401 — registers <id:…>
from courseapp.lti import views

app_name = "lti"
urlpatterns = [
    path("lti/", views.registration, name="registration"),
    path("lti/jwks/", jwks, name="jwks"),
    path("lti/login/<uuid:registration_uuid>/", views.OIDCLogin.as_view(), name="login"),
    path("lti/launch/", views.Launch.as_view(), name="launch"),
    path("lti/deep-link/", views.deep_link_return, name="deep-link"),
    path("teach/classes/<id:cohort_id>/lms-grades/", views.cohort_passbacks, name="passbacks"),
    path("teach/classes/<id:cohort_id>/lms-grades/<id:passback_id>/retry/", views.passback_retry, name="passback-retry"),
]
