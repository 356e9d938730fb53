"""Python readers take the job's stream keys: a publisher that serves encrypted chunk streams only
is read encrypted, bit for bit, by a reader with the job's keys; a reader told to read clear is
refused with the reason, and nothing is loaded. Both hold under their identity by default.

Reads cross a chunk stream only between hosts, or where UCX may not use shared memory: both
processes run with UCX_TLS=tcp,self, as on two hosts."""

import os

os.environ["UCX_TLS"] = "tcp,self"  # before sluice makes its engine: no shared memory

import _harness as h  # noqa: E402

h.need_torch()
import torch  # noqa: E402

import sluice  # noqa: E402


def tensors(version):
    g = torch.Generator().manual_seed(7000 + version)
    return {"w": torch.randn(256, 256, generator=g), "b": torch.randn(256, generator=g).to(torch.bfloat16)}


PUBLISHER = r"""
import os, sys
os.environ["UCX_TLS"] = "tcp,self"
import sluice
sys.path.insert(0, sys.argv[1])
import test_stream_keys as t
pub = sluice.Publisher(sys.argv[2], "policy", security=t.h.security(sys.argv[3], "actor"),
                       stream_encryption="on", chunk_bytes=65536)
pub.publish(1, t.tensors(1))
pub.wait(1, timeout=30)
print("committed 1", flush=True)
sys.stdin.read()
pub.close(timeout=10)
print("closed", flush=True)
"""


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and \
        bytes(a.contiguous().view(torch.uint8).numpy()) == bytes(b.contiguous().view(torch.uint8).numpy())


def main():
    keys, store, child = h.job_with_publisher(PUBLISHER, __file__)
    line = child.stdout.readline().strip()
    h.check(line == "committed 1", f"a publisher that serves encrypted streams only published version 1 ({line})")

    # A reader told to read clear: the holder refuses it, with the reason, and nothing is loaded.
    clear = sluice.Reader(store, "policy", security=h.security(keys, "rollout-1"), stream_encryption="off",
                          serve=False)
    target = {k: torch.zeros_like(v) for k, v in tensors(1).items()}
    e = h.raises(sluice.Error, lambda: clear.pull(1, into=target, timeout=20), "a clear read is refused")
    h.check("encrypt" in str(e), f"saying why ({e})")
    h.check(clear.current == 0 and all(not t.any() for t in target.values()), "and nothing is loaded")
    clear.close()

    # The job's keys, stream_encryption auto (the default): read encrypted, bit for bit.
    reader = sluice.Reader(store, "policy", security=h.security(keys, "rollout-0"))
    h.check(reader.pull(1, into=target, timeout=30) == 1, "a reader with the job's keys pulled version 1")
    for k, v in tensors(1).items():
        assert same_bits(target[k], v), k
    h.check(True, "every tensor equals the published one bit for bit")
    reader.close()

    child.stdin.close()
    h.check(child.stdout.readline().strip() == "closed" and child.wait(30) == 0, "the publisher closed cleanly")


if __name__ == "__main__":
    main()
