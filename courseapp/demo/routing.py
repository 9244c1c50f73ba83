from django.urls import path

from courseapp.demo.consumers import RunConsumer

websocket_urlpatterns = [path("ws/demo/runs/<str:run_id>/", RunConsumer.as_asgi())]
