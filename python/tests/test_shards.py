"""A tensor-parallel rollout's Reader takes a layout and reads only its shard: every rank of tp 2
and 4 gets its tensors (its names, its shard shapes) bit for bit equal to slicing the published
state_dict, and the bytes it read are its shard's, about 1/tp of the version plus the replicated
tensors. A cast on the way matches torch's own conversion. A bad layout raises a clear error and
loads nothing."""

import os
import subprocess
import sys

import _harness as h

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
    work = h.workdir()
    keys = h.make_keys(work, rollouts=4)
    store = h.start_store(work, keys)
    child = subprocess.Popen([sys.executable, "-c", PUBLISHER, os.path.dirname(__file__), store, keys],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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
