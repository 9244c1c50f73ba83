"""Settings shared by every environment; dev.py, test.py and prod.py refine them."""
import os
from datetime import timedelta
from pathlib import Path

import dj_database_url

from django.utils.translation import gettext_lazy as _

BASE_DIR = Path(__file__).resolve().parent.parent.parent
CONTENT_DIR = BASE_DIR / "courseapp" / "content"

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "dev-only-insecure-key-change-me")
DEBUG = False
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")

INSTALLED_APPS = [
    "daphne",  # must precede staticfiles so `runserver` is the ASGI one
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "axes",
    "csp",
    "courseapp.lessons",
    "courseapp.learners",
    "courseapp.quizzes",
    "courseapp.demo",
    "courseapp.lab",
    "courseapp.instructor",
    "courseapp.api",
    "lti_tool",  # django-lti: LMS registrations, deployments, the tool's keys (JWKS)
    "courseapp.lti",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "courseapp.middleware.ApiStraightThroughMiddleware",  # /api/v1/: Bearer-token JSON, none of the page middleware below
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "courseapp.learners.order_seed.OrderSeedCookieMiddleware",  # a visitor's option order, as a cookie
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "axes.middleware.AxesMiddleware",  # last: turns a locked-out login into the lockout page
]

ROOT_URLCONF = "courseapp.urls"
ASGI_APPLICATION = "courseapp.asgi.application"
WSGI_APPLICATION = "courseapp.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.template.context_processors.i18n",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "courseapp.lessons.chrome.chrome",
            ],
        },
    }
]

# SQLite by default; DATABASE_URL (e.g. postgres://…) when scaled.
# Health-checked: a connection PostgreSQL dropped (a restart, a failover, a pooler's idle timeout)
# is replaced at its next use instead of failing it.
DATABASES = {"default": dj_database_url.config(default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}", conn_max_age=60,
                                               conn_health_checks=True)}
# A class writes at once (answers, read marks, demo heartbeats): WAL lets readers go on beside
# the one writer, writers queue for up to 20 s instead of failing at once with "database is
# locked", and IMMEDIATE transactions take the write lock up front, so two transactions never
# both read and then deadlock on upgrading to write.
SQLITE_OPTIONS = {
    "timeout": 20,
    "transaction_mode": "IMMEDIATE",
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = dict(SQLITE_OPTIONS)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (django-axes): 5 wrong passwords for one username from one address lock that
# pair out for 15 minutes; each try during the lockout restarts it. `manage.py axes_reset` lifts all.
# And per address alone, whatever the usernames (learners/login_throttle.py): so many failures
# in a window lock the address out until the window ends.
LOGIN_FAILURES_PER_ADDRESS = os.environ.get("LOGIN_FAILURES_PER_ADDRESS", "40/15m")
AUTHENTICATION_BACKENDS = [
    "courseapp.learners.login_throttle.AddressThrottleBackend",
    "axes.backends.AxesStandaloneBackend",  # needs `request` in authenticate(); the login form passes it
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = 5
AXES_COOLOFF_TIME = timedelta(minutes=15)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "courseapp.views.locked_out"
AXES_VERBOSE = False  # no banner on every manage.py command
# Signups per client address (django-ratelimit, fixed window), counted where every rate limit is
# (the "limits" cache each settings module adds: shared by every process, never fail-open).
SIGNUP_RATE = "10/m"
RATELIMIT_USE_CACHE = "limits"

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "home"

# The lesson is Korean; the UI chrome is translatable. The UI follows the browser's
# Accept-Language, Korean when it asks for neither; `set_language` (a cookie) overrides it.
LANGUAGE_CODE = "ko"
LANGUAGES = [("ko", _("Korean")), ("en", _("English"))]
LOCALE_PATHS = [BASE_DIR / "locale"]
USE_I18N = True
TIME_ZONE = "Asia/Seoul"
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / ".staticfiles"

# Only this origin's scripts, styles, images and sockets ('self' covers ws:/wss: to this host);
# no inline script anywhere. Style *attributes* stay allowed: the demo and the mastery meter set
# sizes with them (a style attribute cannot run script).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "style-src-attr": ["'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Self-check submissions are tiny; anything bigger is refused with a clear 400.
DATA_UPLOAD_MAX_MEMORY_SIZE = 16 * 1024
DATA_UPLOAD_MAX_NUMBER_FIELDS = 200

SESSION_COOKIE_AGE = 60 * 60 * 24 * 180  # guests keep their progress for half a year
# Threads running Django for HTTP requests in one ASGI process (courseapp/http_threads.py).
HTTP_THREADS = int(os.environ.get("HTTP_THREADS", "2"))
# Processes that answer lesson pages, self-check submits and progress beside the ASGI process
# (courseapp/http_workers.py): one per core where there is more than one; 0 keeps every request
# in the ASGI process. HTTP_WORKER_PATHS: the paths they answer (nothing that touches the demo).
_CORES = os.cpu_count() or 1
HTTP_WORKERS = int(os.environ.get("HTTP_WORKERS", _CORES if _CORES > 1 else 0))
HTTP_WORKER_PATHS = r"^/(?:$|lessons/|questions/|progress/|api/)"
# Pages each worker serves once, answers dropped, before it takes requests: the first learner's
# page does not pay for a cold worker (templates, URL resolvers, the lesson's outline).
HTTP_WARM_PATHS = ("/", "/lessons/21/", "/lessons/21/s2/")
HTTP_LOCAL_WARM_PATHS = ("/demo/", "/lab/")  # the same for the ASGI process's own pages (courseapp/asgi.py)
# One process by default: a local-memory cache big enough for a class's sessions and rendered
# sections (Redis replaces it when scaled, below).
CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "OPTIONS": {"MAX_ENTRIES": 20000}}}

