"""The engine's own forward (engine/fused_llama.py) for Llama, Qwen2 and Mistral: the same logits
as transformers' forward, no second copy of the weights, and transformers' forward (with the
paged attention) still serving every architecture the fused one does not cover."""
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

from engine import EngineConfig, LLMEngine
from engine.fused_llama import supports
from engine.model_runner import load_model, wrap_model
from tests.engine.conftest import ARCHS
from tests.engine.test_parity import assert_parity, prompts, run_checked


@pytest.mark.parametrize("arch,dtype,packed", [
    ("llama", "float32", True), ("qwen2", "float32", True), ("mistral", "float32", True),
    ("llama", "float32", False),  # every matmul through F.linear
    ("llama", "bfloat16", True), ("qwen2", "bfloat16", True),
])
def test_a_mixed_step_gives_transformers_logits(tiny_models, arch, dtype, packed, monkeypatch):
    """Decodes beside a prompt chunk in one step: the last position of each request has the
    logits transformers' own forward computes over that request's whole sequence (bfloat16: the
    GPU's dtype, with transformers' RMSNorm order of rounding)."""
    path = tiny_models[arch]
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=24,
                                    dtype=dtype))
    fused = engine.loaded.fused
    assert fused is not None
    # oneDNN's packed weights on the CPU in float32 (the engine's default there), F.linear otherwise
    assert (fused.layers[0].qkv.packed is not None) == (dtype == "float32")
    assert (fused.lm_head.packed is not None) == (dtype == "float32")
    monkeypatch.setattr(fused, "packed_linears", packed)
    ps = prompts(3, length_range=(6, 14), seed=3)
    for i, p in enumerate(ps[:2]):
        engine.add_request(p, {"temperature": 0, "max_tokens": 8}, f"d{i}")
    engine.step()
    engine.step()  # two decoding requests now
    engine.add_request(ps[2], {"temperature": 0, "max_tokens": 8}, "p")
    batch = engine.scheduler.schedule().scheduled
    assert sorted(n for _, n in batch) == [1, 1, len(ps[2])]
    reqs, logits, _ = engine.runner.execute(batch)
    assert logits.shape[0] == len(reqs) == 3, "one row of logits a sampled request, none for the padding"

    dt = getattr(torch, dtype)
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=dt, attn_implementation="sdpa").eval()
    tolerance = 1e-4 if dt == torch.float32 else 3e-2
    for req, row in zip(reqs, logits):
        with torch.inference_mode():
            expected = reference(input_ids=torch.tensor([req.all_token_ids])).logits[0, -1]
        assert row.dtype == dt
        torch.testing.assert_close(row, expected, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
def test_the_models_projections_are_views_of_the_fused_weights(tiny_models, arch):
    """No second copy: each projection's weight (and bias) is its own rows of the fused matrix,
    with the values it was loaded with; a checkpoint without biases gets no bias add."""
    model = AutoModelForCausalLM.from_pretrained(tiny_models[arch])  # Qwen2: Q, K and V have biases
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    fused = wrap_model(model).fused  # a model of its own: load_model's is shared and fused once
    for layer, decoder in zip(fused.layers, model.model.layers):
        attn, mlp = decoder.self_attn, decoder.mlp
        at = 0
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            assert proj.weight.data_ptr() == layer.qkv.weight[at:].data_ptr()
            if arch == "qwen2":
                assert proj.bias.data_ptr() == layer.qkv.bias[at:].data_ptr()
            at += proj.out_features
        assert at == layer.qkv.weight.shape[0]
        assert (layer.qkv.bias is None) == (arch == "llama")
        assert mlp.up_proj.weight.data_ptr() == layer.gate_up.weight[mlp.gate_proj.out_features:].data_ptr()
    after = dict(model.named_parameters())
    for name, value in before.items():
        assert torch.equal(after[name], value), f"{name} changed"


def test_an_architecture_it_does_not_cover_runs_through_transformers_forward(tmp_path):
    config = ARCHS["llama"]()
    config.mlp_bias = True  # a biased MLP: outside what the fused forward computes
    torch.manual_seed(7)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    engine = LLMEngine(EngineConfig(model=str(tmp_path), block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=16))
    assert engine.loaded.fused is None
    ps = [(f"b{i}", p) for i, p in enumerate(prompts(4, seed=5))]
    run_checked(engine, {0: ps[:2], 3: ps[2:]})
    assert_parity(engine, str(tmp_path), ps)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_transformers_forward_with_the_paged_attention_still_matches_generate(tiny_models, arch):
    """The fallback path on a covered architecture (the fused forward set aside): chunks beside
    decodes and preemption, token-identical to generate."""
    path = tiny_models[arch]
    loaded = replace(load_model(path), fused=None)
    engine = LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=18, max_num_seqs=4, max_num_batched_tokens=16),
                       loaded=loaded)
    ps = [(f"f{i}", p) for i, p in enumerate(prompts(5, length_range=(12, 30), seed=8))]
    run_checked(engine, {0: ps[:2], 2: ps[2:4], 5: ps[4:]})
    assert engine.scheduler.num_preemptions > 0
    assert_parity(engine, path, ps)


def test_supports_names_the_covered_architectures():
    def llama(**changes):
        return AutoModelForCausalLM.from_config(LlamaConfig(**{**ARCHS["llama"]().to_diff_dict(), **changes}))

    assert supports(llama()) and supports(llama(hidden_act="swish"))
    assert not supports(llama(mlp_bias=True))
    assert not supports(llama(pretraining_tp=2)), "Llama 2's sliced matmuls are not what this forward computes"
    assert not supports(llama(hidden_act="gelu"))
    assert not supports(AutoModelForCausalLM.from_config(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64)))
    assert wrap_model(AutoModelForCausalLM.from_config(ARCHS["mistral"]())).fused is not None


