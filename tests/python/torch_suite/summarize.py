#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""Turns the verbose unittest output of a run_suite.py run into a stable, sorted table

    <test name> <PASS|SKIP|FAIL|ERROR> <short reason>

plus totals, so that two backends' tables can be diffed.

    summarize.py LOG [--expect CASES] [--allow ALLOWLIST] > TABLE

--expect: the case names (run_suite.py --list); cases the log never finished are ERROR
          ("not reached"), so an aborted run shows where it stopped.
--allow:  lines "<test name> <why>" ('#' comments); FAIL/ERROR cases named there do not count.
Exit status: 0 if every FAIL/ERROR is allowed and the run completed, 1 otherwise.
"""
import argparse
import ast
import re
import sys

# The ranks' log lines land between "name (id) ... " and the outcome, so the outcome is looked
# for at the start of any later line (or right after " ... ").
HEADER = re.compile(r"^(test\w*) \([\w.]+\.\1\)(?: \.\.\. (.*))?$")
OUTCOME = re.compile(r"^(ok|FAIL|ERROR|expected failure|unexpected success|skipped (.*))$")
STATUS = {"ok": "PASS", "FAIL": "FAIL", "ERROR": "ERROR", "expected failure": "PASS",
          "unexpected success": "FAIL"}
BLOCK = re.compile(r"^(FAIL|ERROR): (test\w*) \(")
EXC = re.compile(r"^([\w.]*(Error|Exception|Exit|Interrupt|Failure)|Timing out)\b.*")


def normalize(reason):
    """Keeps a reason short and the same from run to run (set order, pids, elapsed seconds)."""
    reason = re.sub(r"\{('[^']*'(?:, '[^']*')*)\}",
                    lambda m: "{" + ", ".join(sorted(m.group(1).split(", "))) + "}", reason)
    reason = re.sub(r"pid:? \d+", "pid N", reason)
    reason = re.sub(r"\d+\.\d+ seconds", "N seconds", reason)
    reason = " ".join(reason.split())
    return reason[:200] + ("..." if len(reason) > 200 else "")


def error_reason(body):
    """The innermost exception line of a failure block: a rank's error comes after the
    parent's "RuntimeError: Process N exited with error code 10 and exception:"."""
    found = [l.strip() for l in body if EXC.match(l.strip())
             and not re.match(r"RuntimeError: Process \d+ exited with error code", l.strip())]
    return found[-1] if found else (body[-1].strip() if body else "")


def parse(lines):
    results, current, complete = {}, None, False
    for i, line in enumerate(lines):
        line = line.rstrip("\n")
        m = HEADER.match(line)
        rest = line
        if m:
            current, rest = m.group(1), m.group(2) or ""
        o = OUTCOME.match(rest.strip()) if current else None
        if o:
            if o.group(2) is not None:
                try:
                    reason = ast.literal_eval(o.group(2))
                except (ValueError, SyntaxError):
                    reason = o.group(2)
                results[current] = ["SKIP", reason]
            else:
                results[current] = [STATUS[o.group(1)], "" if o.group(1) == "ok" else o.group(1)]
            current = None
        if re.match(r"^Ran \d+ tests? in ", line):
            complete = True
        b = BLOCK.match(line)
        if b and i > 0 and lines[i - 1].startswith("=" * 70):
            body = []
            for l in lines[i + 2:]:
                if l.startswith("=" * 70) or l.startswith("-" * 70):
                    break
                body.append(l)
            if b.group(2) in results:
                results[b.group(2)][1] = error_reason(body)
    return results, complete


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("log")
    ap.add_argument("--expect")
    ap.add_argument("--allow")
    args = ap.parse_args()
    with open(args.log, errors="replace") as f:
        results, complete = parse(f.readlines())
    if args.expect:
        with open(args.expect) as f:
            for name in f.read().split():
                results.setdefault(name, ["ERROR", "not reached (run aborted or killed)"])
    allowed = {}
    if args.allow:
        with open(args.allow) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    allowed[line.split()[0]] = line
    counts = {s: 0 for s in ("PASS", "SKIP", "FAIL", "ERROR")}
    for name in sorted(results):
        status, reason = results[name]
        counts[status] += 1
        print(f"{name:<64} {status:<5} {normalize(reason)}".rstrip())
    print(f"# total {len(results)}: " + " ".join(f"{s} {n}" for s, n in counts.items()))
    bad = [n for n in sorted(results) if results[n][0] in ("FAIL", "ERROR") and n not in allowed]
    for n in bad:
        print(f"summarize: not allowed: {n} {results[n][0]}", file=sys.stderr)
    if not complete:
        print("summarize: the log has no 'Ran N tests' line: the run did not finish",
              file=sys.stderr)
    return 1 if bad or not complete else 0


if __name__ == "__main__":
    sys.exit(main())
