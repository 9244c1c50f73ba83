from django.urls import path
from django.views.generic import RedirectView

import courseapp.converters  # noqa: F401 — registers <id:…>
from courseapp.lessons import views

app_name = "lessons"
urlpatterns = [
    # /lessons/ itself (a learner trimming the address): the course's lessons are on the home page
    path("", RedirectView.as_view(pattern_name="home"), name="index"),
    path("<id:number>/", views.lesson_detail, name="lesson"),
    path("<id:number>/glossary/", views.glossary, name="glossary"),
    path("<id:number>/<slug:slug>/", views.section_detail, name="section"),
    path("<id:number>/<slug:slug>/read/", views.section_read, name="section-read"),
    path("<id:number>/<slug:slug>/visited/", views.section_visited, name="section-visited"),
]
