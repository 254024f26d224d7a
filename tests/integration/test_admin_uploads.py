#!/usr/bin/env python3
"""Resumable model uploads (/api/v1/uploads) against a live privai-admin:
a GGUF sent in parts, one of them cut off mid-body, the admin killed with
SIGKILL between parts and its hash state thrown away, then finished and
registered byte for byte; every refusal with its status and field; the
name reserved meanwhile; bad files removed; idle and orphaned uploads
swept at start; models registered by path hashed in the background.  Usage: test_admin_uploads.py BUILD"""
import hashlib
import os
import re
import signal
import socket
import sqlite3
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
PW = "uploads-test-password-1"
DEMO = os.path.join(BUILD, "demo", "privai-demo.gguf")
OCTET = {"Content-Type": "application/octet-stream"}


def put(c, uid, offset, data, **kw):
    return c.request("PUT", f"/api/v1/uploads/{uid}?offset={offset}", raw=data, headers=OCTET, **kw)


def put_cut(adm, c, uid, offset, declared, data):
    """A PUT that declares `declared` bytes, sends `data`, and hangs up."""
    s = socket.create_connection(("127.0.0.1", adm.port), timeout=30)
    s.sendall((f"PUT /api/v1/uploads/{uid}?offset={offset} HTTP/1.1\r\nHost: x\r\n"
               f"Cookie: privai_session={c.cookie}\r\nX-CSRF-Token: {c.csrf}\r\n"
               f"Content-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n").encode() + data)
    time.sleep(0.5)
    s.close()


