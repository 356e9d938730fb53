#!/usr/bin/env python3
"""The agent endpoint end to end: a job whose rollout serves /v1/*, driven by this script.

Bad input gets a clear 4xx and changes nothing (a wrong JSON type included: the rollout lives);
an oversized body's 413 is readable; idle connections do not lock agents out; a turn that
reaches the episode's limit is answered; a stop sequence ends a turn without its text; a silent
agent's episode is ended and counted; every other episode, driven properly (completions and
chat), reaches the actor exactly once; and the token is in no file of the run but its own.

    agent_http.py SLUICE_BIN WORK_DIR
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

sluice, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
run_dir = os.path.join(work, "agent-http-run")
subprocess.run(["rm", "-rf", run_dir], check=True)
PROMPTS, GROUP = 4, 2
job = {
    "name": "agent-http", "mode": "sluice", "rollouts": 1, "relays": 1, "log_level": "warn",
    "timeout_s": 150, "progress_s": 0,
    "manager": {"prompt_source": "task", "prompts": PROMPTS, "group_size": GROUP,
                "batch_trajectories": PROMPTS * GROUP, "heartbeat_timeout_ms": 5000},
    "rollout": {"engine": "model", "report_ms": 20, "gpt": {"max_sequences": 8},
                "agent_listen": "127.0.0.1:0", "env_timeout_ms": 3000},
    "actor": {"policy": "gpt", "weight_bytes": 16,
              "learner": {"warmstart_steps": 5, "eval_prompts": 4}},
}
job_path = os.path.join(work, "agent-http.json")
json.dump(job, open(job_path, "w"))
proc = subprocess.Popen([sluice, "run", job_path, "--out", run_dir], stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def post(path, body, token=None, raw=None):
    """(status, body); (None, {"error": ...}) when no answer came (a reset, a time-out)."""
    data = raw if raw is not None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    req = urllib.request.Request(url + path, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else {}
    except (OSError, urllib.error.URLError) as e:
        return None, {"error": {"message": f"no answer: {e!r}"}}


def message(answer):
    return answer.get("error", {}).get("message", "")


deadline = time.time() + 60
url_file = os.path.join(run_dir, "agent-rollout-0.url")
while not os.path.exists(url_file) and time.time() < deadline and proc.poll() is None:
    time.sleep(0.1)
if not os.path.exists(url_file):
    print(proc.communicate()[0])
    sys.exit("the rollout wrote no agent endpoint URL")
url = open(url_file).read().strip()
token = open(os.path.join(run_dir, "agent_token")).read().strip()
check(oct(os.stat(os.path.join(run_dir, "agent_token")).st_mode & 0o777) == "0o600",
      "the token file is 0600")
# The rollout's file names where the token is, not the token; and it is its owner's alone.
role_file = os.path.join(run_dir, "rollout-0.json")
check(token not in open(role_file).read(), "the rollout's role file does not hold the token")
check(os.stat(role_file).st_mode & 0o077 == 0, "the rollout's role file is 0600")
printed = subprocess.run([sluice, "rollout", "--config", role_file, "--print-config"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
check("agent_token_file" in printed and token not in printed,
      "--print-config shows the token's file, not the token")

# A stranger is refused: no token, a wrong one.
check(post("/v1/episodes", {})[0] == 401, "no token: 401")
check(post("/v1/episodes", {}, token="x" * len(token))[0] == 401, "a wrong token: 401")


def take():
    for _ in range(400):
        status, ep = post("/v1/episodes", {}, token)
        if status == 200:
            return ep
        time.sleep(0.05)
    sys.exit("no episode to take")


# Before any episode is taken (these take a while, and an episode waits env_timeout_ms at most):
# a client that sends the whole oversized body before it reads (urllib does) reads the 413 too,
# not a reset: 6 MB, more than the sockets' buffers take at once.
status, err = post("/v1/completions", None, token, raw=b"7" * 6_000_000)
check(status == 413 and "limit" in message(err), f"a 6 MB body sent whole: a readable 413 ({status})")

# Idle connections (no request, no token) cannot lock the agent out: the oldest are closed.
host, port = url.split("//")[1].split(":")
idle = [socket.create_connection((host, int(port)), timeout=30) for _ in range(70)]
status, _ = post("/v1/completions", None, token, raw=b"[]")
check(status == 400, f"an agent is answered past 70 idle connections ({status})")
for c in idle:
    c.close()

# A wrong JSON type is a 400 naming the field, never the rollout's end (the fields are checked
# before the session is looked up).
for bad, field in [({"session": 7, "prompt": [1, 5, 16]}, "session"),
                   ({"session": None, "prompt": [1, 5, 16]}, "session"),
                   ({"session": "p999/9", "prompt": None}, "prompt"),
                   ({"session": "p999/9", "prompt": [1, 5, 16], "max_tokens": -1}, "max_tokens"),
                   ({"session": "p999/9", "prompt": [1, 5, 16], "max_tokens": 1e30}, "max_tokens"),
                   ({"session": "p999/9", "prompt": [1, 5, 16], "max_tokens": "8"}, "max_tokens"),
                   ({"session": "p999/9", "prompt": [1, 5, 16], "stop": 3}, "stop"),
                   ({"session": "p999/9", "prompt": [1, 5, 16], "stop": ["1"] * 5}, "stop")]:
    status, err = post("/v1/completions", bad, token)
    check(status == 400 and field in message(err), f"{json.dumps(bad)[:60]}...: 400 naming {field}")
status, err = post("/v1/episodes/end", {"session": 7, "reward": 1}, token)
check(status == 400 and "session" in message(err), "an end with a numeric session: 400")
check(post("/v1/nothing", {}, token)[0] == 404, "the rollout lives on after them")

ep = take()
sid, prompt = ep["session"], ep["prompt_tokens"]
check(post("/v1/completions", None, token, raw=b"{not json")[0] == 400, "malformed JSON: 400")
check(post("/v1/completions", {"session": sid, "prompt": "text"}, token)[0] == 400,
      "a prompt that is not token ids: 400")
check(post("/v1/completions", {"session": sid, "prompt": prompt, "max_tokens": 0}, token)[0]
      == 400, "max_tokens 0: 400")
check(post("/v1/completions", {"session": "p999/9", "prompt": prompt}, token)[0] == 404,
      "an unknown session: 404")
status, err = post("/v1/completions", {"session": sid, "prompt": [1] + prompt}, token)
check(status == 409 and "position 1" in err["error"]["message"],
      "a context that drifts from the episode's tokens: 409 naming the position")
status, err = post("/v1/completions", {"session": sid, "prompt": prompt + [3] * 200}, token)
check(status == 400 and "at most" in err["error"]["message"], "a context over the model's: 400")


def oversized():
    """Announces a 2 MB body and sends none: the endpoint answers from the header alone."""
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as c:
        c.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\n"
                   f"Authorization: Bearer {token}\r\nContent-Length: 2000000\r\n\r\n").encode())
        answer = b""
        while chunk := c.recv(4096):
            answer += chunk
    return int(answer.split()[1])


check(oversized() == 413, "a body over 1 MiB: 413")
check(post("/v1/nothing", {"session": sid}, token)[0] == 404, "an unknown route: 404")

# The right way: a turn, then the episode ended with the agent's reward.
status, out1 = post("/v1/completions", {"session": sid, "prompt": prompt, "max_tokens": 6}, token)
check(status == 200 and out1["version"] >= 1, "a turn answered, with its version")
turn = out1["choices"][0]["tokens"]
check(0 < len(turn) <= 6 and len(out1["choices"][0]["logprobs"]) == len(turn),
      "at most max_tokens tokens, one log-prob each")
# A second turn after the agent's own tokens (its environment's): the context grows exactly.
status, out2 = post("/v1/completions",
                    {"session": sid, "prompt": prompt + turn + [19, 3], "max_tokens": 2}, token)
check(status == 200, "a second turn after the agent's tokens")
context = prompt + turn + [19, 3] + (out2["choices"][0]["tokens"] if status == 200 else [])
# max_tokens near 2^64 does not wrap the turn's bound (the episode's own bounds hold).
status, out3 = post("/v1/completions",
                    {"session": sid, "prompt": context + [3], "max_tokens": 2**64 - 1}, token)
check(status == 200, f"max_tokens 2^64-1: answered ({status} {message(out3)})")
if status == 200:
    context += [3] + out3["choices"][0]["tokens"]
# A turn that reaches the episode's max_new_tokens is answered: find the limit (a context that
# fills the model leaves no room, and the answer says the limit), then ask for a turn with room
# for one token.
fill = context + [3] * max(0, 94 - len(context))
status, err = post("/v1/completions", {"session": sid, "prompt": fill, "max_tokens": 50}, token)
if status == 400 and "max_new_tokens" in message(err):
    limit = int(message(err).split("max_new_tokens ")[1].split(")")[0])
    generated = len(context) - len(prompt)
    if generated < limit:
        room = context + [3] * (limit - 1 - generated)
        status, last = post("/v1/completions", {"session": sid, "prompt": room, "max_tokens": 50},
                            token)
        check(status == 200 and len(last["choices"][0]["tokens"]) == 1
              and last["choices"][0]["finish_reason"] in ("length", "stop"),
              f"a turn that reaches max_new_tokens {limit} is answered ({status} {message(last)})")
    else:
        check(out3["choices"][0]["finish_reason"] == "length",
              f"the 2^64-1 turn reached max_new_tokens {limit} and was answered")
else:
    check(status == 200, f"a turn that fills the model's context is answered ({status} {message(err)})")
check(post("/v1/episodes/end", {"session": sid, "reward": "high"}, token)[0] == 400,
      "a reward that is not a number: 400")
check(post("/v1/episodes/end", {"session": sid, "reward": 1.0}, token)[0] == 200, "ended")
check(post("/v1/episodes/end", {"session": sid, "reward": 1.0}, token)[0] == 409,
      "an ended session: 409")

# One episode left silent: ended by the rollout after env_timeout_ms, counted.
silent = take()

# The rest through chat completions, with stop sequences: a turn that meets one ends before it,
# its text left out of the answer and out of the episode (the next context holds none of it).
STOP = [",", "1", "2", "3"]
done, stopped = 2, 0
while done < PROMPTS * GROUP:
    ep = take()
    messages = [{"role": "user", "content": ep["prompt"].lstrip("^")}]
    status, out = post("/v1/chat/completions",
                       {"session": ep["session"], "messages": messages, "max_tokens": 8,
                        "stop": STOP}, token)
    check(status == 200 and "content" in out["choices"][0]["message"], "a chat turn")
    if status == 200:
        content = out["choices"][0]["message"]["content"]
        reason = out["choices"][0]["finish_reason"]
        check(not any(s in content for s in STOP), f"no stop text in the answer ({content!r})")
        if reason == "stop" and not content.endswith("$"):
            stopped += 1
        # Ids past the tokenizer's characters decode as '?', which no context can hold.
        if reason == "stop" and not content.endswith("$") and "?" not in content:
            messages.append({"role": "assistant", "content": content})
            status, out = post("/v1/chat/completions",
                               {"session": ep["session"], "messages": messages,
                                "max_tokens": 2}, token)
            check(status == 200, f"the next turn's context holds no stop text ({status})")
    check(post("/v1/episodes/end", {"session": ep["session"], "reward": 0.0}, token)[0] == 200,
          "a chat episode ended")
    done += 1
check(stopped >= 1, f"a stop sequence ended a turn ({stopped} of {PROMPTS * GROUP - 2})")

output = proc.communicate(timeout=150)[0]
check(proc.returncode == 0, "the job ends (exit 0)")
summary = json.load(open(os.path.join(run_dir, "summary.json")))
actor, manager = summary["actor"], summary["manager"]
ids = actor["accepted_ids"]
check(len(ids) == len(set(ids)) == PROMPTS * GROUP, "every trajectory reached the actor once")
failed = sum(r["stats"].get("env_failed", 0) for r in manager["rollouts"])
check(failed == 1, f"the silent agent's episode was ended and counted (env_failed {failed})")
check(actor["abandoned"] >= 1, "and the actor counted it abandoned")
# The token exists only in its file: no other file of the run, and no line the job printed.
leaks = []
for root, _, files in os.walk(run_dir):
    for f in files:
        path = os.path.join(root, f)
        if path == os.path.join(run_dir, "agent_token") or not os.path.isfile(path):
            continue
        with open(path, "rb") as data:
            if token.encode() in data.read():
                leaks.append(os.path.relpath(path, run_dir))
check(not leaks, f"no file of the run but agent_token holds the token ({leaks})")
check(token not in output, "the job's output does not hold the token")
if failures:
    print(output)
    sys.exit(1)
