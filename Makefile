# Two commands for a fresh machine with Python 3.11, make and git: `make run`, `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
export PYTHONDONTWRITEBYTECODE := 1

.PHONY: run test install migrate content static lock messages clean mutation

# Re-installs only when requirements.txt changes, so the second run is fast.
$(BIN)/.installed: requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

install: $(BIN)/.installed

migrate: install
	$(BIN)/python manage.py migrate --noinput -v0

content: migrate
	$(BIN)/python manage.py load_content

# Hashed, gzip- and brotli-compressed copies in .staticfiles/ for WhiteNoise (DEBUG is off);
# collected again only when static/ or the installed packages change.
static: .staticfiles/staticfiles.json
.staticfiles/staticfiles.json: $(BIN)/.installed $(shell find static -type f)
	$(BIN)/python manage.py collectstatic --noinput -v0

# DEBUG is off unless DEBUG=1 (then tracebacks show and edits in static/ apply without a restart).
run: content static
	@echo "Starting http://127.0.0.1:$(PORT)/ — open it once Daphne says \"Listening on TCP address\" (Ctrl-C stops)"
	PORT=$(PORT) $(BIN)/daphne -b 127.0.0.1 -p $(PORT) courseapp.asgi:application

# The whole suite on SQLite (scaled mode on Redis included), then the app again on PostgreSQL (the
# machine runs one on 127.0.0.1:5432; TEST_DATABASE_URL overrides, an empty value skips it), less
# what does not touch the database or only keeps what a scene computed (PG_NOT_DATABASE: serving,
# the engine process, the scenes and their traces, the demo host on its own, the lab's client and
# report, the HTTP workers, the grading functions), with the scaled-mode tests whose
# outcome the database's locking decides (seats, runs shared by two workers, a run nobody takes)
# or that kills its connections (PostgreSQL backends terminated mid-run).
TEST_DATABASE_URL ?= postgres://127.0.0.1:5432/test
PG_NOT_DATABASE = $(addprefix --ignore=tests/courseapp/,serving test_page_imports.py test_http_workers_unit.py test_settings.py \
	demo/test_engine_process.py demo/test_scenes.py demo/test_host.py demo/test_traces.py demo/test_frames.py demo/test_served_view.py \
	lab/test_experiments.py lab/test_report.py lab/test_services.py quizzes/test_grading.py)
PG_SCALED = $(addprefix tests/e2e/test_scaled.py::test_,four_runs_on_one_worker_of_two_seats_wait_their_turn_and_all_finish \
	two_workers_share_the_runs_and_the_page_names_each_runs_host with_no_worker_a_run_waits_queued_then_fails_saying_no_worker_took_it) \
	tests/e2e/test_scaled_faults.py::test_postgresql_backends_killed_mid_run_cost_a_retry_not_the_run
# Three test processes (pytest-xdist) on 2 cores, each handed whole files: the suite spends much
# of its time waiting on the servers, browsers and workers it starts (two processes kept 1.5 cores
# busy; docs/testing.md "Suite time"). TEST_PROCESSES=0 runs it in this one.
TEST_PROCESSES ?= 3
# The 15 slowest tests are printed at the end: CI's log says where the time went.
PYTEST = $(BIN)/python -m pytest -n $(TEST_PROCESSES) --dist loadfile --durations=15
test: install
	$(PYTEST)
	if [ -z "$(TEST_DATABASE_URL)" ]; then echo "*** TEST_DATABASE_URL is empty: the PostgreSQL pass is SKIPPED (CI refuses this: .ci/run) ***" >&2; fi
	if [ -n "$(TEST_DATABASE_URL)" ]; then DATABASE_URL=$(TEST_DATABASE_URL) $(PYTEST) -q tests/courseapp $(PG_SCALED) $(PG_NOT_DATABASE); fi

# Mutation testing of the costliest modules (tests/mutation.py; slow, not part of `make test`):
# killed/survived per module and every survivor's diff; fails under 90% killed. MODULES=… picks some
# (a file, or one of issue #34's modules: serving, api, instructor, lti, lab, http_workers, demo/traces, engine/fused_llama).
mutation: install
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-mutation.txt
	$(BIN)/python tests/mutation.py $(MODULES)

# Regenerate the full lock from the direct pins in requirements.in.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r requirements.in
	{ echo "# Every installed package, pinned exactly. Edit requirements.in, then run 'make lock'."; .lock-venv/bin/pip freeze | sed 's/+cpu$$//'; } > requirements.txt
	rm -rf .lock-venv

# Needs GNU gettext; the compiled .mo files are committed so `make run` does not.
messages: install
	$(BIN)/python manage.py makemessages -l ko -l en --ignore=.venv --ignore=tests
	$(BIN)/python manage.py compilemessages --ignore=.venv

clean:
	rm -rf $(VENV) db.sqlite3 .test-db.sqlite3 .staticfiles
