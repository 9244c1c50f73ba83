from django.contrib import admin

from courseapp.demo.models import DemoRun


@admin.register(DemoRun)
class DemoRunAdmin(admin.ModelAdmin):
    list_display = ("id", "preset", "is_class", "status", "host", "created_at", "finished_at")
    list_filter = ("status", "preset", "is_class")
    readonly_fields = ("trace",)
