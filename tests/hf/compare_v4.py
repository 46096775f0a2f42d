#!/usr/bin/env python3
"""Cross-check of the CPU oracle's V4 / 0731 forward against Hugging Face transformers'
DeepseekV4ForCausalLM (an independent implementation of the V4 architecture).

Input: the directory written by `hf_v4_dump DIR small` (weights.safetensors with the synthetic
preset's weights dequantized to f32 under their checkpoint names, prompt.txt, and the oracle's
logits of every prompt row: oracle_ref32.npy, oracle_ref64.npy, oracle_unquantized.npy).

The same weights are loaded into DeepseekV4ForCausalLM built from the equivalent config and run on
the same prompt (float64, float32 with TF32 off, and bfloat16). Reported per pair: NRMS over all logits,
top-1 agreement per position, and the worst positions. transformers' V4 omits every quantization
step of the reference (activation FP8, KV QDQ, FP4 indexer, Hadamard), so the like-for-like pair is
(oracle_unquantized, hf_fp32); the quantized oracle is reported against it too.
"""
import json
import re
import struct
import sys

import numpy as np
import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        b, e = meta["data_offsets"]
        dt = {"F32": np.float32, "I64": np.int64}[meta["dtype"]]
        out[name] = np.frombuffer(data[b:e], dtype=dt).reshape(meta["shape"])
    return out


def hf_config(w, n_layers, ratios):
    from transformers import DeepseekV4Config

    D = w["embed.weight"].shape[1]
    V = w["embed.weight"].shape[0]
    H = w["layers.0.attn.attn_sink"].shape[0]
    d = w["layers.0.attn.kv_norm.weight"].shape[0]
    Q = w["layers.0.attn.q_norm.weight"].shape[0]
    E, _ = w["layers.0.ffn.gate.weight"].shape
    I = w["layers.0.ffn.shared_experts.w1.weight"].shape[0]
    G = next(g for g in range(1, 65) if w["layers.0.attn.wo_a.weight"].shape[1] * g == H * d)
    O = w["layers.0.attn.wo_a.weight"].shape[0] // G
    K = next(w[k].shape[1] for k in w if k.endswith("tid2eid"))
    n_hash = sum(1 for k in w if k.endswith("tid2eid"))
    csa = next(l for l, r in enumerate(ratios) if r == 4)
    ihd = w[f"layers.{csa}.attn.indexer.compressor.norm.weight"].shape[0]
    IH = w[f"layers.{csa}.attn.indexer.weights_proj.weight"].shape[0]
    hca = sorted({r for r in ratios if r not in (0, 4)})
    types = {0: "sliding_attention", 4: "compressed_sparse_attention"}
    rd = 64
    cfg = DeepseekV4Config(
        vocab_size=V, hidden_size=D, moe_intermediate_size=I, num_hidden_layers=n_layers,
        num_attention_heads=H, num_key_value_heads=1, head_dim=d, q_lora_rank=Q,
        num_experts_per_tok=K, n_routed_experts=E, n_shared_experts=1, scoring_func="sqrtsoftplus",
        routed_scaling_factor=1.5, max_position_embeddings=1048576, rope_theta=10000.0,
        layer_types=[types.get(r, "heavily_compressed_attention") for r in ratios],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": hca[0] if hca else 128},
        compress_rope_theta=160000.0, hc_mult=4, hc_sinkhorn_iters=20, hc_eps=1e-6,
        mlp_layer_types=["hash_moe"] * n_hash + ["moe"] * (n_layers - n_hash), swiglu_limit=10.0,
        sliding_window=int(SLIDING_WINDOW), o_groups=G, o_lora_rank=O, index_n_heads=IH, index_head_dim=ihd,
        index_topk=int(INDEX_TOPK), rms_norm_eps=1e-6, tie_word_embeddings=False,
        partial_rotary_factor=rd / d,
        rope_parameters={
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": rd / d},
            "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "factor": 16.0,
                         "original_max_position_embeddings": 65536, "beta_fast": 32.0, "beta_slow": 1.0,
                         "attention_factor": 1.0, "partial_rotary_factor": rd / d},
        },
    )
    cfg._attn_implementation = "eager"
    return cfg