# How stale another process's content edit may look in this one (see lessons/outline.py).
OUTLINE_RECHECK_SECONDS = float(os.environ.get("OUTLINE_RECHECK_SECONDS", "1"))

# The OpenAI-compatible API (/v1/*) and /metrics (courseapp/serving): the name clients ask for,
# an optional key like vLLM's --api-key (then `Authorization: Bearer <key>` is required on /v1),
# the largest request body, and the served engine's settings (engine.EngineConfig).
SERVED_MODEL_NAME = os.environ.get("SERVED_MODEL_NAME", "munuibot")
SERVING_API_KEY = os.environ.get("SERVING_API_KEY", "")
# /metrics is open, as vLLM's is whatever --api-key says; this key, when set, guards it (a lab
# engine's /metrics stays behind its run's own token in the path).
SERVING_METRICS_KEY = os.environ.get("SERVING_METRICS_KEY", "")
SERVING_MAX_BODY_BYTES = 1024 * 1024
SERVING_RATE_LIMIT = os.environ.get("SERVING_RATE_LIMIT", "1200/60")  # requests per seconds, per key or address
# torch threads for the served engine and the lab's: a core left for the web process's event loop.
SERVING_TORCH_THREADS = int(os.environ.get("SERVING_TORCH_THREADS", max(1, _CORES - 1)))
# The site's served engine and the lab runs' step in a process of their own (courseapp/demo/engine_process.py,
# as vLLM V1's EngineCore): in the web process they shared one interpreter lock with the event loop.
SERVING_ENGINE_PROCESS = os.environ.get("SERVING_ENGINE_PROCESS", "1") == "1"
SERVING_ENGINE = {"num_blocks": int(os.environ.get("SERVING_NUM_BLOCKS", "512")),
                  "max_num_seqs": int(os.environ.get("SERVING_MAX_NUM_SEQS", "32")),
                  "max_num_batched_tokens": 512, "enable_prefix_caching": True}

