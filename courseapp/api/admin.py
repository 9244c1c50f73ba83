from django.contrib import admin
from django.utils import timezone

from courseapp.api.models import ApiClient, IdempotentAnswer, LearnerIdentity


@admin.register(ApiClient)
class ApiClientAdmin(admin.ModelAdmin):
    """Tokens are made by `manage.py create_api_token` (printed once); here they are scoped,
    watched (last used) and revoked. The token itself is never stored, so never shown."""

    list_display = ("name", "token_hint", "scope", "created_at", "last_used_at", "revoked_at")
    list_filter = ("scope", "revoked_at")
    search_fields = ("name", "token_hint")
    filter_horizontal = ("cohorts",)
    readonly_fields = ("token_hint", "created_at", "last_used_at")
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


@admin.register(LearnerIdentity)
class LearnerIdentityAdmin(admin.ModelAdmin):
    list_display = ("source", "external_id", "learner", "created_at")
    search_fields = ("external_id", "source")
    readonly_fields = ("source", "external_id", "learner", "created_at")


@admin.register(IdempotentAnswer)
class IdempotentAnswerAdmin(admin.ModelAdmin):
    list_display = ("client", "key", "status", "created_at")
    search_fields = ("key",)

    def has_change_permission(self, request, obj=None):
        return False

    def has_add_permission(self, request):
        return False
