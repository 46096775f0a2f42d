"""Records, at chosen layers of DeepSeek's V4.1 reference (inference/model.py with the CPU kernels), the values that
its bf16 roundings round, before rounding, so that a row where dsv4 and the reference part can be shown to straddle
a rounding boundary (straddle.py; docs/numerics.md, "dsv4 against DeepSeek's reference, row by row").

Nothing of the reference's arithmetic is replaced: each tap wraps a function or module of the reference, lets the
original compute the value the model uses, and recomputes the value before the rounding with the original's own
torch operations (the fragments in EXPECTED, checked against the loaded source before anything runs: a reference
whose code differs stops the run). Each tap stores NAME_LL [T, n / T] float32 and, where the reference has a rounded
result, NAME_LL_post, the value the model went on with (straddle.py checks that the recomputed value rounds to it).

Names and layouts are those of `dsv4 run --dump-pre-round` (src/backends/cpu/forward.h, pre_round_probe): h_in
(the layer's input streams, already bf16), attn_mix_pre/post/comb, attn_collapse, attn_norm, wq_a, q_norm, wq_b, q_rope, wkv, kv_norm, kv_rope, probs (the
window part then the picks, zero-padded to window + index_topk), attn_o, o_rope, wo_a, wo_b, attn_post,
ffn_mix_pre/post/comb, ffn_collapse, ffn_norm, ffn_post.
"""
import inspect
import re
import sys

import torch

