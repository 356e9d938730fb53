"""A tensor-parallel rollout's Reader takes a layout and reads only its shard: every rank of tp 2
and 4 gets its tensors (its names, its shard shapes) bit for bit equal to slicing the published
state_dict, and the bytes it read are its shard's, about 1/tp of the version plus the replicated
tensors. A cast on the way matches torch's own bf16 conversion, and fp8 e4m3 with block scales
matches a reference written here. A bad layout raises a clear error and loads nothing."""


import _harness as h
import numpy as np

h.need_torch()
import torch  # noqa: E402

import sluice  # noqa: E402

SPLITS = {"model.embed_tokens.weight": "rows", "model.layers.0.self_attn.q_proj.weight": "rows",
          "model.layers.0.self_attn.o_proj.weight": "columns"}


def tensors(version):
    g = torch.Generator().manual_seed(2000 + version)
    return {
        "model.embed_tokens.weight": torch.randn(256, 64, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(128, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.o_proj.weight": torch.randn(64, 128, generator=g).to(torch.bfloat16),
        "model.norm.weight": torch.randn(64, generator=g),
    }


def layout(rank, tp, **extra):
    names = {k: "rollout." + k for k in tensors(0)}
    return dict({"tp_rank": rank, "tp_size": tp, "splits": SPLITS, "names": names}, **extra)


def shard(name, t, rank, tp):
    split = SPLITS.get(name, "replicated")
    if split == "rows":
        return t.chunk(tp, dim=0)[rank].contiguous()
    if split == "columns":
        return t.chunk(tp, dim=1)[rank].contiguous()
    return t


def e4m3_values():
    """The e4m3fn value of each code 0..0x7e, from the format (bias 7, 3 mantissa bits)."""
    return np.array([(b & 7) * 2.0 ** -9 if b >> 3 == 0 else (1 + (b & 7) / 8) * 2.0 ** ((b >> 3) - 7)
                     for b in range(0x7f)])


def ref_fp8(x):
    """Reference float32 -> e4m3fn codes: the nearest value, ties to the even code, saturating at
    448, NaN to 0x7f (with the sign)."""
    vals, codes = e4m3_values(), np.arange(0x7f)
    a = np.abs(x.astype(np.float64))
    d = np.abs(a[:, None] - vals[None, :])
    tie = d == d.min(axis=1)[:, None]
    even = np.where(tie & (codes % 2 == 0), codes, 999).min(axis=1)
    q = np.where(even < 999, even, np.where(tie, codes, 999).min(axis=1))
    q = np.where(a >= 448, 0x7e, q)
    q = np.where(np.isnan(x), 0x7f, q)
    return (q | np.where(np.signbit(x), 0x80, 0)).astype(np.uint8)


def same_bits(a, b):
    a, b = a.contiguous(), b.contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and \
        bytes(a.view(torch.uint8).numpy()) == bytes(b.view(torch.uint8).numpy())


PUBLISHER = r"""
import sys, sluice
sys.path.insert(0, sys.argv[1])
import test_shards as t
sec = t.h.security(sys.argv[3], "actor")
pub = sluice.Publisher(sys.argv[2], "policy", holder_id="actor", security=sec, chunk_bytes=16384,
                       layouts=[t.layout(0, 2), t.layout(0, 4)])
pub.publish(1, t.tensors(1))
pub.wait(1, timeout=30)
print("committed 1", flush=True)
sys.stdin.read()  # serves until the test closes stdin
pub.close(timeout=10)
print("closed", flush=True)
"""


def main():
    keys, store, child = h.job_with_publisher(PUBLISHER, __file__, rollouts=4)
    line = child.stdout.readline().strip()
    h.check(line == "committed 1", f"another process published version 1 with tp 2 and 4 declared ({line})")

    expect = tensors(1)
    version_bytes = sum(t.numel() * t.element_size() for t in expect.values())
    replicated = sum(t.numel() * t.element_size() for k, t in expect.items() if k not in SPLITS)
    for tp in (2, 4):
        total = 0
        for rank in range(tp):
            reader = sluice.Reader(store, "policy", holder_id=f"rollout-{tp}-{rank}",
                                   security=h.security(keys, f"rollout-{rank}"), layout=layout(rank, tp))
            target = {"rollout." + k: torch.zeros_like(shard(k, t, rank, tp)) for k, t in expect.items()}
            h.check(reader.pull(1, into=target, timeout=30) == 1, f"tp {tp} rank {rank} pulled version 1")
            for k, t in expect.items():
                assert same_bits(target["rollout." + k], shard(k, t, rank, tp)), (tp, rank, k)
            read = reader.last_read()
            want = (version_bytes - replicated) // tp + replicated
            h.check(read["bytes"] == want and read["version_bytes"] == version_bytes and not read["whole_chunks"],
                    f"tp {tp} rank {rank}: every tensor equals its slice; read {read['bytes']} of "
                    f"{version_bytes} bytes ({read['bytes'] / version_bytes:.3f})")
            total += read["bytes"]
            reader.close()
        h.check(total == version_bytes + (tp - 1) * replicated,
                f"tp {tp}: the ranks together read the version once, plus the replicated tensors {tp} times")

    # A cast on the way: F32 tensors arrive as bf16, as torch rounds them.
    reader = sluice.Reader(store, "policy", holder_id="rollout-bf16", security=h.security(keys, "rollout-0"),
                           layout=layout(1, 2, cast="bf16"))
    reader.pull(1, timeout=30)
    sd = reader.state_dict()
    for k, t in expect.items():
        assert same_bits(sd["rollout." + k], shard(k, t, 1, 2).to(torch.bfloat16)), k
    h.check(True, "cast bf16: every tensor equals torch's bf16 of its slice")
    reader.close()

    # bf16 to fp8 e4m3 with a scale per block of 32 elements, against the reference above.
    reader = sluice.Reader(store, "policy", holder_id="rollout-fp8", security=h.security(keys, "rollout-0"),
                           layout=layout(0, 4, cast="fp8_e4m3", cast_block=32))
    reader.pull(1, timeout=30)
    for k, t in expect.items():
        part = shard(k, t, 0, 4)
        if part.dtype != torch.bfloat16:
            assert same_bits(torch.from_numpy(reader.numpy("rollout." + k)), part), k
            continue
        x = part.float().flatten().numpy()
        blocks = x.reshape(-1, 32)
        amax = np.where(np.isfinite(blocks), np.abs(blocks), 0).max(axis=1).astype(np.float32)
        scale = np.where(amax > 0, amax / np.float32(448), np.float32(1)).astype(np.float32)
        want = ref_fp8((blocks / scale[:, None]).astype(np.float32).flatten())
        assert np.array_equal(reader.numpy("rollout." + k + ".scale"), scale), k
        assert np.array_equal(reader.numpy("rollout." + k).flatten(), want), k
        h.check(True, f"fp8 e4m3: {k} {tuple(part.shape)} and its {len(scale)} block scales match the reference")
    reader.close()

    # Bad layouts: a clear error, nothing loaded.
    bad = sluice.Reader(store, "policy", holder_id="rollout-tp3", security=h.security(keys, "rollout-0"),
                        layout=layout(0, 3))
    e = h.raises(sluice.Error, lambda: bad.pull(1, timeout=30), "a layout that does not tile raises")
    h.check(e.code == "invalid_argument" and "model.embed_tokens.weight" in str(e) and "does not divide" in str(e),
            "the error names the tensor")
    h.check(bad.current == 0 and bad.staged == 0, "and nothing is loaded")
    bad.close()
    names = layout(0, 2)
    del names["names"]["model.norm.weight"]
    bad = sluice.Reader(store, "policy", holder_id="rollout-names", security=h.security(keys, "rollout-0"),
                        layout=names)
    e = h.raises(sluice.Error, lambda: bad.pull(1, timeout=30), "a name map that misses a tensor raises")
    h.check("no entry for tensor 'model.norm.weight'" in str(e) and bad.current == 0, "naming it; nothing loaded")
    bad.close()
    e = h.raises(sluice.Error, lambda: sluice.Reader(store, "policy", holder_id="rollout-int4",
                                                     security=h.security(keys, "rollout-0"),
                                                     layout=layout(0, 2, cast="int4")),
                 "a cast to an unsupported dtype raises")
    h.check("unsupported cast 'int4'" in str(e), "naming the cast")

    child.stdin.close()
    h.check(child.stdout.readline().strip() == "closed" and child.wait(30) == 0, "the publisher closed cleanly")


if __name__ == "__main__":
    main()
