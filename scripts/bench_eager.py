#!/usr/bin/python3
"""PyTorch-eager twin of posenc's model, for `posenc bench`.

    /usr/bin/python3 scripts/bench_eager.py CASES.json RESULTS.json
    /usr/bin/python3 scripts/bench_eager.py --serve     (one case per stdin line; posenc bench uses this)

CASES.json (written by `posenc bench`) lists resolved configs with a batch
size and length. For each case this script builds the same encoder classifier
(pre-LN blocks, GELU feed-forward, cls/mean/max pooling, projected or embedded
q,k,v, every positional scheme of the registry) with the same parameter names
as the C++ modules, then:

  - parity: when the case has a parity_dir, loads the C++ initial weights
    (weights.bin + weights.json) and the C++ batch, and compares the loss with
    the one C++ computed (the two must compute the same function);
  - timing: the same training step (forward, cross-entropy, backward,
    gradient clipping, AdamW with decay on matrices only) and evaluation
    forward, warm-up then the median over timed steps, at the same thread count.

Needs Debian's python3-torch (the same LibTorch 1.13 as the C++ build).

POSENC_BENCH_PROFILE=FOLDER (CUDA cases): a few more steps under torch.profiler,
their GPU time by kind of kernel written to FOLDER (scripts/step_profile.py).
"""
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------
# Position math (mirrors src/posenc/positional/tables.cpp and relative_offsets.cpp)


