"""Everything needed to rebuild the engine's default model, `munuibot-tiny`, from nothing.

- `corpus`: the generated Korean 문의봇 data set, `SYSTEM_PROMPT` and `LONG_SYSTEM_PROMPT`.
- `tokenizer`: the byte-level BPE tokenizer with its chat template.
- `train`: the training loop (`python -m engine.training.train --out engine/models/munuibot-tiny`).

Nothing here is imported by the engine at serving time; only `corpus` is light enough to import
anywhere (it needs the standard library alone).
"""
