from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.views import LoginView
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _
from django.views.decorators.http import require_http_methods
from django_ratelimit.core import is_ratelimited

from courseapp.learners import login_throttle
from courseapp.learners.forms import LoginForm, SignupForm
from courseapp.learners.order_seed import request_seed
from courseapp.learners.selectors import (
    guest_work,
    mastery_by_objective,
    recent_attempts,
    resume_section,
    sections_with_read,
)
from courseapp.learners.services import SESSION_KEY, learner_get, learner_merge_guest
from courseapp.lessons.models import Lesson
from courseapp.views import too_many_failed_logins, too_many_signups


def describe_errors(form):
    """Point each invalid input at its error message (shown beside it, templates/registration/field.html),
    so a screen reader reads the message with the field."""
    for name, field in form.fields.items():
        if name in form.errors:
            ids = [f"{form[name].auto_id}_error"] + ([f"{form[name].auto_id}_helptext"] if field.help_text else [])
            field.widget.attrs["aria-describedby"] = " ".join(ids)
    return form


class GuestKeepingLoginView(LoginView):
    """Django's login, plus: what the learner did as a guest carries into the account; an address
    with too many failed logins is told so before anything is checked (login_throttle.py)."""

    form_class = LoginForm

    def post(self, request, *args, **kwargs):
        wait = login_throttle.throttled(request)
        if wait:
            return too_many_failed_logins(request, wait)
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        return super().form_invalid(describe_errors(form))

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "guest_work": guest_work(learner=learner_get(self.request))}

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
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        guest_id = request.session.get(SESSION_KEY)
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        learner_merge_guest(guest_id=guest_id, user=user, seed=request_seed(request))
        request.session.pop(SESSION_KEY, None)
        if guest_id is not None:
            messages.success(request, _("What you did as a guest (sections read and answers) is now in your account."))
        else:
            messages.success(request, _("Your account is ready. Your progress is kept in it from now on."))
        return redirect("progress")
    return render(
        request,
        "registration/signup.html",
        {"form": describe_errors(form) if form.is_bound else form, "guest_work": guest_work(learner=learner_get(request))},
    )


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
    attempts = recent_attempts(learner=learner, limit=50)
    return render(request, "learners/progress.html", {"lessons": lessons, "attempts": attempts, "learner": learner})
