#!/usr/bin/env python3
"""DeepSeek's own image processor against the preprocessing goldens of tests/data/vision.

For every image and config of tests/data/vision/manifest.json (`preprocess`), runs the reference's
`image_processor.load_image` (tests/reference/upstream/deepseek_v41/image_processor.py: decode with PIL,
its resize plan, pad or stretch, normalize, bf16, patches) and compares its patch grid, token grid and the
SHA-256 of its bf16 patch tensor with the manifest's. dsv4's preprocessing is tested against the same
manifest bit for bit (src/vision/preprocess_test.cc), so agreement here means dsv4 == the reference's code.

    python3 tests/reference/vision/preprocess_ref.py [--json OUT.json]

Needs torch, numpy and Pillow. Exit status 0 when every comparison agreed.
"""
import argparse
import hashlib
import json
import os
import sys
import types

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.normpath(os.path.join(here, "..", "..", ".."))
sys.path.insert(0, os.path.join(root, "tests", "reference", "upstream", "deepseek_v41"))
import numpy as np  # noqa: E402
import PIL  # noqa: E402
import torch  # noqa: E402
import image_processor as ip  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the per-image results here")
    a = ap.parse_args()
    data = os.path.join(root, "tests", "data", "vision")
    with open(os.path.join(data, "manifest.json")) as f:
        m = json.load(f)
    results, bad, n = [], 0, 0
    for cname, entries in m["preprocess"].items():
        c = m["configs"][cname]
        args = types.SimpleNamespace(vision_patch_size=c["patch_size"], vision_max_wh_ratio=c["max_wh_ratio"],
                                     vision_min_pixels=c["min_pixels"], vision_downsample_ratio=c["downsample_ratio"],
                                     vision_max_n_token=c["max_image_tokens"])
        for name, want in sorted(entries.items()):
            n += 1
            r = {"config": cname, "image": name}
            try:
                patches, vh, vw, lh, lw = ip.load_image({"url": os.path.join(data, "images", name)}, args)
                bits = patches.contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
                r.update(grid=[vh, vw], llm=[lh, lw], patches_sha256=hashlib.sha256(bits).hexdigest())
            except Exception as e:  # the manifest records refusals as errors
                r["error"] = f"{type(e).__name__}: {e}"
            if "error" in want or "error" in r:
                ok = ("error" in want) == ("error" in r)
            else:
                p = want["plan"]
                ok = (r["grid"] == [p["grid_h"], p["grid_w"]] and r["llm"] == [p["llm_h"], p["llm_w"]] and
                      r["patches_sha256"] == want["patches_sha256"])
            r["agrees"] = ok
            bad += 0 if ok else 1
            results.append(r)
            if not ok:
                print(f"DIFFERS {cname} {name}: reference {r} manifest {want}")
    print(f"reference image_processor.py against tests/data/vision/manifest.json: {n - bad} of {n} (config, image) "
          f"pairs agree (patch grid, token grid, bf16 patch SHA-256); Pillow {PIL.__version__} (goldens: "
          f"{m['pillow']}), numpy {np.__version__}, torch {torch.__version__}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pillow": PIL.__version__, "numpy": np.__version__, "torch": torch.__version__,
                       "agree": n - bad, "pairs": n, "results": results}, f, indent=1)
    return 0 if bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
