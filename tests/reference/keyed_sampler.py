#!/usr/bin/env python3
"""Independent reference for the keyed sampler (engine-reference.md §1.6), in Python integers and floats.

Prints the expectations src/lanes/sampling_test.cc checks: SplitMix64 outputs, key bits, prompt seeds and
draws for fixed logits rows. Run: python3 tests/reference/keyed_sampler.py
"""
import math
import struct

M64 = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15


def mix(x):
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def splitmix64(state, n):
    out = []
    for _ in range(n):
        state = (state + GAMMA) & M64
        out.append(mix(state))
    return out


def key_bits(seed, position, token):
    h = mix(seed + GAMMA)
    h = mix(h ^ ((position * 0xD1B54A32D192ED03) & M64))
    return mix(h ^ (token & 0xFFFFFFFF))


def uniform(bits):
    return (bits >> 11) * 2.0**-53 + 2.0**-54


def seed_from_prompt(ids):
    h = 0
    for t in ids:
        h = mix(h + GAMMA + (t & 0xFFFFFFFF))
    return h >> 1


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def sample(logits, temperature, top_k, top_p, min_p, seed, position):
    logits = [f32(x) for x in logits]
    if temperature <= 0:
        return max(range(len(logits)), key=lambda i: (logits[i], -i))
    t = max(f32(temperature), 1e-6)
    ids = sorted(range(len(logits)), key=lambda i: (-logits[i], i))
    if top_k > 0:
        ids = ids[:top_k]
    x = [logits[i] / t for i in ids]
    if f32(top_p) < 1.0:
        total = sum(math.exp(v - x[0]) for v in x)
        need = f32(top_p) * total
        acc, cut = 0.0, len(x)
        for i, v in enumerate(x):
            acc += math.exp(v - x[0])
            if acc >= need:
                cut = i + 1
                break
        ids, x = ids[:cut], x[:cut]
    if min_p > 0:
        floor = x[0] + math.log(f32(min_p))
        cut = 1
        while cut < len(x) and x[cut] >= floor:
            cut += 1
        ids, x = ids[:cut], x[:cut]
    scores = [v - math.log(-math.log(uniform(key_bits(seed, position, i)))) for v, i in zip(x, ids)]
    best = 0
    for i in range(1, len(scores)):
        if scores[i] > scores[best]:
            best = i
    return ids[best]


ROW = [1.5, -0.25, 2.0, 0.75, 2.0, -3.0, 0.5, 1.25]

if __name__ == "__main__":
    print("splitmix64(0):", [hex(v) for v in splitmix64(0, 4)])
    print("key_bits(42,7,3):", hex(key_bits(42, 7, 3)))
    print("key_bits(2**63+5,123456789,128000):", hex(key_bits(2**63 + 5, 123456789, 128000)))
    print("seed_from_prompt([1,2,3]):", hex(seed_from_prompt([1, 2, 3])))
    print("seed_from_prompt([128000,-1]):", hex(seed_from_prompt([128000, -1])))
    configs = [(1.0, 0, 1.0, 0.0), (0.7, 5, 0.9, 0.05), (1.3, 0, 0.8, 0.0), (2.0, 3, 1.0, 0.2), (0.8, 0, 1.0, 0.3)]
    for c in configs:
        draws = [sample(ROW, *c, seed=99, position=p) for p in range(100, 116)]
        print("draws", c, draws)
