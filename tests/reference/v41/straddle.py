#!/usr/bin/env python3
"""Where dsv4 and DeepSeek's V4.1 reference first part on a row: the first rounding whose results differ, and whether
the two values before that rounding straddle its boundary (docs/numerics.md, "dsv4 against DeepSeek's reference,
row by row"). numpy only.

Inputs: the values before rounding of `dsv4 run --dump-pre-round` (ref32; ref64 optional) and of reference_run.py
--pre-round (pre_round_taps.py), same names: NAME_LL [T, n / T]. For each row it walks the layers and, in forward
order, the roundings tapped there; the first whose rounded values differ is the row's first event. A window key
(wkv, kv_norm, kv_rope) is looked at on every row of the row's window, so a row that parts through another row's key
is told apart from one that parts by itself. At a row's own event it prints the first element whose rounded values
differ: both values before rounding (fp32 hex and decimal), the bf16 boundary between the two rounded values,
whether the two values lie on either side of it and how many fp32 ulps each is from it, ref64's value and which side
it rounds to, and the largest difference before rounding over the row's other elements.

usage: straddle.py --name NAME --dsv4 P32.npz --reference PRE.npz [--ref64 P64.npz] [--config config.json]
                   [--rows 2,66] [--header] [--all]
       straddle.py --self-check
"""
import argparse
import json
import sys

import numpy as np

MIX = ("mix_pre", "mix_post", "mix_comb")  # unrounded coefficients: compared, never an event by themselves
INPUTS = ("h_in",)  # the layer's input streams, bf16 already: a difference there comes from below (Engram, untapped)
ORDER = (
    ["h_in"]
    + ["attn_" + m for m in MIX]
    + ["attn_collapse", "attn_norm", "wq_a", "q_norm", "wq_b", "q_rope", "wkv", "kv_norm", "kv_rope", "probs",
       "attn_o", "o_rope", "wo_a", "wo_b", "attn_post"]
    + ["ffn_" + m for m in MIX]
    + ["ffn_collapse", "ffn_norm", "ffn_post"]
)
KEYS = ("wkv", "kv_norm", "kv_rope")  # computed on every row, read by the rows of its window
FLIP_BOUND = 4096  # fp32 ulps: 1/16 of a bf16 step; a row's values before rounding agreeing within it = equal inputs


def bf16_round(x):
    """Round to nearest even bf16 in one rounding (float64 in; fp32 values are exact in float64)."""
    x = np.asarray(x, np.float64)
    _, e = np.frexp(x)
    ulp = np.ldexp(1.0, np.maximum(e, -125) - 8)
    with np.errstate(invalid="ignore"):
        return np.round(x / ulp) * ulp


def ulp32(x):
    """The fp32 spacing at |x|."""
    _, e = np.frexp(np.asarray(x, np.float64))
    return np.ldexp(1.0, np.maximum(e, -125) - 24)


def bf16_order(v):
    """bf16 values as integers in their order (adjacent bf16 values differ by 1)."""
    bits = (np.asarray(v, np.float32).view(np.uint32) >> 16).astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def hex32(v):
    return f"0x{int(np.float32(v).view(np.uint32)):08x}"


def num(v):
    return f"{float(v):.9g}"


class Side:
    def __init__(self, path):
        self.z = np.load(path)
        self.files = set(self.z.files)
        self.cache = {}

    def has(self, tap, L):
        return f"{tap}_{L:02d}" in self.files

    def _get(self, key, make):
        if key not in self.cache:
            self.cache[key] = make()
        return self.cache[key]

    def pre(self, tap, L):
        k = f"{tap}_{L:02d}"
        return self._get(k, lambda: self.z[k].astype(np.float64))

    def rounded(self, tap, L):
        k = f"{tap}_{L:02d}_post"
        if k in self.files:
            return self._get(k, lambda: self.z[k].astype(np.float64))
        return self._get(k, lambda: bf16_round(self.pre(tap, L)))


def layers_of(side):
    return sorted({int(k.split("_")[2]) for k in side.files if k.startswith("attn_post_") and not k.endswith("_post")})


