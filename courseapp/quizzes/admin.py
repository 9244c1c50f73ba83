from django.contrib import admin

from courseapp.quizzes.models import Attempt, Question


@admin.register(Question)
class QuestionAdmin(admin.ModelAdmin):
    list_display = ("slug", "type", "objective", "anchor", "order")
    list_filter = ("type", "objective")
    search_fields = ("slug", "prompt")


@admin.register(Attempt)
class AttemptAdmin(admin.ModelAdmin):
    """Read-only: attempts are history."""

    list_display = ("created_at", "learner", "question", "score")
    list_filter = ("question__objective",)

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