# function -> source fragments, in order, that the recomputations below repeat or rely on (whitespace ignored)
EXPECTED = {
    "Block.forward": [
        "attn_pre, attn_post, attn_comb = self.hc_mixes(x, self.hc_attn_fn, self.hc_attn_scale, self.hc_attn_base)",
        "x = self.hc_pre(x, pre_mix)",
        "x = self.attn_norm(x)",
        "x = self.attn(x, start_pos, *attn_args)",
        "x = self.hc_post(x, residual, attn_post, attn_comb)",
        "ffn_pre, ffn_post, ffn_comb = self.hc_mixes(x, self.hc_ffn_fn, self.hc_ffn_scale, self.hc_ffn_base)",
        "x = self.hc_pre(x, attn_pre)",
        "x = self.ffn_norm(x)",
        "x = self.ffn(x, image_mask)",
        "x = self.hc_post(x, residual, ffn_post, ffn_comb)",
    ],
    "Block.hc_mixes": ["return hc_split_sinkhorn(mixes, hc_scale, hc_base,"],
    "Block.hc_pre": ["y = torch.sum(pre_mix.unsqueeze(-1) * x.float(), dim=2)", "return y.to(x.dtype)"],
    "Block.hc_post": [
        "y = post.unsqueeze(-1) * x.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)",
        "return y.type_as(x)",
    ],
    "RMSNorm.forward": [
        "x = x.float()",
        "var = x.square().mean(-1, keepdim=True)",
        "x = x * torch.rsqrt(var + self.eps)",
        "return (self.weight * x).to(dtype)",
    ],
    "Linear.forward": ["return linear(x, self.weight, self.bias)"],
    "RowParallelLinear.forward": ["y = linear(x, self.weight, None)", "return y.type_as(x)"],
    "linear": [
        "elif weight.dtype == torch.float8_e4m3fn:",
        "x, s = act_quant(x, fp8_block_size, scale_fmt, scale_dtype)",
        "return fp8_gemm(",
        "block_size=fp8_block_size,",
    ],
    "fp8_gemm": [
        "b_s_rows = b_s.float().repeat_interleave(block_size, dim=0)[:N]",
        "c = _block_scaled_gemm(a.view(M, K).float(), a_s.view(M, -1).float(), b.float(), b_s_rows, block_size)",
        "return c.to(torch.get_default_dtype()).view(*a.size()[:-1], N)",
    ],
    "apply_rotary_emb": [
        "x = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))",
        "if inverse:",
        "freqs_cis = freqs_cis.conj()",
        "if x.ndim == 3:",
        "freqs_cis = freqs_cis.view(1, x.size(1), x.size(-1))",
        "freqs_cis = freqs_cis.view(1, x.size(1), 1, x.size(-1))",
        "x = torch.view_as_real(x * freqs_cis).flatten(-2)",
        "y.copy_(x)",
    ],
    "Attention.forward": [
        "qr = self.q_norm(self.wq_a(x))",
        "q = self.wq_b(qr).unflatten(-1, (self.n_local_heads, self.head_dim))",
        "apply_rotary_emb(q[..., -rd:], freqs_cis)",
        "kv, topk_idxs = self._window_kv(x, freqs_cis, start_pos)",
        "o = sparse_attn(q, kv, self.attn_sink, topk_idxs, self.softmax_scale)",
        "apply_rotary_emb(o[..., -rd:], freqs_cis, True)",
        "o = o.view(bsz, seqlen, self.n_local_groups, -1)",
        "wo_a = self.wo_a.weight.view(self.n_local_groups, self.o_lora_rank, -1)",
        'o = torch.einsum("bsgd,grd->bsgr", o, wo_a)',
        "x = self.wo_b(o.flatten(2))",
    ],
    "Attention._window_kv": [
        "kv = self.kv_norm(self.wkv(x))",
        "apply_rotary_emb(kv[..., -self.rope_head_dim :], freqs_cis)",
        "act_quant(kv, fp8_block_size, scale_fmt, scale_dtype, True)",
    ],
    "sparse_attn": [
        "scale = torch.tensor(softmax_scale, dtype=torch.float32)",
        "qf = q.float()",
        "kvf = kv.float()",
        "acc_o = torch.zeros(b, m, h, d, dtype=torch.float32)",
        "sum_exp = torch.zeros(b, m, h, dtype=torch.float32)",
        "scores_max = torch.full((b, m, h), -1e30, dtype=torch.float32)",
        "batch = torch.arange(b).view(b, 1, 1)",
        "for t in range(0, topk, SPARSE_ATTN_BLOCK):",
        "idxs = topk_idxs[:, :, t : t + SPARSE_ATTN_BLOCK].long()",
        "valid = idxs != -1",
        "kv_blk = kvf[batch, idxs.clamp_min(0)] * valid.unsqueeze(-1)",
        'acc_s = torch.einsum("bmhd,bmkd->bmhk", qf, kv_blk)',
        "acc_s = torch.where(valid.unsqueeze(2), acc_s, -torch.inf) * scale",
        "scores_max_prev = scores_max",
        "scores_max = torch.maximum(scores_max_prev, acc_s.amax(dim=-1))",
        "scores_scale = torch.exp(scores_max_prev - scores_max)",
        "p = torch.exp(acc_s - scores_max.unsqueeze(-1))",
        "sum_exp = sum_exp * scores_scale + p.sum(dim=-1)",
        "p_bf16 = p.to(torch.bfloat16)",
        'acc_o = acc_o * scores_scale.unsqueeze(-1) + torch.einsum("bmhk,bmkd->bmhd", p_bf16.float(), kv_blk)',
        "sum_exp = sum_exp + torch.exp(attn_sink.float() - scores_max)",
        "return (acc_o / sum_exp.unsqueeze(-1)).to(torch.bfloat16)",
    ],
}


def _squash(s):
    return re.sub(r"\s+", "", s)


def check_sources(ref, kernel):
    """Stops the run when a function the taps rely on is not the code they were written against."""
    where = {"linear": ref.linear, "apply_rotary_emb": ref.apply_rotary_emb, "fp8_gemm": kernel.fp8_gemm,
             "sparse_attn": kernel.sparse_attn}
    for name, fragments in EXPECTED.items():
        if name in where:
            fn = where[name]
        else:
            cls, meth = name.split(".")
            fn = getattr(getattr(ref, cls), meth)
        src = _squash(inspect.getsource(fn))
        at = 0
        for frag in fragments:
            i = src.find(_squash(frag), at)
            if i < 0:
                raise SystemExit(f"pre-round taps: {name} does not hold (in this order) `{frag}`; the reference differs "
                                 "from the code the taps were written against (tests/reference/v41/pre_round_taps.py)")
            at = i + 1
    if ref.sparse_attn is not kernel.sparse_attn or ref.fp8_gemm is not kernel.fp8_gemm:
        raise SystemExit("pre-round taps: model.py's sparse_attn / fp8_gemm are not kernel_cpu's")
    if ref.fp8_block_size != 32 or ref.scale_fmt != "ue8m0":
        raise SystemExit(f"pre-round taps: unexpected fp8_block_size {ref.fp8_block_size} / scale_fmt {ref.scale_fmt}")


