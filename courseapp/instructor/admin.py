from django.contrib import admin

from courseapp.instructor.models import Cohort, Membership


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
