"""GPU: a model's state_dict in one process's GPU memory is published and pulled into another
process's GPU tensors, equal bit for bit. The model is a Hugging Face GPT-2 built from a
configuration (no download) where transformers is installed, else a small model with Hugging
Face names. Skipped (77) without a CUDA device or without CUDA in this build."""

import sys

import _harness as h

h.need_torch()
import torch  # noqa: E402

import sluice  # noqa: E402

if not torch.cuda.is_available() or sluice._sluice.cuda_devices() == 0:
    print("skip: no CUDA device (torch: %s, sluice: %d)" % (torch.cuda.is_available(),
                                                            sluice._sluice.cuda_devices()))
    sys.exit(77)


def build(seed):
    torch.manual_seed(seed)
    try:
        import transformers
        cfg = transformers.GPT2Config(n_layer=2, n_embd=256, n_head=4, vocab_size=4096,
                                      n_positions=256, bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(cfg)
    except ImportError:
        model = torch.nn.ModuleDict({
            "wte": torch.nn.Embedding(4096, 256),
            "h0": torch.nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True),
            "ln_f": torch.nn.LayerNorm(256),
        })
    return model.to(torch.bfloat16).cuda()


PUBLISHER = r"""
import sys, sluice
sys.path.insert(0, sys.argv[1])
import test_cuda_weights as t
model = t.build(7)
pub = sluice.Publisher(sys.argv[2], "hf", holder_id="actor", security=t.h.security(sys.argv[3], "actor"))
pub.publish(1, model.state_dict())
pub.wait(1, timeout=60)
print("committed", flush=True)
sys.stdin.read()
pub.close(timeout=10)
"""


def main():
    keys, store, child = h.job_with_publisher(PUBLISHER, __file__)
    # Libraries may print to the child's stdout too (transformers 5 prints its warnings there):
    # read up to the word, or to the end when the child died.
    said = []
    for line in iter(child.stdout.readline, ""):
        said.append(line.strip())
        if said[-1] == "committed":
            break
    if not said or said[-1] != "committed":
        child.stdin.close()
        h.check(False, f"another process published its GPU model (it exited {child.wait(30)}, "
                       f"saying {said[-5:]})")
    target = build(99)  # other weights, same shapes
    sd = target.state_dict()
    reader = sluice.Reader(store, "hf", holder_id="rollout-0", security=h.security(keys, "rollout-0"))
    reader.pull(1, into=sd, timeout=60)
    torch.cuda.synchronize()
    expect = build(7).state_dict()
    bad = [k for k in expect if not torch.equal(sd[k].view(torch.uint8) if sd[k].dtype != torch.bool else sd[k],
                                                expect[k].view(torch.uint8) if expect[k].dtype != torch.bool else expect[k])]
    h.check(not bad, f"{len(expect)} GPU tensors equal bit for bit ({bad[:3]})")
    h.check(all(t.is_cuda for t in sd.values()), "and they stayed on the GPU")
    reader.close()
    child.stdin.close()
    h.check(child.wait(30) == 0, "the publisher closed cleanly")


if __name__ == "__main__":
    main()