class PreRoundTaps:
    def __init__(self, ref, model, args, layers, rows):
        self.ref = ref
        self.kernel = sys.modules[ref.sparse_attn.__module__]
        check_sources(ref, self.kernel)
        self.T = rows
        self.kmax = args.window_size + args.index_topk
        self.layers = sorted(set(layers)) if layers else list(range(len(model.layers)))
        self.rec = {}
        self.block = None  # the tapped layer whose Block.forward is running
        self.attn = None  # the tapped layer whose Attention.forward is running
        self.rope_calls = 0
        self.o = None  # sparse_attn's output (then rotated in place): wo_a's input
        self.mismatch = {}
        for L in self.layers:
            if not 0 <= L < len(model.layers):
                raise SystemExit(f"pre-round taps: no layer {L}")
            self._wrap_block(model.layers[L], L)
        self._orig_sparse = ref.sparse_attn
        self._orig_rope = ref.apply_rotary_emb
        ref.sparse_attn = self._sparse_attn
        ref.apply_rotary_emb = self._rope

    # -- storage
    def put(self, name, L, pre, post=None):
        key = f"{name}_{L:02d}"
        if key in self.rec:
            raise SystemExit(f"pre-round taps: {key} recorded twice (more than one forward call?)")
        pre = pre.detach().float()
        self.rec[key] = pre.reshape(self.T, -1).numpy().copy()
        if post is not None:
            post = post.detach()
            self.rec[key + "_post"] = post.float().reshape(self.T, -1).numpy().copy()
            n = int((pre.to(post.dtype).float().reshape(-1) != post.float().reshape(-1)).sum())
            if n:
                self.mismatch[key] = n

    def arrays(self):
        missing = [f"{n}_{L:02d}" for L in self.layers for n in ("h_in", "attn_collapse", "attn_norm", "wq_a", "q_norm", "wq_b",
                   "q_rope", "wkv", "kv_norm", "kv_rope", "probs", "attn_o", "o_rope", "wo_a", "wo_b", "attn_post",
                   "ffn_collapse", "ffn_norm", "ffn_post", "attn_mix_post", "ffn_mix_post")
                   if f"{n}_{L:02d}" not in self.rec]
        if missing:
            raise SystemExit(f"pre-round taps: never recorded {missing[:6]}")
        for k, n in self.mismatch.items():
            print(f"pre-round taps: WARNING {k}: {n} recomputed values do not round to the reference's own result",
                  file=sys.stderr)
        return self.rec

    # -- recomputations (the reference's own expressions; see EXPECTED)
    def fp8_linear_pre(self, x, weight):
        ref, kc = self.ref, self.kernel
        if weight.dtype != torch.float8_e4m3fn:
            raise SystemExit(f"pre-round taps: expected an FP8 weight, got {weight.dtype}")
        q, s = ref.act_quant(x, ref.fp8_block_size, ref.scale_fmt, ref.scale_dtype)
        K = q.size(-1)
        M = q.numel() // K
        N = weight.size(0)
        b_s_rows = weight.scale.float().repeat_interleave(ref.fp8_block_size, dim=0)[:N]
        return kc._block_scaled_gemm(q.view(M, K).float(), s.view(M, -1).float(), weight.float(), b_s_rows,
                                     ref.fp8_block_size)

    @staticmethod
    def rope_pre(x, freqs_cis, inverse):
        x = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)))
        if inverse:
            freqs_cis = freqs_cis.conj()
        if x.ndim == 3:
            freqs_cis = freqs_cis.view(1, x.size(1), x.size(-1))
        else:
            freqs_cis = freqs_cis.view(1, x.size(1), 1, x.size(-1))
        return torch.view_as_real(x * freqs_cis).flatten(-2)

    def sparse_attn_pre(self, q, kv, attn_sink, topk_idxs, softmax_scale):
        block = self.kernel.SPARSE_ATTN_BLOCK
        b, m, h, d = q.size()
        topk = topk_idxs.size(-1)
        scale = torch.tensor(softmax_scale, dtype=torch.float32)
        qf = q.float()
        kvf = kv.float()
        acc_o = torch.zeros(b, m, h, d, dtype=torch.float32)
        sum_exp = torch.zeros(b, m, h, dtype=torch.float32)
        scores_max = torch.full((b, m, h), -1e30, dtype=torch.float32)
        batch = torch.arange(b).view(b, 1, 1)
        ps = []
        for t in range(0, topk, block):
            idxs = topk_idxs[:, :, t : t + block].long()
            valid = idxs != -1
            kv_blk = kvf[batch, idxs.clamp_min(0)] * valid.unsqueeze(-1)
            acc_s = torch.einsum("bmhd,bmkd->bmhk", qf, kv_blk)
            acc_s = torch.where(valid.unsqueeze(2), acc_s, -torch.inf) * scale
            scores_max_prev = scores_max
            scores_max = torch.maximum(scores_max_prev, acc_s.amax(dim=-1))
            scores_scale = torch.exp(scores_max_prev - scores_max)
            p = torch.exp(acc_s - scores_max.unsqueeze(-1))
            ps.append(p)
            sum_exp = sum_exp * scores_scale + p.sum(dim=-1)
            p_bf16 = p.to(torch.bfloat16)
            acc_o = acc_o * scores_scale.unsqueeze(-1) + torch.einsum("bmhk,bmkd->bmhd", p_bf16.float(), kv_blk)
        sum_exp = sum_exp + torch.exp(attn_sink.float() - scores_max)
        p = torch.cat(ps, dim=-1)
        if p.size(-1) > self.kmax:
            raise SystemExit(f"pre-round taps: {p.size(-1)} attention entries, more than window + index_topk")
        pad = torch.zeros(b, m, h, self.kmax - p.size(-1), dtype=torch.float32)
        return torch.cat([p, pad], dim=-1), acc_o / sum_exp.unsqueeze(-1)

    # -- wrappers
    def _wrap_block(self, blk, L):
        taps = self
        calls = {"pre": 0, "post": 0}
        orig_forward, orig_mixes, orig_pre, orig_post = blk.forward, blk.hc_mixes, blk.hc_pre, blk.hc_post

        def forward(*a, **k):
            calls["pre"] = calls["post"] = 0
            taps.block = L
            taps.put("h_in", L, a[0])  # the layer's input streams, bf16 (after Engram)
            try:
                return orig_forward(*a, **k)
            finally:
                taps.block = None

        def hc_mixes(x, hc_fn, hc_scale, hc_base):
            out = orig_mixes(x, hc_fn, hc_scale, hc_base)
            if taps.block == L:
                sub = "attn" if hc_fn is blk.hc_attn_fn else "ffn" if hc_fn is blk.hc_ffn_fn else None
                if sub is None:
                    raise SystemExit("pre-round taps: hc_mixes with neither the attention's nor the FFN's hc_fn")
                pre, post, comb = out
                taps.put(f"{sub}_mix_pre", L, pre)
                taps.put(f"{sub}_mix_post", L, post)
                taps.put(f"{sub}_mix_comb", L, comb)
            return out

        def hc_pre(x, pre_mix):
            out = orig_pre(x, pre_mix)
            if taps.block == L:
                sub = ("attn", "ffn")[calls["pre"]]
                calls["pre"] += 1
                taps.put(f"{sub}_collapse", L, torch.sum(pre_mix.unsqueeze(-1) * x.float(), dim=2), out)
            return out

        def hc_post(x, residual, post, comb):
            pre = None
            if taps.block == L:
                pre = post.unsqueeze(-1) * x.unsqueeze(-2) + torch.sum(comb.unsqueeze(-1) * residual.unsqueeze(-2), dim=2)
            out = orig_post(x, residual, post, comb)
            if pre is not None:
                sub = ("attn", "ffn")[calls["post"]]
                calls["post"] += 1
                taps.put(f"{sub}_post", L, pre, out)
            return out

        blk.forward, blk.hc_mixes, blk.hc_pre, blk.hc_post = forward, hc_mixes, hc_pre, hc_post
        self._wrap_norm(blk.attn_norm, "attn_norm", L)
        self._wrap_norm(blk.ffn_norm, "ffn_norm", L)
        attn = blk.attn
        self._wrap_norm(attn.q_norm, "q_norm", L)
        self._wrap_norm(attn.kv_norm, "kv_norm", L)
        for name in ("wq_a", "wq_b", "wkv"):
            self._wrap_linear(getattr(attn, name), name, L)
        self._wrap_wo_b(attn, L)
        orig_attn = attn.forward

        def attn_forward(*a, **k):
            taps.attn, taps.rope_calls, taps.o = L, 0, None
            try:
                out = orig_attn(*a, **k)
            finally:
                taps.attn = None
            if taps.rope_calls < 3:
                raise SystemExit(f"pre-round taps: layer {L}: {taps.rope_calls} RoPE calls in attention")
            return out

        attn.forward = attn_forward

    def _wrap_norm(self, mod, name, L):
        taps, orig = self, mod.forward

        def forward(x):
            out = orig(x)
            xf = x.float()
            var = xf.square().mean(-1, keepdim=True)
            xf = xf * torch.rsqrt(var + mod.eps)
            taps.put(name, L, mod.weight * xf, out)
            return out

        mod.forward = forward

    def _wrap_linear(self, mod, name, L):
        taps, orig = self, mod.forward

        def forward(x):
            out = orig(x)
            taps.put(name, L, taps.fp8_linear_pre(x, mod.weight), out)
            return out

        mod.forward = forward

    def _wrap_wo_b(self, attn, L):
        taps, mod = self, attn.wo_b
        orig = mod.forward

        def forward(x):
            if taps.o is None:
                raise SystemExit(f"pre-round taps: layer {L}: wo_b ran before sparse_attn was seen")
            o = taps.o.view(x.size(0), x.size(1), attn.n_local_groups, -1)
            wo_a = attn.wo_a.weight.view(attn.n_local_groups, attn.o_lora_rank, -1)
            taps.put("wo_a", L, torch.einsum("bsgd,grd->bsgr", o.float(), wo_a.float()), x)
            out = orig(x)
            taps.put("wo_b", L, taps.fp8_linear_pre(x, mod.weight), out)
            return out

        mod.forward = forward

    def _sparse_attn(self, q, kv, attn_sink, topk_idxs, softmax_scale):
        out = self._orig_sparse(q, kv, attn_sink, topk_idxs, softmax_scale)
        if self.attn is not None:
            p, o = self.sparse_attn_pre(q, kv, attn_sink, topk_idxs, softmax_scale)
            self.put("probs", self.attn, p)
            self.put("attn_o", self.attn, o, out)
            self.o = out
        return out

    def _rope(self, x, freqs_cis, inverse=False):
        if self.attn is None:
            return self._orig_rope(x, freqs_cis, inverse)
        L = self.attn
        pre = self.rope_pre(x, freqs_cis, inverse)
        self.rope_calls += 1
        out = self._orig_rope(x, freqs_cis, inverse)
        name = "o_rope" if inverse else {1: "q_rope", 2: "kv_rope"}.get(self.rope_calls)
        if name is not None:
            want = 3 if name == "kv_rope" else 4
            if x.dim() != want or x.size(1) != self.T:
                raise SystemExit(f"pre-round taps: layer {L}: {name} on a tensor of shape {tuple(x.shape)}")
            if name == "o_rope" and self.o is None:
                raise SystemExit(f"pre-round taps: layer {L}: inverse RoPE before sparse_attn")
            self.put(name, L, pre, out)
        return out
