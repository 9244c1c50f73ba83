"""Fixture scopes that keep `make mutation` honest.

mutmut maps each mutant to the tests that reached its function while it collected stats, and a
module-scoped fixture's work is done during the first test that asks for it: every later test of
the module then looks as if it never reached that code, and a mutant the later tests would kill
is run only against the first one ("survived"). While mutmut collects its stats
(MUTANT_UNDER_TEST=stats) such a fixture is set up for every test; otherwise, in the suite and for
each mutant's run, once per module.
"""
import os


def module_unless_collecting_stats(fixture_name: str, config) -> str:
    return "function" if os.environ.get("MUTANT_UNDER_TEST") == "stats" else "module"
