from django.urls import path

from courseapp.lab.consumers import ServedViewConsumer

websocket_urlpatterns = [
    path("ws/lab/runs/<uuid:run_id>/live/", ServedViewConsumer.as_asgi()),
    path("ws/lab/site/live/", ServedViewConsumer.as_asgi()),
]
