#!/usr/bin/python3
"""Writes the vision test images and their expected outputs (tests/data/vision/README.md).

Run with Debian 12's python3 and its python3-pil (Pillow 9.4.0) and python3-numpy (1.24.2):
    /usr/bin/python3 tests/data/vision/make_goldens.py
Images are synthetic and deterministic. Expected values come from Pillow (decoding, resizing, padding)
and numpy (normalisation, patch layout), following the V4.1 image processor's rules as written in
docs/vision.md; nothing here runs dsv4 code.
"""

import hashlib
import io
import json
import math
import os
import struct
import zlib

import numpy as np
import PIL
from PIL import Image, ImageOps

HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "images")

# The released vision_config (model-spec.md §2.1), a variant with max_wh_ratio set (the stretch branch)
# and a tiny one whose whole patch tensors are small enough to store.
CONFIGS = {
    "release": dict(patch_size=14, downsample_ratio=3, max_image_tokens=1024, min_pixels=295936, max_wh_ratio=None),
    "wh_ratio_2": dict(patch_size=14, downsample_ratio=3, max_image_tokens=1024, min_pixels=295936, max_wh_ratio=2),
    "tiny": dict(patch_size=2, downsample_ratio=2, max_image_tokens=20, min_pixels=64, max_wh_ratio=None),
}


def sha(b):
    return hashlib.sha256(bytes(b)).hexdigest()


# ---------------------------------------------------------------------------------------------- pictures