# Scaled mode: with REDIS_URL set, Celery workers on the "engine" queue host the demo's engines
# and frames travel through channels-redis. Without it, everything runs in this one process.
REDIS_URL = os.environ.get("REDIS_URL", "")
DEMO_HOST = "celery" if REDIS_URL else "embedded"
# Embedded mode runs the engine in a child process (courseapp/demo/engine_process.py): page views
# do not slow it down and a crash inside torch cannot take the site with it.
DEMO_ENGINE_PROCESS = os.environ.get("DEMO_ENGINE_PROCESS", "1") == "1"
DEMO_ENGINE_THREADS = int(os.environ.get("DEMO_ENGINE_THREADS", "1"))  # torch threads in that process
DEMO_MAX_ACTIVE_RUNS = int(os.environ.get("DEMO_MAX_ACTIVE_RUNS", "6"))  # runs someone is watching, server-wide
# Per client address, for learners in no class: a flood of cookie-less starts from one address.
DEMO_MAX_RUNS_PER_ADDRESS = int(os.environ.get("DEMO_MAX_RUNS_PER_ADDRESS", "3"))
# Members of a class (who joined with an instructor's code) share a school's NAT address: their
# runs count against this limit instead, so a room is bounded by the server's cap, not by 3.
DEMO_MAX_RUNS_PER_CLASS_ADDRESS = int(os.environ.get("DEMO_MAX_RUNS_PER_CLASS_ADDRESS", "40"))
DEMO_PAUSED_IDLE_S = int(os.environ.get("DEMO_PAUSED_IDLE_S", "600"))  # a paused run with nothing happening ends
DEMO_MAX_RUN_S = int(os.environ.get("DEMO_MAX_RUN_S", "900"))  # a learner's run ends after this long at the latest
# A queued run no engine worker took by then fails ("no worker"); a started one whose engine is
# not built by then (the model loading) fails too. Workers load the model when they start.
DEMO_PICKUP_WITHIN_S = int(os.environ.get("DEMO_PICKUP_WITHIN_S", "60"))
DEMO_START_WITHIN_S = int(os.environ.get("DEMO_START_WITHIN_S", "120"))
DEMO_STEP_DELAY = float(os.environ.get("DEMO_STEP_DELAY", "0.08"))  # seconds between steps at ×1, so people can watch
if REDIS_URL:
    # redis-py 8 reads with a 5 s socket timeout by default, which aborts the layer's blocking
    # BZPOPMIN (channels_redis issue #422): wait as long as the command itself says.
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # An API answer comes back as one message per token (courseapp/serving/remote.py).
            "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": None}], "channel_capacity": {"serving.*": 2000}},
        }
    }
    # While Redis is away the cache answers "not there" and drops writes (django-redis's
    # IGNORE_EXCEPTIONS), so the lesson, self-checks and progress keep working on the database;
    # rate limits count in a cache of their own that does not (limits_cache), so no limit is
    # silently lifted by an outage.
    CACHES = {"default": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": REDIS_URL,
                          "OPTIONS": {"IGNORE_EXCEPTIONS": True, "SOCKET_CONNECT_TIMEOUT": 1, "SOCKET_TIMEOUT": 2}}}
    DJANGO_REDIS_LOG_IGNORED_EXCEPTIONS = True
    DJANGO_REDIS_LOGGER = "courseapp.cache"
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


def limits_cache(http_workers: int, caches: dict) -> dict:
    """Where rate limits (courseapp/demo/limits.py) are counted: where every process answering
    requests sees them. The default cache when it is shared (Redis, scaled) or when this process
    answers everything itself; with HTTP worker processes and a per-process cache (LocMem), files
    in a folder the server makes as it starts (its spawned workers inherit the variable). Each
    settings module calls it once its HTTP_WORKERS is final, so no folder is made for nothing."""
    if "LocMem" not in caches["default"]["BACKEND"] or not http_workers:
        shared = dict(caches["default"])
        if "OPTIONS" in shared:  # counted, or refused with an error: never waved through
            shared["OPTIONS"] = {**shared["OPTIONS"], "IGNORE_EXCEPTIONS": False}
        return shared
    import atexit
    import shutil
    import tempfile

    folder = os.environ.get("COURSEAPP_LIMITS_DIR")
    if folder is None:  # this process makes it (its spawned workers inherit it): it goes when we do
        folder = os.environ["COURSEAPP_LIMITS_DIR"] = tempfile.mkdtemp(prefix="courseapp-limits-")
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": folder,
            "OPTIONS": {"MAX_ENTRIES": 100_000}}



# Sessions are read on every request: from the cache, with the database behind it, in the cache
# every process answering requests sees ("limits": Redis when scaled, this process's memory when
# it answers everything, else files the HTTP workers share; see limits_cache). A per-process copy
# would outlive a logout answered by another process; a shared one is deleted for all at once.
SESSION_ENGINE = "courseapp.session_store"
SESSION_CACHE_ALIAS = "limits"

CELERY_BROKER_URL = REDIS_URL or "memory://"  # an engine worker refuses memory:// (demo/worker.py)
CELERY_TASK_ROUTES = {"demo.run": {"queue": "engine"}, "serving.generate": {"queue": "engine"},
                      "instructor.item_analysis": {"queue": "engine"},
                      "lti.passback": {"queue": "engine"}}
