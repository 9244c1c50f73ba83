class KoreanByDefaultMiddleware:
    """Drop Accept-Language so LocaleMiddleware falls back to LANGUAGE_CODE ("ko").

    The learners are Korean but many browsers (and every headless one) announce English;
    only an explicit choice through `set_language` (the language cookie) switches the UI.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.META.pop("HTTP_ACCEPT_LANGUAGE", None)
        return self.get_response(request)
