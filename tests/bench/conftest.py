from tests.engine.conftest import tiny_llama, tiny_models  # noqa: F401  (the engine tests' tiny checkpoints)
