#!/usr/bin/python3
"""Golden values for every positional scheme that computes something (all but none).

An independent implementation in numpy, written from the papers' formulas (not
from posenc's C++), whose output the C++ tests compare against within a
tolerance. Regenerate with:  /usr/bin/python3 scripts/golden.py tests/golden  (Debian python3-numpy)
"""
import json
import math
import os
import sys

import numpy as np


def sinusoidal(length, dim, base=10000.0, layout="interleaved"):
    pe = np.zeros((length, dim))
    for p in range(length):
        for i in range(dim // 2):
            angle = p / base ** (2 * i / dim)
            if layout == "interleaved":
                pe[p, 2 * i], pe[p, 2 * i + 1] = math.sin(angle), math.cos(angle)
            else:
                pe[p, i], pe[p, dim // 2 + i] = math.sin(angle), math.cos(angle)
    return pe


def rope(x, base=10000.0, layout="half", fraction=1.0):
    """x: (L, Dh) rotated at positions 0..L-1 (RoFormer; 'half' = HF rotate_half)."""
    length, dh = x.shape
    r = int(fraction * dh) // 2 * 2
    out = x.copy()
    for m in range(length):
        for i in range(r // 2):
            theta = m * base ** (-2 * i / r)
            c, s = math.cos(theta), math.sin(theta)
            a, b = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)
            out[m, a] = x[m, a] * c - x[m, b] * s
            out[m, b] = x[m, a] * s + x[m, b] * c
    return out


def alibi_slopes(n):
    def pow2(k):
        start = 2 ** (-8 / k)
        return [start ** (h + 1) for h in range(k)]
    if math.log2(n).is_integer():
        return pow2(n)
    p = 2 ** math.floor(math.log2(n))
    return pow2(p) + pow2(2 * p)[0::2][: n - p]


def alibi_bias(heads, length):
    slopes = alibi_slopes(heads)
    return [[[-slopes[h] * abs(i - j) for j in range(length)] for i in range(length)] for h in range(heads)]


def t5_bucket(relative, num_buckets, max_distance, bidirectional):
    """Mesh TensorFlow / T5 _relative_position_bucket, one offset (memory - query) at a time."""
    ret = 0
    n = -relative
    if bidirectional:
        num_buckets //= 2
        if n < 0:
            ret += num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(val, num_buckets - 1)


def rope_scaled(x, base, scaling, factor, original, drop_low=0.0, layout="half"):
    """x: (L, R) rotated at positions 0..L-1 with theta_i after a scaling mode of HF
    transformers' modeling_rope_utils (linear, dynamic, yarn; ntk = NTK-aware base s^(R/(R-2)))
    and p-RoPE; cos and sin multiplied by the mode's attention factor."""
    length, r = x.shape
    half = r // 2
    theta = [base ** (-2.0 * i / r) for i in range(half)]
    mscale = 1.0
    if scaling == "linear":
        theta = [t / factor for t in theta]
    elif scaling == "ntk":
        b = base * factor ** (r / (r - 2))
        theta = [b ** (-2.0 * i / r) for i in range(half)]
    elif scaling == "dynamic_ntk":
        seq = max(length, original)
        b = base * ((factor * seq / original) - (factor - 1)) ** (r / (r - 2))
        theta = [b ** (-2.0 * i / r) for i in range(half)]
    elif scaling == "yarn":
        def correction_dim(rotations):
            return (r * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))
        low = max(math.floor(correction_dim(32)), 0)
        high = min(math.ceil(correction_dim(1)), r - 1)
        if low == high:
            high += 0.001
        blended = []
        for i, t in enumerate(theta):
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)
            blended.append(t / factor * ramp + t * (1 - ramp))
        theta = blended
        mscale = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    dropped = int(round(drop_low * half))
    for i in range(half - dropped, half):
        theta[i] = 0.0
    out = x.copy()
    for m in range(length):
        for i in range(half):
            c, s = math.cos(m * theta[i]) * mscale, math.sin(m * theta[i]) * mscale
            a, b2 = (2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + half)
            out[m, a] = x[m, a] * c - x[m, b2] * s
            out[m, b2] = x[m, a] * s + x[m, b2] * c
    return out