# HF parameter name -> checkpoint name (or a function of the checkpoint tensors).
RULES = [
    (r"model\.embed_tokens\.weight", "embed.weight"),
    (r"lm_head\.weight", "head.weight"),
    (r"model\.norm\.weight", "norm.weight"),
    (r"model\.hc_head\.hc_fn", "hc_head_fn"),
    (r"model\.hc_head\.hc_base", "hc_head_base"),
    (r"model\.hc_head\.hc_scale", "hc_head_scale"),
    (r"model\.layers\.(\d+)\.self_attn\.q_a_proj\.weight", "layers.{0}.attn.wq_a.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.q_a_norm\.weight", "layers.{0}.attn.q_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.q_b_proj\.weight", "layers.{0}.attn.wq_b.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.kv_proj\.weight", "layers.{0}.attn.wkv.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.kv_norm\.weight", "layers.{0}.attn.kv_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.o_a_proj\.weight", "layers.{0}.attn.wo_a.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.o_b_proj\.weight", "layers.{0}.attn.wo_b.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.sinks", "layers.{0}.attn.attn_sink"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.kv_proj\.weight", "layers.{0}.attn.indexer.compressor.wkv.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.gate_proj\.weight", "layers.{0}.attn.indexer.compressor.wgate.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.position_bias", "layers.{0}.attn.indexer.compressor.ape"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.kv_norm\.weight", "layers.{0}.attn.indexer.compressor.norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.q_b_proj\.weight", "layers.{0}.attn.indexer.wq_b.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.indexer\.scorer\.weights_proj\.weight", "layers.{0}.attn.indexer.weights_proj.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.kv_proj\.weight", "layers.{0}.attn.compressor.wkv.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.gate_proj\.weight", "layers.{0}.attn.compressor.wgate.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.position_bias", "layers.{0}.attn.compressor.ape"),
    (r"model\.layers\.(\d+)\.self_attn\.compressor\.kv_norm\.weight", "layers.{0}.attn.compressor.norm.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.weight", "layers.{0}.ffn.gate.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias", "layers.{0}.ffn.gate.bias"),
    (r"model\.layers\.(\d+)\.mlp\.gate\.tid2eid", "layers.{0}.ffn.gate.tid2eid"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.gate_proj\.weight", "layers.{0}.ffn.shared_experts.w1.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.up_proj\.weight", "layers.{0}.ffn.shared_experts.w3.weight"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.down_proj\.weight", "layers.{0}.ffn.shared_experts.w2.weight"),
    (r"model\.layers\.(\d+)\.mlp\.experts\.gate_up_proj", "experts_gate_up"),
    (r"model\.layers\.(\d+)\.mlp\.experts\.down_proj", "experts_down"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", "layers.{0}.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "layers.{0}.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.attn_hc\.(fn|base|scale)", "layers.{0}.hc_attn_{1}"),
    (r"model\.layers\.(\d+)\.ffn_hc\.(fn|base|scale)", "layers.{0}.hc_ffn_{1}"),
]


def source(w, name, n_experts):
    for pat, tgt in RULES:
        m = re.fullmatch(pat, name)
        if not m:
            continue
        g = m.groups()
        if tgt == "experts_gate_up":  # [E, 2I, D]: w1 (gate) rows then w3 (up) rows
            return np.stack([np.concatenate([w[f"layers.{g[0]}.ffn.experts.{e}.w1.weight"],
                                             w[f"layers.{g[0]}.ffn.experts.{e}.w3.weight"]]) for e in range(n_experts)])
        if tgt == "experts_down":
            return np.stack([w[f"layers.{g[0]}.ffn.experts.{e}.w2.weight"] for e in range(n_experts)])
        return w[tgt.format(*g)]
    return None


