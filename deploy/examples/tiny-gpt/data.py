"""The training data: a deterministic synthetic corpus (protected).

A fixed seed makes every trial see the same token batches, so losses of
honest settings agree step by step and the contract can compare them.
"""

import torch

VOCAB = 256


def corpus(seed, length=1 << 16):
    """Byte-like tokens with structure a small model can learn: repeated
    motifs with noise."""
    g = torch.Generator().manual_seed(seed)
    motifs = torch.randint(0, VOCAB, (64, 16), generator=g)
    picks = torch.randint(0, 64, (length // 16,), generator=g)
    data = motifs[picks].reshape(-1)
    noise = torch.rand(data.shape, generator=g) < 0.05
    data[noise] = torch.randint(0, VOCAB, (int(noise.sum()),), generator=g)
    return data


def batch(data, step, global_batch, seq_len, seed):
    """The (inputs, targets) of one optimizer step: global_batch sequences."""
    g = torch.Generator().manual_seed(seed * 100003 + step)
    starts = torch.randint(0, data.numel() - seq_len - 1, (global_batch,), generator=g)
    x = torch.stack([data[s:s + seq_len] for s in starts.tolist()])
    y = torch.stack([data[s + 1:s + 1 + seq_len] for s in starts.tolist()])
    return x, y