CELERY_TASK_ACKS_LATE = True  # a run's message stays in Redis until its run has ended
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # a worker takes only what it has seats for; the rest wait, "queued"
CELERY_TASK_IGNORE_RESULT = True  # runs report through the database; nobody reads task results
CELERY_RESULT_BACKEND = None
# A Redis restart heals without restarting the worker: it reconnects at startup and at runtime,
# forever (the default gives up after 100 tries). With gossip or remote control on, kombu 5.7's
# Redis transport crashes the worker when Redis goes away while a run is unacknowledged
# ("AttributeError: 'NoneType' object has no attribute 'hostname'", 7 of 7 tries): remote control
# is off here, gossip and mingle by the worker's flags (demo/worker.py refuses to start without).
CELERY_BROKER_CONNECTION_RETRY = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_ENABLE_REMOTE_CONTROL = False
# An unacknowledged run goes back to the queue this long after its worker vanished (checked
# every 10 s): longer than a learner's run may last, so a run is not handed to a second worker
# while the first still serves it (a second delivery is dropped anyway: tasks.run_demo).
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": DEMO_MAX_RUN_S + 600,
                                   "unacked_restore_interval": 10, "unacked_restore_throttle": 1}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"once_a_minute": {"()": "courseapp.outages.QuietRepeats"}},
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
    # django-redis logs every cache call that failed while Redis is away: one line a minute is enough.
    "loggers": {"courseapp.cache": {"filters": ["once_a_minute"]}},
}

# §6 lab (courseapp/lab): each run gets an engine of its own with the learner's knobs.
LAB_MAX_TOKENS = int(os.environ.get("LAB_MAX_TOKENS", "200"))  # §6 fixes 200
LAB_CONCURRENCY = 8  # experiment 2
LAB_SAMPLE_EVERY_S = float(os.environ.get("LAB_SAMPLE_EVERY_S", "0.1"))  # /metrics during experiment 2
LAB_LOG_INTERVAL_S = 1.0  # the lab engine's stats line (vLLM's default is 10 s; a lab run lasts seconds)
LAB_MAX_ACTIVE = int(os.environ.get("LAB_MAX_ACTIVE", "1"))  # labs measuring at once; more wait their turn
LAB_RUNS_PER_HOUR = int(os.environ.get("LAB_RUNS_PER_HOUR", "12"))  # per learner
LAB_RUNS_PER_HOUR_PER_ADDRESS = int(os.environ.get("LAB_RUNS_PER_HOUR_PER_ADDRESS", "30"))  # a cookie-less guest is a new learner each time
LAB_MAX_ACTIVE_PER_ADDRESS = int(os.environ.get("LAB_MAX_ACTIVE_PER_ADDRESS", "2"))  # waiting or measuring
LAB_MAX_QUEUED = int(os.environ.get("LAB_MAX_QUEUED", "6"))  # waiting or measuring, server-wide (each builds an engine)
LAB_MAX_RUN_S = 600  # a run that takes longer fails (its requests time out)
LAB_STALE_S = 60  # a queued or running run whose thread stayed silent this long has died with its server
# How the lab reaches this server's engine. From settings only, never from a request (a Host
# header would point it, and the API key it sends, anywhere): Daphne's own address by default,
# on the port `make run` serves (PORT).
PORT = int(os.environ.get("PORT", "8000"))
LAB_BASE_URL = os.environ.get("LAB_BASE_URL") or f"http://127.0.0.1:{PORT}"

# Quiz grading API (courseapp/api): requests per token per minute.
GRADING_API_RATE_PER_MINUTE = int(os.environ.get("GRADING_API_RATE_PER_MINUTE", "60000"))  # a class's LMS: one token (bench.grading_api sends ~25,000 a minute)
GRADING_API_PAGE_SIZE = 50

# LTI 1.3 (courseapp/lti): scores go back to the LMS by Assignment and Grade Services; a failed
# send is tried again after BACKOFF, 2×BACKOFF, 4×BACKOFF … up to MAX_ATTEMPTS tries in all.
LTI_PASSBACK_MAX_ATTEMPTS = int(os.environ.get("LTI_PASSBACK_MAX_ATTEMPTS", "6"))
LTI_PASSBACK_BACKOFF_S = float(os.environ.get("LTI_PASSBACK_BACKOFF_S", "5"))
LTI_HTTP_TIMEOUT_S = 10.0  # the LMS's token and score endpoints
LTI_LOGIN_RATE = "60/m"  # OIDC logins per address (each leaves a ticket until its launch or expiry)
LTI_LOGIN_TTL_S = 300  # a login must be answered by its launch within this (PyLTI1p3's state cookie lasts as long)
