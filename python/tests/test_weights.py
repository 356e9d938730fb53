"""A state_dict published by one process is pulled into another's tensors bit for bit (fp32,
bf16, fp16, int8, int64, and a numpy array); a name, shape or dtype mismatch raises and writes
nothing; a prefetched version is swapped in only when asked; a reader without the job's key is
refused."""


import _harness as h

h.need_torch()
import torch  # noqa: E402

import sluice  # noqa: E402


def tensors(version):
    """The state_dict of `version`: deterministic, so both processes can build it."""
    g = torch.Generator().manual_seed(1000 + version)
    return {
        "model.embed_tokens.weight": torch.randn(300, 64, generator=g),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, generator=g).to(torch.float16),
        "model.layers.0.quant.scale": torch.randint(-128, 127, (77,), generator=g, dtype=torch.int8),
        "model.step": torch.tensor([version * 12345678901], dtype=torch.int64),
        "model.norm.weight": torch.randn(64, generator=g).numpy(),  # a numpy array
    }


def zeros_like(sd):
    return {k: (torch.zeros_like(v) if isinstance(v, torch.Tensor) else torch.zeros(v.shape, dtype=torch.float32))
            for k, v in sd.items()}


def same_bits(a, b):
    a = torch.as_tensor(a).contiguous()
    b = torch.as_tensor(b).contiguous()
    return a.dtype == b.dtype and a.shape == b.shape and \
        bytes(a.view(torch.uint8).numpy()) == bytes(b.view(torch.uint8).numpy())


PUBLISHER = r"""
import sys, sluice
sys.path.insert(0, sys.argv[1])
import test_weights as t
sec = t.h.security(sys.argv[3], "actor")
pub = sluice.Publisher(sys.argv[2], "policy", holder_id="actor", security=sec, chunk_bytes=16384)
for v in (1, 2):
    pub.publish(v, t.tensors(v))
    pub.wait(v, timeout=30)
    print("committed", v, flush=True)
sys.stdin.read()  # serves until the test closes stdin
pub.close(timeout=10)
print("closed", flush=True)
"""


def main():
    keys, store, child = h.job_with_publisher(PUBLISHER, __file__)
    lines = [child.stdout.readline().strip() for _ in range(2)]
    h.check(lines == ["committed 1", "committed 2"], f"another process published versions 1 and 2 ({lines})")

    reader = sluice.Reader(store, "policy", holder_id="rollout-0",
                           security=h.security(keys, "rollout-0"))
    h.check(reader.latest() == 2, "the store's latest version is 2")

    target = zeros_like(tensors(1))
    v = reader.pull(1, into=target, timeout=30)
    expect = tensors(1)
    h.check(v == 1 and reader.current == 1, "pulled version 1")
    for name in expect:
        h.check(same_bits(target[name], expect[name]), f"{name} ({target[name].dtype}) equal bit for bit")
    h.check(same_bits(torch.from_numpy(reader.numpy("model.norm.weight")), expect["model.norm.weight"]),
            "Reader.numpy copies a tensor out")
    sd = reader.state_dict()
    h.check(same_bits(sd["model.layers.0.self_attn.q_proj.weight"],
                      expect["model.layers.0.self_attn.q_proj.weight"]), "Reader.state_dict: bf16 as torch")

    # Mismatches: nothing is written, not even the tensors that match.
    def before_after(bad, what):
        snapshot = {k: v.clone() for k, v in target.items()}
        e = h.raises(sluice.MismatchError, lambda: reader.copy_into(bad), what)
        for k in target:
            assert same_bits(target[k], snapshot[k]), k
        return e

    for k in target:
        target[k].zero_()
    wrong_shape = dict(target)
    wrong_shape["model.layers.0.mlp.up_proj.weight"] = torch.zeros(64, 128, dtype=torch.float16)
    e = before_after(wrong_shape, "a shape mismatch raises")
    h.check("up_proj" in str(e) and "shape" in str(e), "the error names the tensor and its shape")
    h.check(all(float(t.float().abs().sum()) == 0 for t in target.values()), "the target is unchanged (all zero)")
    wrong_dtype = dict(target)
    wrong_dtype["model.embed_tokens.weight"] = torch.zeros(300, 64, dtype=torch.float16)
    before_after(wrong_dtype, "a dtype mismatch raises")
    unknown = dict(target)
    unknown["lm_head.weight"] = torch.zeros(3)
    before_after(unknown, "a name the version lacks raises")
    missing = dict(target)
    del missing["model.step"]
    before_after(missing, "a missing name raises (strict)")
    reader.copy_into(missing, strict=False)
    h.check(same_bits(missing["model.embed_tokens.weight"], expect["model.embed_tokens.weight"]),
            "strict=False copies the tensors given")
    h.raises(sluice.MismatchError, lambda: reader.pull(2, into=wrong_shape, timeout=30),
             "pull of version 2 into a mismatching target raises")
    h.check(reader.current == 1 and reader.staged == 2, "and leaves version 1 current, 2 staged")

    # Swaps only when asked.
    reader.copy_into(target)
    reader.prefetch("latest")
    h.check(reader.ready(timeout=30), "prefetch of version 2 finished")
    h.check(reader.current == 1 and reader.staged == 2, "after prefetch: current 1, staged 2")
    h.check(same_bits(target["model.embed_tokens.weight"], tensors(1)["model.embed_tokens.weight"]),
            "the target still holds version 1")
    h.check(reader.swap(into=target) == 2 and reader.current == 2, "swap makes 2 current")
    for name, t in tensors(2).items():
        assert same_bits(target[name], t), name
    h.check(True, "after swap the target holds version 2 bit for bit")

    # Errors, not hangs.
    e = h.raises(sluice.Error, lambda: reader.pull(99, timeout=10), "a version nobody published")
    h.check(e.code in ("not_found", "failed_precondition"), f"its code is {e.code}")
    h.raises(ValueError, lambda: reader.pull(0), "version 0 is not a version")
    stranger = sluice.Reader(store, "policy", holder_id="stranger", serve=False, timeout=1.0)
    h.raises(sluice.TimeoutError, stranger.latest, "a reader without the job's keys gets no answer")
    stranger.close()

    reader.close()
    child.stdin.close()
    h.check(child.stdout.readline().strip() == "closed" and child.wait(30) == 0, "the publisher closed cleanly")


if __name__ == "__main__":
    main()