def picture(w, h, seed):
    """u8 [h, w, 3]: gradients, a hard-edged disc and a checkerboard corner (so bicubic overshoot and
    clipping are exercised), plus a little noise on small pictures (kept off large ones to keep files small)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    fx = x / max(w - 1, 1)
    fy = y / max(h - 1, 1)
    r = 255 * fx
    g = 255 * fy
    b = 128 + 100 * np.sin(6.0 * fx + 4.0 * fy + seed)
    img = np.stack([r, g, b], axis=-1)
    disc = (x - 0.6 * w) ** 2 + (y - 0.4 * h) ** 2 < (0.25 * min(w, h)) ** 2
    img[disc] = [250, 20, 40]
    checker = ((x.astype(int) // 2 + y.astype(int) // 2) % 2 == 0) & (x < w / 4) & (y < h / 4)
    img[checker] = [0, 0, 0]
    if w * h <= 40000:
        img += rng.normal(0, 4, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


# ------------------------------------------------------------------------------ a minimal PNG writer
# Pillow cannot write low bit depths for grey, 16-bit RGB, tRNS on grey or out-of-palette indices;
# these files are written chunk by chunk (filter type 0 on every row).

def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def png_bytes(width, height, bit_depth, color_type, rows, plte=None, trns=None, adam7_pixels=None):
    """rows: packed scanlines. With adam7_pixels (u8 [h, w, c], 8-bit only) the image is written interlaced."""
    interlace = 1 if adam7_pixels is not None else 0
    out = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, interlace))
    if plte is not None:
        out += png_chunk(b"PLTE", bytes(plte))
    if trns is not None:
        out += png_chunk(b"tRNS", bytes(trns))
    if adam7_pixels is not None:
        # Adam7: seven passes over sub-grids (x0, y0, dx, dy); each pass's rows are filtered on their own.
        rows = []
        for x0, y0, dx, dy in [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]:
            sub = adam7_pixels[y0::dy, x0::dx]
            if sub.shape[0] and sub.shape[1]:
                rows += [r.tobytes() for r in sub]
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    return out + png_chunk(b"IDAT", zlib.compress(raw, 9)) + png_chunk(b"IEND", b"")


def pack_bits(values, depth):
    """One row of sub-byte samples, most significant bits first."""
    per = 8 // depth
    out = bytearray()
    for i in range(0, len(values), per):
        byte = 0
        for j in range(per):
            v = values[i + j] if i + j < len(values) else 0
            byte |= v << (8 - depth * (j + 1))
        out.append(byte)
    return bytes(out)


# ----------------------------------------------------------------------------------------- the images

def pil_save(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def make_images():
    """name -> (bytes, declared MIME, lossless?)."""
    files = {}
    rgb_37x91 = Image.fromarray(picture(37, 91, 1))
    for (w, h), seed in {(1, 1): 2, (3, 500): 3, (500, 3): 4, (37, 91): 1, (640, 480): 5, (544, 544): 6}.items():
        files[f"rgb_{w}x{h}.png"] = pil_save(Image.fromarray(picture(w, h, seed)), "PNG")
    files["gray_37x91.png"] = pil_save(rgb_37x91.convert("L"), "PNG")
    files["rgba_37x91.png"] = pil_save(Image.fromarray(np.dstack([picture(37, 91, 1), picture(37, 91, 7)[:, :, 0]]), "RGBA"), "PNG")
    files["la_37x91.png"] = pil_save(Image.fromarray(np.dstack([picture(37, 91, 1)[:, :, 1], picture(37, 91, 7)[:, :, 0]]), "LA"), "PNG")
    pal = rgb_37x91.quantize(colors=16, method=Image.Quantize.MEDIANCUT)
    files["palette4_37x91.png"] = pil_save(pal, "PNG", bits=4, transparency=3)
    files["palette8_640x480.png"] = pil_save(Image.fromarray(picture(640, 480, 5)).quantize(colors=200), "PNG")

    g = picture(33, 17, 8)[:, :, 0]
    for depth in (1, 2, 4):
        rows = [pack_bits([int(v) >> (8 - depth) for v in row], depth) for row in g]
        files[f"gray{depth}bit_33x17.png"] = png_bytes(33, 17, depth, 0, rows)
    g16 = (picture(20, 30, 9)[:, :, 0].astype(np.uint16) * 3)  # 0..765: values past 255 exercise PIL's clip
    files["gray16_20x30.png"] = png_bytes(20, 30, 16, 0, [r.astype(">u2").tobytes() for r in g16], trns=b"\x00\x05")
    c16 = picture(37, 91, 10).astype(np.uint16) * 257 + np.uint16(91)
    files["rgb16_37x91.png"] = png_bytes(37, 91, 16, 2, [r.astype(">u2").tobytes() for r in c16])
    a16 = np.dstack([c16, (picture(37, 91, 11)[:, :, :1].astype(np.uint16) * 250)])
    files["rgba16_37x91.png"] = png_bytes(37, 91, 16, 6, [r.astype(">u2").tobytes() for r in a16])
    files["la16_37x91.png"] = png_bytes(37, 91, 16, 4, [r.astype(">u2").tobytes() for r in a16[:, :, 2:4]])
    files["gray_trns_37x91.png"] = png_bytes(37, 91, 8, 0, [r.tobytes() for r in picture(37, 91, 12)[:, :, 0]], trns=b"\x00\x40")
    files["interlaced_37x91.png"] = png_bytes(37, 91, 8, 2, None, adam7_pixels=picture(37, 91, 13))
    files["interlaced_gray_5x3.png"] = png_bytes(5, 3, 8, 0, None, adam7_pixels=picture(5, 3, 14)[:, :, :1])
    files["palette_past_plte_4x1.png"] = png_bytes(4, 1, 8, 3, [bytes([0, 1, 5, 200])], plte=[255, 0, 0, 0, 255, 0])

    big = Image.fromarray(picture(640, 480, 5))
    files["baseline_640x480.jpg"] = pil_save(big, "JPEG", quality=90)
    files["q444_37x91.jpg"] = pil_save(rgb_37x91, "JPEG", quality=95, subsampling=0)
    files["progressive_37x91.jpg"] = pil_save(rgb_37x91, "JPEG", quality=80, progressive=True)
    files["progressive_3x500.jpg"] = pil_save(Image.fromarray(picture(3, 500, 3)), "JPEG", quality=80, progressive=True)
    files["gray_37x91.jpg"] = pil_save(rgb_37x91.convert("L"), "JPEG", quality=85)
    files["cmyk_37x91.jpg"] = pil_save(rgb_37x91.convert("CMYK"), "JPEG", quality=90)

    files["lossless_37x91.webp"] = pil_save(rgb_37x91, "WEBP", lossless=True)
    files["lossy_640x480.webp"] = pil_save(big, "WEBP", quality=80)
    files["lossy_alpha_37x91.webp"] = pil_save(Image.open(io.BytesIO(files["rgba_37x91.png"])), "WEBP", quality=70)
    files["lossless_alpha_37x91.webp"] = pil_save(Image.open(io.BytesIO(files["rgba_37x91.png"])), "WEBP", lossless=True, exact=True)

    files["palette_37x91.gif"] = pil_save(rgb_37x91.quantize(colors=64), "GIF")  # Pillow interlaces by default
    files["noninterlaced_500x3.gif"] = pil_save(Image.fromarray(picture(500, 3, 4)).quantize(colors=32), "GIF", interlace=False)
    files["transparent_37x91.gif"] = pil_save(rgb_37x91.quantize(colors=16), "GIF", transparency=2)
    # Two frames; the second would look different, so only a first-frame decoder matches.
    f0 = rgb_37x91.quantize(colors=32)
    f1 = Image.fromarray(255 - picture(37, 91, 1)).quantize(colors=32)
    files["animated_37x91.gif"] = pil_save(f0, "GIF", save_all=True, append_images=[f1], duration=100, loop=0)
    files["gray_palette_33x17.gif"] = pil_save(Image.fromarray(picture(33, 17, 8)[:, :, 0]), "GIF")
    files["offset_frame_20x10.gif"] = hand_gif(20, 10, (5, 3, 6, 4), global_colors=16, transparent=7)
    # A 4-colour global palette with 4-bit LZW codes: indices 4..15 lie past the palette.
    files["past_palette_9x5.gif"] = hand_gif(9, 5, (0, 0, 9, 5), global_colors=4)
    # A local palette that replaces the global one, on a frame larger than the logical screen.
    files["local_palette_12x6.gif"] = hand_gif(8, 4, (2, 1, 10, 5), global_colors=16, local_colors=16)
    return files


def gif_palette(n, salt):
    bits = max(1, (n - 1).bit_length())
    entries = [[(i * 16 + salt) % 256, (255 - i * 16) % 256, (i * 53 + salt) % 256] for i in range(1 << bits)]
    return bits, bytes(sum(entries, []))


def hand_gif(screen_w, screen_h, box, global_colors, local_colors=None, transparent=None):
    """A one-frame GIF written byte by byte (Pillow always writes frames covering the screen with a palette
    of the codes it uses): frame `box` = (x, y, w, h), indices (x + 2y) mod 16, LZW code size 4 with a clear
    code before every pixel so the code width stays 5."""
    x0, y0, w, h = box
    gbits, gpal = gif_palette(global_colors, 0)
    pixels = bytes((x + 2 * y) % 16 for y in range(h) for x in range(w))
    code_size = 4
    clear = 1 << code_size
    codes = []
    for p in pixels:
        codes += [clear, p]
    codes.append(clear + 1)
    bits, nbits, data = 0, 0, bytearray()
    for c in codes:
        bits |= c << nbits
        nbits += code_size + 1
        while nbits >= 8:
            data.append(bits & 0xFF)
            bits >>= 8
            nbits -= 8
    if nbits:
        data.append(bits)
    blocks = b"".join(bytes([len(data[i:i + 255])]) + bytes(data[i:i + 255]) for i in range(0, len(data), 255)) + b"\x00"
    gif = b"GIF89a" + struct.pack("<HHBBB", screen_w, screen_h, 0x80 | (gbits - 1), 0, 0) + gpal
    if transparent is not None:
        gif += b"\x21\xF9\x04\x01\x00\x00" + bytes([transparent]) + b"\x00"
    flags, local = 0, b""
    if local_colors is not None:
        lbits, local = gif_palette(local_colors, 101)
        flags = 0x80 | (lbits - 1)
    gif += b"\x2C" + struct.pack("<HHHHB", x0, y0, w, h, flags) + local + bytes([code_size]) + blocks + b"\x3B"
    return gif


# ------------------------------------------------------------------------- the processor's rules
# Restated from the V4.1 image processor's description (docs/vision.md "Resize rules"), in Python floats.

def plan(width, height, cfg):
    p, ratio, budget = cfg["patch_size"], cfg["downsample_ratio"], cfg["max_image_tokens"]
    w, h = width, height
    if cfg["max_wh_ratio"] is not None and w > h * cfg["max_wh_ratio"]:
        w = h * cfg["max_wh_ratio"]
    if 0 < w * h < cfg["min_pixels"]:
        s = (cfg["min_pixels"] / (w * h)) ** 0.5
        w, h = int(w * s), int(h * s)
    cw, ch = math.ceil(w / p) * p, math.ceil(h / p) * p

    def tokens_of(ch_, cw_):
        gh, gw = -(-(ch_ // p) // ratio), -(-(cw_ // p) // ratio)
        return gh, gw, gh * (gw + 1) + 2

    gh, gw, n = tokens_of(ch, cw)
    if n > budget:
        aspect = h / w
        cols = math.sqrt((budget - 2) / aspect + 0.25) - 0.5  # solves rows * (cols + 1) + 2 = budget
        rows = cols * aspect
        cell = p * ratio
        if cols < 1.0:
            ch, cw = (budget - 2) // 2 * cell, cell
        elif rows < 1.0:
            ch, cw = cell, (budget - 3) * cell
        else:
            k = min(math.floor(cols) * cell / w, math.floor(rows) * cell / h)
            ch, cw = math.floor(h * k / p) * p, math.floor(w * k / p) * p
        gh, gw, n = tokens_of(ch, cw)
        assert n <= budget
    stretch = cfg["max_wh_ratio"] is not None and width >= cfg["max_wh_ratio"] * height
    return dict(canvas_width=cw, canvas_height=ch, grid_h=ch // p, grid_w=cw // p, llm_h=gh, llm_w=gw,
                n_tokens=n, fit="stretch" if stretch else "pad")


def canvas_of(image, pl):
    size = (pl["canvas_width"], pl["canvas_height"])
    if pl["fit"] == "stretch":
        return image.resize(size, Image.Resampling.BICUBIC)
    return ImageOps.pad(image, size, method=Image.Resampling.BICUBIC, color=(127, 127, 127))


def bf16_bits(x):
    """fp32 -> bf16 bit patterns, round to nearest even (no NaNs occur here)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def patches_of(canvas_u8, p):
    """bf16 bits [n_patches, 3 * p * p]: (v / 255 - 0.5) / 0.5 in fp32, channel-major inside a patch."""
    x = canvas_u8.astype(np.float32) / np.float32(255)
    x = (x - np.float32(0.5)) / np.float32(0.5)
    h, w, _ = x.shape
    gh, gw = h // p, w // p
    x = x.transpose(2, 0, 1).reshape(3, gh, p, gw, p).transpose(1, 3, 0, 2, 4).reshape(gh * gw, 3 * p * p)
    return bf16_bits(x)


