#!/usr/bin/env python3
"""A second implementation of the vision tower for machines without torch: numpy, written from DeepSeek's
vision.py equations (model-spec.md §3.10), float64 arithmetic with the reference's bf16 rounding points
emulated (or none with --no-rounding). Writes ref_img{i}.npz in the format of `vision_ref.py reference`, so
`vision_ref.py compare PATCHES OUT DSV4` compares dsv4 with it (README.md here).

  vision_numpy.py CKPT PATCH_DIR OUT [--no-rounding]
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vision_ref as vr  # noqa: E402  (checkpoint reader, bf16 rounding, test images)


class Tower:
    def __init__(self, ckpt, rounding):
        cfg = vr.load_config(ckpt)
        self.vc, self.D = cfg["vision_config"], cfg["text_config"]["hidden_size"]
        with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
            names = [n for n in json.load(f)["weight_map"] if n.startswith(("vision.", "aligner.", "image_"))]
        self.raw = vr.read_safetensors(ckpt, names)
        self.rounding = rounding

    def w(self, name):
        """A bf16 tensor widened exactly to float64."""
        dtype, shape, b = self.raw[name]
        assert dtype == "BF16", (name, dtype)
        return (np.frombuffer(b, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape).astype(np.float64)

    def r(self, x):
        """A bf16 rounding point (float64 -> float32 -> bf16; the float32 step is exact except in the last bits)."""
        return vr.to_bf16(np.asarray(x, dtype=np.float32)).astype(np.float64) if self.rounding else x

    def linear(self, x, name, bias=True):
        y = x @ self.w(name + ".weight").T
        return self.r(y + self.w(name + ".bias") if bias else y)

    def norm(self, x, name):
        return self.r(self.w(name) * (x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6)))

    def forward(self, patches, gh, gw):
        vc, out = self.vc, {}
        n, H = gh * gw, vc["num_attention_heads"]
        x = self.linear(self.r(patches.astype(np.float64)), "vision.patch_embed.proj")
        out["patch_embed"] = x
        # 2-D RoPE: fp32 inverse frequencies and angles; angle i < 16 from the patch row, i >= 16 from its column.
        inv = (np.float32(1) / np.float32(vc["rope_theta"]) ** (np.arange(0, 32, 2, dtype=np.float32) / np.float32(32)))
        pos = np.stack([np.repeat(np.arange(gh), gw), np.tile(np.arange(gw), gh)], -1).astype(np.float32)
        ang = (pos[:, :, None] * inv[None, None, :]).reshape(n, 32)
        cos = np.cos(ang.astype(np.float64)).astype(np.float32).astype(np.float64)[:, None, :]
        sin = np.sin(ang.astype(np.float64)).astype(np.float32).astype(np.float64)[:, None, :]

        def rope(t):  # [n, H, 64]: element i with element i + 32
            a, b = t[..., :32], t[..., 32:]
            return self.r(np.concatenate([a * cos - b * sin, b * cos + a * sin], -1))

        for blk in range(vc["num_hidden_layers"]):
            p = f"vision.blocks.{blk}."
            qkv = self.linear(self.norm(x, p + "norm1.weight"), p + "attn.wqkv")
            q, k, v = (t.reshape(n, H, 64) for t in np.split(qkv, 3, axis=-1))
            q, k = rope(q), rope(k)
            s = np.einsum("ihd,jhd->hij", q, k) * 0.125
            s = np.exp(s - s.max(-1, keepdims=True))
            o = self.r(np.einsum("hij,jhd->ihd", s / s.sum(-1, keepdims=True), v).reshape(n, -1))
            x = self.r(x + self.linear(o, p + "attn.wo"))
            g = self.linear(self.norm(x, p + "norm2.weight"), p + "mlp.w1", bias=False)
            gate, up = np.split(g, 2, axis=-1)
            m = self.r(self.r(gate / (1 + np.exp(-gate))) * up)
            x = self.r(x + self.linear(m, p + "mlp.w2", bias=False))
            out[f"block_{blk:02d}"] = x
        y = self.norm(x, "vision.norm.weight")
        out["vit_norm"] = y
        # Aligner: zero-pad to multiples of r, r x r blocks row-major, feature (channel, kh, kw).
        rr = vc["downsample_ratio"]
        V = y.shape[1]
        grid = np.pad(y.reshape(gh, gw, V), ((0, -gh % rr), (0, -gw % rr), (0, 0)))
        bh, bw = grid.shape[0] // rr, grid.shape[1] // rr
        u = grid.reshape(bh, rr, bw, rr, V).transpose(0, 2, 4, 1, 3).reshape(bh * bw, V * rr * rr)
        a = self.linear(u, "aligner.w1")
        a = self.r(a * 0.5 * (1 + np.vectorize(math.erf)(a / math.sqrt(2))))
        out["aligner_hidden"] = a
        rows = self.linear(a, "aligner.w2")
        out["aligner"] = rows
        # The span: start, per aligner grid row its rows then the newline, end.
        span = [self.w("image_start")]
        for i in range(bh):
            span += list(rows[i * bw:(i + 1) * bw]) + [self.w("image_newline")]
        out["span"] = np.stack(span + [self.w("image_end")])
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("ckpt"); ap.add_argument("patches"); ap.add_argument("out")
    ap.add_argument("--no-rounding", action="store_true", help="float64 throughout, no bf16 rounding points")
    a = ap.parse_args()
    tower = Tower(a.ckpt, not a.no_rounding)
    with open(os.path.join(a.patches, "images.json")) as f:
        images = json.load(f)["images"]
    os.makedirs(a.out, exist_ok=True)
    for i, im in enumerate(images):
        x = np.load(os.path.join(a.patches, im["file"]))
        out = tower.forward(x, im["grid_h"], im["grid_w"])
        np.savez(os.path.join(a.out, f"ref_img{i}.npz"), **{k: v.astype(np.float32) for k, v in out.items()})
        print(f"image {i}: grid {im['grid_h']}x{im['grid_w']}")
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump({"implementation": "vision_numpy.py", "rounding": not a.no_rounding}, f)


if __name__ == "__main__":
    main()
