"""Perplexity of a token stream, computed as momoe-eval computes it.

The stream is cut into N = (len - 1) // S sequences of S = seq_len inputs (sequence i is tokens
[i S, i S + S], targets shifted by one), evaluated in batches of config.json's eval_batch_size;
the last batch is padded with copies of sequence 0 whose targets are ignored (an AC router's
metric sees the whole batch, padding included, as in momoe). The loss is summed in float64.
"""

import math

import numpy as np
import torch


def perplexity(model, ids, batch_size=None, max_sequences=0, replay=None):
    """Returns {"ppl", "loss_sum", "tokens", "sequences"} for the int array `ids`. With a
    `replay` (replay.RoutingReplay), the routing decisions are the replayed path's."""
    s = model.seq_len
    ids = np.asarray(ids, dtype=np.int64)
    n = (ids.size - 1) // s
    if n < 1:
        raise ValueError(f"{ids.size} tokens: fewer than seq_len + 1 = {s + 1}")
    total = min(n, max_sequences) if max_sequences > 0 else n
    batch = int(batch_size or model.cfg["eval_batch_size"])
    device = next(model.parameters()).device
    loss_sum, tokens = 0.0, 0
    with torch.no_grad():
        for start in range(0, total, batch):
            seqs = list(range(start, min(total, start + batch)))
            real = len(seqs)
            seqs += [0] * (batch - real)
            rows = np.stack([ids[i * s : i * s + s + 1] for i in seqs])
            inputs = torch.from_numpy(rows[:, :-1]).to(device)
            targets = torch.from_numpy(rows[:, 1:]).to(device)
            logits = model(inputs, replay=replay)[:real].double()
            lse = torch.logsumexp(logits, dim=-1)
            picked = logits.gather(-1, targets[:real, :, None]).squeeze(-1)
            loss_sum += float((lse - picked).sum())
            tokens += real * s
    return {
        "ppl": math.exp(loss_sum / tokens),
        "loss_sum": loss_sum,
        "tokens": tokens,
        "sequences": total,
    }
