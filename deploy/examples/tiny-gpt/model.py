"""A small GPT (decoder-only transformer) in plain PyTorch."""

import math

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.checkpoint import checkpoint


def gelu(x):
    # The tanh approximation, written out op by op.
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


class LayerNorm(nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = ((x - mean) ** 2).mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class Head(nn.Module):
    """One attention head with its own key, query and value projections."""

    def __init__(self, dim, head_dim, impl):
        super().__init__()
        self.key = nn.Linear(dim, head_dim, bias=False)
        self.query = nn.Linear(dim, head_dim, bias=False)
        self.value = nn.Linear(dim, head_dim, bias=False)
        self.impl = impl

    def forward(self, x):
        return attend(self.query(x), self.key(x), self.value(x), self.impl)


def attend(q, k, v, impl):
    """Causal scaled dot-product attention over the last two dimensions."""
    t = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    if impl == "einsum":
        att = torch.einsum("...qd,...kd->...qk", q, k) * scale
    else:
        att = (q @ k.transpose(-2, -1)) * scale
    mask = torch.tril(torch.ones(t, t, device=q.device)) == 0
    att = F.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
    return torch.einsum("...qk,...kd->...qd", att, v) if impl == "einsum" else att @ v


class Attention(nn.Module):
    """Multi-head attention as a list of heads, run one after another."""

    def __init__(self, dim, heads, impl):
        super().__init__()
        self.heads = nn.ModuleList(Head(dim, dim // heads, impl) for _ in range(heads))
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class Block(nn.Module):
    def __init__(self, dim, heads, impl):
        super().__init__()
        self.ln1 = LayerNorm(dim)
        self.attn = Attention(dim, heads, impl)
        self.ln2 = LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.out(gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, dim, heads, layers, seq_len, impl="matmul", recompute=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(seq_len, dim)
        self.blocks = nn.ModuleList(Block(dim, heads, impl) for _ in range(layers))
        self.ln = LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.recompute = recompute

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            # Activation checkpointing: recompute the block in backward.
            x = checkpoint(block, x, use_reentrant=False) if self.recompute else block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
