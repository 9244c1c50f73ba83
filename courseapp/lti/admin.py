from django.contrib import admin

from courseapp.lti.models import ContextCohort, Passback, Placement


@admin.register(ContextCohort)
class ContextCohortAdmin(admin.ModelAdmin):
    list_display = ("context", "cohort")
    search_fields = ("cohort__name", "context__title", "context__id_on_platform")


@admin.register(Placement)
class PlacementAdmin(admin.ModelAdmin):
    list_display = ("resource_link", "cohort", "section", "lineitem_url", "updated_at")
    list_filter = ("cohort",)
    search_fields = ("cohort__name", "lineitem_url")
    readonly_fields = ("resource_link", "lineitem_url", "ags_scopes")


@admin.register(Passback)
class PassbackAdmin(admin.ModelAdmin):
    """What went to the LMS is a record: read-only here (instructors retry from their page)."""

    list_display = ("learner", "placement", "score_given", "score_maximum", "status", "tries", "sent_at", "last_error")
    list_filter = ("status", "placement__cohort")
    search_fields = ("learner__user__username", "lti_user__sub", "last_error")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
