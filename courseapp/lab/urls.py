from django.urls import path

from courseapp.lab import views

app_name = "lab"
urlpatterns = [
    path("", views.lab_index, name="index"),
    path("runs/", views.lab_create, name="create"),
    path("runs/<uuid:run_id>/", views.lab_run, name="run"),
    path("runs/<uuid:run_id>/progress/", views.lab_run_progress, name="progress"),
    path("runs/<uuid:run_id>/live/", views.lab_run_live, name="live"),
    path("live/", views.site_live, name="site-live"),
    path("runs/<uuid:run_id>/report.<str:fmt>", views.lab_run_download, name="download"),
    path("compare/", views.lab_compare, name="compare"),
]
