"""sluice: publish a PyTorch model's weights from a trainer and pull them into generators.

The classes wrap sluice's C++ library (the extension ``sluice._sluice``):

* :class:`Publisher` puts weight versions (a ``state_dict``) into the weight store; the trainer
  may step again as soon as :meth:`Publisher.publish` returns.
* :class:`Reader` pulls versions into existing tensors, checked against the version's manifest
  first, and swaps to a new version only when asked.
* :class:`Generator` and :class:`TrainerClient` talk to the rollout manager for custom
  generation and training roles.

Tensors are torch tensors (CPU or CUDA) or numpy arrays; CPU memory is read and written in
place, without copies. Errors raise :class:`Error` (``.code`` names the kind); every blocking
call has a timeout and raises :class:`TimeoutError` when it runs out.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

# The extension (and torch with it) loads on first use, not at import: `import sluice.env` (an
# environment program) stays light, as do tools that only read a role's configuration.
_EXTENSION_NAMES = frozenset({
    "ArithmeticTask", "Batch", "Error", "Generator", "MismatchError", "SequenceState",
    "TensorInfo", "TimeoutError", "TrainerClient", "Trajectory", "Work", "to_trajectory",
    "set_log_level",
})


_loaded: Any = None


def _extension() -> Any:
    """The extension sluice._sluice, loaded on the first call."""
    global _loaded
    if _loaded is not None:
        return _loaded
    # Where PyTorch is installed it is imported before the extension: on a GPU machine (g++ 13,
    # the CUDA 13 toolkit, torch 2.11+cu130 from pip), importing torch after the extension
    # aborted ("free(): invalid pointer") inside torch's own import; torch first worked. Both
    # bring CUDA libraries of the same names, and whichever loads first serves both.
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    # Not `from . import _sluice`: that asks this module for the attribute first, which is
    # __getattr__ below, which is here again.
    ext = importlib.import_module(__name__ + "._sluice")

    # The library logs to stderr; warnings and errors only unless SLUICE_LOG_LEVEL says
    # otherwise.
    ext.set_log_level(os.environ.get("SLUICE_LOG_LEVEL", "warn"))
    _loaded = ext
    return ext


def __getattr__(name: str) -> Any:
    # The extension's classes and functions, re-exported: loaded on first use.
    if name == "_sluice":
        return _extension()
    if name in _EXTENSION_NAMES:
        value = getattr(_extension(), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sluice' has no attribute {name!r}")


__all__ = [
    "ArithmeticTask", "Batch", "Error", "Generator", "MismatchError", "Publisher", "Reader",
    "SequenceState", "TensorInfo", "TimeoutError", "TrainerClient", "Trajectory", "Work",
    "load_role_config", "set_log_level", "to_trajectory",
]

_TORCH_DTYPES = {
    "F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64", "I8": "int8",
    "I16": "int16", "I32": "int32", "I64": "int64", "U8": "uint8", "BOOL": "bool",
    "F8_E4M3": "float8_e4m3fn",
}
_NUMPY_DTYPES = {
    "F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "i1", "I16": "<i2", "I32": "<i4",
    "I64": "<i8", "U8": "u1", "BOOL": "?", "BF16": "<u2",  # bfloat16: its raw 16 bits
    "F8_E4M3": "u1",  # fp8 e4m3: its raw 8 bits
}


def _items(tensors: Any) -> List[Tuple[str, Any]]:
    if hasattr(tensors, "items"):
        return list(tensors.items())
    return [(name, t) for name, t in tensors]


def _is_cuda(t: Any) -> bool:
    return bool(getattr(t, "is_cuda", False))


def _version(v: Union[int, str]) -> int:
    if v == "latest":
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"version must be a positive int or 'latest', not {v!r}")
    return v


def _security(security: Optional[Mapping[str, str]]) -> Optional[Dict[str, str]]:
    if security is None:
        return None
    return {k: str(v) for k, v in security.items() if k in ("mode", "key_file", "members_file")}


class Publisher:
    """Publishes weight versions of one model to the weight store.

    ``publish(version, tensors)`` copies the tensors into registered staging memory and
    returns; checksums, the manifest and the commit follow in the background, while this
    process serves the version to relays and generators. ``wait(version)`` blocks until the
    store committed it. Versions must increase. Tensor names are the ``state_dict``'s (Hugging
    Face names for a Hugging Face model). CUDA tensors (one GPU) are copied on CUDA streams.
    ``holder_id`` is the id it holds versions under: by default its identity where the job
    authenticates (curve), where an id must be the identity or the identity and a ``-suffix``;
    ``"actor-0"`` in plain mode. ``layouts`` declares the rollouts' inference layouts (dicts as :class:`Reader` takes; only
    ``tp_size`` and ``splits`` count): each version then carries signed checksums of every
    rank's shard, so those readers read only their shard's bytes.

    Example::

        pub = sluice.Publisher("tcp://127.0.0.1:5555", "policy", security=cfg["security"])
        pub.publish(1, model.state_dict())
        pub.wait(1)
    """

    def __init__(self, store: str, model: str, *, holder_id: Optional[str] = None,
                 security: Optional[Mapping[str, str]] = None, stream_encryption: str = "auto",
                 chunk_bytes: int = 8 << 20,
                 keep_versions: int = 2, lease_ttl: float = 10.0, timeout: float = 10.0,
                 layouts: Optional[Sequence[Mapping[str, Any]]] = None) -> None:
        self._p = _extension().Publisher(
            store, model, holder_id=holder_id or "", security=_security(security),
            stream_encryption=stream_encryption, chunk_bytes=chunk_bytes,
            keep_versions=keep_versions, lease_ttl=lease_ttl, timeout=timeout,
            layouts=None if layouts is None else [dict(l) for l in layouts])
        self.model = model

    def publish(self, version: int, tensors: Any) -> None:
        """Stages ``tensors`` (a state_dict or (name, tensor) pairs) as ``version``; returns once
        they are copied, so the caller may change them again."""
        items = _items(tensors)
        # Device tensors are copied into staging on CUDA streams by the C++ publisher when this
        # build has a device and they sit on one GPU; otherwise they come to the host here.
        devices = {t.device for _, t in items if _is_cuda(t)}
        if devices and (_extension().cuda_devices() == 0 or len(devices) > 1):
            items = [(n, t.detach().to("cpu") if _is_cuda(t) else t) for n, t in items]
        self._p.publish(_version(version), items)

    def wait(self, version: int, timeout: float = 60.0) -> None:
        """Blocks until ``version`` is committed; raises its error, or TimeoutError."""
        self._p.wait(_version(version), timeout)

    def committed(self) -> int:
        """The newest version committed so far (0: none)."""
        return self._p.committed()

    def close(self, timeout: float = 30.0) -> None:
        """Stops serving: unpublishes every version and waits (at most ``timeout``) for their
        readers to finish."""
        self._p.close(timeout)

    def __enter__(self) -> "Publisher":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Reader:
    """Pulls weight versions of one model into existing tensors.

    ``pull(version, into=state_dict)`` reads the version (from the nearest holders), checks
    every tensor of ``into`` against its manifest (names, dtypes, shapes; with ``strict``, no
    tensor missing) and only then writes them in place; a mismatch raises MismatchError and
    writes nothing. ``prefetch()`` reads a version in the background; ``swap(into=...)`` makes it
    current at the caller's safe point; until then the current version stays as it was. A reader
    that serves (the default) is a source of its current version for its peers.

    ``layout`` makes it a tensor-parallel rollout's reader: it reads only its shard's bytes and
    holds its own tensors (names from ``names``, shard shapes, cast dtypes), e.g.
    ``{"tp_rank": 1, "tp_size": 4, "splits": {"q.weight": "rows", "o.weight": "columns"},
    "names": {...}, "cast": "bf16"}`` (``cast``: "bf16" from F32, or "fp8_e4m3" from BF16 with a
    "<name>.scale" F32 tensor per ``cast_block`` elements). A bad layout raises before anything
    is loaded. Such a reader does not serve. ``last_read()`` says what the last pull moved.
    ``holder_id`` is the id it serves under, as for :class:`Publisher` (``"reader-0"`` in plain
    mode). Where the job encrypts chunk streams, it reads them encrypted with its own keys.
    ``stream_encryption`` is as a role's: ``"auto"`` (encrypt what a holder serves encrypted
    only), ``"on"`` (serve and read encrypted streams only; needs curve) or ``"off"``.

    Example::

        reader = sluice.Reader(store, "policy", security=cfg["security"])
        reader.pull("latest", into=model.state_dict())
    """

    def __init__(self, store: str, model: str, *, holder_id: Optional[str] = None,
                 security: Optional[Mapping[str, str]] = None, stream_encryption: str = "auto",
                 serve: Optional[bool] = None, timeout: float = 10.0, drain_timeout: float = 30.0,
                 layout: Optional[Mapping[str, Any]] = None) -> None:
        # serve: True unless a layout is given (a shard reader holds no whole version to serve).
        self._r = _extension().Reader(
            store, model, holder_id=holder_id or "", security=_security(security),
            stream_encryption=stream_encryption, serve=serve, timeout=timeout,
            drain_timeout=drain_timeout, layout=None if layout is None else dict(layout))
        self.model = model

    def latest(self) -> int:
        """The newest committed version in the store (0: none)."""
        return self._r.latest()

    @property
    def current(self) -> int:
        """The version swapped in (0: none)."""
        return self._r.current

    @property
    def staged(self) -> int:
        """The version prefetched and not swapped in yet (0: none)."""
        return self._r.staged

    def _host_targets(self, into: Any) -> Tuple[List[Tuple[str, Any]], List[Tuple[Any, Any]]]:
        # CUDA targets get host stand-ins of the same dtype and shape: the C++ side checks and
        # fills those, and they are copied to the device after.
        host, device = [], []
        direct = _extension().cuda_devices() > 0  # the C++ reader copies to the GPU on CUDA streams
        for name, t in _items(into):
            if _is_cuda(t) and not direct:
                import torch
                h = torch.empty(tuple(t.shape), dtype=t.dtype, device="cpu",
                                pin_memory=torch.cuda.is_available())
                host.append((name, h))
                device.append((t, h))
            else:
                host.append((name, t))
        return host, device

    @staticmethod
    def _to_device(device: List[Tuple[Any, Any]]) -> None:
        for t, h in device:
            with __import__("torch").no_grad():
                t.copy_(h)

    def pull(self, version: Union[int, str] = "latest", into: Any = None, *, strict: bool = True,
             timeout: float = 60.0) -> int:
        """Reads ``version`` (or the latest), makes it current and copies it into ``into``;
        returns the version."""
        if into is None:
            return self._r.pull(_version(version), None, strict, timeout)
        host, device = self._host_targets(into)
        v = self._r.pull(_version(version), host, strict, timeout)
        self._to_device(device)
        return v

    def prefetch(self, version: Union[int, str] = "latest") -> None:
        """Starts reading ``version`` in the background; the current version is unchanged."""
        self._r.prefetch(_version(version))

    def ready(self, timeout: float = 0.0) -> bool:
        """Whether the last prefetch finished (waits up to ``timeout``); raises its error."""
        return self._r.ready(timeout)

    def swap(self, into: Any = None, *, strict: bool = True) -> int:
        """Makes the prefetched version current and copies it into ``into``."""
        if into is None:
            return self._r.swap(None, strict)
        host, device = self._host_targets(into)
        v = self._r.swap(host, strict)
        self._to_device(device)
        return v

    def copy_into(self, into: Any, *, strict: bool = True) -> None:
        """Copies the current version into ``into`` (checked first, as pull does)."""
        host, device = self._host_targets(into)
        self._r.copy_into(host, strict)
        self._to_device(device)

    def last_read(self) -> Dict[str, Any]:
        """What the last pull that staged a version read: ``bytes`` (as the transfer engine
        counted them), ``version_bytes`` (the whole version as published) and ``whole_chunks``
        (a shard read as whole chunks: its layout was not declared by the publisher)."""
        return self._r.last_read()

    def tensors(self) -> List[TensorInfo]:
        """The current version's tensors: name, dtype, shape, nbytes."""
        return self._r.tensors()

    def numpy(self, name: str) -> Any:
        """A copy of one tensor of the current version as a numpy array (bfloat16: raw uint16)."""
        import numpy as np
        info = {t.name: t for t in self.tensors()}[name]
        return np.frombuffer(self._r.tensor_bytes(name), dtype=_NUMPY_DTYPES[info.dtype]).reshape(
            info.shape).copy()

    def state_dict(self, device: str = "cpu") -> Dict[str, Any]:
        """A copy of the current version as torch tensors."""
        import torch
        out = {}
        for t in self.tensors():
            raw = bytearray(self._r.tensor_bytes(t.name))
            # fp8 as torch.float8_e4m3fn where torch has it (2.1 and later), else its raw bits.
            dtype = getattr(torch, _TORCH_DTYPES[t.dtype], torch.uint8)
            x = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
            out[t.name] = x.reshape(t.shape).to(device)
        return out

    def close(self) -> None:
        """Stops serving and frees what this reader holds (waits for its readers to finish)."""
        self._r.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_role_config(argv: Optional[Sequence[str]] = None) -> dict:
    """The configuration ``sluice run`` hands a command role: ``--config FILE`` (JSON)."""
    parser = argparse.ArgumentParser(add_help=True)
    parser.add_argument("--config", required=True, help="the role's configuration (JSON)")
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else list(argv))
    with open(args.config) as f:
        return json.load(f)
