#!/usr/bin/env python3
"""Runs DeepSeek's V4.1 reference (inference/model.py with CPU kernels, kept out of the repository in
tests/reference/upstream/deepseek_v41/) on a checkpoint written by `dsv4 synth`, and writes every prompt row's
logits, each layer's residual streams and each index source's selected rows to an .npz.

The reference's top-k is replaced by a stable lowest-index-first selection (the tie rule PyTorch's CUDA top-k
follows and dsv4 uses), so ties are decided the same way on every machine.

usage: reference_run.py CHECKPOINT_DIR IDS_CSV OUT.npz [--pre-round PRE.npz [--pre-round-layers 1,2]]

--pre-round also writes, at the layers given (all by default), the values the reference rounds to bf16 before
rounding (pre_round_taps.py; read by straddle.py).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "upstream"))

try:
    import PIL  # noqa: F401  (image_processor.py needs it at import; the text path does not use it)
except ImportError:
    import types

    stub = types.ModuleType("deepseek_v41.image_processor")
    stub.IMAGE, stub.IMAGE_START, stub.IMAGE_END, stub.IMAGE_NEW_LINE = 0, 1, 2, 3
    sys.modules["deepseek_v41.image_processor"] = stub

from deepseek_v41 import engram as ref_engram  # noqa: E402
from deepseek_v41 import model as ref  # noqa: E402

DTYPES = {
    "BF16": torch.bfloat16,
    "F32": torch.float32,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E8M0": torch.float8_e8m0fnu,
    "I8": torch.int8,
    "I64": torch.int64,
}


def read_safetensors(path):
    """Every tensor of one shard as a torch tensor of its stored dtype (our own reader: F8_E8M0 included)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = bytearray(data[base + a : base + b])
        t = torch.frombuffer(raw, dtype=torch.uint8) if b > a else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def model_args(cfg, seq_len):
    t = cfg.get("text_config", cfg)
    rs = t["rope_scaling"]
    return ref.ModelArgs(
        max_batch_size=1,
        max_seq_len=max(64, seq_len),
        dtype="fp8",
        expert_dtype="fp4",
        vocab_size=t["vocab_size"],
        dim=t["hidden_size"],
        moe_inter_dim=t["moe_intermediate_size"],
        n_layers=t["num_hidden_layers"],
        n_mtp_layers=len(t["compress_ratios"]) - t["num_hidden_layers"],
        n_heads=t["num_attention_heads"],
        n_routed_experts=t["n_routed_experts"],
        n_shared_experts=t["n_shared_experts"],
        n_activated_experts=t["num_experts_per_tok"],
        score_func=t["scoring_func"],
        norm_topk_prob=t["norm_topk_prob"],
        route_scale=t["routed_scaling_factor"],
        swiglu_limit=t["swiglu_limit"],
        q_lora_rank=t["q_lora_rank"],
        head_dim=t["head_dim"],
        rope_head_dim=t["qk_rope_head_dim"],
        norm_eps=t["rms_norm_eps"],
        o_groups=t["o_groups"],
        o_lora_rank=t["o_lora_rank"],
        window_size=t["sliding_window"],
        compress_ratios=tuple(t["compress_ratios"]),
        kv_source_layers=tuple(t["kv_source_layer_ids"]),
        index_source_layers=tuple(t["index_source_layer_ids"]),
        compress_rope_theta=t["compress_rope_theta"],
        original_seq_len=rs["original_max_position_embeddings"],
        rope_theta=t["rope_theta"],
        rope_factor=rs["factor"],
        beta_fast=int(rs["beta_fast"]),
        beta_slow=int(rs["beta_slow"]),
        index_n_heads=t["index_n_heads"],
        index_head_dim=t["index_head_dim"],
        index_topk=t["index_topk"],
        candidate_source_layer=t["candidate_source_layer_id"],
        candidate_topk_blocks=t["candidate_topk_blocks"],
        candidate_block_size=t["candidate_block_size"],
        hc_mult=t["hc_mult"],
        hc_sinkhorn_iters=t["hc_sinkhorn_iters"],
        hc_eps=t["hc_eps"],
        engram_layer_ids=tuple(t.get("engram_layer_ids", ())),
        engram_num_embeddings=tuple(t.get("engram_num_embeddings", ())),
        engram_max_ngram_size=t.get("engram_max_ngram_size", 1),
        engram_vocab_size=t.get("engram_vocab_size", 0),
        engram_n_heads=t.get("engram_n_heads", 0),
        engram_head_dim=t.get("engram_head_dim", 0),
        engram_pad_id=t.get("engram_pad_token_id", 2),
        engram_compressed_vocab_size=t.get("engram_compressed_vocab_size", 0),
        vision_n_layers=0,
        dspark_block_size=0,  # the drafter is not part of the prompt's logits
    )


def stable_topk(self, k, dim=-1, largest=True, sorted=True):
    """Top-k with ties to the lower index: a stable descending sort, first k."""
    vals, idx = torch.sort(self, dim=dim, descending=largest, stable=True)
    return torch.return_types.topk((vals.narrow(dim, 0, k), idx.narrow(dim, 0, k)))