def test_every_matmul_of_a_step_runs_on_the_packed_weights(tiny_llama, monkeypatch):
    engine = LLMEngine(EngineConfig(model=tiny_llama, block_size=4, num_blocks=32, max_num_seqs=2))
    real = torch.ops.mkldnn._linear_pointwise
    calls = []
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    engine.add_request([5, 6, 7, 8, 9], {"temperature": 0, "max_tokens": 2})
    engine.step()
    layers = engine.loaded.shape.num_layers
    # QKV, O, gate/up, down per layer, then the LM head on the one sampled row; five tokens and
    # one row each run as the 8-row bucket
    assert calls == [8] * (4 * layers) + [8]
    calls.clear()
    monkeypatch.setattr(engine.loaded.fused, "packed_linears", False)  # bench.throughput's comparison
    engine.step()
    assert calls == [], "none on the packed weights when packing is off"


def test_row_buckets_and_the_warm_up_that_builds_them_once(tiny_models, monkeypatch):
    from engine.fused_llama import rows_bucket

    assert [rows_bucket(m) for m in (1, 8, 9, 17, 64, 65, 96, 97, 128, 129, 512, 513, 1024, 1025)] == \
        [8, 8, 16, 24, 64, 72, 96, 104, 128, 144, 512, 576, 1024, 1152]
    assert all(m <= rows_bucket(m) <= max(m * 1.125, m + 7) for m in range(1, 5000))
    assert len({rows_bucket(m) for m in range(1, 1025)}) == 40  # eight shapes per doubling
    path = tiny_models["mistral"]
    LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=100))
    fused = load_model(path).fused
    assert fused._warm == {rows_bucket(m) for m in range(1, 101)}
    real = torch.ops.mkldnn._linear_pointwise
    calls = []
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", lambda *a: calls.append(a[0].shape[0]) or real(*a))
    LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=100))
    assert calls == [], "the second engine of the same sizes builds nothing"
    LLMEngine(EngineConfig(model=path, block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=130))
    assert sorted(set(calls)) == [112, 120, 128, 144], "a bigger step budget builds only its new buckets"


def test_a_checkpoint_with_attention_biases_gives_transformers_logits(tmp_path):
    """Mutant (issue #34): o_proj's bias dropped. supports() accepts a Llama with
    attention_bias=True, so the fused forward must use all four of its biases (set nonzero here:
    transformers initialises them to zero)."""
    torch.manual_seed(7)
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, eos_token_id=255, attention_bias=True)
    model = AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj):
                proj.bias.normal_(0, 0.5)
    model.save_pretrained(tmp_path)
    engine = LLMEngine(EngineConfig(model=str(tmp_path), block_size=4, num_blocks=64, max_num_seqs=4, max_num_batched_tokens=32))
    assert engine.loaded.fused is not None and engine.loaded.fused.layers[0].o.bias is not None
    ps = prompts(2, length_range=(6, 14), seed=5)
    for i, p in enumerate(ps):
        engine.add_request(p, {"temperature": 0, "max_tokens": 4}, f"b{i}")
    engine.step()
    reqs, logits, _ = engine.runner.execute(engine.scheduler.schedule().scheduled)
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32, attn_implementation="sdpa").eval()
    for req, row in zip(reqs, logits):
        with torch.inference_mode():
            expected = reference(input_ids=torch.tensor([req.all_token_ids])).logits[0, -1]
        torch.testing.assert_close(row, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rms_norm_is_transformers_own_with_its_weight_and_epsilon(tiny_llama, dtype):
    """Small activations (where epsilon counts) and a weight that is not all ones (a fresh model's
    is): float32 to rounding, bfloat16 bit for bit (transformers' order of rounding)."""
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    fused = load_model(tiny_llama).fused
    dt = getattr(torch, dtype)
    torch.manual_seed(3)
    x = (torch.randn(5, 64) * 1e-3).to(dt)
    reference = LlamaRMSNorm(64, eps=fused.eps).to(dt)
    with torch.no_grad():
        reference.weight.copy_(torch.rand(64) + 0.5)
        expected = reference(x)
    got = fused._rms(x, reference.weight.detach())
    assert got.dtype == dt
    if dt == torch.bfloat16:
        assert torch.equal(got, expected)
    else:
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("packed", [True, False])
def test_a_linear_gives_f_linear_for_any_row_count_with_its_bias(packed):
    """The packed matmul pads the rows to their bucket: what comes back is the real rows only."""
    from engine.fused_llama import Linear

    torch.manual_seed(5)
    weight, bias = torch.randn(48, 32), torch.randn(48)
    linear = Linear.of(weight, bias)
    for rows in (1, 5, 8, 9, 70):
        x = torch.randn(rows, 32)
        got = linear(x, packed)
        assert got.shape == (rows, 48)
        torch.testing.assert_close(got, F.linear(x, weight, bias), atol=1e-5, rtol=1e-5)


def test_fusing_projections_of_which_some_have_a_bias_puts_zeros_for_the_others():
    from torch import nn

    from engine.fused_llama import _fuse

    torch.manual_seed(2)
    q, k, v = nn.Linear(8, 4), nn.Linear(8, 2, bias=False), nn.Linear(8, 2)
    biases = (q.bias.detach().clone(), v.bias.detach().clone())
    weight, bias = _fuse(q, k, v)
    assert weight.shape == (8, 8)
    assert torch.equal(bias, torch.cat([biases[0], torch.zeros(2), biases[1]]))
    assert k.bias is None and v.bias.data_ptr() == bias[6:].data_ptr()
    x = torch.randn(3, 8)
    torch.testing.assert_close(F.linear(x, weight, bias), torch.cat([q(x), k(x), v(x)], dim=-1))
