#!/usr/bin/env python3
"""An agent that trains a model through sluice's agent endpoint, with the standard library only.

It starts the job (job.json beside this file) with `sluice run`, then runs episodes against every
rollout's endpoint until the job ends: it takes an episode (POST /v1/episodes), asks for the
model's answer (POST /v1/completions, token ids in and out), checks the answer itself (the running
sums of the prompt's terms) and ends the episode with that reward (POST /v1/episodes/end). sluice
records each answer's tokens, log-probs and version and trains on them.

A rollout that dies is started again on a new port and rewrites its agent-<id>.url: on a
connection error the agent reads the file again and retries (a few times, backing off). The
episodes it had there are gone (404); sluice runs them again.

    python3 examples/agent/agent.py [--out RUN_DIR] [--sluice PATH] [--threads N] [--slow-file F]

While the file given as --slow-file exists, each thread waits a second before its next episode:
a test slows the job down that way to keep it running while it is attacked.

Runs from any folder; the run folder defaults to runs/agent-<time> under the working folder.
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def post(url, token, path, body):
    """POSTs a JSON body; returns (status, parsed answer)."""
    req = urllib.request.Request(
        url + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        text = e.read()
        return e.code, json.loads(text) if text else {}
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, {"error": {"message": str(e)}}


RETRIES = 6  # tries of one request across connection errors and 503s (0.1 s, 0.2 s, ... apart)


class Endpoint:
    """One rollout's agent endpoint, found in its url file (rewritten when the rollout restarts)."""

    def __init__(self, path):
        self.path = path
        self.url = self.read()

    def read(self):
        try:
            with open(self.path) as f:
                return f.read().strip()
        except OSError:
            return ""

    def post(self, token, path, body):
        """post() to the endpoint; on a connection error, the url file again, and a retry (after a
        503, every connection there busy, a retry too)."""
        for attempt in range(RETRIES):
            status, answer = post(self.url, token, path, body)
            if status not in (0, 503):
                return status, answer
            time.sleep(min(0.1 * 2 ** attempt, 2.0))
            self.url = self.read() or self.url
        return status, answer


def reward(prompt, answer):
    """1 when `answer` is the prompt's running sums ("7+3+8=" -> "10,18$"), else 0."""
    terms = [int(t) for t in prompt.lstrip("^").rstrip("=").split("+")]
    sums, total = [], terms[0]
    for t in terms[1:]:
        total += t
        sums.append(str(total))
    return 1.0 if answer == ",".join(sums) + "$" else 0.0


def episodes(path, token, stop, counts, lock, slow_file):
    """Runs episodes against one rollout's endpoint (its url file `path`) until `stop` is set."""
    endpoint = Endpoint(path)
    while not stop.is_set():
        if slow_file and os.path.exists(slow_file):
            stop.wait(1.0)
        status, ep = endpoint.post(token, "/v1/episodes", {})
        if status != 200:
            time.sleep(0.05)  # no work here now (503), or the job is ending
            continue
        status, out = endpoint.post(token, "/v1/completions",
                                    {"session": ep["session"], "prompt": ep["prompt_tokens"],
                                     "max_tokens": 48})
        if status != 200:
            continue  # the episode ended on the rollout's side (or with it); it is counted there
        r = reward(ep["prompt"], out["choices"][0]["text"])
        status, _ = endpoint.post(token, "/v1/episodes/end",
                                  {"session": ep["session"], "reward": r})
        with lock:
            counts["episodes"] += status == 200
            counts["right"] += r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join("runs", time.strftime("agent-%Y%m%d-%H%M%S")))
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "sluice"))
    ap.add_argument("--threads", type=int, default=32, help="episodes at once per rollout")
    ap.add_argument("--set", action="append", default=[], help="a job override, key=value")
    ap.add_argument("--slow-file", default="",
                    help="while this file exists, a second's wait before each episode")
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    cmd = [args.sluice, "run", os.path.join(HERE, "job.json"), "--out", out]
    for s in args.set:
        cmd += ["--set", s]
    job = subprocess.Popen(cmd)
    rollouts = json.load(open(os.path.join(HERE, "job.json")))["rollouts"]
    # The rollouts write their endpoints' URLs into the run folder, beside the job's token.
    urls = []
    while job.poll() is None:
        urls = sorted(glob.glob(os.path.join(out, "agent-*.url")))
        if len(urls) >= rollouts and os.path.exists(os.path.join(out, "agent_token")):
            break
        time.sleep(0.2)
    if job.poll() is not None:
        sys.exit(job.returncode)
    token = open(os.path.join(out, "agent_token")).read().strip()
    stop, lock = threading.Event(), threading.Lock()
    counts = {"episodes": 0, "right": 0.0}
    threads = []
    for path in urls:
        for _ in range(args.threads):
            t = threading.Thread(target=episodes, daemon=True,
                                 args=(path, token, stop, counts, lock, args.slow_file))
            t.start()
            threads.append(t)
    code = job.wait()
    stop.set()
    n = max(1, counts["episodes"])
    print(f"agent: {counts['episodes']} episodes over {len(urls)} endpoints, "
          f"mean reward {counts['right'] / n:.3f}")
    sys.exit(code)


if __name__ == "__main__":
    main()
