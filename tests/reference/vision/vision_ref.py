#!/usr/bin/env python3
"""Cross-check of dsv4's CPU oracle vision tower against DeepSeek's reference vision.py (README.md here).

Subcommands:
  patches CKPT OUT_DIR          deterministic test images as ViT patches (images.json + patches_{i}.npy)
  reference CKPT PATCH_DIR OUT  the reference ViT + aligner on those patches (torch; --device cpu|cuda)
  compare PATCH_DIR REF DSV4    per-layer NRMS of dsv4 ref32 / ref64 against the reference and each other
  golden PATCH_DIR REF OUT --preset P --seed S   the reference outputs of the golden images, with provenance

Only `reference` needs torch; the others need numpy.
"""
import argparse
import datetime
import hashlib
import json
import os
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
UPSTREAM = os.path.join(HERE, "..", "upstream", "deepseek_v41")
UPSTREAM_REVISION = "dba1be0a40aa45a94ad051997016db3960a90277"

# Patch grids (rows x columns of 14-pixel patches) per run. 39 x 39 is a 546 x 546 image (the release's
# min_pixels is 544^2); the others cover padding to multiples of 3 on either side, no padding, a single row.
GRIDS = [(4, 7), (7, 8), (1, 5), (12, 12), (39, 39)]
GOLDEN = 4  # the first GOLDEN images are saved as golden files (small)


def load_config(ckpt):
    with open(os.path.join(ckpt, "config.json")) as f:
        c = json.load(f)
    if "vision_config" not in c:
        sys.exit(f"{ckpt}: config.json has no vision_config")
    return c


# ---- test images ----

def image_pixels(seed, height, width):
    """uint8 [3, H, W]: a gradient plus 5-bit noise from an integer hash (uint64 arithmetic, wrapping), the same
    on every machine: h = (7919 c + 104729 y + 1299709 x + 15485863 seed) * 2654435761 mod 2^64,
    pixel = (2 x + 3 y + 80 c + ((h >> 27) & 31)) mod 256."""
    U = np.uint64
    c = np.arange(3, dtype=U)[:, None, None]
    y = np.arange(height, dtype=U)[None, :, None]
    x = np.arange(width, dtype=U)[None, None, :]
    with np.errstate(over="ignore"):
        h = (c * U(7919) + y * U(104729) + x * U(1299709) + U(seed) * U(15485863)) * U(2654435761)
    noise = (h >> U(27)) & U(31)
    return ((U(2) * x + U(3) * y + U(80) * c + noise) % U(256)).astype(np.uint8)


def to_bf16(a):
    """Round float32 to bfloat16 (nearest, ties to even), returned as float32."""
    U = np.uint64
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(U)
    u = (u + U(0x7FFF) + ((u >> U(16)) & U(1))) >> U(16) << U(16)
    return u.astype(np.uint32).view(np.float32)


def image_patches(seed, gh, gw, p):
    """f32 [gh*gw, 3*p*p]: the reference's preprocessing ((x/255 - 0.5)/0.5 in fp32, then bf16) and patch
    order (patch (i, j) at row i*gw + j; element c*p*p + y*p + x)."""
    px = image_pixels(seed, gh * p, gw * p).astype(np.float32) / np.float32(255)
    x = to_bf16((px - np.float32(0.5)) / np.float32(0.5))
    return np.ascontiguousarray(x.reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4).reshape(gh * gw, 3 * p * p))


def cmd_patches(a):
    cfg = load_config(a.ckpt)
    p = cfg["vision_config"]["patch_size"]
    os.makedirs(a.out, exist_ok=True)
    images = []
    for i, (gh, gw) in enumerate(GRIDS):
        x = image_patches(i + 1, gh, gw, p)
        name = f"patches_{i}.npy"
        np.save(os.path.join(a.out, name), x)
        images.append({"file": name, "grid_h": gh, "grid_w": gw, "seed": i + 1,
                       "sha256": hashlib.sha256(x.tobytes()).hexdigest()})
    with open(os.path.join(a.out, "images.json"), "w") as f:
        json.dump({"patch_size": p, "images": images}, f, indent=1)
    print(f"{len(images)} images -> {a.out}")


# ---- the reference ----

