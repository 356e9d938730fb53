"""sluice.env.serve spoken to directly, as a rollout does (no job): `close` frees an episode (its
close() runs, a hung step is cancelled, no answer comes), a line over asyncio's 64 KiB is taken,
a line over serve's max_line is an error for its episode only, a step for an episode never reset
here is an error for that episode only, and `import sluice.env` loads neither torch nor the
extension (which loads on first use)."""

import json
import os
import queue
import subprocess
import sys
import threading

from _harness import check, workdir

ENV = r'''
import asyncio, sys
from sluice.env import serve


class Env:
    alive = 0
    closed = []

    def __init__(self):
        Env.alive += 1
        self.prompt = ""

    def reset(self, prompt):
        self.prompt = prompt
        return ""

    async def step(self, action):
        if action == "hang":
            await asyncio.sleep(1000)
        if action == "count":
            return f"alive={Env.alive} closed={','.join(sorted(Env.closed))}", 0.0, False
        if action == "end":
            return "", 1.0, True
        return str(len(action)), 0.0, False

    def close(self):
        Env.alive -= 1
        Env.closed.append(self.prompt)


serve(Env, max_line=int(sys.argv[1]))
'''

# 1. Importing the environment helper is light.
probe = subprocess.run(
    [sys.executable, "-c",
     "import json, sys, sluice.env; "
     "print(json.dumps(['torch' in sys.modules, 'sluice._sluice' in sys.modules]))"],
    capture_output=True, text=True, timeout=60)
check(probe.returncode == 0, "import sluice.env works: " + probe.stderr[-1000:])
torch_loaded, ext_loaded = json.loads(probe.stdout.strip().splitlines()[-1])
check(not torch_loaded, "import sluice.env does not import torch")
check(not ext_loaded, "import sluice.env does not load the extension")
# ... which loads on first use (where it is built).
probe = subprocess.run(
    [sys.executable, "-c",
     "import sys, sluice; e = sluice.Error; t = sluice.Reader; "
     "print(sluice._sluice.__name__, 'sluice._sluice' in sys.modules)"],
    capture_output=True, text=True, timeout=60)
if "No module named 'sluice._sluice'" in probe.stderr:
    print("skip: the extension is not built here")
else:
    check(probe.returncode == 0 and probe.stdout.split() == ["sluice._sluice", "True"],
          "the extension loads on first use: " + probe.stdout + probe.stderr[-1000:])

# 2. The protocol.
work = workdir()
with open(os.path.join(work, "env.py"), "w") as f:
    f.write(ENV)
MAX_LINE = 200_000
proc = subprocess.Popen([sys.executable, os.path.join(work, "env.py"), str(MAX_LINE)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sys.stderr)
answers = queue.Queue()


def read():
    for line in proc.stdout:
        answers.put(json.loads(line))
    answers.put(None)


threading.Thread(target=read, daemon=True).start()


def send(op, episode, **fields):
    # As the rollout writes them: op and episode first.
    msg = {"op": op, "episode": episode, **fields}
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


def answer(timeout=20):
    a = answers.get(timeout=timeout)
    if a is None:
        raise AssertionError("the environment exited")
    return a


def nothing_more():
    try:
        a = answers.get(timeout=0.5)
    except queue.Empty:
        return True
    raise AssertionError(f"unexpected answer {a}")


send("reset", "a", prompt=[1], text="A")
check(answer() == {"episode": "a", "done": False, "text": ""}, "reset a answered")
send("reset", "b", prompt=[1], text="B")
check(answer()["episode"] == "b", "reset b answered")
send("close", "a")
send("step", "b", action=[], text="count")
check(answer() == {"episode": "b", "reward": 0.0, "done": False, "text": "alive=1 closed=A"},
      "close a freed it (its close() ran) and was not answered")

send("step", "z", action=[], text="x")
a = answer()
check(a["episode"] == "z" and "never reset here" in a.get("error", ""),
      "a step for an episode never reset here is an error for it: " + str(a))

long_text = "7" * 100_000  # over asyncio's 64 KiB line limit, under max_line
send("step", "b", action=[], text=long_text)
check(answer()["text"] == str(len(long_text)), "a 100 KB line is taken")

send("reset", "c", prompt=[1], text="C")
answer()
send("step", "c", action=[], text="7" * (MAX_LINE + 10))
a = answer()
check(a["episode"] == "c" and "over" in a.get("error", ""),
      "a line over max_line is an error for its episode: " + str(a)[:200])
send("step", "b", action=[], text="count")
check(answer()["text"] == "alive=1 closed=A,C", "and only that episode ended (closed)")

send("reset", "d", prompt=[1], text="D")
answer()
send("step", "d", action=[], text="hang")
send("close", "d")
send("step", "b", action=[], text="count")
check(answer()["text"] == "alive=1 closed=A,C,D", "close ends a hung step and frees its episode")
check(nothing_more(), "the hung step is never answered")

send("step", "b", action=[], text="end")
check(answer() == {"episode": "b", "reward": 1.0, "done": True, "text": ""}, "b ends with done")
send("close", "b")  # as the rollout sends it after done: nothing held, nothing answered
send("close", "never")
send("reset", "e", prompt=[1], text="E")
answer()
send("step", "e", action=[], text="count")
check(answer()["text"] == "alive=1 closed=A,B,C,D", "done freed b; closes of nothing are ignored")

proc.stdin.close()
check(proc.wait(timeout=20) == 0, "the environment exits when its stdin closes")
print("ok")
