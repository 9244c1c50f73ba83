"""The munuibot training code, run for a few steps on a tiny corpus and a tiny model (seconds)."""

import json
import math

import pytest
import torch

from engine.training import train as T
from engine.training.corpus import make_corpus
from engine.training.tokenizer import train_tokenizer

SHORT_SYSTEM = "너는 누리마켓의 문의봇이다. 분류, 요약, 답변을 쓴다."

TINY = dict(
    steps=4,
    examples=40,
    seed=7,
    batch_size=8,
    seq_len=512,
    threads=2,
    vocab_size=300,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=64,
    max_position_embeddings=1024,
    lr=1e-2,
    warmup_steps=1,
    long_prompt_every=0,
    system_prompt=SHORT_SYSTEM,
    eval_examples=8,
    samples=0,
    log_every=1,
    progress=False,
)


def test_train_a_few_steps_and_reload(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "tiny"
    log = T.train({**TINY, "out": str(out)})

    assert log["steps"] == 4 and log["corpus_size"] == 40 and log["seed"] == 7
    losses = [loss for _, loss in log["loss_curve"]]
    assert len(losses) == 4 and all(math.isfinite(x) for x in losses)
    assert math.isfinite(log["final_loss"]) and math.isfinite(log["eval_loss"])
    assert log["first_loss"] > log["last_step_loss"]  # it learns something in four steps
    assert log["first_loss"] < math.log(300) + 1  # starts near uniform over the vocabulary

    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                 "tokenizer_config.json", "training_log.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "training_log.json").read_text(encoding="utf-8"))["steps"] == 4
    assert "chat_template" in json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.model_type == "llama"
    assert model.config.num_key_value_heads < model.config.num_attention_heads  # GQA
    assert model.config.tie_word_embeddings
    assert model.generation_config.eos_token_id == tok.eos_token_id

    msgs = [{"role": "system", "content": SHORT_SYSTEM}, {"role": "user", "content": "배송이 늦어요."}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == (f"<s><|system|>\n{SHORT_SYSTEM}<|end|>\n<|user|>\n배송이 늦어요.<|end|>\n"
                    "<|assistant|>\n")
    ids = tok.apply_chat_template(msgs, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    assert ids["input_ids"][0, 0].item() == tok.bos_token_id
    done = tok.apply_chat_template(msgs + [{"role": "assistant", "content": "분류: 배송"}], tokenize=False)
    assert done.endswith("분류: 배송</s>")  # the answer ends with eos, so generation stops there

    # The saved weights are the trained ones: the reloaded model scores the held-out examples
    # exactly as the trained model did before it was saved (log["eval_loss"]).
    held = make_corpus(TINY["eval_examples"], seed=TINY["seed"] + 1, system=SHORT_SYSTEM)
    enc = [e for e in (T.encode_example(tok, x["user"], x["assistant"], TINY["seq_len"]) for x in held) if e[1] < len(e[0])]
    batch, labels = T.collate(enc, list(range(len(enc))), tok.pad_token_id)
    prefix = torch.tensor([tok(T._render_prefix(tok, SHORT_SYSTEM), add_special_tokens=False)["input_ids"]])
    model.eval()
    with torch.no_grad():
        assert float(T.prefix_loss(model, prefix, batch, labels)) == pytest.approx(log["eval_loss"], abs=2e-4)

    # And the engine serves the checkpoint as transformers runs it: the same greedy answer.
    from engine import EngineConfig, LLMEngine, SamplingParams

    out_ids = model.generate(**ids, do_sample=False, max_new_tokens=5)
    answer = out_ids[0, ids["input_ids"].shape[1]:].tolist()
    served = LLMEngine(EngineConfig(model=str(out), block_size=16, num_blocks=64, max_num_seqs=1))
    assert served.generate(ids["input_ids"][0].tolist(), SamplingParams(temperature=0, max_tokens=5))[0].token_ids == answer


def test_shared_prefix_loss_equals_the_plain_loss():
    """Computing the system prompt once per batch gives the same loss and gradients."""
    corpus = make_corpus(24, seed=1)
    tok = train_tokenizer([SHORT_SYSTEM] + [f"{e['user']}\n{e['assistant']}" for e in corpus], vocab_size=400)
    for ex in corpus[:5]:
        T._check_split(tok, SHORT_SYSTEM, ex, 10**9)
    enc = [T.encode_example(tok, e["user"], e["assistant"], 300) for e in corpus[:4]]
    ids, labels = T.collate(enc, [0, 1, 2, 3], tok.pad_token_id)
    assert (labels != -100).any()
    prefix = torch.tensor([tok(T._render_prefix(tok, SHORT_SYSTEM), add_special_tokens=False)["input_ids"]])
    torch.manual_seed(0)
    cfg = T.TrainConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=64)
    model = T.build_model(cfg, tok)

    a = T.prefix_loss(model, prefix, ids, labels)
    a.backward()
    grads_a = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    b = T.full_loss(model, prefix, ids, labels)
    b.backward()
    grads_b = [p.grad.clone() for p in model.parameters()]

    assert torch.allclose(a, b, atol=1e-5)
    assert all(torch.allclose(x, y, atol=1e-6) for x, y in zip(grads_a, grads_b))


def test_cli_parses_the_documented_options():
    args = T.parse_args(["--out", "x", "--steps", "3", "--examples", "10", "--seed", "5",
                         "--batch-size", "2", "--seq-len", "128", "--threads", "1"])
    cfg = T._as_config(args)
    assert (cfg.out, cfg.steps, cfg.examples, cfg.seed, cfg.batch_size, cfg.seq_len, cfg.threads) == \
        ("x", 3, 10, 5, 2, 128, 1)


def test_schedule_warms_up_then_decays():
    cfg = T.TrainConfig(steps=100, warmup_steps=10, lr=1e-3, min_lr_ratio=0.1)
    lrs = [T.lr_at(s, cfg) for s in range(100)]
    assert lrs[0] < lrs[5] < lrs[9] == 1e-3
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert math.isclose(T.lr_at(100, cfg), 1e-4)


def test_same_seed_same_weights(tmp_path):
    from safetensors.torch import load_file

    cfg = {**TINY, "steps": 2, "eval_examples": 0}
    T.train({**cfg, "out": str(tmp_path / "a")})
    T.train({**cfg, "out": str(tmp_path / "b")})
    a = load_file(tmp_path / "a" / "model.safetensors")
    b = load_file(tmp_path / "b" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert (tmp_path / "a" / "tokenizer.json").read_bytes() == (tmp_path / "b" / "tokenizer.json").read_bytes()


def test_the_category_line_weighs_more_and_weighted_losses_still_agree():
    """category_weights marks exactly the `분류: …` line's tokens; the shared-prefix loss and
    the plain one agree under weights too, and a weight of 1 is the unweighted mean."""
    corpus = make_corpus(12, seed=3)
    tok = train_tokenizer([SHORT_SYSTEM] + [f"{e['user']}\n{e['assistant']}" for e in corpus], vocab_size=400)
    enc = [T.encode_example(tok, e["user"], e["assistant"], 400) for e in corpus[:3]]
    cats = [T.category_tokens(tok, e["assistant"]) for e in corpus[:3]]
    ids, labels = T.collate(enc, [0, 1, 2], tok.pad_token_id)
    w = T.category_weights(enc, [0, 1, 2], cats, 7.0)
    for row, ((seq, start), n) in enumerate(zip(enc, cats)):
        assert (w[row] == 7.0).sum() == n
        assert tok.decode(seq[start:start + n]).startswith("분류: ")
        assert "\n" in tok.decode(seq[start:start + n]) and "요약" not in tok.decode(seq[start:start + n])
    prefix = torch.tensor([tok(T._render_prefix(tok, SHORT_SYSTEM), add_special_tokens=False)["input_ids"]])
    torch.manual_seed(0)
    model = T.build_model(T.TrainConfig(hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
                                        intermediate_size=64), tok)
    weighted = T.prefix_loss(model, prefix, ids, labels, w)
    assert torch.allclose(weighted, T.full_loss(model, prefix, ids, labels, w), atol=1e-5)
    assert not torch.allclose(weighted, T.prefix_loss(model, prefix, ids, labels), atol=1e-4)
    ones = T.category_weights(enc, [0, 1, 2], cats, 1.0)
    assert torch.allclose(T.prefix_loss(model, prefix, ids, labels, ones), T.prefix_loss(model, prefix, ids, labels))
