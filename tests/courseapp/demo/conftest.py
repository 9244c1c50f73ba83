import pytest


@pytest.fixture(autouse=True)
def _keeper_stops_with_the_test():
    """The demo's keeper thread starts with the first run or viewer; it must not go on into the
    next test (whose database may be another, or closed to it)."""
    yield
    from courseapp.demo import keeper

    keeper.stop()
