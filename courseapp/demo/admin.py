from django.contrib import admin

from courseapp.demo.models import DemoRun


@admin.register(DemoRun)
class DemoRunAdmin(admin.ModelAdmin):
    list_display = ("id", "preset", "is_class", "status", "end_reason", "host", "created_at", "finished_at")
    list_filter = ("status", "end_reason", "preset", "is_class")
    readonly_fields = ("trace_size",)

    @admin.display(description="trace (bytes, compressed)")
    def trace_size(self, run):
        return len(run.trace_packed or b"")
