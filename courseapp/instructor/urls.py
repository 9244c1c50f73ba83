from django.urls import path

import courseapp.converters  # noqa: F401 — registers <id:…>
from courseapp.instructor import views

app_name = "instructor"
urlpatterns = [
    path("teach/", views.teach_index, name="index"),
    path("teach/classes/<id:cohort_id>/", views.cohort_dashboard, name="cohort"),
    path("teach/classes/<id:cohort_id>/learners/<id:learner_id>/", views.cohort_learner, name="learner"),
    path("teach/classes/<id:cohort_id>/items/", views.cohort_items, name="items"),
    path("teach/classes/<id:cohort_id>/progress/", views.cohort_progress, name="progress"),
    path("teach/classes/<id:cohort_id>/<str:what>.csv", views.cohort_export, name="export"),
    path("teach/classes/<id:cohort_id>/regrades/", views.cohort_regrades, name="regrades"),
    path("teach/classes/<id:cohort_id>/regrades/<slug:slug>/", views.cohort_regrade, name="regrade"),
    path("classes/join/", views.join, name="join"),
    path("classes/join/<str:code>/", views.join, name="join-code"),
]
