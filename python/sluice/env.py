"""Environments for sluice's rollouts, in Python: ``serve(make_env)`` runs as the program of a
job's ``rollout.env_command`` and answers the rollout over stdin and stdout (JSON lines).

Each episode gets its own environment object from ``make_env()``:

* ``reset(prompt: str) -> str`` is called when the episode starts; what it returns is shown to the
  model after the prompt (``""`` for nothing).
* ``step(action: str) -> (observation: str, reward: float, done: bool)`` is called with each turn
  the model ends (at the job's ``rollout.env_call_token``, EOS by default). When ``done``, the
  episode ends with ``reward``; otherwise the model reads ``observation`` and goes on.

Either may be ``async``: episodes then wait on their I/O side by side. An exception ends its
episode (the rollout counts it); the others go on. Text is in the task's characters (the built-in
tokenizer); a list of token ids may be returned instead of a string.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import sys
from typing import Any, Callable, Dict


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


def _observation(obs: Any) -> Dict[str, Any]:
    if isinstance(obs, str):
        return {"text": obs}
    return {"observation": [int(t) for t in obs]}


async def _serve(make_env: Callable[[], Any], reader: asyncio.StreamReader) -> None:
    envs: Dict[str, Any] = {}
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
            env = envs[episode]
            obs, reward, done = await _call(env.step, msg.get("text", ""))
            if done:
                envs.pop(episode, None)
            send({"episode": episode, "reward": float(reward), "done": bool(done),
                  **_observation(obs or "")})
        except Exception as e:  # noqa: BLE001: any failure ends this episode, not the server
            envs.pop(episode, None)
            send({"episode": episode, "error": f"{type(e).__name__}: {e}"})

    while True:
        line = await reader.readline()
        if not line:
            break
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        task = asyncio.ensure_future(handle(msg))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


def serve(make_env: Callable[[], Any]) -> None:
    """Answers the rollout until it closes stdin."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        await _serve(make_env, reader)

    asyncio.run(main())
