from django.urls import path

from courseapp.demo import views

app_name = "demo"
urlpatterns = [
    path("", views.demo_index, name="index"),
    path("runs/", views.run_create, name="run-create"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("runs/<uuid:run_id>/trace.json", views.run_trace, name="run-trace"),
    path("runs/<uuid:run_id>/summary/", views.run_summary, name="run-summary"),
    path("class/", views.class_create, name="class-create"),
    path("join/", views.class_join, name="class-join"),
]