def sinusoidal_table(positions, dim, base, layout="interleaved"):
    i = torch.arange(dim // 2, dtype=torch.float64, device=positions.device)
    freq = torch.pow(torch.tensor(base, dtype=torch.float64, device=positions.device), -2.0 * i / dim)
    angle = positions.to(torch.float64).unsqueeze(1) * freq.unsqueeze(0)  # (L, D/2)
    s, c = torch.sin(angle), torch.cos(angle)
    if layout == "concat":
        return torch.cat([s, c], dim=1)
    return torch.stack([s, c], dim=2).reshape(positions.size(0), dim)


def relative_positions(q, k):
    return k.unsqueeze(0) - q.unsqueeze(1)  # (Lq, Lk): j - i


def alibi_slopes(heads):
    def power_of_two(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    p = 1
    while p * 2 <= heads:
        p *= 2
    slopes = power_of_two(p)
    extra = power_of_two(2 * p)
    i = 0
    while len(slopes) < heads:
        slopes.append(extra[i])
        i += 2
    return slopes


def t5_buckets(relative, num_buckets, max_distance, bidirectional):
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).long() * num_buckets
        distance = relative.abs()
    else:
        distance = (-relative).clamp_min(0)
    max_exact = num_buckets // 2
    scaled = (torch.log(distance.clamp_min(max_exact).double() / max_exact)
              / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    large = (max_exact + scaled.long()).clamp_max(num_buckets - 1)
    return buckets + torch.where(distance < max_exact, distance, large)


class Positions:
    """Explicit position ids and the per-forward cache (mirrors scheme.h)."""

    def __init__(self, ids):
        self.q = ids
        self.k = ids
        self.end = int(ids.numel())
        self.cache = {}

    def once(self, owner, key, make):
        k = (id(owner), key)
        if k not in self.cache:
            self.cache[k] = make()
        return self.cache[k]


# ---------------------------------------------------------------------------
# Schemes (mirror src/posenc/positional/*.cpp; same parameter names)


class Scheme(nn.Module):
    embed_hook = rotate_hook = bias_hook = score_hook = value_hook = reweight_hook = False


class NoneScheme(Scheme):
    def __init__(self, o, D, H, Dh):
        super().__init__()


class Sinusoidal(Scheme):
    embed_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.dim, self.base, self.layout = D, o["base"], o["layout"]
        self.concat = o["combine"] == "concat"
        self.token_scale = math.sqrt(D) if o["scale_tokens"] else 1.0
        self.pe_dim = (o["concat_dim"] if o["concat_dim"] > 0 else D // 2) if self.concat else D

    def embed(self, x, pos):
        pe = pos.once(self, "pe", lambda: sinusoidal_table(pos.q, self.pe_dim, self.base, self.layout).to(x.dtype))
        tokens = x if self.token_scale == 1.0 else x * self.token_scale
        if not self.concat:
            return tokens + pe.unsqueeze(0)
        kept = tokens.narrow(-1, 0, self.dim - self.pe_dim)
        return torch.cat([kept, pe.unsqueeze(0).expand(x.size(0), -1, -1)], dim=-1)


class Learned(Scheme):
    embed_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.table = nn.Parameter(torch.randn(o["max_positions"], D) * o["init_std"])
        self.scaled = o["scaled"]
        if self.scaled:
            self.scale = nn.Parameter(torch.ones(o["max_positions"], 1))
            self.norm = nn.LayerNorm(D)

    def embed(self, x, pos):
        rows = self.table.index_select(0, pos.q)
        if not self.scaled:
            return x + rows.unsqueeze(0)
        rows = rows * self.scale.index_select(0, pos.q)
        return self.norm(x + rows.unsqueeze(0))


class Dynamic(Scheme):
    embed_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.dim, self.max_length = D, o["max_length"]
        self.content_scale = nn.Parameter(torch.ones(D))
        self.position_scale = nn.Parameter(torch.ones(D))
        self.gate_in = nn.Linear(D, 2 * D)
        self.gate_out = nn.Linear(2 * D, D)
        self.content_factor = nn.Parameter(torch.ones(1))
        self.length_factor = nn.Parameter(torch.ones(1))

    def embed(self, x, pos):
        pe = pos.once(self, "pe", lambda: sinusoidal_table(pos.q, self.dim, 10000.0).to(x.dtype))
        gate = torch.sigmoid(self.gate_out(F.gelu(self.gate_in(x))) * self.content_factor)
        length_scale = torch.sigmoid(self.length_factor * (pos.q.size(0) / self.max_length))
        return x * self.content_scale + pe.unsqueeze(0) * self.position_scale * gate * length_scale


class Rope(Scheme):
    rotate_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.base, self.interleaved = o["base"], o["layout"] == "interleaved"
        self.rot = int(o["fraction"] * Dh) // 2 * 2
        self.scaling, self.factor = o.get("scaling", "none"), o.get("factor", 1.0)
        self.original, self.drop_low = o.get("original_max_position", 0), o.get("drop_low_frequencies", 0.0)

    def frequencies(self, length, device):
        """theta_i (R/2, float64) after scaling and p-RoPE, and the factor on cos and sin (rotary.cpp)."""
        R, s = float(self.rot), self.factor
        i = torch.arange(self.rot // 2, dtype=torch.float64, device=device)

        def at_base(base):
            return torch.pow(torch.tensor(base, dtype=torch.float64, device=device), -2.0 * i / R)

        mscale = 1.0
        if self.scaling == "linear":
            theta = at_base(self.base) / s
        elif self.scaling == "ntk":
            theta = at_base(self.base * s ** (R / (R - 2.0)))
        elif self.scaling == "dynamic_ntk":
            L = float(max(length, self.original))
            theta = at_base(self.base * (s * L / self.original - (s - 1.0)) ** (R / (R - 2.0)))
        elif self.scaling == "yarn":
            def pair_for(rotations):
                return R * math.log(self.original / (rotations * 2.0 * math.pi)) / (2.0 * math.log(self.base))
            low, high = max(math.floor(pair_for(32.0)), 0.0), min(math.ceil(pair_for(1.0)), R - 1.0)
            if high == low:
                high += 0.001
            ramp = ((i - low) / (high - low)).clamp(0.0, 1.0)
            unscaled = at_base(self.base)
            theta = unscaled / s * ramp + unscaled * (1.0 - ramp)
            mscale = 0.1 * math.log(s) + 1.0 if s > 1.0 else 1.0
        else:
            theta = at_base(self.base)
        dropped = int(round(self.drop_low * (self.rot // 2)))
        if dropped > 0:
            theta = theta.clone()
            theta[self.rot // 2 - dropped:] = 0.0
        return theta, mscale

    def apply(self, x, positions, pos, which):
        def make():
            theta, mscale = self.frequencies(pos.end, positions.device)
            angle = positions.to(torch.float64).unsqueeze(1) * theta.unsqueeze(0)
            return (torch.stack([angle.cos(), angle.sin()]) * mscale).to(x.dtype)

        cs = pos.once(self, which, make)
        cos, sin = cs[0], cs[1]
        rot = x.narrow(-1, 0, self.rot)
        if self.interleaved:
            pairs = rot.unflatten(-1, (self.rot // 2, 2))
            even, odd = pairs[..., 0], pairs[..., 1]
            out = torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).flatten(-2)
        else:
            x1, x2 = rot.narrow(-1, 0, self.rot // 2), rot.narrow(-1, self.rot // 2, self.rot // 2)
            out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        if self.rot == x.size(-1):
            return out
        return torch.cat([out, x.narrow(-1, self.rot, x.size(-1) - self.rot)], -1)

    def rotate(self, q, k, pos):
        return self.apply(q, pos.q, pos, "q"), self.apply(k, pos.k, pos, "k")


class Xpos(Rope):
    """RoPE, then q scaled by zeta_i^((n - end//2)/scale_base) and k by its inverse (rotary.cpp)."""

    def __init__(self, o, D, H, Dh):
        super().__init__(o, D, H, Dh)
        self.gamma, self.scale_base = o["gamma"], o["scale_base"]

    def scales(self, pos, positions, sign, like, key):
        def make():
            R = float(self.rot)
            zeta = (2.0 * torch.arange(self.rot // 2, dtype=torch.float64, device=positions.device) / R
                    + self.gamma) / (1.0 + self.gamma)
            power = sign * (positions.to(torch.float64) - float(pos.end // 2)) / self.scale_base
            s = torch.pow(zeta.unsqueeze(0), power.unsqueeze(1))
            s = s.repeat_interleave(2, -1) if self.interleaved else torch.cat([s, s], -1)
            Dh = like.size(-1)
            if self.rot < Dh:
                s = torch.cat([s, torch.ones(s.size(0), Dh - self.rot, dtype=torch.float64, device=s.device)], -1)
            return s.to(like.dtype)

        return pos.once(self, key, make)

    def rotate(self, q, k, pos):
        q, k = super().rotate(q, k, pos)
        return q * self.scales(pos, pos.q, 1.0, q, "xpos_q"), k * self.scales(pos, pos.k, -1.0, k, "xpos_k")


class Fire(Scheme):
    """f(psi(|i-j|) / psi(max(T, i))), psi(x) = log(|c| x + 1), f: Linear(1, hidden), ReLU, Linear(hidden, H)."""
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.hidden = nn.Linear(1, o["hidden"])
        self.out = nn.Linear(o["hidden"], H)
        # A per-head constant that the softmax cancels: frozen at zero, as in posenc.
        nn.init.zeros_(self.out.bias)
        self.out.bias.requires_grad_(False)
        self.c = nn.Parameter(torch.tensor(float(o["init_c"])))
        self.threshold = nn.Parameter(torch.tensor(float(o["init_threshold"])))
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            dtype = self.c.dtype

            def psi(x):
                return torch.log1p(self.c.abs() * x)

            query = pos.q.to(dtype).unsqueeze(1)
            normalizer = psi(torch.maximum(query, self.threshold.abs()))
            x = (psi(rel.abs().to(dtype)) / normalizer).unsqueeze(-1)
            b = self.out(torch.relu(self.hidden(x)))
            return apply_directional(self, b.permute(2, 0, 1).contiguous().unsqueeze(0), rel)

        return pos.once(self, "fire", make)


def add_directional(module, o, H):
    """The shared `directional` option (relative_offsets.h): offsets for keys left / right of the query."""
    module.directional = o["directional"]
    if module.directional:
        module.left_offset = nn.Parameter(torch.zeros(H))
        module.right_offset = nn.Parameter(torch.zeros(H))


def apply_directional(module, b, rel):
    """b (1, H or 1, Lq, Lk) plus the offsets by the sign of rel (Lq, Lk)."""
    if not module.directional:
        return b
    dtype = module.left_offset.dtype
    offsets = (module.right_offset.view(-1, 1, 1) * (rel > 0).to(dtype)
               + module.left_offset.view(-1, 1, 1) * (rel < 0).to(dtype))
    return b + offsets.unsqueeze(0)


class Alibi(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(H), dtype=torch.float32))
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            b = -self.slopes.view(-1, 1, 1) * rel.abs().to(self.slopes.dtype).unsqueeze(0)
            return apply_directional(self, b.unsqueeze(0), rel)

        return pos.once(self, "alibi", make)


class Kerple(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.power = o["variant"] == "power"
        # Per-head floors: the last free_heads heads keep the paper's 0.01 (or the floor, if lower).
        free = o["free_heads"]
        self.register_buffer("min_r1", torch.full((H,), float(o["min_r1"])), persistent=False)
        self.register_buffer("min_r2", torch.full((H,), float(o["min_r2"])), persistent=False)
        if free > 0:
            self.min_r1[H - free:] = min(o["min_r1"], 0.01)
            self.min_r2[H - free:] = min(o["min_r2"], 0.01)
        self.r1 = nn.Parameter(torch.rand(H) * (1.0 if self.power else 2.0))
        self.r2 = nn.Parameter(torch.rand(H) * (2.0 if self.power else 1.0))
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            distance = rel.abs().to(self.r1.dtype).unsqueeze(0)
            r1 = torch.maximum(self.r1, self.min_r1).view(-1, 1, 1)
            r2 = torch.maximum(self.r2, self.min_r2).view(-1, 1, 1)
            b = -r1 * distance.pow(r2.clamp(max=2.0)) if self.power else -r1 * torch.log1p(r2 * distance)
            return apply_directional(self, b.unsqueeze(0), rel)

        return pos.once(self, "kerple", make)


class Sandwich(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.H, self.Dh, self.base = H, Dh, o["base"]
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            k = torch.arange(1, self.Dh // 2 + 1, dtype=torch.float64, device=rel.device)
            freq = torch.pow(torch.tensor(self.base, dtype=torch.float64), -2.0 * k / self.Dh)
            dot = torch.cos(rel.to(torch.float64).unsqueeze(-1) * freq).sum(-1) - self.Dh // 2
            h = torch.arange(1, self.H + 1, dtype=torch.float64, device=rel.device)
            b = (dot.unsqueeze(0) / (8.0 * h / self.H).view(-1, 1, 1)).to(torch.float32)
            return apply_directional(self, b.unsqueeze(0), rel)

        return pos.once(self, "sandwich", make)


class T5(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.nb, self.md, self.bi = o["num_buckets"], o["max_distance"], o["bidirectional"]
        self.table = nn.Parameter(torch.randn(self.nb, H) * o["init_std"])

    def bias(self, pos):
        buckets = pos.once(self, "buckets", lambda: t5_buckets(relative_positions(pos.q, pos.k), self.nb, self.md, self.bi))
        # As the C++ side gathers (positional/bias.cpp): embedding on CUDA, indexing on the CPU.
        rows = lambda: F.embedding(buckets, self.table) if buckets.is_cuda else self.table[buckets]
        return pos.once(self, "bias", lambda: rows().permute(2, 0, 1).contiguous().unsqueeze(0))


def pick_columns(per_offset, index):
    return per_offset.gather(-1, index.expand(per_offset.size(0), per_offset.size(1), index.size(0), index.size(1)))


class Shaw(Scheme):
    score_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.clip, self.use_values = o["max_distance"], o["values"]
        self.value_hook = self.use_values
        std = o["init_std"]
        self.keys = nn.Parameter(torch.randn(2 * self.clip + 1, Dh) * std)
        if self.use_values:
            self.values = nn.Parameter(torch.randn(2 * self.clip + 1, Dh) * std)
        self.head_scales = o["head_scales"]
        if self.head_scales:
            self.content_scale = nn.Parameter(torch.ones(H))
            self.position_scale = nn.Parameter(torch.ones(H))

    def index(self, pos):
        return pos.once(self, "index", lambda: relative_positions(pos.q, pos.k).clamp(-self.clip, self.clip) + self.clip)

    def score_terms(self, q, k, qk, pos):
        rel = pick_columns(torch.matmul(q, self.keys.t()), self.index(pos))
        if not self.head_scales:
            return rel
        c, p = self.content_scale.view(1, -1, 1, 1), self.position_scale.view(1, -1, 1, 1)
        return (c - 1.0) * qk + p * rel

    def value_terms(self, probs, pos):
        idx = self.index(pos).expand_as(probs)
        per_offset = torch.zeros(probs.size(0), probs.size(1), probs.size(2), 2 * self.clip + 1, dtype=probs.dtype,
                                 device=probs.device)
        per_offset = per_offset.scatter_add(-1, idx, probs)
        return torch.matmul(per_offset, self.values)


class Xl(Scheme):
    score_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.H, self.Dh, self.D, self.base = H, Dh, D, o["base"]
        self.u = nn.Parameter(torch.zeros(H, Dh))
        self.v = nn.Parameter(torch.zeros(H, Dh))
        self.w_r = nn.Linear(D, H * Dh, bias=False)

    def score_terms(self, q, k, qk, pos):
        rel = -relative_positions(pos.q, pos.k)
        lo = -(pos.end - 1)
        index = pos.once(self, "index", lambda: rel - lo)

        def make_r():
            offsets = torch.arange(lo, pos.end, dtype=torch.long, device=q.device)
            projected = self.w_r(sinusoidal_table(offsets, self.D, self.base).to(q.dtype))
            return projected.view(-1, self.H, self.Dh).permute(1, 2, 0)

        r = pos.once(self, "r", make_r)
        content_bias = torch.matmul(self.u.unsqueeze(1).unsqueeze(0), k.transpose(-2, -1))
        position = torch.matmul(q + self.v.view(1, self.H, 1, self.Dh), r)
        return content_bias + pick_columns(position, index)


class Cope(Scheme):
    """Contextual positions, counted back to the left and forward (negative) to the right: contextual.cpp."""
    score_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.N, self.scale = o["max_count"], 1.0 / math.sqrt(Dh)
        self.table = nn.Parameter(torch.randn(2 * self.N - 1, Dh) * o["init_std"])

    def score_terms(self, q, k, qk, pos):
        N, L = self.N, qk.size(-1)
        at_or_left = pos.once(self, "at_or_left", lambda: torch.ones(L, L, dtype=torch.bool, device=qk.device).tril())
        gates = torch.sigmoid(qk.float() * self.scale)
        prefix = gates.cumsum(-1)
        p = (prefix.diagonal(0, -2, -1).unsqueeze(-1) - prefix + gates * at_or_left).clamp(-(N - 1), N - 1)
        lower = p.floor()
        weight = (p - lower).to(q.dtype)
        below = (lower + (N - 1)).long()
        above = (below + 1).clamp(max=2 * N - 2)
        per_position = torch.matmul(q, self.table.to(q.dtype).t())
        return per_position.gather(-1, below) * (1 - weight) + per_position.gather(-1, above) * weight


class Fox(Scheme):
    """The forget gate read from each key: D_ij = -|F_i - F_j|, F the cumsum of log sigmoid(w.k + b): contextual.cpp."""
    score_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.content, self.unscale = o["gate"] == "content", math.sqrt(Dh)
        if self.content:
            self.gate_weight = nn.Parameter(torch.randn(H, Dh) * o["init_std"])
        self.gate_bias = nn.Parameter(torch.full((H,), float(o["bias_init"])))

    def score_terms(self, q, k, qk, pos):
        dtype = torch.promote_types(k.dtype, torch.float32)
        logit = self.gate_bias.to(dtype).view(1, -1, 1)
        if self.content:
            logit = (k.to(dtype) * self.gate_weight.to(dtype).view(1, -1, 1, k.size(-1))).sum(-1) + logit
        else:
            logit = logit.expand(1, -1, k.size(2))
        cumulative = F.logsigmoid(logit).cumsum(-1)
        own = cumulative[..., k.size(2) - q.size(2):]
        return (-(own.unsqueeze(-1) - cumulative.unsqueeze(-2)).abs() * self.unscale).to(q.dtype)


def path_causal_logits(q, k, w, beta, chunk=32):
    """PaTH's logits for keys at or left of each query, zero right of it: householder.cpp's causal_logits."""
    B, H, L, D = q.shape
    C = min(chunk, L)
    N = (L + C - 1) // C
    padded = N * C
    if padded > L:
        q, k, w = (F.pad(x, (0, 0, 0, padded - L)) for x in (q, k, w))
        beta = F.pad(beta, (0, padded - L))
    qc, kc, wc = (x.reshape(B, H, N, C, D) for x in (q, k, w))
    wb = wc * beta.reshape(B, H, N, C, 1)
    at_or_below = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    below = torch.ones(C, C, dtype=torch.bool, device=q.device).tril(-1)
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    unit_lower = torch.where(below, wb @ wc.transpose(-1, -2), zero) + torch.eye(C, dtype=q.dtype, device=q.device)

    def apply_t(rhs):
        return torch.linalg.solve_triangular(unit_lower, rhs, upper=False, left=True, unitriangular=True)

    qw = torch.where(at_or_below, qc @ wc.transpose(-1, -2), zero)
    t_wbk = apply_t(torch.where(below, wb @ kc.transpose(-1, -2), zero))
    t_wb = apply_t(wb)
    local = torch.where(at_or_below, qc @ kc.transpose(-1, -2), zero) - qw @ t_wbk
    if N == 1:
        return local.reshape(B, H, padded, padded)[:, :, :L, :L]
    q_hat = qc - qw @ t_wb
    k_hat = kc - t_wbk.transpose(-1, -2) @ wc
    through = wc.transpose(-1, -2) @ t_wb
    blocks = torch.zeros(B, H, N, C, N, C, dtype=q.dtype, device=q.device)
    blocks.diagonal(0, 2, 4).copy_(local.permute(0, 1, 3, 4, 2))
    carried = q_hat[:, :, 1:]
    for d in range(1, N):
        n = N - d
        block = carried @ k_hat[:, :, :n].transpose(-1, -2)
        blocks.diagonal(-d, 2, 4).copy_(block.permute(0, 1, 3, 4, 2))
        if n == 1:
            break
        carried = (carried - carried @ through[:, :, :n])[:, :, 1:]
    return blocks.reshape(B, H, padded, padded)[:, :, :L, :L]


class Path(Scheme):
    """PaTH: w_t = normalize(M_h k_t), beta_t = 2 sigmoid(u_h.k_t + b_h); an encoder's two sides: householder.cpp."""
    score_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.transform = nn.Parameter(torch.randn(H, Dh, Dh) / math.sqrt(Dh))
        self.beta_weight = nn.Parameter(torch.randn(H, Dh) * o["init_std"])
        self.beta_bias = nn.Parameter(torch.full((H,), float(o["beta_bias_init"])))

    def score_terms(self, q, k, qk, pos):
        dtype = torch.promote_types(k.dtype, torch.float32)
        keys, queries = k.to(dtype), q.to(dtype)
        L = keys.size(2)
        w = keys @ self.transform.to(dtype).transpose(-1, -2).unsqueeze(0)
        w = w / w.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        beta = 2 * torch.sigmoid((keys * self.beta_weight.to(dtype).view(1, -1, 1, keys.size(-1))).sum(-1)
                                 + self.beta_bias.to(dtype).view(1, -1, 1))
        left = path_causal_logits(queries, keys, w, beta)

        def shifted(x, pad):
            return F.pad(x.flip(2)[:, :, :L - 1], pad)

        right = path_causal_logits(queries.flip(2), keys.flip(2), shifted(w, (0, 0, 1, 0)), shifted(beta, (1, 0)))
        return (left + right.flip(2, 3).triu(1) - qk.to(dtype)).to(q.dtype)


def scalar(module, name, value, learnable):
    t = torch.tensor(value, dtype=torch.float32)
    if learnable:
        setattr(module, name, nn.Parameter(t))
    else:
        module.register_buffer(name, t)


class Ape(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        scalar(self, "scale", o["scale"], o["learnable"])
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            distance = rel.abs().to(self.scale.dtype)
            b = (self.scale * (1.0 - distance / pos.k.size(0))).view(1, 1, *distance.shape)
            return apply_directional(self, b, rel)

        return pos.once(self, "ape", make)


class Decay(Scheme):
    bias_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        scalar(self, "log_tau", math.log(o["tau"]), o["learnable"])
        add_directional(self, o, H)

    def bias(self, pos):
        def make():
            rel = relative_positions(pos.q, pos.k)
            distance = rel.abs().to(self.log_tau.dtype)
            b = torch.exp(-distance / self.log_tau.exp()).view(1, 1, *distance.shape)
            return apply_directional(self, b, rel)

        return pos.once(self, "decay", make)


class Da(Scheme):
    reweight_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        s = o["init_spread"]
        self.w = nn.Parameter(torch.linspace(-s, s, H) if H > 1 else torch.zeros(1))
        self.v = nn.Parameter(torch.zeros(H))

    def reweight(self, scores, pos):
        def make():
            distance = relative_positions(pos.q, pos.k).abs().to(self.w.dtype).unsqueeze(0)
            x = self.w.view(-1, 1, 1) * distance
            v = self.v.view(-1, 1, 1)
            return ((1.0 + v.exp()) / (1.0 + (v - x).exp())).unsqueeze(0)

        return torch.relu(scores) * pos.once(self, "f", make)


class Dape(Scheme):
    """A + B + f([A; B]) per pair: B = -r1 log(1 + r2 |i-j|), f: Linear(2H, hidden), GELU, Linear(hidden, H) without bias."""
    reweight_hook = True

    def __init__(self, o, D, H, Dh):
        super().__init__()
        self.r1 = nn.Parameter((torch.rand(H) * 2.0).clamp(min=0.01))
        self.r2 = nn.Parameter(torch.rand(H).clamp(min=0.01))
        self.hidden = nn.Linear(2 * H, o["hidden"])
        self.out = nn.Linear(o["hidden"], H, bias=False)

    def reweight(self, scores, pos):
        def make():
            distance = relative_positions(pos.q, pos.k).abs().to(self.r1.dtype).unsqueeze(0)
            r1, r2 = self.r1.clamp(min=0.01).view(-1, 1, 1), self.r2.clamp(min=0.01).view(-1, 1, 1)
            return (-r1 * torch.log1p(r2 * distance)).unsqueeze(0).to(scores.dtype)

        bias = pos.once(self, "dape", make)
        pair = torch.cat([scores, bias.expand_as(scores)], 1).permute(0, 2, 3, 1)
        f = self.out(torch.nn.functional.gelu(self.hidden(pair)))
        return scores + bias + f.permute(0, 3, 1, 2)


SCHEMES = {"none": NoneScheme, "sinusoidal": Sinusoidal, "learned": Learned, "dynamic": Dynamic, "rope": Rope, "xpos": Xpos,
           "alibi": Alibi, "t5": T5, "kerple": Kerple, "sandwich": Sandwich, "fire": Fire, "shaw": Shaw, "xl": Xl, "cope": Cope, "fox": Fox, "path": Path, "ape": Ape, "decay": Decay, "da": Da, "dape": Dape}

# ---------------------------------------------------------------------------
# Model (mirrors src/posenc/model/attention.cpp, blocks.cpp and encoder.cpp)

HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
FORCE_EXPLICIT = False  # posenc bench --attention explicit: no SDPA on either side


class Attention(nn.Module):
    def __init__(self, D, H, dropout, project_input):
        super().__init__()
        self.D, self.H, self.Dh, self.p = D, H, D // H, dropout
        if project_input:
            self.qkv = nn.Linear(D, 3 * D)
        self.out = nn.Linear(D, D)
        self.attn_drop = nn.Dropout(dropout)

    def split(self, x):
        return x.view(x.size(0), x.size(1), self.H, self.Dh).transpose(1, 2)

    def forward(self, x, scheme, pos):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        return self.attend(q, k, v, scheme, pos)

    def attend(self, q, k, v, scheme, pos):
        B, L = q.size(0), q.size(1)
        q, k, v = self.split(q), self.split(k), self.split(v)
        s = scheme
        if s is not None and s.rotate_hook:
            q, k = s.rotate(q, k, pos)
        bias = s.bias(pos) if s is not None and s.bias_hook else None
        explicit = FORCE_EXPLICIT or (s is not None and (s.score_hook or s.value_hook or s.reweight_hook))
        if HAS_SDPA and not explicit:  # LibTorch >= 2: the fused kernel, as the C++ side uses
            mask = bias.to(q.dtype) if bias is not None else None
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.p if self.training else 0.0)
        else:
            scores = torch.matmul(q, k.transpose(-2, -1))
            if s is not None and s.score_hook:
                scores = scores + s.score_terms(q, k, scores, pos)
            scores = scores * (1.0 / math.sqrt(self.Dh))
            if bias is not None:
                scores = scores + bias
            if s is not None and s.reweight_hook:
                scores = s.reweight(scores, pos)
            probs = torch.softmax(scores, dim=-1)
            dropped = self.attn_drop(probs)
            ctx = torch.matmul(dropped, v)
            if s is not None and s.value_hook:
                ctx = ctx + s.value_terms(dropped, pos)
        return self.out(ctx.transpose(1, 2).reshape(B, L, self.D))


class Block(nn.Module):
    def __init__(self, m, project_input):
        super().__init__()
        D = m["d_model"]
        self.ln1 = nn.LayerNorm(D)
        self.attention = Attention(D, m["heads"], m["dropout"], project_input)
        self.ln2 = nn.LayerNorm(D)
        self.ff1 = nn.Linear(D, m["d_ff"])
        self.ff2 = nn.Linear(m["d_ff"], D)
        self.drop = nn.Dropout(m["dropout"])

    def feed_forward(self, h):
        return h + self.drop(self.ff2(F.gelu(self.ff1(self.ln2(h)))))

    def forward(self, x, scheme, pos):
        return self.feed_forward(x + self.drop(self.attention(self.ln1(x), scheme, pos)))

    def forward_qkv(self, q, k, v, scheme, pos):
        return self.feed_forward(v + self.drop(self.attention.attend(q, k, v, scheme, pos)))


class EncoderClassifier(nn.Module):
    def __init__(self, cfg, placement):
        """placement: where the scheme acts when model.positional.apply_to is auto, from posenc's registry."""
        super().__init__()
        m = cfg["model"]
        self.m, self.vocab = m, cfg["task"]["vocab_size"]
        D, H = m["d_model"], m["heads"]
        self.embedded = m["attention"]["qkv"] == "embedded"
        # The twin is posenc's plain attention: refuse what it does not compute rather than time something else.
        plain = {"qkv": m["attention"]["qkv"], "weights": "softmax", "log_length_scale": 0.0, "logn_from": 0,
                 "head_scale": False, "logit_scale": 1.0}
        alone = " is not in the PyTorch twin (posenc bench --no-python times posenc alone)"
        for key, value in m["attention"].items():
            if plain.get(key, object()) != value:
                raise SystemExit(f"bench_eager.py: model.attention.{key}={value}{alone}")
        if m["positional"].get("nope_every", 0):
            raise SystemExit(f"bench_eager.py: model.positional.nope_every{alone}")
        for slot in ("input", "with"):  # a second scheme, before block 1 or in the same attention
            if slot in m["positional"]:
                raise SystemExit(f"bench_eager.py: model.positional.{slot}{alone}")
        self.tokens = nn.Embedding(self.vocab + 2, 3 * D if self.embedded else D)
        self.embed_drop = nn.Dropout(m["dropout"])
        p = dict(m["positional"])
        kind, apply_to, shared = p.pop("type"), p.pop("apply_to"), p.pop("share_across_layers")
        if apply_to == "auto":
            apply_to = placement
        layers = [0] if apply_to == "input" else list(range(m["layers"]))
        self.embed_at = [None] * m["layers"]
        self.attend_with = [None] * m["layers"]
        current = None
        for layer in layers:
            if current is None or not shared:
                current = SCHEMES[kind](p, D, H, D // H)
                self.add_module("positional" if shared else f"positional{layer}", current)
            if current.embed_hook:
                self.embed_at[layer] = current
            if current.rotate_hook or current.bias_hook or current.score_hook or current.value_hook or current.reweight_hook:
                self.attend_with[layer] = current
        self.blocks = nn.ModuleList([Block(m, not (self.embedded and i == 0)) for i in range(m["layers"])])
        self.final_ln = nn.LayerNorm(D)
        self.head = nn.Linear(D, 2)

    def forward(self, tokens):
        if self.m["pooling"] == "cls":
            cls = torch.full((tokens.size(0), 1), self.vocab + 1, dtype=tokens.dtype, device=tokens.device)
            tokens = torch.cat([cls, tokens], dim=1)
        L = tokens.size(1)
        pos = Positions(torch.arange(L, dtype=torch.long, device=tokens.device))
        x = self.embed_drop(self.tokens(tokens))
        for i, block in enumerate(self.blocks):
            if i == 0 and self.embedded:
                q, k, v = x.chunk(3, dim=-1)
                x = block.forward_qkv(q, k, v, self.attend_with[0], pos)
                continue
            if self.embed_at[i] is not None:
                x = self.embed_at[i].embed(x, pos)
            x = block(x, self.attend_with[i], pos)
        x = self.final_ln(x)
        if self.m["pooling"] == "cls":
            pooled = x[:, 0]
        elif self.m["pooling"] == "mean":
            pooled = x.mean(1)
        else:
            pooled = x.max(1)[0]
        return self.head(pooled)


def make_optimizer(model, train):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": train["weight_decay"]},
                              {"params": no_decay, "weight_decay": 0.0}], lr=train["lr"])


# ---------------------------------------------------------------------------


def load_cpp_weights(model, folder):
    meta = json.load(open(os.path.join(folder, "weights.json")))
    blob = torch.from_file(os.path.join(folder, "weights.bin"), shared=False,
                           size=os.path.getsize(os.path.join(folder, "weights.bin")) // 4, dtype=torch.float32)
    state = {}
    for p in meta["parameters"]:
        n = 1
        for s in p["shape"]:
            n *= s
        state[p["name"]] = blob[p["offset"]:p["offset"] + n].view(p["shape"])
    missing, unexpected = model.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"bench_eager.py: parameter names differ from the C++ model: missing {missing}, "
                         f"unexpected {unexpected}")
    tokens = torch.tensor(meta["tokens"], dtype=torch.long).view(meta["batch"], meta["length"])
    labels = torch.tensor(meta["labels"], dtype=torch.long)
    return tokens, labels, meta["loss"]


def resolve_device(name):
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SystemExit("bench_eager.py: train.device=cuda, but this torch sees no CUDA device")
    return torch.device(name)


def run_case(case, bf16):
    cfg = case["config"]
    device = resolve_device(cfg["train"].get("device", "cpu"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(cfg["train"]["seed"])
    model = EncoderClassifier(cfg, case["placement"])
    result = {"index": case["index"], "device": str(device)}
    B, L = case["batch"], case["length"]
    if "parity_dir" in case:
        tokens, labels, cpp_loss = load_cpp_weights(model, case["parity_dir"])
        model.to(device)
        tokens, labels = tokens.to(device), labels.to(device)
        model.eval()
        with torch.no_grad():
            py_loss = F.cross_entropy(model(tokens), labels).item()
        diff = abs(py_loss - cpp_loss)
        result.update({"parity_cpp_loss": cpp_loss, "parity_python_loss": py_loss, "parity_abs_diff": diff,
                       "parity_ok": diff <= 1e-4 * max(1.0, abs(cpp_loss))})
    else:
        model.to(device)
        tokens = torch.randint(1, cfg["task"]["vocab_size"] + 1, (B, L)).to(device)
        labels = torch.randint(0, 2, (B,)).to(device)
    optimizer = make_optimizer(model, cfg["train"])
    clip = cfg["train"]["grad_clip"]
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model.train()
    steps, forward, backward, opt = [], [], [], []
    for i in range(case["warmup"] + case["timed"]):
        sync()
        t0 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(tokens), labels)
        sync()
        t1 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        sync()
        t2 = time.perf_counter()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        sync()
        if i >= case["warmup"]:
            t3 = time.perf_counter()
            steps.append((t3 - t0) * 1000)
            forward.append((t1 - t0) * 1000)
            backward.append((t2 - t1) * 1000)
            opt.append((t3 - t2) * 1000)
    if device.type == "cuda" and os.environ.get("POSENC_BENCH_PROFILE"):
        profile_case(case, bf16, model, tokens, labels, optimizer, clip, sync)
    if device.type == "cuda" and os.environ.get("POSENC_BENCH_COMPILE") == "1" and hasattr(torch, "compile"):
        result["compile_ms"] = compiled_step_ms(model, tokens, labels, optimizer, clip, bf16, case, sync)
    model.eval()
    evals = []
    with torch.inference_mode():
        for i in range(case["warmup"] + case["timed"]):
            sync()
            t0 = time.perf_counter()
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                model(tokens)
            sync()
            if i >= case["warmup"]:
                evals.append((time.perf_counter() - t0) * 1000)
    result.update({"train_ms": statistics.median(steps), "train_ms_min": min(steps),
                   "forward_ms": statistics.median(forward), "backward_ms": statistics.median(backward),
                   "optimizer_ms": statistics.median(opt),
                   "eval_ms": statistics.median(evals), "parameters": sum(p.numel() for p in model.parameters())})
    if device.type == "cuda":
        result["peak_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return result


def profile_case(case, bf16, model, tokens, labels, optimizer, clip, sync):
    """POSENC_BENCH_PROFILE=FOLDER: the same training step under torch.profiler,
    its GPU time by kind of kernel (scripts/step_profile.py), once per case."""
    folder = os.environ["POSENC_BENCH_PROFILE"]
    name = f'profile-{case["size"]}-{case["scheme"]}-{case["qkv"]}{"-bf16" if bf16 else ""}.md'
    out_path = os.path.join(folder, name)
    if os.path.exists(out_path):  # posenc bench asks for a case more than once
        return

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(tokens), labels)
        optimizer.zero_grad()
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()

    from step_profile import profile_step
    os.makedirs(folder, exist_ok=True)
    title = (f'PyTorch twin, {case["size"]} {case["scheme"]} {case["qkv"]}, batch {case["batch"]} x length '
             f'{case["length"]}, {"bf16 autocast" if bf16 else "float32"}, {torch.cuda.get_device_name()}')
    try:
        profile_step(step, sync, 5, out_path, title)
    except Exception as e:  # a profile is extra: the timing above stands without it
        print(f"bench_eager.py: profiling {name} failed: {e}", file=sys.stderr, flush=True)


def compiled_step_ms(model, tokens, labels, optimizer, clip, bf16, case, sync):
    """The step as a PyTorch user would speed it up on a GPU: the model through
    torch.compile(mode="reduce-overhead") (Inductor kernels replayed from CUDA
    graphs), the optimizer as is. Median step time, one sync per step."""
    compiled = torch.compile(model, mode="reduce-overhead")
    steps = []
    for i in range(case["warmup"] + case["timed"] + 5):  # the first calls compile and record
        sync()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(compiled(tokens), labels)
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        if i >= case["warmup"] + 5:
            steps.append((time.perf_counter() - t0) * 1000)
    return statistics.median(steps)


def main():
    """Two modes: files (CASES.json RESULTS.json), or a worker (--serve) that
    reads one case per line on stdin and answers one result line on stdout, so
    that posenc bench can alternate the two sides case by case."""
    global FORCE_EXPLICIT
    torch.set_flush_denormal(True)  # as posenc does (environment.cpp: flush_denormals)
    if len(sys.argv) == 2 and sys.argv[1] == "--serve":
        out = sys.stdout
        sys.stdout = sys.stderr  # progress lines must not mix with the answers
        for line in sys.stdin:
            if not line.strip():
                continue
            request = json.loads(line)
            torch.set_num_threads(request["threads"])
            FORCE_EXPLICIT = request.get("explicit_attention", False)
            r = run_case(request["case"], request.get("bf16", False))
            out.write(json.dumps(r) + "\n")
            out.flush()
        return
    if len(sys.argv) != 3:
        sys.exit("usage: bench_eager.py CASES.json RESULTS.json   or   bench_eager.py --serve")
    spec = json.load(open(sys.argv[1]))
    torch.set_num_threads(spec["threads"])
    FORCE_EXPLICIT = spec.get("explicit_attention", False)
    results = []
    for case in spec["cases"]:
        r = run_case(case, spec.get("bf16", False))
        parity = f' parity |dloss| {r["parity_abs_diff"]:.1e}' if "parity_abs_diff" in r else ""
        print(f'bench_eager.py: {case["size"]} {case["scheme"]} {case["qkv"]}: train {r["train_ms"]:.2f} ms '
              f'(forward {r["forward_ms"]:.2f}, backward {r["backward_ms"]:.2f}, clip+AdamW {r["optimizer_ms"]:.2f}), '
              f'eval {r["eval_ms"]:.2f} ms{parity}', flush=True)
        results.append(r)
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"torch": torch.__version__, "threads": torch.get_num_threads(), "cases": results}, f, indent=1)
    os.replace(tmp, sys.argv[2])


if __name__ == "__main__":
    main()
