from django.contrib import admin

from courseapp.learners.models import Learner, SectionRead


@admin.register(Learner)
class LearnerAdmin(admin.ModelAdmin):
    list_display = ("pk", "user", "last_section", "created_at")
    search_fields = ("user__username", "user__email")
    list_filter = ("memberships__cohort",)


@admin.register(SectionRead)
class SectionReadAdmin(admin.ModelAdmin):
    list_display = ("learner", "section", "read_at")
