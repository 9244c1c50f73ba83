"""The `<id:…>` path converter: a row id or lesson number, at most 18 digits — always within the
databases' 64-bit integers. Django's `<int:…>` takes any length, and a 25-digit id overflowed
SQLite's integers inside the view (a 500) instead of being a plain 404. Imported by every
urls.py that uses it; registered once, here."""
from django.urls import register_converter


class RowId:
    regex = "[0-9]{1,18}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value) -> str:
        return str(int(value))


register_converter(RowId, "id")
