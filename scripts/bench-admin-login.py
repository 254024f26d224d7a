#!/usr/bin/env python3
"""make bench, admin part: what sign-ins cost everyone else.  privai-admin
(--dev, its own state under BUILD/bench) gets LOGINS threads each sending
wrong passwords as fast as they are answered (each is an Argon2 check,
about 130 ms here), while one client asks GET /api/v1/health, a route that
takes the store's lock, REQUESTS times.  Prints the health request's
latency (p50, p95, max) and the logins answered; JSON on the last line.

    BUILD=build scripts/bench-admin-login.py
"""
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

BUILD = os.environ.get("BUILD", "build")
LOGINS = int(os.environ.get("LOGINS", "4"))
REQUESTS = int(os.environ.get("REQUESTS", "200"))


def main():
    state = os.path.join(BUILD, "bench", "login-state")
    shutil.rmtree(state, ignore_errors=True)
    os.makedirs(os.path.dirname(state), exist_ok=True)
    log = open(os.path.join(BUILD, "bench", "login.log"), "w+")
    p = subprocess.Popen([os.path.join(BUILD, "privai-admin"), "--dev", "--port", "0", "--state-dir", state,
                          "--login-rate", "10000"], stderr=log, stdout=subprocess.DEVNULL)
    try:
        port = None
        for _ in range(300):
            log.seek(0)
            m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        if port is None:
            print("bench-admin-login: privai-admin did not start", file=sys.stderr)
            return 1
        stop = threading.Event()
        answered = [0]

        def hammer():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            body = json.dumps({"name": "admin", "password": "not the password at all"})
            while not stop.is_set():
                c.request("POST", "/api/v1/auth/login", body, {"Content-Type": "application/json"})
                c.getresponse().read()
                answered[0] += 1

        threads = [threading.Thread(target=hammer, daemon=True) for _ in range(LOGINS)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        lat = []
        t0 = time.monotonic()
        for _ in range(REQUESTS):
            t = time.monotonic()
            c.request("GET", "/api/v1/health")
            c.getresponse().read()
            lat.append((time.monotonic() - t) * 1000)
        wall = time.monotonic() - t0
        stop.set()
        for t in threads:
            t.join(timeout=5)
        lat.sort()
        res = {"logins_threads": LOGINS, "requests": REQUESTS, "p50_ms": round(statistics.median(lat), 2),
               "p95_ms": round(lat[int(0.95 * (len(lat) - 1))], 2), "max_ms": round(lat[-1], 2),
               "logins_answered": answered[0], "seconds": round(wall, 2)}
        print("GET /api/v1/health during %d threads of failed logins: p50 %.2f ms, p95 %.2f ms, max %.2f ms "
              "(%d requests in %.1f s; %d logins answered)" % (LOGINS, res["p50_ms"], res["p95_ms"], res["max_ms"],
                                                              REQUESTS, wall, answered[0]))
        print(json.dumps(res))
        return 0
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    sys.exit(main())
