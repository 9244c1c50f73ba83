from django.contrib import admin

from courseapp.lessons.models import Course, GlossaryTerm, Lesson, Objective, Section


class ObjectiveInline(admin.TabularInline):
    model = Objective
    extra = 0


@admin.register(Course)
class CourseAdmin(admin.ModelAdmin):
    list_display = ("slug", "title")


@admin.register(Lesson)
class LessonAdmin(admin.ModelAdmin):
    list_display = ("number", "title", "day", "available")
    inlines = [ObjectiveInline]


@admin.register(Section)
class SectionAdmin(admin.ModelAdmin):
    list_display = ("lesson", "number", "slug", "title", "order", "updated_at")
    list_filter = ("lesson",)
    search_fields = ("title", "body")


@admin.register(GlossaryTerm)
class GlossaryTermAdmin(admin.ModelAdmin):
    list_display = ("term", "slug", "genus", "anchor")
    list_filter = ("lesson",)
    search_fields = ("term", "differentia")