def put_expect(adm, c, uid, offset, declared):
    """A PUT with `Expect: 100-continue` that sends no body: the reply the
    server gives on the headers alone.  (Sending the body regardless races
    with the server's early refusal and close, which resets the connection.)"""
    s = socket.create_connection(("127.0.0.1", adm.port), timeout=30)
    s.sendall((f"PUT /api/v1/uploads/{uid}?offset={offset} HTTP/1.1\r\nHost: x\r\n"
               f"Cookie: privai_session={c.cookie}\r\nX-CSRF-Token: {c.csrf}\r\nExpect: 100-continue\r\n"
               f"Content-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n").encode())
    got = b""
    try:
        while True:
            head, sep, body = got.partition(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            if sep and m and len(body) >= int(m.group(1)):
                break
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except OSError as e:  # a timeout here means the server waited for the body
        got += f" [{e}]".encode()
    s.close()
    return got.decode(errors="replace")


def parts_dir(adm):
    return sorted(f for f in os.listdir(os.path.join(adm.state, "models")) if f.startswith(".part-"))


def test_refusals(adm, o, v):
    for body, status, field in (({"size": 10}, 422, "name"), ({"name": "m"}, 422, "size"),
                                ({"name": "m", "size": 0}, 422, "size"),
                                ({"name": "m", "size": (1 << 30) + 1}, 422, "size"),
                                ({"name": "m", "size": "10"}, 422, "size"),
                                ({"name": "../m", "size": 10}, 422, "name"),
                                ({"name": "m", "size": 10, "sha256": "ABC"}, 422, "sha256"),
                                ({"name": "m", "size": 10, "color": 1}, 422, "color"),
                                ({"name": "demo", "size": 10}, 409, "name")):
        r = o.post("/api/v1/uploads", body)
        check(r.status == status and r.json["error"].get("field") == field, f"create refused: {body}", r)
    check(v.post("/api/v1/uploads", {"name": "m", "size": 10}).status == 403, "a viewer cannot upload")
    check(v.get("/api/v1/uploads").status == 403, "nor list uploads")
    check(o.get("/api/v1/uploads").json["data"] == [] and parts_dir(adm) == [], "nothing stored by a refusal")
    r = o.get("/api/v1/uploads/77")
    check(r.status == 404, "no such upload 404", r)
    r = put(o, 77, 0, b"x")
    check(r.status == 404, "PUT to no upload 404", r)


def test_resume(adm, o):
    data = open(DEMO, "rb").read()
    n, sha = len(data), hashlib.sha256(data).hexdigest()
    third = n // 3
    r = o.post("/api/v1/uploads", {"name": "resumed", "size": n, "sha256": sha})
    check(r.status == 201 and r.json["received"] == 0 and r.json["size_bytes"] == n and
          r.json["expires_at"] - r.json["updated_at"] == 72 * 3600, "upload created", r)
    uid = r.json["id"]
    r = put(o, uid, 0, data[:third])
    check(r.status == 200 and r.json["received"] == third, "first part kept", r)
    m = o.get("/metrics").body.decode()
    check('privai_admin_uploads{state="unfinished"} 1\n' in m and f'privai_admin_upload_bytes{{of="received"}} {third}\n' in m
          and f'privai_admin_upload_bytes{{of="size"}} {n}\n' in m, "the admin's metrics show the upload and its bytes",
          [x for x in m.splitlines() if "upload" in x])
    r = put(o, uid, 0, data[:third])
    check(r.status == 409 and r.error_code() == "offset_mismatch" and f"kept {third} bytes" in r.json["error"]["message"],
          "a part from the wrong offset is refused, naming where to go on", r)
    for q in ("", "?offset=x", "?offset=-1"):
        r = o.request("PUT", f"/api/v1/uploads/{uid}{q}", raw=b"x", headers=OCTET)
        check(r.status == 422 and r.json["error"]["field"] == "offset", f"bad offset '{q}' 422", r)
    head = put_expect(adm, o, uid, third, n - third + 5)
    check(head.startswith("HTTP/1.1 413") and '"too_large"' in head,
          "a body past the declared size is refused before any of it is sent", head)
    check(o.get(f"/api/v1/uploads/{uid}").json["received"] == third, "and nothing of it counted")

    # a body cut off mid-way: what arrived is kept
    half = (n - third) // 2
    put_cut(adm, o, uid, third, n - third, data[third:third + half])
    got = wait_for(lambda: (lambda j: j["received"] if j["received"] != third else None)(
        o.get(f"/api/v1/uploads/{uid}").json), timeout=10)
    check(got is not None and third < got <= third + half, "a cut-off part keeps what arrived", got)
    kept = o.get(f"/api/v1/uploads/{uid}").json["received"]

    # SIGKILL, and the stored hash state thrown away: the resume hashes the kept bytes again
    adm.stop(signal.SIGKILL)
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    db.execute("UPDATE uploads SET hash_state = NULL WHERE id = ?", (uid,))
    db.commit()
    db.close()
    adm.start()
    o.port = adm.port
    o.login("olga", PW)
    r = o.get(f"/api/v1/uploads/{uid}")
    check(r.status == 200 and r.json["received"] == kept, "after kill -9 the kept bytes are still kept", r)

    # a second sender while one is sending: refused
    s = socket.create_connection(("127.0.0.1", adm.port), timeout=30)
    s.sendall((f"PUT /api/v1/uploads/{uid}?offset={kept} HTTP/1.1\r\nHost: x\r\n"
               f"Cookie: privai_session={o.cookie}\r\nX-CSRF-Token: {o.csrf}\r\n"
               f"Content-Type: application/octet-stream\r\nContent-Length: {n - kept}\r\n\r\n").encode() +
              data[kept:kept + 100])
    # probe with a wrong offset (refused either way, nothing written) until the first sender holds it
    held = wait_for(lambda: put(o, uid, n, b"").error_code() == "busy", timeout=20)
    busy = put(o, uid, kept, b"y")
    check(held and busy.status == 409 and busy.error_code() == "busy", "a second sender meanwhile is refused", busy)
    r = o.request("DELETE", f"/api/v1/uploads/{uid}")
    check(r.status == 409 and r.error_code() == "busy", "and the upload cannot be deleted meanwhile", r)
    s.sendall(data[kept + 100:])
    reply = b""
    while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
        chunk = s.recv(65536)
        if not chunk:
            break
        reply += chunk
    s.close()
    check(reply.startswith(b"HTTP/1.1 201") and sha.encode() in reply and b'"source":"upload"' in reply,
          "the last part makes it a model, with the SHA-256 promised", reply[:400])
    m = [x for x in o.get("/api/v1/models").json["data"] if x["name"] == "resumed"]
    check(m and m[0]["sha256"] == sha and m[0]["size_bytes"] == n and m[0]["architecture"] == "llama" and
          open(m[0]["path"], "rb").read() == data, "registered, read by the GGUF reader, byte for byte", m)
    check(o.get(f"/api/v1/uploads/{uid}").status == 404 and parts_dir(adm) == [], "the upload and its part are gone")


def test_reserved_and_bad(adm, o, tmp):
    r = o.post("/api/v1/uploads", {"name": "held", "size": 1000})
    uid = r.json["id"]
    copy = os.path.join(adm.state, "models", "held-copy.gguf")
    with open(copy, "wb") as f:
        f.write(open(DEMO, "rb").read())
    r = o.post("/api/v1/models", {"name": "held", "path": copy})
    check(r.status == 409 and "reserved by an upload" in r.json["error"]["message"],
          "the name is reserved while the upload is under way", r)
    os.unlink(copy)
    r = o.post("/api/v1/uploads", {"name": "held", "size": 1000})
    check(r.status == 409 and f"upload {uid}" in r.json["error"]["message"], "and not given to a second upload", r)
    r = o.request("DELETE", f"/api/v1/uploads/{uid}")
    check(r.status == 204 and parts_dir(adm) == [] and o.get(f"/api/v1/uploads/{uid}").status == 404,
          "deleted: row and part gone", r)
    check(o.request("DELETE", f"/api/v1/uploads/{uid}").status == 404, "deleting again 404")

    data = open(DEMO, "rb").read()
    r = o.post("/api/v1/uploads", {"name": "wrongsum", "size": len(data), "sha256": "0" * 64})
    uid = r.json["id"]
    r = put(o, uid, 0, data)
    check(r.status == 422 and r.error_code() == "checksum_mismatch", "a whole file with another SHA-256 is refused", r)
    check(o.get(f"/api/v1/uploads/{uid}").status == 404 and parts_dir(adm) == [] and
          not [m for m in o.get("/api/v1/models").json["data"] if m["name"] == "wrongsum"],
          "and removed, no model made")
    junk = os.urandom(4096)
    uid = o.post("/api/v1/uploads", {"name": "junk", "size": len(junk)}).json["id"]
    r = put(o, uid, 0, junk)
    check(r.status == 422 and r.error_code() == "bad_file", "a file that is not GGUF is refused", r)
    check(o.get(f"/api/v1/uploads/{uid}").status == 404 and parts_dir(adm) == [], "and removed")

    ids = []
    for i in range(16):
        r = o.post("/api/v1/uploads", {"name": f"many{i}", "size": 10})
        ids.append(r.json["id"] if r.status == 201 else None)
    r = o.post("/api/v1/uploads", {"name": "many16", "size": 10})
    check(None not in ids and r.status == 409 and r.error_code() == "too_many", "at most 16 uploads at once", r)
    for uid in ids:
        o.request("DELETE", f"/api/v1/uploads/{uid}")
    st = os.statvfs(os.path.join(adm.state, "models"))
    free = st.f_bavail * st.f_frsize
    big = Admin(BUILD, os.path.join(tmp, "big"), PW, extra=("--max-upload-gib", "100000"), ports="19186-19189")
    try:
        bc = big.client()
        bc.login("admin", PW)
        r = bc.post("/api/v1/uploads", {"name": "huge", "size": free + (1 << 30)})
        check(r.status == 507 and r.error_code() == "disk_full" and
              re.search(r"has \d+ bytes free; the upload needs \d+", r.json["error"]["message"]),
              "an upload larger than the free space is refused at once", r)
    finally:
        big.stop()


def test_sweep(adm, o):
    uid = o.post("/api/v1/uploads", {"name": "idle", "size": 100}).json["id"]
    check(put(o, uid, 0, b"z" * 50).status == 200, "an upload half sent")
    keep = o.post("/api/v1/uploads", {"name": "fresh", "size": 100}).json["id"]
    adm.stop()
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    db.execute("UPDATE uploads SET updated_at = updated_at - 73 * 3600 WHERE id = ?", (uid,))
    db.commit()
    db.close()
    open(os.path.join(adm.state, "models", ".part-999"), "wb").write(b"left by a crash")
    adm.start()
    o.port = adm.port
    o.login("olga", PW)
    check(o.get(f"/api/v1/uploads/{uid}").status == 404, "an upload idle past 72 h is removed at start")
    check(parts_dir(adm) == [f".part-{keep}"], "with its part; a part with no row is removed", parts_dir(adm))
    check(o.get(f"/api/v1/uploads/{keep}").status == 200, "a fresh one stays")
    o.request("DELETE", f"/api/v1/uploads/{keep}")


def test_path_hash(adm, o):
    """Models registered by path are hashed in the background; a file whose
    size is no longer the one registered is not."""
    want = hashlib.sha256(open(DEMO, "rb").read()).hexdigest()
    demo = wait_for(lambda: (lambda m: m if m and m[0]["sha256"] else None)(
        [m for m in o.get("/api/v1/models").json["data"] if m["name"] == "demo"]), timeout=30)
    check(demo and demo[0]["sha256"] == want, "the demo model (registered by path at first start) is hashed", demo)
    grow = os.path.join(adm.state, "models", "grow.gguf")
    with open(grow, "wb") as f:
        f.write(open(DEMO, "rb").read())
    r = o.post("/api/v1/models", {"name": "grow", "path": grow})
    check(r.status == 201 and r.json["sha256"] is None, "registered by path: no SHA-256 yet in the reply", r)
    mid = r.json["id"]
    m = wait_for(lambda: (lambda j: j if j["sha256"] else None)(o.get(f"/api/v1/models/{mid}").json), timeout=30)
    check(m and m["sha256"] == want, "and it follows", m)
    adm.stop()
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    db.execute("UPDATE models SET sha256 = NULL WHERE id = ?", (mid,))
    db.commit()
    db.close()
    with open(grow, "ab") as f:
        f.write(b"appended after registration")
    mark = os.path.getsize(adm.log_path)
    adm.start()
    o.port = adm.port
    o.login("olga", PW)
    said = wait_for(lambda: "not the %d registered" % len(open(DEMO, "rb").read()) in
                    open(adm.log_path, errors="replace").read()[mark:], timeout=30)
    check(said and o.get(f"/api/v1/models/{mid}").json["sha256"] is None,
          "a file that grew since it was registered is not hashed, and the log says why")
    o.request("DELETE", f"/api/v1/models/{mid}")


def test_audit(adm):
    a = adm.client()
    a.login("admin", PW)
    acts = [e["action"] for e in a.get("/api/v1/audit?limit=500").json["data"] if e["result"] == "ok"]
    check("model.upload_begin" in acts and "model.upload" in acts and "model.upload_abort" in acts,
          "begin, finish and abort are in the audit log", sorted(set(acts)))


def main():
    tmp = tempfile.mkdtemp(prefix="privai-uploads-")
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=("--demo-model", DEMO, "--max-upload-gib", "1"),
                ports="19180-19185")
    try:
        _, o, v = users(adm, PW)
        test_refusals(adm, o, v)
        test_resume(adm, o)
        test_reserved_and_bad(adm, o, tmp)
        test_sweep(adm, o)
        test_path_hash(adm, o)
        test_audit(adm)
        check(adm.stop() == 0, "the admin exits cleanly (no sanitizer report)", open(adm.log_path).read()[-2000:])
    finally:
        adm.stop()
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
