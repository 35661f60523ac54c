#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
"""A tiny launcher for cohort's Python tests.

    launch.py -np N [--timeout S] [--local-size K] -- command [args...]

Starts N copies of the command with the variables cohortrun (and torchrun) export: RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT=<a free port>
(--local-size K pretends the ranks run K to a host: LOCAL_RANK=rank%K, LOCAL_WORLD_SIZE=K).
Each line a rank prints is shown prefixed with "[rank] ". When a rank fails (non-zero exit or
a signal), or at the timeout (default 300 s), every rank still running is killed (its whole
process group) and the launcher exits non-zero naming which rank failed and how; 124 at the
timeout. It prints how long the run took.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading
import time


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def pump(rank, stream, lock):
    for line in iter(stream.readline, b''):
        text = line.decode('utf-8', 'replace').rstrip('\n')
        with lock:
            sys.stdout.write('[%d] %s\n' % (rank, text))
            sys.stdout.flush()
    stream.close()


def describe(code):
    if code < 0:
        try:
            return 'killed by %s' % signal.Signals(-code).name
        except ValueError:
            return 'killed by signal %d' % -code
    return 'exit status %d' % code


def kill_group(p, sig):
    try:
        os.killpg(p.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument('-np', type=int, required=True)
    ap.add_argument('--timeout', type=float, default=300.0)
    ap.add_argument('--local-size', type=int, default=0)
    ap.add_argument('cmd', nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == '--' else a.cmd
    if a.np < 1 or not cmd:
        ap.error('need -np N >= 1 and a command after --')
    local = a.local_size if a.local_size > 0 else a.np
    port = free_port()
    lock = threading.Lock()
    procs, pumps = [], []
    start = time.monotonic()
    for r in range(a.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.np), LOCAL_RANK=str(r % local),
                   LOCAL_WORLD_SIZE=str(min(local, a.np)), MASTER_ADDR='127.0.0.1',
                   MASTER_PORT=str(port))
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        procs.append(p)
        t = threading.Thread(target=pump, args=(r, p.stdout, lock), daemon=True)
        t.start()
        pumps.append(t)

    def on_signal(signum, frame):
        for p in procs:
            kill_group(p, signal.SIGKILL)
        sys.exit(128 + signum)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    failure = None
    while True:
        codes = [p.poll() for p in procs]
        bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
        if bad:
            failure = bad[0]
            break
        if all(c == 0 for c in codes):
            break
        if time.monotonic() - start > a.timeout:
            failure = ('timeout', [r for r, c in enumerate(codes) if c is None])
            break
        time.sleep(0.05)
    if failure is not None:
        for p in procs:
            if p.poll() is None:
                kill_group(p, signal.SIGKILL)
    for p in procs:
        p.wait()
    for t in pumps:
        t.join(timeout=5)
    elapsed = time.monotonic() - start
    if failure is None:
        print('launch.py: %d rank(s) succeeded in %.1f s' % (a.np, elapsed))
        return 0
    if failure[0] == 'timeout':
        print('launch.py: timeout after %.0f s; rank(s) %s still running, killed'
              % (a.timeout, ', '.join(map(str, failure[1]))))
        return 124
    r, c = failure
    others = ['%d: %s' % (i, describe(p.returncode)) for i, p in enumerate(procs) if i != r]
    print('launch.py: rank %d failed (%s) after %.1f s; the others: %s'
          % (r, describe(c), elapsed, '; '.join(others) if others else 'none'))
    return c if 0 < c < 125 else 1


if __name__ == '__main__':
    sys.exit(main())
