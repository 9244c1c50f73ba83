"""How the lab writes its figures (the report's table and its reading lines share them)."""


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.0f} ms"


def num(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.{digits}f}"