def load_weights(model, ckpt):
    tensors = {}
    for name in sorted(os.listdir(ckpt)):
        if name.endswith(".safetensors"):
            tensors.update(read_safetensors(os.path.join(ckpt, name)))
    used = set()
    for pname, p in model.named_parameters():
        if pname not in tensors:
            raise SystemExit(f"reference parameter {pname} has no checkpoint tensor")
        src = tensors[pname]
        used.add(pname)
        if p.dtype == torch.float4_e2m1fn_x2:
            p.data = src.view(torch.float4_e2m1fn_x2).clone()
        elif src.dtype == torch.float8_e4m3fn and p.dtype != torch.float8_e4m3fn:
            # wo_a: stored FP8 with block scales, used as bf16 (the release's convert step dequantizes it)
            scale = tensors[pname[: -len("weight")] + "scale"].float()
            used.add(pname[: -len("weight")] + "scale")
            full = scale.repeat_interleave(32, 0)[: src.shape[0]].repeat_interleave(32, 1)[:, : src.shape[1]]
            p.data = (src.float() * full).to(p.dtype)
        else:
            assert tuple(p.shape) == tuple(src.shape), (pname, p.shape, src.shape)
            p.data = src.to(p.dtype).clone()
    # not read on the text path: the drafter, the vision side and the image-span router bias
    left = [n for n in tensors if n not in used and not n.startswith(("mtp.", "vision.", "aligner.", "image_"))
            and not n.endswith("ffn.gate.bias_vl")]
    left = [n for n in left if not (n.endswith(".scale") and n[: -len("scale")] + "weight" in used)]
    if left:
        raise SystemExit(f"checkpoint tensors the reference does not read: {left[:8]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("ids")
    ap.add_argument("out")
    ap.add_argument("--pre-round", default="", help="also write the values before bf16 rounding to this .npz")
    ap.add_argument("--pre-round-layers", default="", help="comma-separated layers for --pre-round (default: all)")
    opts = ap.parse_args()
    ckpt, ids_csv, out = opts.ckpt, opts.ids, opts.out
    ids = [int(x) for x in ids_csv.split(",")]
    cfg = json.load(open(os.path.join(ckpt, "config.json")))
    args = model_args(cfg, len(ids))
    tm = json.load(open(os.path.join(ckpt, "engram_token_map.json")))
    ref_engram.build_compressed_token_map = lambda tok: (tm["token_map"], tm["compressed_vocab_size"])
    torch.Tensor.topk = stable_topk
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("REF_THREADS", "8")))
    with ref.set_dtype(torch.bfloat16), torch.no_grad():
        model = ref.Transformer(args, tokenizer=object())
        load_weights(model, ckpt)
        captured = {}
        for i, layer in enumerate(model.layers):
            layer.register_forward_hook(lambda m, a, o, i=i: captured.__setitem__(f"layer_{i:02d}", o[0][0].detach().float().numpy()))
            put = captured.__setitem__
            layer.attn.register_forward_pre_hook(lambda m, a, i=i: put(f"attn_in_{i:02d}", a[0][0].detach().float().numpy()))
            layer.attn.register_forward_hook(lambda m, a, o, i=i: put(f"attn_out_{i:02d}", o[0].detach().float().numpy()))
            layer.ffn.register_forward_pre_hook(lambda m, a, i=i: put(f"ffn_in_{i:02d}", a[0][0].detach().float().numpy()))
            layer.ffn.register_forward_hook(lambda m, a, o, i=i: put(f"ffn_out_{i:02d}", o[0].detach().float().numpy()))
            layer.ffn.gate.register_forward_hook(
                lambda m, a, o, i=i: put(f"experts_{i:02d}", o[1].detach().numpy().astype(np.int32)))
            ix = layer.attn.indexer
            if ix is not None:
                ix.register_forward_hook(lambda m, a, o, i=i: captured.__setitem__(f"topk_{i:02d}", o[0].detach().numpy().astype(np.int32)))
        model.norm.register_forward_hook(lambda m, a, o: captured.__setitem__("final_norm_bf16", o[0].detach().clone()))
        taps = None
        if opts.pre_round:
            from pre_round_taps import PreRoundTaps

            layers = [int(v) for v in opts.pre_round_layers.split(",") if v.strip()]
            taps = PreRoundTaps(ref, model, args, layers, len(ids))
        x = torch.tensor([ids], dtype=torch.long)
        model(x, 0)
        normed = captured.pop("final_norm_bf16")
        logits = torch.nn.functional.linear(normed.float(), model.head.weight).detach().numpy()
    captured["final_norm"] = normed.float().numpy()
    captured["logits"] = logits
    captured["tokens"] = np.array(ids, dtype=np.int32)
    np.savez(out, **captured)
    print(f"reference: {len(ids)} rows, {len(model.layers)} layers -> {out}")
    if taps is not None:
        pre = taps.arrays()
        pre["tokens"] = np.array(ids, dtype=np.int32)
        np.savez(opts.pre_round, **pre)
        print(f"reference: values before rounding at layers {taps.layers} -> {opts.pre_round}")


if __name__ == "__main__":
    main()
