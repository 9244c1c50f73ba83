from django.contrib import admin

from courseapp.instructor.models import AuditEntry, Cohort, Membership, Regrade, RegradeChange


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    autocomplete_fields = ["learner"]
    readonly_fields = ["joined_at"]


@admin.register(Cohort)
class CohortAdmin(admin.ModelAdmin):
    list_display = ("name", "lesson", "join_code", "archived", "created_at")
    list_filter = ("archived", "lesson")
    search_fields = ("name", "join_code", "instructors__username")
    filter_horizontal = ("instructors",)
    inlines = [MembershipInline]
    readonly_fields = ["created_at"]


@admin.register(Membership)
class MembershipAdmin(admin.ModelAdmin):
    list_display = ("cohort", "learner", "via", "joined_at")
    list_filter = ("via", "cohort")
    search_fields = ("cohort__name", "learner__user__username")
    autocomplete_fields = ["learner"]


class RegradeChangeInline(admin.TabularInline):
    model = RegradeChange
    extra = 0
    readonly_fields = ("attempt", "old_score", "new_score")
    can_delete = False


@admin.register(Regrade)
class RegradeAdmin(admin.ModelAdmin):
    """The audit record of regrades: read-only."""

    list_display = ("at", "cohort", "question", "by")
    list_filter = ("cohort",)
    readonly_fields = ("cohort", "question", "by", "at", "key")
    inlines = [RegradeChangeInline]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    """Instructors' actions on learners' data and grades: read-only."""

    list_display = ("at", "user", "action", "cohort", "detail")
    list_filter = ("action", "cohort")
    search_fields = ("user__username", "detail")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
