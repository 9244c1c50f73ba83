from django.conf import settings
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.views import LoginView
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods
from django_ratelimit.core import is_ratelimited

from courseapp.learners.order_seed import request_seed
from courseapp.learners.selectors import mastery_by_objective, resume_section, sections_with_read
from courseapp.learners.services import SESSION_KEY, learner_get, learner_merge_guest
from courseapp.lessons.models import Lesson
from courseapp.quizzes.models import Attempt
from courseapp.views import too_many_signups


class GuestKeepingLoginView(LoginView):
    """Django's login, plus: what the learner did as a guest carries into the account."""

    def form_valid(self, form):
        guest_id = self.request.session.get(SESSION_KEY)
        response = super().form_valid(form)
        learner_merge_guest(guest_id=guest_id, user=form.get_user(), seed=request_seed(self.request))
        self.request.session.pop(SESSION_KEY, None)
        return response


@require_http_methods(["GET", "POST"])
def signup(request):
    if request.user.is_authenticated:
        return redirect("progress")
    if is_ratelimited(request, group="signup", key="ip", rate=settings.SIGNUP_RATE, method="POST", increment=True):
        return too_many_signups(request)
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        guest_id = request.session.get(SESSION_KEY)
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        learner_merge_guest(guest_id=guest_id, user=user, seed=request_seed(request))
        request.session.pop(SESSION_KEY, None)
        return redirect("progress")
    return render(request, "registration/signup.html", {"form": form})


def progress(request):
    learner = learner_get(request)
    lessons = []
    for lesson in Lesson.objects.filter(available=True):
        lessons.append(
            {
                "lesson": lesson,
                "mastery": mastery_by_objective(learner=learner, lesson=lesson),
                "sections": sections_with_read(learner=learner, lesson=lesson),
                "resume": resume_section(learner=learner, lesson=lesson),
            }
        )
    attempts = (
        Attempt.objects.filter(learner=learner).select_related("question").order_by("-created_at")[:50]
        if learner
        else []
    )
    return render(request, "learners/progress.html", {"lessons": lessons, "attempts": attempts, "learner": learner})
