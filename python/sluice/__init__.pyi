# Type stubs for the sluice Python package (python/sluice). The C++ extension is sluice._sluice;
# the classes below are its Python face. Every blocking call takes a timeout in seconds and raises
# sluice.Error (or a subclass) instead of hanging.
from typing import Any, Iterable, Mapping, Optional, Sequence, Tuple, Union

# A tensor: a torch.Tensor (CPU or CUDA; contiguous) or a numpy.ndarray, passed through DLPack
# without a copy. dtypes: float32, bfloat16, float16, int8, int64 (and int32, uint8).
Tensor = Any
Tensors = Union[Mapping[str, Tensor], Iterable[Tuple[str, Tensor]]]
SecurityConfig = Mapping[str, str]  # {"mode": "curve"|"plain", "key_file": ..., "members_file": ...}

class Error(Exception):
    code: str  # "invalid_argument", "not_found", "timeout", "unavailable", "permission_denied", ...

class TimeoutError(Error): ...
class MismatchError(Error): ...  # names, dtypes or shapes differ from the version's manifest

def load_role_config(argv: Optional[Sequence[str]] = None) -> dict:
    """The JSON configuration `sluice run` hands a command role (--config FILE)."""

class Publisher:
    def __init__(self, store: str, model: str, *, holder_id: str = "actor-0",
                 security: Optional[SecurityConfig] = None, chunk_bytes: int = 8 << 20,
                 keep_versions: int = 2, lease_ttl: float = 10.0, timeout: float = 10.0,
                 layouts: Optional[Sequence[Mapping[str, Any]]] = None) -> None: ...
    def publish(self, version: int, tensors: Tensors) -> None: ...
    def wait(self, version: int, timeout: float = 60.0) -> None: ...
    def committed(self) -> int: ...
    def close(self, timeout: float = 30.0) -> None: ...
    def __enter__(self) -> "Publisher": ...
    def __exit__(self, *exc: object) -> None: ...

class TensorInfo:
    name: str
    dtype: str   # safetensors spelling: F32, BF16, F16, I8, I64, ...
    shape: Tuple[int, ...]
    nbytes: int

class Reader:
    def __init__(self, store: str, model: str, *, holder_id: str = "reader-0",
                 security: Optional[SecurityConfig] = None, serve: Optional[bool] = None,
                 timeout: float = 10.0, drain_timeout: float = 30.0,
                 layout: Optional[Mapping[str, Any]] = None) -> None: ...
    def last_read(self) -> dict[str, Any]: ...  # bytes, version_bytes, whole_chunks
    def latest(self) -> int: ...  # 0 when nothing is committed
    current: int  # the version swap() made current (0: none)
    staged: int   # the version prefetched and not yet swapped in (0: none)
    def pull(self, version: Union[int, str] = "latest", into: Optional[Tensors] = None, *,
             strict: bool = True, timeout: float = 60.0) -> int: ...
    def prefetch(self, version: Union[int, str] = "latest") -> None: ...
    def ready(self, timeout: float = 0.0) -> bool: ...  # whether the prefetch finished (raises its error)
    def swap(self, into: Optional[Tensors] = None, *, strict: bool = True) -> int: ...
    def tensors(self) -> list[TensorInfo]: ...
    def copy_into(self, into: Tensors, *, strict: bool = True) -> None: ...
    def numpy(self, name: str) -> Any: ...  # a copy of one tensor of the current version
    def state_dict(self, device: str = "cpu") -> dict[str, Any]: ...  # copies, as torch tensors
    def close(self) -> None: ...
    def __enter__(self) -> "Reader": ...
    def __exit__(self, *exc: object) -> None: ...

class SequenceState:
    """One sequence being generated: what a generator needs to continue it (on any generator)."""
    trajectory_id: str
    prompt_id: str
    prompt_tokens: list[int]
    generated: list[int]  # assign a new list: attribute lists are copies
    logprobs: list[float]
    versions: list[int]
    max_new_tokens: int
    rng_state: int
    def __init__(self) -> None: ...

class Trajectory:
    def __init__(self) -> None: ...
    id: str
    prompt_id: str
    version: int
    versions: list[int]
    prompt_tokens: list[int]
    response_tokens: list[int]
    logprobs: list[float]
    reward: float
    rollout: str
    abandoned: bool

class Work:
    assign: list[SequenceState]    # new sequences to generate
    imported: list[SequenceState]  # sequences moved here from another generator: continue them
    unqueue: bool             # drop sequences assigned but not started
    export_ids: list[str]     # hand these back (with their state) in the next report
    abandon: list[str]        # stop these, report nothing for them
    abandon_before: int       # stop sequences whose first token came from an older version
    load: int                 # the version to load before generating more (0: none asked)
    state: str                # run, barrier or idle
    latest: int
    done: bool
    rejoin: bool              # the manager declared this generator dead: drop everything
    allow_active: bool

def to_trajectory(sequence: SequenceState, reward: float, rollout: str) -> Trajectory: ...
def set_log_level(level: str) -> None: ...  # trace, debug, info, warn (default), error, off

class Generator:
    def __init__(self, manager: str, rollout_id: str, *, security: Optional[SecurityConfig] = None,
                 max_sequences: int = 32, max_kv_tokens: int = 65536, timeout: float = 10.0) -> None: ...
    id: str
    def report(self, *, version: int, staged: int = 0, loading: bool = False,
               active: Sequence[SequenceState] = (), finished: Sequence[Trajectory] = (),
               exported: Sequence[SequenceState] = (), queued: Sequence[str] = (),
               partial: Sequence[SequenceState] = (), returned: Sequence[SequenceState] = (),
               refused: Sequence[SequenceState] = (), stats: Mapping[str, Any] = ...) -> Work: ...

class Batch:
    trajectories: list[Trajectory]
    done: bool

class TrainerClient:
    # auto_ack: acknowledge what was received with the next collect (without checkpoints,
    # nothing more durable exists); else ack(ids) once their effect is durable.
    def __init__(self, manager: str, *, security: Optional[SecurityConfig] = None,
                 timeout: float = 10.0, auto_ack: bool = True) -> None: ...
    def collect(self, max: int = 256, consumed: int = 0) -> Batch: ...
    def ack(self, ids: Sequence[str]) -> None: ...
    pending_acks: int
    def published(self, version: int, consumed: int = 0) -> int: ...

class ArithmeticTask:
    def __init__(self, config: Optional[Mapping[str, Any]] = None) -> None: ...
    vocab_size: int
    pad: int
    bos: int
    eos: int
    max_prompt_tokens: int
    max_response_tokens: int
    def train_prompt(self, index: int) -> Tuple[str, str, list[int]]: ...  # (id, text, tokens)
    def heldout_prompt(self, index: int) -> Tuple[str, str, list[int]]: ...
    def reward(self, prompt_tokens: Sequence[int], response: Sequence[int]) -> float: ...
    def correct(self, prompt_tokens: Sequence[int], response: Sequence[int]) -> bool: ...
    def solution(self, prompt_tokens: Sequence[int]) -> list[int]: ...
    @staticmethod
    def decode(tokens: Sequence[int]) -> str: ...
    @staticmethod
    def encode(text: str) -> list[int]: ...
