from django.urls import path

from courseapp.quizzes import views

app_name = "quizzes"
urlpatterns = [
    path("<slug:slug>/submit/", views.question_submit, name="submit"),
]
