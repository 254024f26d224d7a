#!/usr/bin/env python3
"""The admin's proxy passes an engine's answer on as it arrives.

A real engine on the demo model answers in milliseconds, so whether an
event was passed on before the next one existed is left to timing there.
Here the deployment's engine is fake_engine.py, which holds an event back
until the client has the one before (a proxy that gathers the answer
first would see the gate time out, and say so in the text), breaks off
mid-stream, notices a client that went away, and sends a body larger
than the proxy keeps in memory; on plain HTTP and on TLS.  Usage: test_admin_stream.py BUILD"""
import hashlib
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import (Admin, check, clean_up, connection_policies, next_event, stream_text, summary,  # noqa: E402
                      wait_for)
from fake_engine import big_body  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
PW = "stream-test-password-1"
HERE = os.path.dirname(os.path.abspath(__file__))
CHAT = "/api/v1/deployments/1/v1/chat/completions"


def ask(what):
    return {"messages": [{"role": "user", "content": what}], "stream": True}


def test_gated(c, fdir, pid):
    r = c.open_stream(CHAT, ask("gated"))
    check(r.status == 200 and r.getheader("Content-Type") == "text/event-stream", "a stream is relayed as one",
          (r.status, r.getheaders()))
    check(r.getheader("Transfer-Encoding") == "chunked" and r.getheader("Content-Length") is None,
          "chunked, with no length: it is not gathered first", r.getheaders())
    first = next_event(r)
    check(first is not None and '"first"' in first, "the first event arrives while the engine holds the next", first)
    check(metric(c, "privai_admin_proxy_streams") == 1, "the admin's metrics count one answer being relayed")
    # past its first bytes the relay's thread waits for a free CPU when
    # the engine's next ones come, rather than preempt its threads
    during = wait_for(lambda: os.SCHED_BATCH in connection_policies(pid), timeout=10)
    open(os.path.join(fdir, "gate"), "w").close()
    text, n, _, done = stream_text(r)
    check(text == "after-gate" and n == 1 and done, "the rest follows once the client had the first", (text, n, done))
    check(during, "the relay's thread runs under SCHED_BATCH while the engine holds its next event")
    with open(os.path.join(fdir, "auth")) as f:
        check(f.read().startswith("Bearer "), "the proxy sent the engine the admin's key")
    os.unlink(os.path.join(fdir, "gate"))


def test_broken(c):
    r = c.open_stream(CHAT, ask("broken"))
    first = next_event(r)
    check(r.status == 200 and first is not None and '"first"' in first, "a stream that will break starts", first)
    try:
        rest = r.read()
        cut = False
    except Exception as e:  # http.client.IncompleteRead, or the connection reset
        rest, cut = repr(e), True
    check(cut, "an upstream cut off mid-stream is cut off for the client too (no last chunk)", rest)


def test_gone(c, fdir):
    r = c.open_stream(CHAT, ask("gone"))
    first = next_event(r)
    check(first is not None and '"first"' in first, "a long stream starts", first)
    r.close()
    check(wait_for(lambda: os.path.exists(os.path.join(fdir, "gone")), timeout=30),
          "a client that goes away closes the upstream too (the engine can stop generating)")


def test_big(c):
    n = 8 << 20
    r = c.post(CHAT, {"messages": [{"role": "user", "content": f"big {n}"}]}, timeout=120)
    check(r.status == 200 and len(r.body) == n and
          hashlib.sha256(r.body).digest() == hashlib.sha256(big_body(n)).digest(),
          "an 8 MiB answer (8 times what the proxy holds) arrives byte for byte", (r.status, len(r.body)))


def test_port_taken(c, lo):
    """A port something else listens on is not given to an engine."""
    import socket
    held = socket.socket()
    held.bind(("127.0.0.1", lo + 1))
    held.listen(1)
    try:
        r = c.post("/api/v1/deployments", {"name": "second", "model": "demo"})
        check(r.status == 201 and r.json["port"] == lo + 2, "a port in use by another program is skipped", r)
        if r.status == 201:
            c.request("DELETE", f"/api/v1/deployments/{r.json['id']}")
    finally:
        held.close()


def metric(c, name):
    for line in c.get("/metrics").body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def test_counts(c):
    r = c.post(CHAT, {"messages": [{"role": "user", "content": "hangup"}]})
    check(r.status == 502 and r.error_code() == "bad_gateway", "an engine that hangs up unanswered: 502", r)
    check(wait_for(lambda: metric(c, "privai_admin_proxy_streams") == 0, timeout=20),
          "no relay left once every answer ended or its client went", metric(c, "privai_admin_proxy_streams"))
    check(metric(c, 'privai_admin_proxy_requests_total{result="answered"}') == 7 and
          metric(c, 'privai_admin_proxy_requests_total{result="bad_gateway"}') == 1,
          "the proxy's counts: 7 answered, 1 not", (metric(c, 'privai_admin_proxy_requests_total{result="answered"}'),
                                                   metric(c, 'privai_admin_proxy_requests_total{result="bad_gateway"}')))


def test_status(c, fdir):
    r = c.post(CHAT, {"messages": [{"role": "user", "content": "full"}], "stream": True})
    check(r.status == 429 and r.json and r.json["error"]["type"] == "rate_limit_error",
          "the engine's own refusal is passed on with its status and body", r)
    c.post(CHAT, {"messages": [{"role": "user", "content": "full"}]})
    peers = open(os.path.join(fdir, "peers")).read().split()
    check(len(peers) >= 2 and peers[-1] == peers[-2], "the next request to the engine reuses the connection", peers[-3:])
    r = c.get("/api/v1/deployments/1/metrics")
    check(r.status == 200 and r.body == b"fake_engine_up 1\n", "metrics through the same relay", r)


def run(tmp, engine, tls):
    """One admin, on plain HTTP or (as deployed) on TLS."""
    fdir = os.path.join(tmp, "fake-tls" if tls else "fake")
    os.makedirs(fdir)
    demo = os.path.join(BUILD, "demo", "privai-demo.gguf")
    adm = Admin(BUILD, os.path.join(tmp, "tls" if tls else "plain"), PW, dev=not tls,
                extra=("--demo-model", demo, "--engine", engine), env_extra={"FAKE_ENGINE_DIR": fdir},
                ports="19175-19179" if tls else "19170-19174")
    try:
        c = adm.client()
        c.login("admin", PW)
        d = wait_for(lambda: (lambda j: j if j and j["state"] == "ready" else None)(
            c.get("/api/v1/deployments/1").json), timeout=60)
        check(d is not None, f"[{adm.scheme}] the fake engine's deployment is ready", d)
        if d is not None:
            test_gated(c, fdir, adm.proc.pid)
            test_broken(c)
            test_gone(c, fdir)
            test_big(c)
            test_status(c, fdir)
            test_counts(c)
            test_port_taken(c, 19175 if tls else 19170)
            check(c.get("/api/v1/health").status == 200, f"[{adm.scheme}] the admin still answers")
        check(adm.stop() == 0, f"[{adm.scheme}] the admin exits cleanly (no sanitizer report)",
              open(adm.log_path).read()[-2000:])
    finally:
        adm.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="privai-stream-")
    engine = os.path.join(tmp, "fake_engine.py")
    shutil.copy2(os.path.join(HERE, "fake_engine.py"), engine)
    os.chmod(engine, 0o755)
    try:
        run(tmp, engine, tls=False)
        run(tmp, engine, tls=True)
    finally:
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
