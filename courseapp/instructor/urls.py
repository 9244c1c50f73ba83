from django.urls import path

from courseapp.instructor import views

app_name = "instructor"
urlpatterns = [
    path("teach/", views.teach_index, name="index"),
    path("teach/classes/<int:cohort_id>/", views.cohort_dashboard, name="cohort"),
    path("teach/classes/<int:cohort_id>/learners/<int:learner_id>/", views.cohort_learner, name="learner"),
    path("teach/classes/<int:cohort_id>/items/", views.cohort_items, name="items"),
    path("teach/classes/<int:cohort_id>/progress/", views.cohort_progress, name="progress"),
    path("teach/classes/<int:cohort_id>/<str:what>.csv", views.cohort_export, name="export"),
    path("teach/classes/<int:cohort_id>/regrades/", views.cohort_regrades, name="regrades"),
    path("teach/classes/<int:cohort_id>/regrades/<slug:slug>/", views.cohort_regrade, name="regrade"),
    path("classes/join/", views.join, name="join"),
    path("classes/join/<str:code>/", views.join, name="join-code"),
]