def xpos(x, base, layout, gamma, scale_base):
    """Sun et al. 2022: RoPE, then pair i of a query at position n times zeta_i^((n - c)/scale_base) and of a
    key times zeta_i^(-(n - c)/scale_base), zeta_i = (2i/R + gamma)/(1 + gamma), c = L // 2 (a centre that
    cancels in q . k). Returns (q, k) for q = k = x at positions 0..L-1."""
    length, r = x.shape
    rotated = rope(x, base, layout)
    q, k = rotated.copy(), rotated.copy()
    centre = length // 2
    for m in range(length):
        for i in range(r // 2):
            zeta = (2.0 * i / r + gamma) / (1.0 + gamma)
            up = zeta ** ((m - centre) / scale_base)
            for d in ((2 * i, 2 * i + 1) if layout == "interleaved" else (i, i + r // 2)):
                q[m, d] *= up
                k[m, d] /= up
    return q, k


def fire_bias(w1, b1, w2, b2, c, threshold, length):
    """Li et al. 2023 (bidirectional, on |i-j|): f(psi(|i-j|) / psi(max(T, i))), psi(x) = log(c x + 1),
    f(x) = W2 relu(W1 x + b1) + b2; returns (H, L, L)."""
    def psi(x):
        return math.log(abs(c) * x + 1.0)
    heads = len(b2)
    out = [[[0.0] * length for _ in range(length)] for _ in range(heads)]
    for i in range(length):
        for j in range(length):
            x = psi(abs(i - j)) / psi(max(abs(threshold), i))
            hidden = [max(w1[u][0] * x + b1[u], 0.0) for u in range(len(b1))]
            for h in range(heads):
                out[h][i][j] = sum(w2[h][u] * hidden[u] for u in range(len(b1))) + b2[h]
    return out


def kerple_bias(r1, r2, length, variant):
    """Chi et al. 2022: -r1 log(1 + r2 |i-j|) or -r1 |i-j|^r2, per head (positive r1, r2 given)."""
    out = []
    for a, b in zip(r1, r2):
        if variant == "log":
            out.append([[-a * math.log(1.0 + b * abs(i - j)) for j in range(length)] for i in range(length)])
        else:
            out.append([[-a * abs(i - j) ** b for j in range(length)] for i in range(length)])
    return out


def sandwich_bias(heads, head_dim, length, base):
    """Chi et al. 2023: the dot product of sinusoidal vectors p_i . p_j = sum_k cos((i-j) w_k),
    w_k = base^(-2k/d), k = 1..d/2, minus its value d/2 at i = j, divided by 8h/H for head h = 1..H."""
    def dot(offset):
        return sum(math.cos(offset * base ** (-2.0 * k / head_dim)) for k in range(1, head_dim // 2 + 1))
    return [[[(dot(j - i) - head_dim // 2) / (8.0 * h / heads) for j in range(length)] for i in range(length)]
            for h in range(1, heads + 1)]


def cope_terms(q, k, table, max_count):
    """Golovneva et al. 2024, counted both ways (the C++ header comment): gates g_ij = sigmoid(q_i.k_j / sqrt(d)),
    p_ij = sum_{t=j..i} g_it left of the query, -sum_{t=i+1..j} g_it right of it, clamped to +-(N-1), and the
    score term interpolates q_i.e[floor p] and q_i.e[ceil p]; table row r is position r - (N-1).
    q, k (H, L, d); returns (H, L, L). Direct sums, not the prefix-sum trick."""
    heads, length, d = q.shape
    out = np.zeros((heads, length, length))
    for h in range(heads):
        gate = [[1.0 / (1.0 + math.exp(-float(np.dot(q[h, i], k[h, j])) / math.sqrt(d))) for j in range(length)]
                for i in range(length)]
        for i in range(length):
            for j in range(length):
                if j <= i:
                    p = sum(gate[i][t] for t in range(j, i + 1))
                else:
                    p = -sum(gate[i][t] for t in range(i + 1, j + 1))
                p = min(max(p, -(max_count - 1)), max_count - 1)
                lo = math.floor(p)
                hi = min(lo + 1, max_count - 1)
                w = p - lo
                e_lo, e_hi = table[lo + max_count - 1], table[hi + max_count - 1]
                out[h, i, j] = (1 - w) * float(np.dot(q[h, i], e_lo)) + w * float(np.dot(q[h, i], e_hi))
    return out


def fox_bias(k, weight, bias):
    """Lin et al. 2025, the forget gate read from each key (the C++ header comment): f_t = sigmoid(w_h . k_t + b_h)
    (weight None: sigmoid(b_h) for every token); the logit of query i for key j gets the sum of log f_l over
    l = j+1..i left of the query and l = i+1..j right of it. k (H, L, d); returns (H, L, L). Direct sums."""
    heads, length, _ = k.shape
    out = np.zeros((heads, length, length))
    for h in range(heads):
        logit = [bias[h] + (float(np.dot(weight[h], k[h, t])) if weight is not None else 0.0) for t in range(length)]
        log_gate = [-math.log1p(math.exp(-x)) for x in logit]
        for i in range(length):
            for j in range(length):
                span = range(j + 1, i + 1) if j <= i else range(i + 1, j + 1)
                out[h, i, j] = sum(log_gate[t] for t in span)
    return out


def path_logits(q, k, transform, beta_weight, beta_bias, causal):
    """Yang et al. 2025 (PaTH), w_t and beta_t read from each key (the C++ header comment): H_t = I - beta_t w_t w_t^T
    with w_t = M_h k_t / |M_h k_t| and beta_t = 2 sigmoid(u_h . k_t + b_h); the logit of query i for key j is
    q_i^T H_i H_{i-1} ... H_{j+1} k_j for j < i and q_i^T H_{i+1} ... H_j k_j for j > i (causal: q_i . k_j there).
    q, k (H, L, d); returns (H, L, L). One explicit d x d product per pair."""
    heads, length, d = q.shape
    out = np.zeros((heads, length, length))
    for h in range(heads):
        steps = []
        for t in range(length):
            w = transform[h] @ k[h, t]
            w = w / np.linalg.norm(w)
            beta = 2.0 / (1.0 + math.exp(-(float(np.dot(beta_weight[h], k[h, t])) + beta_bias[h])))
            steps.append(np.eye(d) - beta * np.outer(w, w))
        for i in range(length):
            for j in range(length):
                row = q[h, i].copy()
                if j < i:
                    for t in range(i, j, -1):
                        row = row @ steps[t]
                elif not causal:
                    for t in range(i + 1, j + 1):
                        row = row @ steps[t]
                out[h, i, j] = float(np.dot(row, k[h, j]))
    return out


def layer_norm(x, eps=1e-5):
    """LayerNorm over the last axis with its initial weight 1 and bias 0."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps)


def learned_embed(x, table, scale=None):
    """x (L, D) at positions 0..L-1: x + E[p]; with a per-position scale s_p, LayerNorm(x + s_p E[p])
    (the scaled variant: a learned scale per position, then LayerNorm)."""
    rows = table[: len(x)]
    if scale is None:
        return x + rows
    return layer_norm(x + scale[: len(x)] * rows)


def gelu(x):
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def dynamic_embed(x, p):
    """The content-gated (dynamic) encoder on x (L, D):
    x * c + PE * s * sigmoid(MLP(x) * a) * sigmoid(L / max_length * b), MLP(x) = W2 gelu(W1 x + b1) + b2."""
    length, dim = x.shape
    pe = sinusoidal(length, dim)
    mlp = gelu(x @ np.array(p["w1"]).T + np.array(p["b1"])) @ np.array(p["w2"]).T + np.array(p["b2"])
    gate = sigmoid(mlp * p["content_factor"])
    length_gate = sigmoid(p["length_factor"] * length / p["max_length"])
    return x * np.array(p["content_scale"]) + pe * np.array(p["position_scale"]) * gate * length_gate


def shaw_terms(q, qk, keys, clip, content_scale=None, position_scale=None):
    """Shaw et al. 2018: e_ij gains q_i . a^K_{clip(j-i, k)}; q (H, L, d), keys (2k+1, d), row r is offset r - k.
    With the guide's per-head scales: c_h q.k + p_h q.a^K, returned as the term added to q.k."""
    heads, length, _ = q.shape
    out = np.zeros((heads, length, length))
    for h in range(heads):
        for i in range(length):
            for j in range(length):
                out[h, i, j] = float(np.dot(q[h, i], keys[min(max(j - i, -clip), clip) + clip]))
        if content_scale is not None:
            out[h] = (content_scale[h] - 1.0) * qk[h] + position_scale[h] * out[h]
    return out


def shaw_values(probs, values, clip):
    """Shaw et al. 2018: z_i gains sum_j alpha_ij a^V_{clip(j-i, k)}; probs (H, L, L) -> (H, L, d)."""
    heads, length, _ = probs.shape
    out = np.zeros((heads, length, values.shape[1]))
    for h in range(heads):
        for i in range(length):
            for j in range(length):
                out[h, i] += probs[h, i, j] * values[min(max(j - i, -clip), clip) + clip]
    return out


def xl_terms(q, k, u, v, w_r, base):
    """Dai et al. 2019, terms (b)-(d) of the score: u . k_j + (q_i + v) . W_R R_{i-j}, R the sinusoidal vector
    of width d_model (interleaved sin/cos, as posenc's sinusoidal scheme) at the offset i - j.
    q, k (H, L, d); u, v (H, d); w_r (H*d, d_model). Returns (H, L, L)."""
    heads, length, d = q.shape
    d_model = w_r.shape[1]
    out = np.zeros((heads, length, length))
    for i in range(length):
        for j in range(length):
            offset = i - j
            r = np.array([math.sin(offset / base ** (2 * (c // 2) / d_model)) if c % 2 == 0 else
                          math.cos(offset / base ** (2 * (c // 2) / d_model)) for c in range(d_model)])
            projected = (w_r @ r).reshape(heads, d)
            for h in range(heads):
                out[h, i, j] = float(np.dot(u[h], k[h, j])) + float(np.dot(q[h, i] + v[h], projected[h]))
    return out


def with_direction(bias, left, right):
    """Adds a per-head offset to keys left (j < i) and right (j > i) of the query; bias (L, L) -> (H, L, L)."""
    length = len(bias)
    return [[[bias[i][j] + (left[h] if j < i else right[h] if j > i else 0.0) for j in range(length)]
             for i in range(length)] for h in range(len(left))]


def ape_bias(scale, length):
    """Attention Positional Encoding: scale * (1 - |i-j| / L), L the sequence length."""
    return [[scale * (1.0 - abs(i - j) / length) for j in range(length)] for i in range(length)]


def decay_bias(tau, length):
    """The position-based attention bias: exp(-|i-j| / tau)."""
    return [[math.exp(-abs(i - j) / tau) for j in range(length)] for i in range(length)]


def da_reweight(scores, w, v):
    """Wu et al. 2021 (DA-Transformer): ReLU(s_ij) * f(w_h |i-j|), f(x) = (1 + exp(v_h)) / (1 + exp(v_h - x));
    scores (H, L, L)."""
    heads, length, _ = scores.shape
    out = np.zeros_like(scores)
    for h in range(heads):
        for i in range(length):
            for j in range(length):
                f = (1.0 + math.exp(v[h])) / (1.0 + math.exp(v[h] - w[h] * abs(i - j)))
                out[h, i, j] = max(scores[h, i, j], 0.0) * f
    return out


def dape_reweight(scores, r1, r2, w1, b1, w2):
    """Zheng et al. 2024 (DAPE) over a KERPLE log bias: A + B + f([A; B]) for each pair (i, j), with A = scores (H),
    B = -r1 log(1 + r2 |i-j|) (H), f(x) = W2 gelu(W1 x + b1) reading the 2H values of A and B; scores (H, L, L)."""
    heads, length, _ = scores.shape
    bias = np.array(kerple_bias(r1, r2, length, "log"))
    w1, b1, w2 = np.array(w1), np.array(b1), np.array(w2)
    out = np.zeros_like(scores)
    for i in range(length):
        for j in range(length):
            x = np.concatenate([scores[:, i, j], bias[:, i, j]])
            out[:, i, j] = scores[:, i, j] + bias[:, i, j] + w2 @ gelu(w1 @ x + b1)
    return out


def rope_input(length, dh):
    return np.array([[math.cos(0.3 * m + 0.7 * d) + 0.1 * d for d in range(dh)] for m in range(length)])


def wave(shape, a, b, c=0.0):
    """A deterministic, non-degenerate array: cos(a * flat_index + b) + c * flat_index / size."""
    n = int(np.prod(shape))
    idx = np.arange(n)
    return (np.cos(a * idx + b) + c * idx / n).reshape(shape)


def add_learned_schemes(fixtures):
    """Schemes with trained parameters: the fixture sets every parameter, then records the output."""
    L, D, H, Dh = 7, 8, 2, 4
    x = wave((L, D), 0.37, 0.2)
    learned = {"length": L, "d_model": D, "max_positions": 10, "x": x.tolist(), "table": wave((10, D), 0.71, 1.0).tolist()}
    learned["output"] = learned_embed(x, np.array(learned["table"])).tolist()
    scaled = dict(learned, scaled=True, scale=(0.5 + wave((10, 1), 1.3, 0.4)).tolist())
    scaled["output"] = learned_embed(x, np.array(scaled["table"]), np.array(scaled["scale"])).tolist()
    fixtures["learned"] = {"cases": [learned, scaled]}

    dyn = {"length": L, "d_model": D, "max_length": 20, "x": x.tolist(),
           "content_scale": (1.0 + 0.3 * wave((D,), 0.9, 0.1)).tolist(),
           "position_scale": (0.8 + 0.5 * wave((D,), 1.7, 0.3)).tolist(),
           "w1": (0.4 * wave((2 * D, D), 0.53, 0.7)).tolist(), "b1": (0.1 * wave((2 * D,), 1.1, 0.0)).tolist(),
           "w2": (0.3 * wave((D, 2 * D), 0.29, 1.9)).tolist(), "b2": (0.2 * wave((D,), 0.77, 0.5)).tolist(),
           "content_factor": 1.7, "length_factor": -0.6}
    dyn["output"] = dynamic_embed(x, dyn).tolist()
    fixtures["dynamic"] = {"cases": [dyn]}

    q = 1.2 * wave((H, L, Dh), 0.61, 0.3)
    k = 0.9 * wave((H, L, Dh), 0.43, 1.1)
    qk = np.einsum("hid,hjd->hij", q, k)
    clip = 3
    keys = 0.5 * wave((2 * clip + 1, Dh), 0.83, 0.6)
    values = 0.7 * wave((2 * clip + 1, Dh), 0.47, 2.0)
    logits = wave((H, L, L), 0.31, 0.9)
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    shaw = {"heads": H, "length": L, "head_dim": Dh, "max_distance": clip, "q": q.tolist(), "k": k.tolist(),
            "keys": keys.tolist(), "values": values.tolist(), "probs": probs.tolist(),
            "terms": shaw_terms(q, qk, keys, clip).tolist(), "value_terms": shaw_values(probs, values, clip).tolist()}
    scales = {"content_scale": [0.7, 1.4], "position_scale": [1.9, -0.5]}
    shaw_scaled = dict(shaw, head_scales=True, **scales)
    shaw_scaled["terms"] = shaw_terms(q, qk, keys, clip, scales["content_scale"], scales["position_scale"]).tolist()
    fixtures["shaw"] = {"cases": [shaw, shaw_scaled]}

    u, v = 0.4 * wave((H, Dh), 0.9, 0.2), 0.6 * wave((H, Dh), 1.3, 0.8)
    w_r = 0.3 * wave((H * Dh, H * Dh), 0.37, 1.5)
    xl = {"heads": H, "length": L, "head_dim": Dh, "base": 100.0, "q": q.tolist(), "k": k.tolist(), "u": u.tolist(),
          "v": v.tolist(), "w_r": w_r.tolist(), "terms": xl_terms(q, k, u, v, w_r, 100.0).tolist()}
    fixtures["xl"] = {"cases": [xl]}

    left, right = [0.3, -0.8], [-0.25, 0.6]
    fixtures["ape"] = {"cases": [
        {"heads": H, "length": 9, "scale": 0.7, "bias": [ape_bias(0.7, 9)] * H},
        {"heads": H, "length": 6, "scale": -1.5, "directional": True, "left_offset": left, "right_offset": right,
         "bias": with_direction(ape_bias(-1.5, 6), left, right)},
    ]}
    fixtures["decay"] = {"cases": [
        {"heads": H, "length": 9, "tau": 2.5, "bias": [decay_bias(2.5, 9)] * H},
        {"heads": H, "length": 6, "tau": 0.8, "directional": True, "left_offset": left, "right_offset": right,
         "bias": with_direction(decay_bias(0.8, 6), left, right)},
    ]}

    scores = 2.0 * wave((H, L, L), 0.57, 0.4)
    w, v_da = [-0.7, 0.45], [0.3, -1.2]
    fixtures["da"] = {"cases": [{"heads": H, "length": L, "scores": scores.tolist(), "w": w, "v": v_da,
                                 "output": da_reweight(scores, w, v_da).tolist()}]}

    hidden = 3
    dape = {"heads": H, "length": L, "hidden": hidden, "scores": scores.tolist(), "r1": [0.8, 0.05],
            "r2": [0.4, 1.6], "w1": (0.6 * wave((hidden, 2 * H), 0.73, 0.2)).tolist(),
            "b1": (0.3 * wave((hidden,), 1.9, 0.5)).tolist(), "w2": (0.9 * wave((H, hidden), 0.41, 1.3)).tolist()}
    dape["output"] = dape_reweight(scores, dape["r1"], dape["r2"], dape["w1"], dape["b1"], dape["w2"]).tolist()
    fixtures["dape"] = {"cases": [dape]}


def main(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    fixtures = {
        "sinusoidal": {
            "cases": [
                {"length": 50, "dim": 16, "base": 10000.0, "layout": "interleaved"},
                {"length": 50, "dim": 16, "base": 10000.0, "layout": "concat"},
                {"length": 20, "dim": 6, "base": 100.0, "layout": "interleaved"},
            ]
        },
        "rope": {
            "cases": [
                {"length": 40, "head_dim": 16, "base": 10000.0, "layout": "half", "fraction": 1.0},
                {"length": 40, "head_dim": 16, "base": 10000.0, "layout": "interleaved", "fraction": 1.0},
                {"length": 40, "head_dim": 16, "base": 500.0, "layout": "half", "fraction": 0.5},
            ]
        },
        "alibi": {"cases": [{"heads": h, "length": 9} for h in (1, 4, 6, 8, 12)]},
        "t5": {
            "cases": [
                {"num_buckets": 32, "max_distance": 128, "bidirectional": True},
                {"num_buckets": 64, "max_distance": 256, "bidirectional": True},
                {"num_buckets": 32, "max_distance": 128, "bidirectional": False},
            ],
            "offsets": list(range(-300, 301)),
        },
    }
    for case in fixtures["sinusoidal"]["cases"]:
        case["table"] = sinusoidal(case["length"], case["dim"], case["base"], case["layout"]).tolist()
    for case in fixtures["rope"]["cases"]:
        x = rope_input(case["length"], case["head_dim"])
        case["input"] = x.tolist()
        case["output"] = rope(x, case["base"], case["layout"], case["fraction"]).tolist()
    for case in fixtures["alibi"]["cases"]:
        case["slopes"] = alibi_slopes(case["heads"])
        case["bias"] = alibi_bias(case["heads"], case["length"])
    for case in fixtures["t5"]["cases"]:
        case["buckets"] = [
            t5_bucket(r, case["num_buckets"], case["max_distance"], case["bidirectional"])
            for r in fixtures["t5"]["offsets"]
        ]
    fixtures["rope_scaling"] = {
        "cases": [
            {"scaling": s, "factor": 4.0, "original_max_position": 8, "drop_low_frequencies": d, "length": 40,
             "head_dim": 16, "base": 10000.0}
            for s, d in (("linear", 0.0), ("ntk", 0.0), ("dynamic_ntk", 0.0), ("yarn", 0.0), ("none", 0.25))
        ] + [{"scaling": "yarn", "factor": 8.0, "original_max_position": 64, "drop_low_frequencies": 0.0,
              "length": 30, "head_dim": 32, "base": 500.0}]
    }
    for case in fixtures["rope_scaling"]["cases"]:
        x = rope_input(case["length"], case["head_dim"])
        case["input"] = x.tolist()
        case["output"] = rope_scaled(x, case["base"], case["scaling"], case["factor"], case["original_max_position"],
                                     case["drop_low_frequencies"]).tolist()
    fixtures["xpos"] = {
        "cases": [
            {"length": 20, "head_dim": 16, "base": 10000.0, "layout": layout, "gamma": 0.4, "scale_base": 8.0}
            for layout in ("half", "interleaved")
        ]
    }
    for case in fixtures["xpos"]["cases"]:
        x = rope_input(case["length"], case["head_dim"])
        case["input"] = x.tolist()
        q, k = xpos(x, case["base"], case["layout"], case["gamma"], case["scale_base"])
        case["q"], case["k"] = q.tolist(), k.tolist()
    fire = {"w1": [[0.5], [-1.2], [2.0], [0.3]], "b1": [0.1, 0.4, -0.5, 0.0],
            "w2": [[1.0, -0.5, 0.25, 2.0], [-1.5, 0.3, 0.7, -0.2]], "b2": [0.05, -0.1], "c": 0.3, "threshold": 6.0,
            "length": 14}
    fire["bias"] = fire_bias(fire["w1"], fire["b1"], fire["w2"], fire["b2"], fire["c"], fire["threshold"],
                             fire["length"])
    fixtures["fire"] = {"cases": [fire]}
    fixtures["kerple"] = {
        "cases": [
            {"variant": "log", "r1": [0.5, 1.7, 0.01], "r2": [0.3, 0.9, 2.5], "length": 12},
            {"variant": "power", "r1": [0.2, 0.8, 1.5], "r2": [0.5, 1.0, 2.0], "length": 12},
        ]
    }
    for case in fixtures["kerple"]["cases"]:
        case["bias"] = kerple_bias(case["r1"], case["r2"], case["length"], case["variant"])
    fixtures["sandwich"] = {
        "cases": [
            {"heads": 4, "head_dim": 16, "length": 20, "base": 10000.0},
            {"heads": 3, "head_dim": 8, "length": 15, "base": 100.0},
        ]
    }
    for case in fixtures["sandwich"]["cases"]:
        case["bias"] = sandwich_bias(case["heads"], case["head_dim"], case["length"], case["base"])
    cope = {"heads": 2, "length": 9, "head_dim": 4, "max_count": 4}
    H, L, Dh, N = cope["heads"], cope["length"], cope["head_dim"], cope["max_count"]
    q = np.array([[[1.5 * math.cos(0.7 * i + 1.3 * d + h) for d in range(Dh)] for i in range(L)] for h in range(H)])
    k = np.array([[[2.0 * math.sin(0.4 * i - 0.9 * d + 0.5 * h) for d in range(Dh)] for i in range(L)]
                  for h in range(H)])
    table = np.array([[0.3 * math.cos(0.8 * r + d) + 0.05 * r for d in range(Dh)] for r in range(2 * N - 1)])
    cope.update(q=q.tolist(), k=k.tolist(), table=table.tolist(), terms=cope_terms(q, k, table, N).tolist())
    fixtures["cope"] = {"cases": [cope]}
    fox_cases = []
    for gate, (H, L, Dh) in (("content", (3, 10, 4)), ("constant", (2, 7, 4))):
        k = np.array([[[1.2 * math.sin(0.6 * i + 1.1 * d - 0.7 * h) for d in range(Dh)] for i in range(L)]
                      for h in range(H)])
        weight = np.array([[0.8 * math.cos(1.7 * d + 0.9 * h) for d in range(Dh)] for h in range(H)])
        bias = [1.5 - 1.2 * h for h in range(H)]
        case = {"gate": gate, "heads": H, "length": L, "head_dim": Dh, "k": k.tolist(), "gate_bias": bias}
        if gate == "content":
            case["gate_weight"] = weight.tolist()
        case["bias"] = fox_bias(k, weight if gate == "content" else None, bias).tolist()
        fox_cases.append(case)
    fixtures["fox"] = {"cases": fox_cases}
    path_cases = []
    for causal, (H, L, Dh) in ((False, (2, 37, 4)), (True, (3, 9, 4))):
        q = np.array([[[1.1 * math.cos(0.5 * i + 1.3 * d - 0.4 * h) for d in range(Dh)] for i in range(L)]
                      for h in range(H)])
        k = np.array([[[1.3 * math.sin(0.8 * i - 0.6 * d + 0.9 * h) for d in range(Dh)] for i in range(L)]
                      for h in range(H)])
        transform = np.array([[[math.cos(1.1 * r + 0.7 * c + h) for c in range(Dh)] for r in range(Dh)]
                              for h in range(H)])
        beta_weight = np.array([[0.6 * math.sin(1.9 * d + 0.3 * h) for d in range(Dh)] for h in range(H)])
        beta_bias = [0.8 - 0.9 * h for h in range(H)]
        path_cases.append({"causal": causal, "heads": H, "length": L, "head_dim": Dh, "q": q.tolist(),
                           "k": k.tolist(), "transform": transform.tolist(), "beta_weight": beta_weight.tolist(),
                           "beta_bias": beta_bias,
                           "logits": path_logits(q, k, transform, beta_weight, beta_bias, causal).tolist()})
    fixtures["path"] = {"cases": path_cases}
    add_learned_schemes(fixtures)
    for name, data in fixtures.items():
        data["generator"] = "scripts/golden.py (numpy, independent of the C++ code)"
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(data, f, separators=(",", ":"))
            f.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/golden")
