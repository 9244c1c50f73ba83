"""How the lab writes its figures (the report's table and its reading lines share them) and its
progress line."""
from django.utils.translation import gettext


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"


def progress_text(message: str, params: dict | None = None) -> str:
    """A lab progress message (an English msgid from experiments.py, with its %(name)s params) in
    the active language: the page's, or the terminal's Korean."""
    if not message:
        return ""
    text = gettext(message)
    return text % params if params else text
