"""What a placement scores: the questions of its section (or of the whole lesson), each worth 1,
counted at the learner's latest attempt, as the learner's own progress page counts them."""
from dataclasses import dataclass

from courseapp.learners.selectors import scores_by_learner
from courseapp.quizzes.models import Question


@dataclass(frozen=True)
class Score:
    given: float
    maximum: float
    completed: bool  # every question in scope answered at least once


def scored_questions(placement) -> list[int]:
    questions = Question.objects.filter(lesson_id=placement.cohort.lesson_id)
    if placement.section is not None:
        questions = questions.filter(anchor__in=placement.section.anchors)
    return list(questions.values_list("pk", flat=True))


def placement_score(placement, learner_id: int) -> Score | None:
    """None when nothing in the placement is graded (a section without questions)."""
    question_ids = scored_questions(placement)
    if not question_ids:
        return None
    scores = scores_by_learner([learner_id], question_ids, "latest").get(learner_id, {})
    return Score(given=round(sum(scores.values()), 4), maximum=float(len(question_ids)),
                 completed=len(scores) == len(question_ids))
