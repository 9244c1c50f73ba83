from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from courseapp import views
from courseapp.api.api import api
from courseapp.learners import views as learner_views
from courseapp.lessons import views as lesson_views

urlpatterns = [
    path("", lesson_views.home, name="home"),
    path("lessons/", include("courseapp.lessons.urls")),
    path("questions/", include("courseapp.quizzes.urls")),
    path("demo/", include("courseapp.demo.urls")),
    path("lab/", include("courseapp.lab.urls")),
    path("", include("courseapp.instructor.urls")),
    path("", include("courseapp.lti.urls")),
    path("api/", api.urls),
    path("progress/", learner_views.progress, name="progress"),
    path("accounts/login/", learner_views.GuestKeepingLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/signup/", learner_views.signup, name="signup"),
    path("i18n/", include("django.conf.urls.i18n")),
    path("admin/", admin.site.urls),
]

handler400 = views.bad_request
