"""Environments for sluice's rollouts, in Python: ``serve(make_env)`` runs as the program of a
job's ``rollout.env_command`` and answers the rollout over stdin and stdout (JSON lines).

Each episode gets its own environment object from ``make_env()``:

* ``reset(prompt: str) -> str`` is called when the episode starts; what it returns is shown to the
  model after the prompt (``""`` for nothing).
* ``step(action: str) -> (observation: str, reward: float, done: bool)`` is called with each turn
  the model ends (at the job's ``rollout.env_call_token``, EOS by default). When ``done``, the
  episode ends with ``reward``; otherwise the model reads ``observation`` and goes on.
* ``close()``, if the object has it, is called when the episode ends for any reason or leaves
  this rollout (the rollout's ``close`` message); the object is dropped either way.

The program's environment names the rollout that runs it in ``SLUICE_ROLLOUT_ID``.

Either may be ``async``: episodes then wait on their I/O side by side. An exception ends its
episode (the rollout counts it); the others go on. Text is in the task's characters (the built-in
tokenizer); a list of token ids may be returned instead of a string.

An episode that moved to another rollout (or resumed after one died) arrives at a process that
never saw it: the rollout replays it there, ``reset`` then one ``step`` per recorded turn, before
its next turn, and keeps the observations it recorded. An environment whose state follows from
the actions it is given is rebuilt exactly; one that draws at random should seed from the prompt.

A line from the rollout longer than ``max_line`` bytes is refused: that episode gets an error,
the others go on. Importing this module loads neither torch nor sluice's extension.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import sys
from typing import Any, Callable, Dict, Optional

# The longest line taken from the rollout, in bytes (a reset carries the prompt, a step the
# model's turn: a few bytes a token).
MAX_LINE = 64 << 20
_READ_CHUNK = 1 << 16
# Where a refused line's episode is looked for: the rollout writes "op" and "episode" first.
_HEAD = 4096
_EPISODE = re.compile(rb'"episode"\s*:\s*"((?:[^"\\]|\\.)*)"')


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _observation(obs: Any) -> Dict[str, Any]:
    if isinstance(obs, str):
        return {"text": obs}
    return {"observation": [int(t) for t in obs]}


def _episode_of(head: bytes) -> Optional[str]:
    m = _EPISODE.search(head)
    if not m:
        return None
    try:
        return json.loads(b'"' + m.group(1) + b'"')
    except ValueError:
        return None


class _Lines:
    """Splits what the rollout writes into lines of at most ``max_line`` bytes: ``next()`` gives
    ``("line", line)``, ``("long", head)`` for a longer line (dropped as it comes; only its head
    is kept, to name its episode), or ``("end", b"")``."""

    def __init__(self, reader: asyncio.StreamReader, max_line: int) -> None:
        self._reader = reader
        self._max = max_line
        self._buf = bytearray()
        self._scanned = 0  # bytes of _buf known to hold no newline
        self._skipping: Optional[bytes] = None  # the head of the over-long line being dropped
        self._eof = False

    async def next(self):
        while True:
            nl = self._buf.find(b"\n", self._scanned)
            if nl >= 0:
                line = bytes(self._buf[:nl])
                del self._buf[:nl + 1]
                self._scanned = 0
                if self._skipping is not None:
                    head, self._skipping = self._skipping, None
                    return "long", head
                if len(line) > self._max:
                    return "long", line[:_HEAD]
                return "line", line
            self._scanned = len(self._buf)
            if self._skipping is None and len(self._buf) > self._max:
                self._skipping = bytes(self._buf[:_HEAD])
            if self._skipping is not None:
                self._buf.clear()
                self._scanned = 0
            if self._eof:
                if self._skipping is not None:
                    head, self._skipping = self._skipping, None
                    return "long", head
                if self._buf:
                    line = bytes(self._buf)
                    self._buf.clear()
                    self._scanned = 0
                    return "line", line
                return "end", b""
            chunk = await self._reader.read(_READ_CHUNK)
            if not chunk:
                self._eof = True
            self._buf += chunk


async def _serve(make_env: Callable[[], Any], reader: asyncio.StreamReader,
                 max_line: int = MAX_LINE) -> None:
    envs: Dict[str, Any] = {}
    running: Dict[str, asyncio.Task] = {}  # the message each episode is being answered for
    tasks = set()

    def send(msg: Dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(msg) + "\n")
        sys.stdout.flush()

    async def handle(msg: Dict[str, Any]) -> None:
        episode = msg.get("episode", "")
        try:
            if msg.get("op") == "reset":
                env = make_env()
                envs[episode] = env
                obs = await _call(env.reset, msg.get("text", ""))
                send({"episode": episode, "done": False, **_observation(obs or "")})
                return
            env = envs.get(episode)
            if env is None:
                raise KeyError(f"episode {episode!r} was never reset here")
            obs, reward, done = await _call(env.step, msg.get("text", ""))
            send({"episode": episode, "reward": float(reward), "done": bool(done),
                  **_observation(obs or "")})
            if done:
                await release(envs.pop(episode, None), episode)
        except Exception as e:  # noqa: BLE001: any failure ends this episode, not the server
            send({"episode": episode, "error": f"{type(e).__name__}: {e}"})
            await release(envs.pop(episode, None), episode)

    async def release(env: Any, episode: str) -> None:
        if env is None or not hasattr(env, "close"):
            return
        try:
            await _call(env.close)
        except Exception as e:  # noqa: BLE001: the episode is over either way
            print(f"sluice.env: closing {episode}: {type(e).__name__}: {e}", file=sys.stderr)

    async def close(episode: str) -> None:
        task = running.pop(episode, None)
        if task is not None:
            task.cancel()
        await release(envs.pop(episode, None), episode)

    def start(coro, episode: Optional[str] = None) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        if episode is not None:
            running[episode] = task
            task.add_done_callback(
                lambda t: running.pop(episode, None) if running.get(episode) is t else None)

    lines = _Lines(reader, max_line)
    while True:
        kind, line = await lines.next()
        if kind == "end":
            break
        if kind == "long":
            episode = _episode_of(line)
            why = f"a message over {max_line} bytes"
            if episode is None:
                print(f"sluice.env: dropped {why} naming no episode", file=sys.stderr)
                continue
            send({"episode": episode, "error": f"ValueError: {why}"})
            start(close(episode))
            continue
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if not isinstance(msg, dict):
            continue
        if msg.get("op") == "close":
            start(close(str(msg.get("episode", ""))))
            continue
        start(handle(msg), str(msg.get("episode", "")))
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def serve(make_env: Callable[[], Any], max_line: int = MAX_LINE) -> None:
    """Answers the rollout until it closes stdin."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await _serve(make_env, reader, max_line)

    asyncio.run(main())
