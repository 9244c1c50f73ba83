"""Scaled mode: a large class's item analysis is computed by a worker, not in a web request."""
from celery import shared_task

from courseapp.instructor import services


@shared_task(name="instructor.item_analysis", ignore_result=True)
def item_analysis(cohort_id: int, basis: str) -> None:
    services.item_analysis_refresh(cohort_id=cohort_id, basis=basis)
