#!/usr/bin/env python3
"""Row-by-row comparison of dsv4 (ref32 and ref64 dumps of `dsv4 run`) with the reference's run
(reference_run.py): per-row logit NRMS, and for each row the first layer whose residual streams part.

usage: compare.py REF.npz DSV4_REF32_LOGITS.npy DSV4_REF32_HIDDEN.npz DSV4_REF64_LOGITS.npy DSV4_REF64_HIDDEN.npz OUT.json
"""
import json
import sys

import numpy as np

PART = 1e-5  # a row "parts" when its NRMS exceeds this (ref32 rounding alone stays near 1e-7 before an event)


def row_nrms(a, b):
    a = a.reshape(a.shape[0], -1).astype(np.float64)
    b = b.reshape(b.shape[0], -1).astype(np.float64)
    return np.sqrt(((a - b) ** 2).sum(1) / np.maximum((b**2).sum(1), 1e-300))


def main():
    ref = np.load(sys.argv[1])
    d32, h32 = np.load(sys.argv[2]), np.load(sys.argv[3])
    d64, h64 = np.load(sys.argv[4]), np.load(sys.argv[5])
    out_path = sys.argv[6]
    T = ref["logits"].shape[0]
    layers = sorted(k for k in ref.files if k.startswith("layer_"))
    res = {"rows": T, "layers": len(layers)}
    res["logits"] = {
        "ref32_vs_reference": row_nrms(d32, ref["logits"]).tolist(),
        "ref64_vs_reference": row_nrms(d64, ref["logits"]).tolist(),
        "ref32_vs_ref64": row_nrms(d32, d64).tolist(),
    }
    first = {}
    for name, h in (("ref32", h32), ("ref64", h64)):
        per_layer = {k: row_nrms(h[k], ref[k]) for k in layers}
        per_layer["final_norm"] = row_nrms(h["final_norm"], ref["final_norm"])
        rows = []
        for t in range(T):
            hit = next((k for k in layers + ["final_norm"] if per_layer[k][t] > PART), None)
            rows.append(None if hit is None else [hit, float(per_layer[hit][t])])
        first[name] = rows
        res[f"hidden_{name}"] = {k: v.tolist() for k, v in per_layer.items()}
    res["first_parting_layer"] = first
    # sub-layer rows where both sides have them: per-row NRMS (ref32 side)
    ops = sorted(k for k in ref.files if k.split("_")[0] in ("attn", "ffn") and k in h32.files)
    res["ops_ref32"] = {k: row_nrms(h32[k], ref[k]).tolist() for k in ops}
    # index picks: rows whose selected compressed rows differ (reference lists carry the window offset T)
    for k in ref.files:
        if k.startswith("topk_") and k in h32.files:
            r = np.where(ref[k] >= 0, ref[k] - T, -1)
            d = h32[k]
            n = min(r.shape[1], d.shape[1])
            differ = [t for t in range(T) if sorted(x for x in r[t] if x >= 0) != sorted(x for x in d[t] if x >= 0)]
            res[k + "_differ_rows"] = differ
    for k in ref.files:
        if k.startswith("topk_"):
            res[k + "_reference"] = ref[k].tolist()
    json.dump(res, open(out_path, "w"))
    lg = res["logits"]
    print(f"{T} rows; logits NRMS vs reference: ref32 max {max(lg['ref32_vs_reference']):.2e}, "
          f"ref64 max {max(lg['ref64_vs_reference']):.2e}; ref32 vs ref64 max {max(lg['ref32_vs_ref64']):.2e}")
    for k in sorted(x for x in res if x.endswith("_differ_rows")):
        print(f"  {k}: {len(res[k])} rows pick other compressed rows {res[k][:10]}")
    parted = [(t, r) for t, r in enumerate(first["ref32"]) if r is not None]
    if parted:
        t, (layer, _) = parted[0]
        if layer.startswith("layer_"):
            n = layer.split("_")[1]
            print(f"  row {t}, layer {n}: " + ", ".join(
                f"{k} {res['ops_ref32'][k][t]:.1e}" for k in (f"attn_in_{n}", f"attn_out_{n}", f"ffn_in_{n}", f"ffn_out_{n}")
                if k in res["ops_ref32"]))
    for name in ("ref32", "ref64"):
        parted = [(t, r) for t, r in enumerate(first[name]) if r is not None]
        print(f"  {name}: {len(parted)} rows part (> {PART:g}); first: "
              + ", ".join(f"row {t} at {r[0]} ({r[1]:.1e})" for t, r in parted[:6]))


if __name__ == "__main__":
    main()