def read_safetensors(ckpt, names):
    """The named tensors of a checkpoint as (dtype, shape, raw bytes), through its index."""
    with open(os.path.join(ckpt, "model.safetensors.index.json")) as f:
        where = json.load(f)["weight_map"]
    out = {}
    for fname in sorted({where[n] for n in names}):
        with open(os.path.join(ckpt, fname), "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(hlen))
            base = 8 + hlen
            for n in names:
                if where[n] != fname:
                    continue
                e = header[n]
                b, end = e["data_offsets"]
                f.seek(base + b)
                out[n] = (e["dtype"], e["shape"], f.read(end - b))
    return out


def cmd_reference(a):
    import importlib.util
    import torch

    def load(name):
        path = os.path.join(UPSTREAM, name + ".py")
        if not os.path.exists(path):
            sys.exit(f"{path} missing: see tests/reference/vision/README.md for how to obtain it")
        spec = importlib.util.spec_from_file_location("upstream_" + name, path)
        m = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(m)
        return m

    vision = load("vision")
    try:
        ip = load("image_processor")  # needs PIL; only its span layout is used
        token_types, kinds = ip.image_token_types, (ip.IMAGE_START, ip.IMAGE, ip.IMAGE_NEW_LINE, ip.IMAGE_END)
        layout_source = "image_processor.image_token_types"
    except ImportError as e:
        print(f"image_processor.py not importable ({e}); the span layout comes from its docstring formula")

        def token_types(h, w):
            return torch.tensor([0] + ([1] * w + [2]) * h + [3], dtype=torch.int64)
        kinds, layout_source = (0, 1, 2, 3), "docstring formula"

    cfg = load_config(a.ckpt)
    vc, D = cfg["vision_config"], cfg["text_config"]["hidden_size"]
    from types import SimpleNamespace
    args = SimpleNamespace(vision_patch_size=vc["patch_size"], vision_dim=vc["hidden_size"],
                           vision_n_heads=vc["num_attention_heads"], vision_inter_dim=vc["intermediate_size"],
                           vision_n_layers=vc["num_hidden_layers"], vision_rope_theta=vc["rope_theta"],
                           vision_downsample_ratio=vc["downsample_ratio"], dim=D)
    device = torch.device(a.device)
    torch.set_default_dtype(torch.bfloat16)  # as the reference's generate.py
    torch.set_default_device(device)  # the RoPE table vision.py builds follows it
    torch.manual_seed(0)
    vit, aligner = vision.ViT(args), vision.Aligner(args)
    with open(os.path.join(a.ckpt, "model.safetensors.index.json")) as f:
        names = [n for n in json.load(f)["weight_map"] if n.startswith(("vision.", "aligner.", "image_"))]
    raw = read_safetensors(a.ckpt, names)

    def tensor(n):
        dtype, shape, b = raw[n]
        assert dtype == "BF16", (n, dtype)
        return torch.from_numpy(np.frombuffer(b, dtype=np.int16).copy()).view(torch.bfloat16).reshape(shape)

    vit.load_state_dict({n[len("vision."):]: tensor(n) for n in names if n.startswith("vision.")}, strict=True)
    aligner.load_state_dict({n[len("aligner."):]: tensor(n) for n in names if n.startswith("aligner.")}, strict=True)
    delim = {n: tensor(n).to(device) for n in ("image_start", "image_end", "image_newline")}

    dumps = {}
    def keep(name):
        def hook(mod, inp, out):
            dumps[name] = out
        return hook
    vit.patch_embed.register_forward_hook(keep("patch_embed"))
    for i, b in enumerate(vit.blocks):
        b.register_forward_hook(keep(f"block_{i:02d}"))
    vit.norm.register_forward_hook(keep("vit_norm"))
    aligner.w2.register_forward_pre_hook(lambda mod, inp: dumps.__setitem__("aligner_hidden", inp[0]))

    with open(os.path.join(a.patches, "images.json")) as f:
        manifest = json.load(f)
    p = manifest["patch_size"]
    os.makedirs(a.out, exist_ok=True)
    for i, im in enumerate(manifest["images"]):
        gh, gw = im["grid_h"], im["grid_w"]
        x = np.load(os.path.join(a.patches, im["file"]))
        patches = torch.from_numpy(x).to(device).to(torch.bfloat16).view(gh * gw, 3, p, p)
        dumps.clear()
        with torch.inference_mode():
            rows = aligner(vit(patches, gh, gw), gh, gw)  # Transformer.encode_image
            r = args.vision_downsample_ratio
            types = token_types(-(-gh // r), -(-gw // r)).to(device)
            # Transformer.merge_image_embeddings on a bf16 span (h is the bf16 embedding output).
            span = torch.zeros(types.numel(), D, dtype=torch.bfloat16, device=device)
            span[types == kinds[0]] = delim["image_start"]
            span[types == kinds[3]] = delim["image_end"]
            span[types == kinds[2]] = delim["image_newline"]
            span[types == kinds[1]] = rows.to(torch.bfloat16)
        dumps["aligner"], dumps["span"] = rows, span
        np.savez(os.path.join(a.out, f"ref_img{i}.npz"), **{k: v.float().cpu().numpy() for k, v in dumps.items()})
        print(f"image {i}: grid {gh}x{gw} -> {len(dumps)} arrays")
    info = {"torch": torch.__version__, "device": str(device),
            "device_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "math_sdp_fp16_bf16_reduction": getattr(torch.backends.cuda, "fp16_bf16_reduction_math_sdp_allowed",
                                                    lambda: None)(),
            "span_layout": layout_source, "upstream_revision": UPSTREAM_REVISION,
            "vision.py_sha256": sha256_file(os.path.join(UPSTREAM, "vision.py"))}
    with open(os.path.join(a.out, "reference.json"), "w") as f:
        json.dump(info, f, indent=1)
    print(json.dumps(info))


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---- comparison ----

def nrms(a, b):
    d = float(np.linalg.norm(b.astype(np.float64)))
    return float(np.linalg.norm(a.astype(np.float64) - b.astype(np.float64))) / d if d else float("inf")


# Two faithful bf16 implementations part by rounding flips that the bidirectional attention spreads over the
# image: about one bf16 ulp (2^-8 relative) RMS (dsv4's ref32 vs ref64 measured up to 7e-3). 2^-6 allows four;
# a structural error (pairing, order, a missing term) moves outputs by far more.
STRUCTURAL = 2.0 ** -6


def cmd_compare(a):
    with open(os.path.join(a.patches, "images.json")) as f:
        images = json.load(f)["images"]
    worst = 0.0
    print(f"{'image':>5} {'grid':>7} {'output':<16} {'ref32-vs-ref':>13} {'ref64-vs-ref':>13} {'ref32-vs-ref64':>15}")
    for i, im in enumerate(images):
        ref = np.load(os.path.join(a.ref, f"ref_img{i}.npz"))
        r32 = np.load(os.path.join(a.dsv4, f"dsv4_ref32_img{i}.npz"))
        r64 = np.load(os.path.join(a.dsv4, f"dsv4_ref64_img{i}.npz"))
        names = [n for n in ref.files]
        missing = [n for n in names if n not in r32.files or n not in r64.files]
        if missing:
            sys.exit(f"image {i}: dsv4 lacks {missing}")
        for n in names:
            if ref[n].shape != r32[n].shape:
                sys.exit(f"image {i} {n}: reference {ref[n].shape}, dsv4 {r32[n].shape}")
            d32, d64, d = nrms(r32[n], ref[n]), nrms(r64[n], ref[n]), nrms(r32[n], r64[n])
            worst = max(worst, d32, d64)
            print(f"{i:>5} {im['grid_h']:>3}x{im['grid_w']:<3} {n:<16} {d32:>13.3e} {d64:>13.3e} {d:>15.3e}")
    print(f"worst NRMS against the reference: {worst:.3e} (structural threshold {STRUCTURAL})")
    return 0 if worst <= STRUCTURAL else 1


def cmd_golden(a):
    with open(os.path.join(a.patches, "images.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(a.ref, "reference.json")) as f:
        ref_info = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    kept = []
    for i, im in enumerate(manifest["images"][:GOLDEN]):
        ref = np.load(os.path.join(a.ref, f"ref_img{i}.npz"))
        for n in ("vit_norm", "aligner", "span"):
            np.save(os.path.join(a.out, f"img{i}_{n}.npy"), ref[n].astype(np.float32))
        kept.append(dict(im, outputs=["vit_norm", "aligner", "span"]))
    prov = {"what": "outputs of DeepSeek's reference vision.py (ViT + aligner) and the span assembly of "
                    "Transformer.merge_image_embeddings, f32 arrays holding bf16 values",
            "reference": ref_info,
            "checkpoint": {"preset": a.preset, "seed": a.seed,
                           "command": f"dsv4 synth --preset {a.preset} --seed {a.seed}"},
            "patches": "vision_ref.py image_patches(seed, grid_h, grid_w, patch_size); sha256 of the f32 bytes",
            "patch_size": manifest["patch_size"], "images": kept,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}
    with open(os.path.join(a.out, "PROVENANCE.json"), "w") as f:
        json.dump(prov, f, indent=1)
    print(f"golden files of {len(kept)} images -> {a.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("patches")
    s.add_argument("ckpt"); s.add_argument("out")
    s = sub.add_parser("reference")
    s.add_argument("ckpt"); s.add_argument("patches"); s.add_argument("out")
    s.add_argument("--device", default="cpu", help="torch device of the reference (cpu: deterministic, no TF32)")
    s = sub.add_parser("compare")
    s.add_argument("patches"); s.add_argument("ref"); s.add_argument("dsv4")
    s = sub.add_parser("golden")
    s.add_argument("patches"); s.add_argument("ref"); s.add_argument("out")
    s.add_argument("--preset", required=True, help="the dsv4 synth preset of the checkpoint (tiny|small)")
    s.add_argument("--seed", type=int, required=True, help="the dsv4 synth seed of the checkpoint")
    a = ap.parse_args()
    return {"patches": cmd_patches, "reference": cmd_reference, "compare": cmd_compare, "golden": cmd_golden}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
