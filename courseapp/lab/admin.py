from django.contrib import admin

from courseapp.lab.models import LabRun


@admin.register(LabRun)
class LabRunAdmin(admin.ModelAdmin):
    list_display = ("id", "learner", "status", "created_at", "finished_at")
    list_filter = ("status",)
    search_fields = ("id", "learner__user__username")
    readonly_fields = [f.name for f in LabRun._meta.fields]

    def has_add_permission(self, request):
        return False