def content_box(canvas_u8, pl, image):
    """Where the resized picture sits (pad fit): found from PIL's own contain() size and pad() offset rule."""
    if pl["fit"] == "stretch":
        return 0, 0, pl["canvas_width"], pl["canvas_height"]
    inner = ImageOps.contain(image, (pl["canvas_width"], pl["canvas_height"]))
    x = round((pl["canvas_width"] - inner.width) * 0.5) if inner.width != pl["canvas_width"] else 0
    y = round((pl["canvas_height"] - inner.height) * 0.5) if inner.width == pl["canvas_width"] else 0
    return x, y, inner.width, inner.height


# ------------------------------------------------------------------------------------------ outputs

PLAN_SIZES = [(1, 1), (1, 2), (2, 1), (3, 500), (500, 3), (37, 91), (91, 37), (640, 480), (480, 640), (544, 544),
              (545, 543), (14, 14), (42, 42), (1000, 1000), (1024, 1024), (4096, 4096), (4000, 3000), (10000, 10),
              (10, 10000), (100000, 1), (1, 100000), (7000, 13), (13, 7000), (1920, 1080), (1080, 1920), (300, 2000),
              (2000, 300), (5000, 200), (200, 5000), (12345, 678), (678, 12345), (1, 50000), (50000, 1),
              (43, 43), (600, 1), (1, 600), (3000, 3000), (13, 4096), (4096, 13)]