class Config:
    def __init__(self, path):
        t = {}
        if path:
            cfg = json.load(open(path))
            t = cfg.get("text_config", cfg)
        self.window = t.get("sliding_window")
        self.topk = t.get("index_topk")
        self.C = t.get("hc_mult")
        self.H = t.get("num_attention_heads")
        self.d = t.get("head_dim")
        self.rd = t.get("qk_rope_head_dim")

    def element(self, tap, j, width):
        """A flat element index of a row as its coordinates, where the layout is known."""
        try:
            if (tap == "h_in" or tap.endswith("_post") and not tap.endswith("mix_post")) and self.C:
                return f"stream {j // (width // self.C)}, dim {j % (width // self.C)}"
            if tap == "probs" and self.window is not None and self.topk is not None:
                k = self.window + self.topk
                e = j % k
                part = f"window entry {e}" if e < self.window else f"pick {e - self.window}"
                return f"head {j // k}, {part}"
            if tap in ("q_rope", "o_rope") and self.rd:
                return f"head {j // self.rd}, rope dim {j % self.rd}"
            if tap in ("wq_b", "attn_o") and self.d:
                return f"head {j // self.d}, dim {j % self.d}"
            if tap.endswith("mix_comb") and self.C:
                return f"from stream {j // self.C} to {j % self.C}"
        except ZeroDivisionError:
            pass
        return f"{j}"


def first_event(t, layers, mine, ref, window):
    """(layer, tap, row) of row t's first rounding whose results differ, or None; and the mixing coefficients'
    largest difference in fp32 ulps on the way, per (layer, tap)."""
    mix_notes = []
    for L in layers:
        for tap in ORDER:
            if not (mine.has(tap, L) and ref.has(tap, L)):
                continue
            if tap.endswith(MIX):
                a, b = mine.pre(tap, L)[t], ref.pre(tap, L)[t]
                d = np.max(np.abs(a - b) / ulp32(b)) if a.size else 0.0
                mix_notes.append((L, tap, float(d)))
                continue
            rows = [t]
            if tap in KEYS and window:
                rows = list(range(max(0, t - window + 1), t + 1))
            ra, rb = mine.rounded(tap, L), ref.rounded(tap, L)
            for r in rows:
                if r < ra.shape[0] and not np.array_equal(ra[r], rb[r]):
                    return (L, tap, r), mix_notes
    return None, mix_notes


def analyse(t, L, tap, mine, ref, r64):
    a, b = mine.pre(tap, L)[t], ref.pre(tap, L)[t]
    ra, rb = bf16_round(a), ref.rounded(tap, L)[t]
    differ = np.flatnonzero(ra != rb)
    j = int(differ[0])
    res = {"element": j, "width": a.size, "n_differ": int(differ.size), "dsv4": a[j], "reference": b[j]}
    res["consistent"] = bool(np.array_equal(bf16_round(b), rb))  # the reference's recomputation rounds to its own
    steps = np.abs(bf16_order(ra[differ]) - bf16_order(rb[differ]))
    res["adjacent"] = bool(np.all(steps == 1))
    lo, hi = sorted((ra[j], rb[j]))
    res["boundary"] = (lo + hi) / 2 if steps[0] == 1 else None
    if res["boundary"] is not None:
        u = ulp32(res["boundary"])
        res["ulps"] = ((a[j] - res["boundary"]) / u, (b[j] - res["boundary"]) / u)
        res["straddles"] = (a[j] - res["boundary"]) * (b[j] - res["boundary"]) <= 0
        every = True
        for i in differ:
            m = (ra[i] + rb[i]) / 2
            every &= bool((a[i] - m) * (b[i] - m) <= 0)
        res["all_straddle"] = every and res["adjacent"]
    else:
        res["ulps"], res["straddles"], res["all_straddle"] = None, False, False
    d = np.abs(a - b) / ulp32(np.where(b != 0, b, a))
    others = np.delete(d, differ)
    res["max_ulps"] = float(np.nanmax(d)) if d.size else 0.0
    res["max_ulps_others"] = float(np.nanmax(others)) if others.size else 0.0
    res["flip"] = res["all_straddle"] and res["max_ulps"] <= FLIP_BOUND and tap not in INPUTS
    if r64 is not None and r64.has(tap, L):
        v = r64.pre(tap, L)[t][j]
        rv = bf16_round(v)
        res["ref64"] = v
        res["ref64_with"] = "reference" if rv == rb[j] else "ref32" if rv == ra[j] else "neither"
    return res