def stats(name, a, b):
    """NRMS(a, b) = ||a - b|| / ||b|| over all logits, top-1 agreement per position."""
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    nrms = np.sqrt(((a - b) ** 2).sum() / (b ** 2).sum())
    row = np.sqrt(((a - b) ** 2).sum(1) / (b ** 2).sum(1))
    agree = a.argmax(1) == b.argmax(1)
    bad = [int(i) for i in np.nonzero(~agree)[0]]
    print(f"{name}: NRMS {nrms:.3e}  top-1 {agree.sum()}/{len(agree)}  per-position NRMS min {row.min():.2e} "
          f"median {np.median(row):.2e} max {row.max():.2e} (at {int(row.argmax())})  disagree at {bad[:20]}")
    return nrms, agree


def main():
    global SLIDING_WINDOW, INDEX_TOPK
    d = sys.argv[1]
    preset = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    SLIDING_WINDOW, INDEX_TOPK = preset.get("window", 128), preset.get("index_topk", 64)
    ratios = preset["ratios"]
    import transformers
    print("transformers", transformers.__version__, "torch", torch.__version__)
    w = read_safetensors(f"{d}/weights.safetensors")
    prompt = [int(t) for t in open(f"{d}/prompt.txt").read().split()]
    cfg = hf_config(w, len(ratios), ratios)
    from transformers import DeepseekV4ForCausalLM
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    model = DeepseekV4ForCausalLM(cfg).to(torch.float32).eval()
    sd = model.state_dict()
    E = w["layers.0.ffn.gate.weight"].shape[0]
    missing = []
    new = {}
    for k, v in sd.items():
        src = source(w, k, E)
        if src is None:
            missing.append(k)
            continue
        src = np.asarray(src)
        if tuple(src.shape) != tuple(v.shape):
            print("shape mismatch", k, tuple(v.shape), "from", tuple(src.shape))
            src = src.reshape(v.shape)
        new[k] = torch.from_numpy(src.copy()).to(v.dtype)
    print("HF tensors without a source:", [k for k in missing if "rotary" not in k and "inv_freq" not in k])
    model.load_state_dict(new, strict=False)
    # The plain per-expert loop (the grouped_mm backend takes no float64).
    if hasattr(model, "set_experts_implementation"):
        model.set_experts_implementation("eager")
    ids = torch.tensor([prompt], dtype=torch.long)
    logits = {}
    for dt, name in ((torch.float64, "hf_fp64"), (torch.float32, "hf_fp32"), (torch.bfloat16, "hf_bf16")):
        m = model.to("cuda", dtype=dt)
        with torch.no_grad():
            out = m(input_ids=ids.cuda(), use_cache=False).logits[0].double().cpu().numpy()
        logits[name] = out
    ref32 = np.load(f"{d}/oracle_ref32.npy")
    ref64 = np.load(f"{d}/oracle_ref64.npy")
    unq = np.load(f"{d}/oracle_unquantized.npy")
    unq64 = np.load(f"{d}/oracle_unquantized_ref64.npy")
    print(f"prompt {len(prompt)} tokens, vocab {ref32.shape[1]}, layer ratios {ratios}")
    stats("floor F = NRMS(ref32, ref64)", ref32, ref64)
    stats("unquantized floor NRMS(unq ref32, unq ref64)", unq, unq64)
    stats("hf_fp32 vs hf_fp64", logits["hf_fp32"], logits["hf_fp64"])
    stats("oracle unquantized vs hf_fp64", unq, logits["hf_fp64"])
    stats("oracle unquantized ref64 vs hf_fp64", unq64, logits["hf_fp64"])
    stats("oracle unquantized vs hf_fp32", unq, logits["hf_fp32"])
    stats("oracle unquantized vs hf_bf16", unq, logits["hf_bf16"])
    stats("hf_bf16 vs hf_fp32", logits["hf_bf16"], logits["hf_fp32"])
    stats("oracle ref32 (reference quantization) vs hf_fp32", ref32, logits["hf_fp32"])
    stats("oracle ref32 vs oracle unquantized", ref32, unq)


if __name__ == "__main__":
    main()