RESIZES = [((37, 91), (50, 20)), ((37, 91), (3, 200)), ((37, 91), (1, 1)), ((37, 91), (37, 40)), ((37, 91), (80, 91)),
           ((640, 480), (644, 490)), ((640, 480), (100, 75)), ((640, 480), (13, 7)), ((3, 500), (7028, 4)),
           ((500, 3), (1, 1000)), ((1, 1), (5, 3)), ((544, 544), (546, 546))]


def main():
    os.makedirs(IMAGES, exist_ok=True)
    files = make_images()
    decoded = {}
    manifest = {"pillow": PIL.__version__, "numpy": np.__version__, "configs": CONFIGS, "images": {}, "plans": {},
                "resizes": [], "preprocess": {}, "tiny_patches": {}}
    for name, data in sorted(files.items()):
        with open(os.path.join(IMAGES, name), "wb") as f:
            f.write(data)
        with Image.open(io.BytesIO(data)) as src:
            fmt, mode = src.format, src.mode
            rgb = src.convert("RGB")
        arr = np.asarray(rgb, dtype=np.uint8)
        decoded[name] = rgb
        manifest["images"][name] = dict(format=fmt, pil_mode=mode, width=rgb.width, height=rgb.height,
                                        rgb_sha256=sha(arr.tobytes()))

    for cname, cfg in CONFIGS.items():
        manifest["plans"][cname] = []
        for w, h in PLAN_SIZES:
            pl = plan(w, h, cfg)
            img = Image.new("RGB", (w, h)) if w * h <= 4_000_000 else None
            entry = dict(width=w, height=h, **pl)
            if pl["fit"] == "pad":
                # contain() on a stand-in of the same size gives PIL's content size; a side of 0 is an error.
                im_ratio, dest = w / h, pl["canvas_width"] / pl["canvas_height"]
                cw, chh = pl["canvas_width"], pl["canvas_height"]
                if im_ratio > dest:
                    chh = round(h / w * pl["canvas_width"])
                elif im_ratio < dest:
                    cw = round(w / h * pl["canvas_height"])
                entry.update(content_width=cw, content_height=chh)
                if cw <= 0 or chh <= 0:
                    entry = dict(width=w, height=h, error="extreme aspect ratio")
                elif img is not None:
                    x, y, iw, ih = content_box(None, pl, img)
                    assert (iw, ih) == (cw, chh)
                    entry.update(content_x=x, content_y=y)
            manifest["plans"][cname].append(entry)

    for (sw, sh), (tw, th) in RESIZES:
        src_name = f"rgb_{sw}x{sh}.png"
        out = decoded[src_name].resize((tw, th), Image.Resampling.BICUBIC)
        manifest["resizes"].append(dict(source=src_name, width=tw, height=th,
                                        rgb_sha256=sha(np.asarray(out, dtype=np.uint8).tobytes())))

    for cname in ("release", "wh_ratio_2", "tiny"):
        cfg = CONFIGS[cname]
        manifest["preprocess"][cname] = {}
        for name, rgb in sorted(decoded.items()):
            if cname == "wh_ratio_2" and not name.startswith(("rgb_500x3", "rgb_640x480", "noninterlaced_500x3")):
                continue
            pl = plan(rgb.width, rgb.height, cfg)
            try:
                canvas = np.asarray(canvas_of(rgb, pl), dtype=np.uint8)
            except ValueError as e:  # Pillow refuses a resize to 0 pixels (extreme aspect ratio)
                manifest["preprocess"][cname][name] = dict(plan=pl, error=str(e))
                continue
            assert canvas.shape == (pl["canvas_height"], pl["canvas_width"], 3)
            pt = patches_of(canvas, cfg["patch_size"])
            manifest["preprocess"][cname][name] = dict(plan=pl, canvas_sha256=sha(canvas.tobytes()),
                                                        patches_sha256=sha(pt.astype("<u2").tobytes()))
            if cname == "tiny":
                manifest["tiny_patches"][name] = pt.reshape(-1).tolist()

    with open(os.path.join(HERE, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