HEADER = ("| configuration | row | layer | rounding | element | dsv4 ref32 before rounding | reference before rounding "
          "| bf16 boundary | straddles | fp32 ulps from it (ref32 / reference) | ref64 before rounding (rounds as) "
          "| row: elements rounded apart, largest difference before rounding elsewhere | verdict |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def row_line(name, t, L, tap, res, cfg, earlier):
    b = res["boundary"]
    ulps = f"{res['ulps'][0]:+.1f} / {res['ulps'][1]:+.1f}" if res["ulps"] else "–"
    r64 = f"{res['ref64']:.17g} ({res['ref64_with']})" if "ref64" in res else "–"
    verdict = "rounding flip" if res["flip"] else "values differ before rounding"
    if tap in INPUTS:
        verdict = "the layer's input streams differ (Engram's rounding or earlier; not tapped before rounding)"
    if not res["consistent"]:
        verdict += " (the reference's recomputed values do not all round to its own results)"
    if tap in ("probs", "attn_o"):
        verdict += "; compressed rows and picks not tapped"
    if tap == "ffn_post":
        verdict += "; the MoE output is not tapped"
    if earlier:  # rows that parted before at this layer or below (through compressed rows, say)
        r, Le = earlier[0]
        verdict += f"; after row {r} parted (layer {Le})"
    bnd = ("%s (%s)" % (hex32(b), num(b))) if b is not None else "not adjacent"
    straddles = "yes" if res["straddles"] else "no"
    if tap in INPUTS:  # values after rounding: no boundary to speak of
        bnd, straddles, ulps = "–", "–", "–"
    return (f"| {name} | {t} | {L} | {tap} | {cfg.element(tap, res['element'], res['width'])} "
            f"| {hex32(res['dsv4'])} ({num(res['dsv4'])}) | {hex32(res['reference'])} ({num(res['reference'])}) "
            f"| {bnd} | {straddles} | {ulps} | {r64} "
            f"| {res['n_differ']} of {res['width']}; {res['max_ulps_others']:.0f} fp32 ulps | {verdict} |")


def run(opts, out=sys.stdout):
    mine, ref = Side(opts.dsv4), Side(opts.reference)
    r64 = Side(opts.ref64) if opts.ref64 else None
    cfg = Config(opts.config)
    layers = [L for L in layers_of(mine) if L in layers_of(ref)]
    T = min(mine.pre("attn_post", layers[0]).shape[0], ref.pre("attn_post", layers[0]).shape[0])
    rows = [int(v) for v in opts.rows.split(",")] if opts.rows else range(T)
    if opts.header:
        print(HEADER, file=out)
    own, via, results, parted = [], {}, [], []
    for t in rows:
        ev, mix = first_event(t, layers, mine, ref, cfg.window)
        if ev is None:
            continue
        L, tap, r = ev
        earlier = [(r0, L0) for r0, L0 in parted if L0 <= L]
        parted.append((t, L))
        if r != t:
            via.setdefault((r, L, tap), []).append(t)
            results.append({"row": t, "layer": L, "tap": tap, "via_row": r})
            continue
        res = analyse(t, L, tap, mine, ref, r64)
        mix_here = [m for m in mix if m[0] == L]
        res.update(row=t, layer=L, tap=tap, mix_ulps={m[1]: m[2] for m in mix_here})
        results.append(res)
        own.append(t)
        if len(own) == 1 or not opts.first_only:
            print(row_line(opts.name, t, L, tap, res, cfg, earlier), file=out)
    notes = [f"rows {_ranges(v)} through row {r}'s {tap} (layer {L})" for (r, L, tap), v in sorted(via.items())]
    print(f"<!-- {opts.name}: {len(own)} rows part by themselves {own[:20]}; " + ("; ".join(notes) or "no other")
          + " -->", file=out)
    for res in results:
        if "mix_ulps" in res and res["mix_ulps"]:
            worst = ", ".join(f"{k} {v:.0f}" for k, v in res["mix_ulps"].items())
            print(f"<!-- {opts.name} row {res['row']} layer {res['layer']}: mixing coefficients' largest difference "
                  f"(fp32 ulps): {worst} -->", file=out)
    return results


def _ranges(v):
    out, i = [], 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[j + 1] == v[j] + 1:
            j += 1
        out.append(f"{v[i]}" if i == j else f"{v[i]}-{v[j]}")
        i = j + 1
    return ", ".join(out)


def self_check():
    """Synthetic arrays: row 2 flips at layer 1's attn_post by straddling a boundary, rows 3 and 4 part through
    row 2's window key at layer 2, row 5 differs before rounding (not a flip); every other row equal."""
    import os
    import tempfile

    T, C, D, W, K = 6, 2, 8, 4, 2
    rng = np.random.default_rng(0)
    shapes = {"h_in": C * D, "attn_mix_pre": C, "attn_mix_post": C, "attn_mix_comb": C * C, "attn_collapse": D, "attn_norm": D,
              "wq_a": 4, "q_norm": 4, "wq_b": 8, "q_rope": 4, "wkv": 4, "kv_norm": 4, "kv_rope": 2,
              "probs": 2 * (W + K), "attn_o": 8, "o_rope": 4, "wo_a": 4, "wo_b": D, "attn_post": C * D,
              "ffn_mix_pre": C, "ffn_mix_post": C, "ffn_mix_comb": C * C, "ffn_collapse": D, "ffn_norm": D,
              "ffn_post": C * D}
    a, b = {}, {}
    for L in range(3):
        for tap, n in shapes.items():
            v = rng.standard_normal((T, n)).astype(np.float32)
            a[f"{tap}_{L:02d}"] = v
            b[f"{tap}_{L:02d}"] = v.copy()
            b[f"{tap}_{L:02d}_post"] = bf16_round(v).astype(np.float32)
    bnd = np.float32(1.00390625)  # halfway between bf16 1.0 and 1.0078125
    u = np.float32(2.0**-23)
    a["attn_post_01"][2, 3] = bnd - 2 * u
    b["attn_post_01"][2, 3] = bnd + 3 * u
    b["attn_post_01_post"][2, 3] = 1.0078125
    a["attn_mix_post_01"][2, 0] = np.nextafter(b["attn_mix_post_01"][2, 0], np.float32(10))
    a["kv_rope_02"][2, 1] = bnd - u
    b["kv_rope_02"][2, 1] = bnd + u
    b["kv_rope_02_post"][2, 1] = 1.0078125
    a["wq_a_00"][5, 0] = 1.5
    b["wq_a_00"][5, 0] = 1.75
    b["wq_a_00_post"][5, 0] = 1.75
    d = tempfile.mkdtemp()
    pa, pb, pc = (os.path.join(d, f) for f in ("a.npz", "b.npz", "c.json"))
    np.savez(pa, **a)
    np.savez(pb, **b)
    json.dump({"text_config": {"sliding_window": W, "index_topk": K, "hc_mult": C, "num_attention_heads": 2,
                               "head_dim": 4, "qk_rope_head_dim": 2}}, open(pc, "w"))
    import io

    buf = io.StringIO()
    opts = argparse.Namespace(name="synthetic", dsv4=pa, reference=pb, ref64=None, config=pc, rows="", header=True,
                              first_only=False)
    res = {r["row"]: r for r in run(opts, buf)}
    text = buf.getvalue()
    print(text)
    assert sorted(res) == [2, 3, 4, 5], sorted(res)
    r2 = res[2]
    assert (r2["layer"], r2["tap"], r2["element"], r2["n_differ"]) == (1, "attn_post", 3, 1), r2
    assert r2["straddles"] and r2["flip"] and r2["consistent"], r2
    assert np.allclose(r2["ulps"], (-2.0, 3.0)), r2["ulps"]
    assert r2["mix_ulps"]["attn_mix_post"] == 1.0, r2["mix_ulps"]
    for t in (3, 4):  # row 2's key is in their windows (W = 4)
        assert res[t] == {"row": t, "layer": 2, "tap": "kv_rope", "via_row": 2}, res[t]
    r5 = res[5]
    assert (r5["layer"], r5["tap"]) == (0, "wq_a") and not r5["flip"] and r5["boundary"] is None, r5
    assert "| synthetic | 2 | 1 | attn_post | stream 0, dim 3 | 0x3f807ffe" in text, text
    assert "rows 3-4 through row 2's kv_rope (layer 2)" in text, text
    print("self-check: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-check", action="store_true")
    ap.add_argument("--name", default="")
    ap.add_argument("--dsv4", help="dsv4 run --dump-pre-round (ref32)")
    ap.add_argument("--reference", help="reference_run.py --pre-round")
    ap.add_argument("--ref64", default="", help="dsv4 run --ref64 --dump-pre-round")
    ap.add_argument("--config", default="", help="the checkpoint's config.json (window, index_topk, shapes)")
    ap.add_argument("--rows", default="", help="rows to look at (default: every row)")
    ap.add_argument("--header", action="store_true", help="print the table's header first")
    ap.add_argument("--first-only", action="store_true", help="only the first row that parts by itself")
    ap.add_argument("--header-only", action="store_true", help="print the table's header and stop")
    opts = ap.parse_args()
    if opts.self_check:
        self_check()
        return
    if opts.header_only:
        print(HEADER)
        return
    if not (opts.dsv4 and opts.reference):
        ap.error("--dsv4 and --reference are needed (or --self-check)")
    run(opts)


if __name__ == "__main__":
    main()
