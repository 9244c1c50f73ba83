from django.urls import path
from django.views.generic import RedirectView

from courseapp.lessons import views

app_name = "lessons"
urlpatterns = [
    # /lessons/ itself (a learner trimming the address): the course's lessons are on the home page
    path("", RedirectView.as_view(pattern_name="home"), name="index"),
    path("<int:number>/", views.lesson_detail, name="lesson"),
    path("<int:number>/glossary/", views.glossary, name="glossary"),
    path("<int:number>/<slug:slug>/", views.section_detail, name="section"),
    path("<int:number>/<slug:slug>/read/", views.section_read, name="section-read"),
    path("<int:number>/<slug:slug>/visited/", views.section_visited, name="section-visited"),
]
