from django.urls import path

from courseapp.lessons import views

app_name = "lessons"
urlpatterns = [
    path("<int:number>/", views.lesson_detail, name="lesson"),
    path("<int:number>/glossary/", views.glossary, name="glossary"),
    path("<int:number>/<slug:slug>/", views.section_detail, name="section"),
    path("<int:number>/<slug:slug>/read/", views.section_read, name="section-read"),
    path("<int:number>/<slug:slug>/visited/", views.section_visited, name="section-visited"),
]
