#!/usr/bin/env python3
"""Fails listing each doctest case or suite whose name holds a ';'. CMake's list separator: the
discovered ctest name is cut there into two tests that match no case, and both fail.
    test_names.py ROOT"""
import pathlib
import re
import sys

# A case, subcase or suite, its name as one or more string literals (clang-format splits long ones).
NAMED = re.compile(r'\b(TEST_CASE|SUBCASE|TEST_SUITE)\(\s*((?:"(?:[^"\\]|\\.)*"\s*)+)[,)]')
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
bad = []
for path in sorted((root / "tests").rglob("*.cpp")):
    text = path.read_text(errors="replace")
    for m in NAMED.finditer(text):
        name = "".join(LITERAL.findall(m.group(2)))
        if ";" in name:
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{path.relative_to(root)}:{line}: {m.group(1)} \"{name}\"")
for b in bad:
    print(b)
if bad:
    print(f"test_names.py: {len(bad)} name(s) with ';', which ctest cuts into tests that fail")
    sys.exit(1)
print("test_names.py: no case, subcase or suite name holds ';'")
