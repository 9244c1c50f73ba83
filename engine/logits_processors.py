"""What a request's own history does to its logits before sampling, and the logprobs it asks for.

Only the rows of requests that ask are touched: a batch without penalties, biases, min_tokens or
logprobs passes through untouched (no cost). The formulas are vLLM's
(vllm/model_executor/layers/utils.py `apply_penalties`, vllm/v1/sample/logits_processor):

- logit_bias: added to the named tokens' logits;
- min_tokens: EOS and the stop token ids get −∞ until the answer has that many tokens;
- repetition_penalty r (HF/CTRL): a token seen in the prompt or the answer has its logit divided
  by r when positive and multiplied by r when not;
- frequency_penalty f and presence_penalty p (OpenAI's): logit − f × count − p × [count > 0],
  counted over the answer only.
"""
from typing import NamedTuple

import torch

from engine.request import Request


class TokenLogprob(NamedTuple):
    """One position: the token there, its log-probability under the raw model, its rank among
    all tokens (1 = likeliest) and the `k` likeliest (id, logprob), best first. A tuple, so it
    crosses a pipe or a channel layer as plain data."""

    token_id: int
    logprob: float
    rank: int
    top: list


def token_strings(tokenizer, ids) -> dict[int, str]:
    """Each id's text alone, as vLLM shows a logprob's token (a lone byte of a longer character
    shows as U+FFFD, as in vLLM)."""
    return {i: tokenizer.decode([i]) for i in set(ids)}


def process(logits: torch.Tensor, reqs: list[Request], eos_token_ids: frozenset[int]) -> torch.Tensor:
    """The logits [R, V] each request samples from; a new tensor only when some row changes."""
    rows = [i for i, r in enumerate(reqs) if r.params.logit_bias or r.params.penalised
            or (r.params.min_tokens and len(r.output_token_ids) < r.params.min_tokens)]
    if not rows:
        return logits
    logits = logits.float().clone()
    vocab = logits.shape[-1]
    for i in rows:
        req, p, row = reqs[i], reqs[i].params, logits[i]
        if p.logit_bias:
            ids = [t for t in p.logit_bias if 0 <= t < vocab]
            row[ids] += torch.tensor([p.logit_bias[t] for t in ids], dtype=row.dtype, device=row.device)
        if p.min_tokens and len(req.output_token_ids) < p.min_tokens:
            banned = [t for t in (*([] if p.ignore_eos else eos_token_ids), *p.stop_token_ids) if 0 <= t < vocab]
            row[banned] = float("-inf")
        if p.penalised:
            counts = torch.bincount(torch.tensor(req.output_token_ids, dtype=torch.long, device=row.device),
                                    minlength=vocab)[:vocab].to(row.dtype)
            if p.repetition_penalty != 1.0:
                seen = counts > 0
                seen[torch.tensor(req.prompt_token_ids, dtype=torch.long, device=row.device)] = True
                row[seen] = torch.where(row[seen] > 0, row[seen] / p.repetition_penalty, row[seen] * p.repetition_penalty)
            row -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(row.dtype)
    return logits


def logprobs_of(logits: torch.Tensor, token_ids: list[int], k: int) -> list[TokenLogprob]:
    """For each row of raw logits [N, V], the logprob and rank of token_ids[row] and the k likeliest."""
    lp = torch.log_softmax(logits.float(), dim=-1)
    chosen = torch.tensor(token_ids, dtype=torch.long, device=lp.device)[:, None]
    picked = lp.gather(1, chosen)
    ranks = (lp > picked).sum(dim=-1) + 1
    top_v, top_i = lp.topk(min(k, lp.shape[-1]), dim=-1) if k else (None, None)
    out = []
    for n, (token, value, rank) in enumerate(zip(token_ids, picked[:, 0].tolist(), ranks.tolist())):
        top = list(zip(top_i[n].tolist(), top_v[n].tolist())) if k else []
        out.append(TokenLogprob(token, value, rank, top))
    return out
