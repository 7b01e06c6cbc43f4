"""Small in-project models for tests and demos: fast to build, export and run on a CPU.

Each one exercises a graph shape the planner must handle: a chain (MLP), residual skips
(ResCNN), attention with residuals (TinyGPT) and parallel branches joined by a concat (Inception).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MLP", "InceptionNet", "ResCNN", "TinyGPT"]


class MLP(nn.Module):
    """A chain of Linear + ReLU layers."""

    def __init__(self, in_features: int = 256, hidden: tuple[int, ...] = (512, 512, 512, 256),
                 out_features: int = 10) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for h in hidden:
            layers += [nn.Linear(width, h), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, out_features))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class BasicBlock(nn.Module):
    """ResNet's basic block: two 3×3 convolutions and a skip connection."""

    def __init__(self, cin: int, cout: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu1(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu2(y + self.shortcut(x))


class ResCNN(nn.Module):
    """A small residual CNN (ResNet-style) for 32×32 images."""

    def __init__(self, widths: tuple[int, ...] = (32, 64, 128, 128), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, widths[0], 3, 1, 1, bias=False),
                                  nn.BatchNorm2d(widths[0]), nn.ReLU())
        blocks = []
        cin = widths[0]
        for i, w in enumerate(widths):
            blocks.append(BasicBlock(cin, w, stride=1 if i == 0 else 2))
            cin = w
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, c))


class DecoderBlock(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.proj(self.act(self.fc(self.ln2(x))))


class TinyGPT(nn.Module):
    """A GPT-style decoder: token + position embeddings, pre-norm blocks, tied LM head."""

    def __init__(self, vocab: int = 512, dim: int = 128, heads: int = 4, layers: int = 4,
                 max_seq: int = 256) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_seq, dim)
        self.blocks = nn.ModuleList(DecoderBlock(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2: one tensor used by two layers

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def _conv(cin: int, cout: int, k: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.ReLU())


class InceptionModule(nn.Module):
    """Four parallel branches (1×1; 1×1→3×3; 1×1→5×5; pool→1×1) joined by a concat."""

    def __init__(self, cin: int, c1: int, c3: tuple[int, int], c5: tuple[int, int], cp: int) -> None:
        super().__init__()
        self.b1 = _conv(cin, c1, 1)
        self.b3 = nn.Sequential(_conv(cin, c3[0], 1), _conv(c3[0], c3[1], 3))
        self.b5 = nn.Sequential(_conv(cin, c5[0], 1), _conv(c5[0], c5[1], 5))
        self.bp = nn.Sequential(nn.MaxPool2d(3, 1, 1), _conv(cin, cp, 1))
        self.out_channels = c1 + c3[1] + c5[1] + cp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.b1(x), self.b3(x), self.b5(x), self.bp(x)], dim=1)


class InceptionNet(nn.Module):
    """A small GoogLeNet-style branchy CNN for 32×32 images."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.stem = _conv(3, 32, 3)
        mods = []
        cin = 32
        for c1, c3, c5, cp in ((16, (24, 32), (4, 8), 8), (32, (32, 48), (8, 24), 16),
                               (48, (48, 64), (12, 32), 24)):
            mod = InceptionModule(cin, c1, c3, c5, cp)
            mods.append(mod)
            cin = mod.out_channels
        self.inceptions = nn.Sequential(*mods)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.inceptions(self.stem(x))), 1))
