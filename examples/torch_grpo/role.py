"""What a command role of `sluice run` does besides its work (docs/architecture.md, "Command
roles"): read its role file (--config FILE), end with the launcher, stop cleanly on SIGTERM, print
its ready and summary lines on stdout, and write safetensors.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys
from typing import Dict

import torch


def die_with_launcher() -> None:
    """SIGTERM when the launcher (SLUICE_PARENT_PID) dies, as sluice's own roles arrange."""
    parent = int(os.environ.get("SLUICE_PARENT_PID", "0") or 0)
    if parent <= 0:
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        return
    if os.getppid() != parent:  # it died before prctl took effect
        sys.exit(0)


class Stop:
    """Set by SIGTERM or SIGINT: the role finishes what it is doing and ends."""

    def __init__(self):
        self.requested = False
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, *_):
        self.requested = True


def start():
    """What every command role does first: end with the launcher, catch SIGTERM, read its role
    file (sluice.load_role_config) and take its thread count from the job's "options".
    Returns (stop, cfg, options)."""
    import sluice

    die_with_launcher()
    stop = Stop()
    cfg = sluice.load_role_config()
    opts = cfg.get("options") or {}
    torch.set_num_threads(int(opts.get("threads", 1)))
    return stop, cfg, opts


def say(line: str) -> None:
    """A line for the launcher (stdout, flushed): the ready line, the summary."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


_DTYPES = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64"}


def write_safetensors(path: str, tensors: Dict[str, torch.Tensor], metadata=None) -> None:
    """The safetensors format: an 8-byte little-endian header length, a JSON header of each
    tensor's dtype, shape and byte range, then the bytes. Written to a temporary name and
    renamed."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        data = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-aligned
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
