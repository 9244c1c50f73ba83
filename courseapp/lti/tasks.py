"""Scaled mode: a passback is sent by an engine worker; a failed try is the same task again later."""
from celery import shared_task

from courseapp.lti import services


@shared_task(name="lti.passback", ignore_result=True)
def passback(passback_id: int) -> None:
    delay = services.passback_send(passback_id=passback_id)
    if delay is not None:
        passback.apply_async((passback_id,), countdown=delay)
