#!/usr/bin/env python3
"""Lists bare duration literals in the sources; exits 1 when there is any.

A time-out or a period lives in a role's configuration (a field's default) or in a named
constant with its reason (`constexpr Millis kStoreRequestTimeout{5000};  // ...`), never as a
number at the call. Flagged, after comments and string literals are blanked:
  - a duration built from a number: Millis(5000), std::chrono::seconds{3}, milliseconds(50)
  - a chrono literal: 5000ms, 3s
  - a number assigned to a member that names a wait: ro.timeout_ms = 300, j.poll_s = 1
  - a number passed to a call that takes milliseconds: wait_for(500), usleep(1000)
Zero is allowed (it means none, or is a bound). Allowed lines: a named constant's definition
(`const`/`constexpr ... kName`), and in a header, a field's default (`Millis lease_ttl{10000};`; not a
parameter's default).
Usage: scripts/check_durations.py [ROOT]   (ROOT: the repository, default: this script's parent)
"""
import os
import re
import sys

DIRS = ["src", "weightstore", "relay", "rollout", "actor", "sim", "python/src"]
EXTS = (".cpp", ".hpp", ".h", ".cc", ".cu", ".cuh")

NUM = r"(\d[\d']*(?:\.\d*)?(?:[eE][+-]?\d+)?)[uUlLfF]*"
UNIT_TYPE = (r"\b(?:Millis|Seconds|Micros|Nanos|Clock::duration|"
             r"(?:std::)?(?:chrono::)?(?:milliseconds|seconds|microseconds|nanoseconds|minutes|"
             r"hours|duration\s*<[^>]*>))")
RULES = [
    ("duration from a number", re.compile(UNIT_TYPE + r"\s*[({]\s*" + NUM + r"\s*[)}]")),
    ("chrono literal", re.compile(r"(?<![\w.])" + NUM.replace("[uUlLfF]*", "") +
                                  r"(ms|s|us|ns|min|h)\b")),
    ("number assigned to a member that names a wait",
     re.compile(r"[.>]\w*(?:timeout|wait|interval|period|poll|ttl|every|after|grace|backoff|delay)"
                r"\w*\s*=\s*" + NUM + r"\s*[;,)]")),
    ("number passed as milliseconds",
     re.compile(r"\b(?:wait_for|usleep|sleep|sleep_ms|wait_ms)\s*\(\s*" + NUM + r"\s*\)")),
]
CONSTANT = re.compile(r"\b(?:constexpr|const)\b.*\bk[A-Z]\w*\s*[{=(]")
FIELD_DEFAULT = re.compile(r"^\s*(?:[\w:<>,]+\s+)+\w+\s*(?:=[^;]*|\{[^;]*\})\s*;")


def blank(text):
    """Replaces comments and string/char literals with spaces, keeping the line breaks."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not text[i - 1].isalnum()):
            open_end = text.find("(", i)
            delim = ")" + text[i + 2:open_end] + '"'
            j = text.find(delim, open_end)
            j = n if j < 0 else j + len(delim)
            out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            # A digit separator (1'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum():
                out.append(c)
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * (j - i - 2) + c if j - i >= 2 else " " * (j - i))
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def nonzero(number):
    return any(ch in "123456789" for ch in number.split("e")[0].split("E")[0])


def check_file(path, rel):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = blank(f.read()).split("\n")
    header = rel.endswith((".hpp", ".h", ".cuh"))
    found = []
    for no, line in enumerate(lines, 1):
        field = header and FIELD_DEFAULT.match(line) and line.count("(") == line.count(")")
        if CONSTANT.search(line) or field:
            continue
        for name, rule in RULES:
            for m in rule.finditer(line):
                if nonzero(m.group(1)):
                    found.append(f"{rel}:{no}: {name}: {m.group(0).strip()}")
    return found


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    found = []
    for d in DIRS:
        for base, _, files in os.walk(os.path.join(root, d)):
            for name in sorted(files):
                if name.endswith(EXTS):
                    path = os.path.join(base, name)
                    found += check_file(path, os.path.relpath(path, root))
    for line in sorted(found):
        print(line)
    if found:
        print(f"check_durations: {len(found)} bare duration literal(s); name each in a config "
              "field or a constant with its reason", file=sys.stderr)
        return 1
    print("check_durations: no bare duration literals")
    return 0


if __name__ == "__main__":
    sys.exit(main())
