"""factory_boy factories for tests that need rows of their own beside the real content."""
import factory
from django.contrib.auth import get_user_model

from courseapp.learners.models import Learner
from courseapp.lessons.models import Course, Lesson, Objective, Section
from courseapp.quizzes.loader import split_question
from courseapp.quizzes.models import Question


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()

    username = factory.Sequence(lambda n: f"learner{n}")
    password = factory.django.Password("correct-horse-battery")


class LearnerFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Learner


class CourseFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Course
        django_get_or_create = ("slug",)

    slug = "test-course"
    title = "Test course"


class LessonFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Lesson

    course = factory.SubFactory(CourseFactory)
    number = factory.Sequence(lambda n: 900 + n)
    slug = factory.Sequence(lambda n: f"lesson-t{n}")
    title = "테스트 차시"
    available = True


class ObjectiveFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Objective

    lesson = factory.SubFactory(LessonFactory)
    slug = factory.Sequence(lambda n: f"obj-{n}")
    order = factory.Sequence(lambda n: n + 1)
    text = "목표"


class SectionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Section

    lesson = factory.SubFactory(LessonFactory)
    slug = factory.Sequence(lambda n: f"s{n}")
    number = factory.Sequence(str)
    title = "절"
    order = factory.Sequence(lambda n: n)
    body = "## 1.1 소절 {#s1-1}\n\n본문\n"


def make_question(*, objective, data: dict) -> Question:
    """A Question row from a YAML-shaped dict, split exactly as the loader does."""
    public, key, feedback = split_question(data)
    return Question.objects.create(
        lesson=objective.lesson,
        slug=data["id"],
        type=data["type"],
        objective=objective,
        anchor=data.get("section", "s1-1"),
        order=1,
        prompt=data.get("prompt", "질문"),
        public=public,
        key=key,
        explanation=data.get("explanation", ""),
        choice_feedback=feedback,
    )
