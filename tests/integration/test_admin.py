"""privai-admin against a live daemon: every route, every role, every
error; models by path, upload and URL; deployments run by the supervisor
with real engines; backups; the audit log; kill -9 mid-write.

usage: python3 tests/integration/test_admin.py BUILD_DIR"""
import hashlib
import http.client
import http.server
import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, Client, check, clean_up, stream_text, summary, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, BUILD, "demo", "privai-demo.gguf")
PW = "correct horse battery staple"


def setup_users(adm):
    a = adm.client()
    r = a.login("admin", PW)
    check(r.status == 200 and r.json["user"]["role"] == "admin", "admin logs in", r)
    for name, role in (("olga", "operator"), ("vic", "viewer"), ("ada", "admin")):
        r = a.post("/api/v1/users", {"name": name, "password": PW, "role": role, "must_change_password": False})
        check(r.status == 201 and r.json["role"] == role, f"create {role} {name}", r)
    o, v = adm.client(), adm.client()
    check(o.login("olga", PW).status == 200 and v.login("vic", PW).status == 200, "operator and viewer log in")
    return a, o, v


def test_basics(adm):
    c = adm.client()
    r = c.get("/api/v1/health")
    check(r.status == 200 and r.json["status"] == "ok", "health is public", r)
    r = c.get("/readyz")
    check(r.status == 200 and r.json == {"database": "ok", "supervisor": "ok"}, "readyz", r)
    r = c.get("/api/v1/nothing")
    check(r.status == 404 and r.error_code() == "not_found", "unknown path 404 JSON", r)
    r = c.request("PUT", "/api/v1/health")
    check(r.status == 405 and r.error_code() == "method_not_allowed", "wrong method 405", r)
    r = c.get("/api/v1/models")
    check(r.status == 401 and r.error_code() == "unauthenticated", "no credentials 401", r)
    r = c.get("/metrics")
    check(r.status == 401, "metrics need a login or token", r)


def test_auth(adm, a):
    c = adm.client()
    r = c.post("/api/v1/auth/login", {"name": "admin", "password": "wrong password here"})
    check(r.status == 401 and r.error_code() == "bad_credentials", "wrong password 401", r)
    r = c.post("/api/v1/auth/login", {"name": "nobody", "password": "wrong password here"})
    check(r.status == 401 and r.json["error"]["message"] == "wrong user name or password", "unknown user, same answer", r)
    r = c.post("/api/v1/auth/login", {"name": 5, "password": []})
    check(r.status == 422 and r.json["error"]["field"] == "name", "login with wrong types 422", r)
    r = c.post("/api/v1/auth/login", raw=b"{not json", headers={"Content-Type": "application/json"})
    check(r.status == 400 and r.error_code() == "bad_json", "bad JSON 400", r)
    r = c.login("admin", PW)
    sc = r.headers.get("Set-Cookie", "")
    check("HttpOnly" in sc and "SameSite=Strict" in sc and "Secure" not in sc, "cookie flags (no Secure on plain HTTP)", sc)
    r = c.get("/api/v1/auth/me")
    check(r.status == 200 and r.json["via"] == "session" and r.json["csrf_token"] == c.csrf, "me", r)
    # CSRF: a change with the cookie but no header is refused and logged
    r = c.post("/api/v1/users", {"name": "csrfvictim", "password": PW, "role": "viewer"}, csrf=False)
    check(r.status == 403 and r.error_code() == "csrf", "no CSRF header 403", r)
    r = c.post("/api/v1/users", {"name": "csrfvictim", "password": PW, "role": "viewer"},
               headers={"X-CSRF-Token": "forged"}, csrf=False)
    check(r.status == 403 and r.error_code() == "csrf", "wrong CSRF token 403", r)
    r = a.get("/api/v1/users")
    check(all(u["name"] != "csrfvictim" for u in r.json["data"]), "nothing stored without CSRF")
    r = a.get("/api/v1/audit?result=refused&action=user.create")
    check(r.status == 200 and any(e["detail"]["status"] == 403 and e["detail"]["request"] == "/api/v1/users"
                                  for e in r.json["data"]), "CSRF refusal audited under user.create", r)
    # logout: the cookie is dead afterwards (a replayed cookie is refused)
    old = c.cookie
    r = c.post("/api/v1/auth/logout")
    check(r.status == 204, "logout", r)
    c.cookie, c.csrf = old, None
    r = c.get("/api/v1/auth/me")
    check(r.status == 401, "replayed cookie after logout 401", r)
    # lockout: five wrong passwords lock even the right one out
    a.post("/api/v1/users", {"name": "lucy", "password": PW, "role": "viewer"})
    for _ in range(5):
        adm.client().post("/api/v1/auth/login", {"name": "lucy", "password": "not the password"})
    r = adm.client().post("/api/v1/auth/login", {"name": "lucy", "password": PW})
    check(r.status == 429 and r.error_code() == "account_locked", "locked after 5 failures", r)
    uid = [u for u in a.get("/api/v1/users").json["data"] if u["name"] == "lucy"][0]["id"]
    r = a.request("PATCH", f"/api/v1/users/{uid}", {"unlock": True})
    check(r.status == 200 and r.json["locked_until"] is None, "admin unlocks", r)
    check(adm.client().login("lucy", PW).status == 200, "unlocked user logs in")
    # password change: current password needed, new one works, old one not
    lc = adm.client()
    lc.login("lucy", PW)
    r = lc.post("/api/v1/auth/password", {"current_password": "wrong one!!", "new_password": "another long one"})
    check(r.status == 403, "password change needs the current password", r)
    r = lc.post("/api/v1/auth/password", {"current_password": PW, "new_password": "another long one"})
    check(r.status == 200 and r.json == {"sessions_ended": 1, "tokens_revoked": []},
          "password changed: lucy's other session ended, this one kept", r)
    check(adm.client().login("lucy", PW).status == 401 and adm.client().login("lucy", "another long one").status == 200,
          "new password only")


def test_users(adm, a, o, v):
    bad = [
        ({"name": "x'; DROP TABLE users;--", "password": PW, "role": "viewer"}, "name"),
        ({"name": "n" * 65, "password": PW, "role": "viewer"}, "name"),
        ({"name": "short", "password": "short", "role": "viewer"}, "password"),
        ({"name": "badrole", "password": PW, "role": "root"}, "role"),
        ({"name": 7, "password": PW, "role": "viewer"}, "name"),
        ({"name": "typo", "password": PW, "role": "viewer", "rol": "admin"}, "rol"),
        ({"name": "ctl\u0001x", "password": PW, "role": "viewer"}, "name"),
    ]
    for body, field in bad:
        r = a.post("/api/v1/users", body)
        check(r.status == 422 and r.json["error"].get("field") == field, f"bad user refused on {field}", r)
    r = a.get("/api/v1/users")
    check(r.status == 200 and len(r.json["data"]) >= 4, "users table intact after SQL metacharacters", r)
    r = a.post("/api/v1/users", {"name": "olga", "password": PW, "role": "viewer"})
    check(r.status == 409, "duplicate user 409", r)
    me = a.get("/api/v1/auth/me").json["user"]["id"]
    r = a.request("DELETE", f"/api/v1/users/{me}")
    check(r.status == 409 and r.error_code() == "self", "cannot delete self", r)
    r = a.get("/api/v1/users/999999")
    check(r.status == 404, "unknown user 404", r)
    r = a.get("/api/v1/users/abc")
    check(r.status == 404, "non-numeric id 404", r)
    # demotion ends the user's sessions
    t = adm.client()
    t.login("admin", PW)
    a.post("/api/v1/users", {"name": "tmpadmin", "password": PW, "role": "admin"})
    tc = adm.client()
    tc.login("tmpadmin", PW)
    tid = tc.get("/api/v1/auth/me").json["user"]["id"]
    r = a.request("PATCH", f"/api/v1/users/{tid}", {"role": "viewer"})
    check(r.status == 200 and r.json["role"] == "viewer", "demote", r)
    check(tc.get("/api/v1/auth/me").status == 401, "demotion ends sessions")
    r = a.request("DELETE", f"/api/v1/users/{tid}")
    check(r.status == 204, "delete user", r)


def test_tokens(adm, a, o, v):
    r = a.post("/api/v1/tokens", {"name": "ci", "scopes": ["read"], "expires_in_days": 1})
    check(r.status == 201 and r.json["token"].startswith("pat_"), "token created", r)
    tok, tid = r.json["token"], r.json["id"]
    r = a.get("/api/v1/tokens")
    check(r.status == 200 and all("token" not in t for t in r.json["data"]), "token text never listed", r)
    b = Client(adm.port)
    b.token = tok
    check(b.get("/api/v1/models").status == 200, "read token reads")
    used = [t for t in a.get("/api/v1/tokens").json["data"] if t["id"] == tid][0]["last_used_at"]
    check(used is not None and abs(used - time.time()) < 120, "its first use is recorded", used)
    r = b.post("/api/v1/models", {"name": "x", "path": "/x.gguf"})
    check(r.status == 403, "read token cannot write (scope caps an admin)", r)
    r = o.post("/api/v1/tokens", {"name": "esc", "scopes": ["admin"]})
    check(r.status == 403, "operator cannot mint an admin token", r)
    for body, field in (({"name": "t", "scopes": ["root"]}, "scopes"), ({"name": "t", "scopes": "read"}, "scopes"),
                        ({"name": "t", "scopes": ["read"], "expires_in_days": 0}, "expires_in_days"),
                        ({"name": "t", "scopes": ["read"], "expires_in_days": "7"}, "expires_in_days"),
                        # beyond int64: range-checked before any cast (UBSan stopped the daemon here)
                        ({"name": "t", "scopes": ["read"], "expires_in_days": 1e300}, "expires_in_days")):
        r = a.post("/api/v1/tokens", body)
        check(r.status == 422 and r.json["error"]["field"] == field, f"bad token {field}", r)
    r = v.request("DELETE", f"/api/v1/tokens/{tid}")
    check(r.status == 404, "someone else's token is not found", r)
    r = a.request("DELETE", f"/api/v1/tokens/{tid}")
    check(r.status == 204, "revoke", r)
    check(b.get("/api/v1/models").status == 401, "revoked token 401")
    r = a.request("DELETE", f"/api/v1/tokens/{tid}")
    check(r.status == 409, "revoke twice 409", r)
    # an expired token (expiry moved into the past in the store) is refused
    r = a.post("/api/v1/tokens", {"name": "old", "scopes": ["read"]})
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    db.execute("UPDATE api_tokens SET expires_at = 1 WHERE id = ?", (r.json["id"],))
    db.commit()
    db.close()
    b.token = r.json["token"]
    r = b.get("/api/v1/models")
    check(r.status == 401 and "expired" in r.json["error"]["message"], "expired token 401", r)
    b.token = "pat_" + "A" * 43
    check(b.get("/api/v1/models").status == 401, "forged token 401")


def test_settings_backups(adm, a, o, v):
    r = v.get("/api/v1/settings")
    check(r.status == 200 and r.json["cluster_name"] == "privai", "settings readable", r)
    r = a.request("PUT", "/api/v1/settings/cluster_name", {"value": "lab 1"})
    check(r.status == 200 and r.json["cluster_name"] == "lab 1", "setting changed", r)
    r = a.request("PUT", "/api/v1/settings/cluster_name", {"value": "<script>"})
    check(r.status == 422, "bad setting value 422", r)
    r = a.request("PUT", "/api/v1/settings/no_such", {"value": "1"})
    check(r.status == 404, "unknown setting 404", r)
    r = o.request("PUT", "/api/v1/settings/cluster_name", {"value": "x"})
    check(r.status == 403, "operator cannot change settings", r)
    r = a.post("/api/v1/system/backups")
    check(r.status == 201 and r.json["name"].endswith(".db"), "backup created", r)
    name = r.json["name"]
    r = a.get("/api/v1/system/backups")
    check(r.status == 200 and any(b["name"] == name for b in r.json["data"]), "backup listed", r)
    r = a.get(f"/api/v1/system/backups/{name}")
    check(r.status == 200 and r.body[:16] == b"SQLite format 3\0", "backup downloads as sqlite", r.status)
    blob = r.body
    a.post("/api/v1/users", {"name": "afterbackup", "password": PW, "role": "viewer"})
    for bad in ("../privai.db", "privai.db/../../x.db", ".hidden.db", "x"):
        r = a.post("/api/v1/system/restore", {"name": bad})
        check(r.status == 404, f"restore refuses '{bad}'", r)
    r = a.post("/api/v1/system/restore", {"name": name})
    check(r.status == 204, "restore", r)
    a.login("admin", PW)  # sessions came back from the backup too; log in afresh
    names = [u["name"] for u in a.get("/api/v1/users").json["data"]]
    check("afterbackup" not in names and "olga" in names, "restore brought the backup's users back", names)
    r = a.get("/api/v1/audit?action=backup.restore&result=ok")
    check(r.status == 200 and len(r.json["data"]) == 1, "restore is in the restored audit log", r)
    r = a.request("DELETE", f"/api/v1/system/backups/{name}")
    check(r.status == 204, "backup deleted", r)
    test_backup_upload(adm, a, o, blob)
    test_backup_schedule(adm, a)


def test_backup_schedule(adm, a):
    """Scheduled backups: due backup_every_hours after the newest scheduled
    one (three from 2020 make one due now); the newest backup_keep stay."""
    for key, bad in (("backup_every_hours", "-1"), ("backup_every_hours", "9000"), ("backup_every_hours", "x"),
                     ("backup_keep", "0")):
        r = a.request("PUT", f"/api/v1/settings/{key}", {"value": bad})
        check(r.status == 422, f"{key} = {bad!r} refused", r)
    check(a.get("/api/v1/settings").json["backup_every_hours"] == "24", "backups every 24 h by default")
    bdir = os.path.join(adm.state, "backups")
    old = [f"privai-auto-2020010{d}-000000.db" for d in (1, 2, 3)]
    for n in old:
        with open(os.path.join(bdir, n), "wb") as f:
            f.write(b"an old scheduled backup")
    manual = a.post("/api/v1/system/backups").json["name"]
    r = a.request("PUT", "/api/v1/settings/backup_keep", {"value": "2"})
    check(r.status == 200 and r.json["backup_keep"] == "2", "keep 2 scheduled backups", r)

    def autos():
        return sorted(b["name"] for b in a.get("/api/v1/system/backups").json["data"] if b["name"].startswith("privai-auto-"))
    got = wait_for(lambda: (lambda x: x if len(x) == 2 and x[0] == old[2] else None)(autos()), timeout=20)
    check(got is not None and got[1] > old[2], "one made now (due a day after 2020-01-03), the two oldest removed", autos())
    if got:
        r = a.get(f"/api/v1/system/backups/{got[1]}")
        check(r.status == 200 and r.body[:16] == b"SQLite format 3\0", "the scheduled backup is the store", r.status)
    check(any(b["name"] == manual for b in a.get("/api/v1/system/backups").json["data"]),
          "a backup made by hand is never removed by the schedule")
    ev = a.get("/api/v1/audit?actor=system&limit=50").json["data"]
    check(any(e["action"] == "backup.create" and e["detail"] == {"scheduled": True} for e in ev) and
          sum(e["action"] == "backup.delete" for e in ev) == 2, "both are in the audit log, by system",
          [(e["action"], e["target"]) for e in ev[:5]])
    a.request("DELETE", f"/api/v1/system/backups/{manual}")


def test_backup_upload(adm, a, o, blob):
    """A backup from elsewhere: streamed in, checked as a restore checks, kept, then restorable."""
    import hashlib
    import sqlite3
    bdir = os.path.join(adm.state, "backups")
    before = sorted(os.listdir(bdir))
    up = "/api/v1/system/backups/upload"
    octet = {"Content-Type": "application/octet-stream"}
    tmp = os.path.join(adm.state, "..", "not-privai.db")
    con = sqlite3.connect(tmp)
    con.execute("CREATE TABLE foo (x)")
    con.execute("PRAGMA user_version = 1")
    con.commit()
    con.close()
    future = os.path.join(adm.state, "..", "future.db")
    with open(future, "wb") as f:
        f.write(blob)
    con = sqlite3.connect(future)
    con.execute("PRAGMA user_version = 99")
    con.commit()
    con.close()
    for body, query, code, words in (
            (b"", "", "empty", "empty"),
            (b"SQLite format 3\0" + b"\xff" * 4096, "", "bad_file", "not a privai backup: the upload"),
            (b"'; DROP TABLE users; --" * 100, "", "bad_file", "not a privai backup"),
            (open(tmp, "rb").read(), "", "bad_file", "not a privai store"),
            (open(future, "rb").read(), "", "bad_file", "schema version 99"),
            (blob, "?sha256=" + "0" * 64, "checksum_mismatch", "SHA-256"),
            (blob, "?sha256=../../x", "invalid_field", "64 lowercase hex")):
        r = a.request("POST", up + query, raw=body, headers=octet)
        check(r.status == 422 and r.error_code() == code and words in r.json["error"]["message"],
              f"backup upload refused: {code} ({words})", r)
    r = o.request("POST", up, raw=blob, headers=octet)
    check(r.status == 403, "an operator may not upload a backup", r)
    r = a.request("POST", up, raw=blob, headers=octet, csrf=False)
    check(r.status == 403, "no CSRF token: refused", r)
    check(sorted(os.listdir(bdir)) == before, "after the refusals: no file added, nothing partial left",
          sorted(os.listdir(bdir)))
    sha = hashlib.sha256(blob).hexdigest()
    r = a.request("POST", up + "?sha256=" + sha, raw=blob, headers=octet)
    check(r.status == 201 and r.json["name"].startswith("privai-upload-") and r.json["sha256"] == sha and
          r.json["size_bytes"] == len(blob), "a downloaded backup uploads back", r)
    name = r.json.get("name")
    check(sorted(os.listdir(bdir)) == sorted(before + [name]), "only the backup itself was added",
          sorted(os.listdir(bdir)))
    a.post("/api/v1/users", {"name": "afterupload", "password": PW, "role": "viewer"})
    r = a.post("/api/v1/system/restore", {"name": name})
    check(r.status == 204, "restore from the uploaded backup", r)
    a.login("admin", PW)
    names = [u["name"] for u in a.get("/api/v1/users").json["data"]]
    check("afterupload" not in names and "olga" in names, "the uploaded backup's users are back", names)
    r = a.get("/api/v1/audit?action=backup.upload")
    check(r.status == 200, "the audit log is readable after the restore", r)
    a.request("DELETE", f"/api/v1/system/backups/{name}")


class FileServer:
    """A loopback HTTP server for one directory (model downloads)."""

    def __init__(self, directory):
        handler = lambda *args, **kw: http.server.SimpleHTTPRequestHandler(*args, directory=directory, **kw)  # noqa
        http.server.SimpleHTTPRequestHandler.log_message = lambda *a: None
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


def upload_raw(port, cookie, csrf, path, data, declared_len=None, close_early=False):
    s = socket.create_connection(("127.0.0.1", port))
    n = declared_len if declared_len is not None else len(data)
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nCookie: privai_session={cookie}\r\nX-CSRF-Token: {csrf}\r\n"
            f"Content-Type: application/octet-stream\r\nContent-Length: {n}\r\n\r\n")
    s.sendall(head.encode() + data)
    if close_early:
        s.close()
        return None
    resp = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        resp += chunk
    s.close()
    return resp


def test_models(adm, a, o, v, roots):
    root = roots[0]
    shutil.copy(DEMO, os.path.join(root, "demo.gguf"))
    with open(os.path.join(root, "junk.gguf"), "wb") as f:
        f.write(b"GGUF" + os.urandom(100))
    os.symlink("/etc/passwd", os.path.join(root, "escape.gguf"))
    r = o.post("/api/v1/models", {"name": "demo", "path": os.path.join(root, "demo.gguf")})
    check(r.status == 201 and r.json["architecture"] == "llama" and r.json["n_layer"] == 4 and
          r.json["quantization"] == "Q8_0" and r.json["source"] == "path", "register by path with metadata", r)
    demo_id = r.json["id"]
    want = hashlib.sha256(open(DEMO, "rb").read()).hexdigest()
    m = wait_for(lambda: (lambda j: j if j["sha256"] else None)(o.get(f"/api/v1/models/{demo_id}").json), timeout=30)
    check(m and m["sha256"] == want, "a model registered by path gets its SHA-256 in the background", m)
    bad_paths = [os.path.join(root, "..", "..", "etc", "passwd"), os.path.join(root, "../../../etc/x.gguf"),
                 "/etc/passwd", os.path.join(root, "escape.gguf"), os.path.join(root, "junk.gguf"),
                 os.path.join(root, "missing.gguf"), "relative/demo.gguf", os.path.join(root, "demo.gguf\n")]
    for p in bad_paths:
        r = o.post("/api/v1/models", {"name": "bad", "path": p})
        check(r.status == 422 and r.json["error"]["field"] in ("path",), f"path refused: {p!r}", r)
    # a valid GGUF outside every model root, reached directly, by "..", and by a symlink inside a root:
    # only the root check stands in the way, so these fail if it is broken
    outside = os.path.join(os.path.dirname(root), "outside")
    os.makedirs(outside, exist_ok=True)
    shutil.copy(DEMO, os.path.join(outside, "real.gguf"))
    os.symlink(os.path.join(outside, "real.gguf"), os.path.join(root, "link-out.gguf"))
    os.makedirs(root + "-sibling", exist_ok=True)
    shutil.copy(DEMO, os.path.join(root + "-sibling", "real.gguf"))
    for p in (os.path.join(outside, "real.gguf"), os.path.join(root, "..", "outside", "real.gguf"),
              os.path.join(root, "link-out.gguf"), os.path.join(root + "-sibling", "real.gguf")):
        r = o.post("/api/v1/models", {"name": "outside", "path": p})
        check(r.status == 422 and "outside the model directories" in r.json["error"]["message"],
              f"valid GGUF outside the roots refused: {p!r}", r)
    r = o.post("/api/v1/models", {"name": "demo", "path": os.path.join(root, "demo.gguf")})
    check(r.status == 409, "duplicate model name 409", r)
    r = o.post("/api/v1/models", {"name": "../evil", "path": os.path.join(root, "demo.gguf")})
    check(r.status == 422 and r.json["error"]["field"] == "name", "model name with a slash refused", r)
    r = v.post("/api/v1/models", {"name": "v", "path": os.path.join(root, "demo.gguf")})
    check(r.status == 403, "viewer cannot register", r)
    r = v.get(f"/api/v1/models/{demo_id}")
    check(r.status == 200 and r.json["n_head_kv"] == 4 and "chat_template" in r.json, "model details", r)
    r = v.get(f"/api/v1/models/{demo_id}/sizing?gpu=H100-80GB&context=2048&concurrency=4")
    kv = 2 * 4 * 4 * 32 * 2
    check(r.status == 200 and r.json["gpus"] == 1 and r.json["kv_bytes_per_token"] == kv, "sizing a registered model", r)
    cores = [n for n in v.get("/api/v1/nodes").json["data"] if n["is_self"]][0]["cpu_cores"]
    cpu = r.json.get("cpu") or {}
    check(cpu.get("ranks") == 1 and cpu.get("placement") == {"kind": "cpu", "threads": cores} and
          "one node holds it" in cpu.get("why", ""), "sizing: on CPUs this node holds it, with its cores", cpu)
    check(r.json.get("placement", "absent") is None and "this node has fewer than 1 whole GPUs" in r.json["placement_why"],
          "sizing: no GPU placement on a node without GPUs, and why", (r.json.get("placement"), r.json.get("placement_why")))
    r = v.get(f"/api/v1/models/{demo_id}/sizing?gpu=H100-80GB&context=2048&concurrency=65536")
    cpu = r.json.get("cpu") or {}
    check(r.status == 200 and cpu.get("ranks") == 0 and "placement" not in cpu and
          "does not fit in the memory of 1 node" in cpu.get("why", ""),
          "sizing: 256 GiB of KV cache does not fit this node's memory", cpu)
    r = v.get(f"/api/v1/models/{demo_id}/sizing?gpu=Z80")
    check(r.status == 422 and r.json["error"]["field"] == "gpu", "sizing: unknown GPU 422", r)
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", "parameters": 70_000_000_000, "bits_per_weight": 16,
                                  "layers": 80, "heads": 64, "kv_heads": 8, "head_dim": 128, "context": 8192,
                                  "concurrency": 16})
    check(r.status == 200 and r.json["gpus"] == 4 and r.json["nodes"] == 1, "sizing form: 70B fp16 on H100", r)
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", "layers": 80, "heads": 64, "head_dim": 128})
    check(r.status == 422, "sizing form needs a size", r)
    r = v.get("/api/v1/sizing/gpus")
    types = {t["name"]: t for t in r.json.get("data", [])} if r.status == 200 else {}
    check({"L40S-48GB", "H100-PCIe-80GB", "H100-NVL-94GB", "L4-24GB", "A10-24GB", "B200-180GB"} <= set(types) and
          types["L40S-48GB"]["interconnect"] == "pcie" and types["H100-80GB"]["interconnect"] == "nvlink" and
          types["A10-24GB"]["gpus_per_node"] == 4, "sizing: the GPU types with their links", r)
    r = v.get(f"/api/v1/models/{demo_id}/sizing?gpu=Z80")
    check(r.status == 422 and "L40S-48GB" in r.json["error"]["message"], "sizing: an unknown GPU lists the known", r)
    # 70B at full context on L40S: 8 GPUs of one server, warned about PCIe; on 4-GPU A10 servers, 4 nodes
    shape70 = {"parameters": 70_600_000_000, "bits_per_weight": 16, "layers": 80, "heads": 64, "kv_heads": 8,
               "head_dim": 128, "max_context": 131072}
    r = v.post("/api/v1/sizing", {"gpu": "L40S-48GB", **shape70})
    check(r.status == 200 and r.json["gpus"] == 8 and r.json["interconnect"] == "pcie" and
          "over PCIe" in (r.json.get("warning") or ""), "sizing form: 70B on L40S warns about PCIe", r)
    r = v.post("/api/v1/sizing", {"gpu": "A10-24GB", **shape70, "context": 32768})
    check(r.status == 200 and (r.json["gpus"], r.json["nodes"], r.json["gpus_per_node"]) == (16, 4, 4) and
          "Across 4 nodes" in r.json["warning"], "sizing form: A10 servers hold 4 GPUs", r)
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", **shape70, "context": 32768})
    check(r.status == 200 and r.json["gpus"] == 2 and r.json["warning"] is None, "sizing form: 2 H100s, no warning", r)
    # 10 of 16 GPUs over 2 servers: a 40-head MHA model at 200 sequences of 4k tokens
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", "weight_bytes": 26_000_000_000, "layers": 40, "heads": 40,
                                  "kv_heads": 40, "head_dim": 128, "context": 4096, "concurrency": 200})
    check(r.status == 200 and (r.json["gpus"], r.json["nodes"], r.json["gpus_per_node"]) == (10, 2, 5) and
          r.json["placement"] is None and "fewer than 5 whole GPUs" in r.json["placement_why"],
          "sizing form: 10 GPUs are 5 on each of 2 nodes", r)
    # gpt-oss-120b's sliding layers hold 128 tokens: 18 full layers at 128k, 18 at 128
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", "weight_bytes": 65_283_502_899, "layers": 36, "heads": 64,
                                  "kv_heads": 8, "head_dim": 64, "context": 131072, "window_layers": 18,
                                  "window": 128})
    check(r.status == 200 and r.json["gpus"] == 1 and
          r.json["kv_bytes_total"] == 2 * 8 * 64 * 2 * (18 * 131072 + 18 * 128), "sizing form: windowed layers", r)
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", **shape70, "window_layers": 18})
    check(r.status == 422 and r.json["error"]["field"] == "window", "sizing form: window_layers needs a window", r)
    r = v.post("/api/v1/sizing", {"gpu": "H100-80GB", **shape70, "window_layers": 81, "window": 8})
    check(r.status == 422 and r.json["error"]["field"] == "window_layers", "sizing form: window_layers beyond the layers", r)

    # upload: checksum verified, streamed, nothing left on failure
    data = open(DEMO, "rb").read()
    sha = hashlib.sha256(data).hexdigest()
    models_dir = os.path.join(adm.state, "models")
    r = o.post(f"/api/v1/models/upload?name=up1&sha256={sha}", raw=data,
               headers={"Content-Type": "application/octet-stream"})
    check(r.status == 201 and r.json["sha256"] == sha and r.json["source"] == "upload", "upload with checksum", r)
    up_id = r.json["id"]
    check(os.path.exists(os.path.join(models_dir, "up1.gguf")), "upload in the model directory")
    r = o.post(f"/api/v1/models/upload?name=up2&sha256={'0' * 64}", raw=data)
    check(r.status == 422 and r.error_code() == "checksum_mismatch", "wrong checksum refused", r)
    r = o.post("/api/v1/models/upload?name=up3", raw=b"GGUF" + b"\0" * 1000)
    check(r.status == 422 and r.error_code() == "bad_file", "garbage upload refused", r)
    for bad in ("../up4", "%2e%2e%2fup4", ".hidden", ""):
        r = o.post(f"/api/v1/models/upload?name={bad}", raw=data[:100])
        check(r.status == 422, f"upload name refused: {bad!r}", r)
    r = v.post("/api/v1/models/upload?name=up5", raw=data[:100])
    check(r.status == 403, "viewer cannot upload", r)
    upload_raw(adm.port, o.cookie, o.csrf, "/api/v1/models/upload?name=up6", data[:50000],
               declared_len=len(data), close_early=True)
    left = wait_for(lambda: not [f for f in os.listdir(models_dir) if f.startswith(".upload-")], timeout=10)
    check(left, "an aborted upload leaves no partial file", os.listdir(models_dir))
    names = [m["name"] for m in v.get("/api/v1/models").json["data"]]
    check(names == ["demo", "up1"], "failed uploads stored nothing", names)

    # download by URL from an allowed host only
    srv = FileServer(root)
    try:
        url = f"http://127.0.0.1:{srv.port}/demo.gguf"
        r = o.post("/api/v1/models", {"name": "dl1", "url": url})
        check(r.status == 403 and r.error_code() == "host_not_allowed", "URL host not allowed by default", r)
        r = a.request("PUT", "/api/v1/settings/model_url_hosts", {"value": f"127.0.0.1:{srv.port}"})
        check(r.status == 200, "allow the file server", r)
        r = o.post("/api/v1/models", {"name": "dl1", "url": url, "sha256": sha})
        check(r.status == 202 and r.json["state"] == "importing", "download started", r)
        dl = r.json["id"]
        m = wait_for(lambda: (lambda j: j if j["state"] != "importing" else None)(v.get(f"/api/v1/models/{dl}").json))
        check(m and m["state"] == "ready" and m["sha256"] == sha and m["n_layer"] == 4, "download ready, checked", m)
        r = o.post("/api/v1/models", {"name": "dl2", "url": f"http://127.0.0.1:{srv.port}/missing.gguf"})
        m = wait_for(lambda: (lambda j: j if j["state"] != "importing" else None)(
            v.get(f"/api/v1/models/{r.json['id']}").json))
        check(m and m["state"] == "failed" and "404" in (m["error"] or ""), "a failed download says why", m)
        r = o.request("DELETE", f"/api/v1/models/{m['id']}")
        check(r.status == 204, "a failed download can be deleted", r)
        r = o.post("/api/v1/models", {"name": "dl3", "url": "file:///etc/passwd"})
        check(r.status == 422 and r.json["error"]["field"] == "url", "file:// URL refused", r)
    finally:
        srv.close()
    return demo_id, up_id


def deployment(c, dep_id):
    return c.get(f"/api/v1/deployments/{dep_id}").json


def engine_chat(port, key, content="hello"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    import json as _j
    h = {"Content-Type": "application/json"}
    if key:
        h["Authorization"] = "Bearer " + key
    conn.request("POST", "/v1/completions", body=_j.dumps({"prompt": content, "max_tokens": 4}), headers=h)
    r = conn.getresponse()
    r.read()
    conn.close()
    return r.status


def numa_nodes():
    """Each CPU's NUMA node, as sysfs lists them ({} without NUMA)."""
    base, nodes = "/sys/devices/system/node", {}
    for name in sorted(os.listdir(base)) if os.path.isdir(base) else []:
        if not (name.startswith("node") and name[4:].isdigit()):
            continue
        with open(os.path.join(base, name, "cpulist")) as f:
            for part in f.read().strip().split(","):
                lo, _, hi = part.partition("-")
                if lo.isdigit():
                    nodes.update({c: int(name[4:]) for c in range(int(lo), int(hi or lo) + 1)})
    return nodes


def test_deployments(adm, a, o, v, demo_id, up_id):
    for body, field in (({"name": "d", "model": demo_id, "placement": {"kind": "tpu"}}, "placement.kind"),
                        ({"name": "d", "model": demo_id, "placement": {"kind": "gpu"}}, "placement.gpus"),
                        ({"name": "d", "model": demo_id, "placement": {"kind": "cpu", "threads": 100000}}, "threads"),
                        ({"name": "d", "model": 999}, "model"),
                        ({"name": "d", "model": 1e300}, "model"), ({"name": "d", "model": 1.5}, "model"),
                        ({"name": "d", "model": demo_id, "options": {"chat_template": "nope"}}, "options.chat_template"),
                        ({"name": "d", "model": demo_id, "options": {"ctx": -1}}, "options.ctx"),
                        ({"name": "d/x", "model": demo_id}, "name")):
        r = o.post("/api/v1/deployments", body)
        check(r.status == 422 and r.json["error"]["field"] == field, f"bad deployment refused on {field}", r)
    r = o.post("/api/v1/deployments", {"name": "chat", "model": "up1",
                                       "placement": {"kind": "cpu", "threads": 1, "gpus": [0]}})
    check(r.status == 422 and r.json["error"]["field"] == "gpus", "GPUs in a CPU placement are refused", r)
    self_name = [n["name"] for n in o.get("/api/v1/nodes").json["data"] if n["is_self"]][0]
    r = o.post("/api/v1/deployments", {"name": "chat", "model": "up1",
                                       "placement": {"kind": "cpu", "threads": 1, "node": self_name},
                                       "options": {"chat_template": "chatml", "ctx": 512, "parallel": 2}})
    check(r.status == 201 and r.json["api_key"].startswith("sk-") and r.json["state"] == "pending", "deployment created", r)
    dep, key, port = r.json["id"], r.json["api_key"], r.json["port"]
    d = wait_for(lambda: (lambda j: j if j["state"] in ("ready", "failed") else None)(deployment(v, dep)), timeout=90)
    check(d and d["state"] == "ready" and d["pid"] > 0, "deployment ready", d)
    if d:
        # one thread of its own: a child process runs with that affinity
        allowed = None
        with open(f"/proc/{d['pid']}/status") as f:
            allowed = [ln.split(":", 1)[1].strip() for ln in f if ln.startswith("Cpus_allowed_list:")]
        check(d.get("cpus") is not None and d["cpus"].isdigit() and allowed == [d["cpus"]],
              "a placement with one thread runs on one CPU of its own", (d.get("cpus"), allowed))
        # its memory from that CPU's NUMA node where there are several
        # (one node: nothing to choose, the default policy)
        nodes = numa_nodes()
        want = {f"bind:{nodes[int(d['cpus'])]}"} if len(set(nodes.values())) > 1 else {"default"}
        if d.get("cpus", "").isdigit() and os.path.exists(f"/proc/{d['pid']}/numa_maps"):
            with open(f"/proc/{d['pid']}/numa_maps") as f:
                policies = {ln.split()[1] for ln in f if len(ln.split()) > 1}
            check(policies == want, f"its memory policy is {want} on {len(set(nodes.values()))} NUMA node(s)",
                  policies)
        else:
            print("SKIP: no numa_maps here: the engine's memory policy is not checked")
    r = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions",
               {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5})
    check(r.status == 200 and r.json["choices"][0]["message"]["role"] == "assistant", "chat through the admin", r)
    r = v.post(f"/api/v1/deployments/{dep}/v1/chat/completions", {"messages": []})
    check(r.status == 403, "viewer cannot use the proxy", r)
    r = o.get(f"/api/v1/deployments/{dep}/v1/models")
    check(r.status == 200 and [m["id"] for m in r.json["data"]] == ["chat"], "GET /v1/models through the admin", r)
    test_stream(o, dep)
    check(engine_chat(port, key) == 200, "the endpoint takes the deployment's key")
    check(engine_chat(port, None) == 401 and engine_chat(port, "sk-wrong") == 401, "the endpoint refuses others")
    r = o.post(f"/api/v1/deployments/{dep}/keys", {"name": "app2"})
    check(r.status == 201 and r.json["api_key"].startswith("sk-"), "second key", r)
    k2, k2id = r.json["api_key"], r.json["id"]
    check(wait_for(lambda: engine_chat(port, k2) == 200, timeout=10), "the new key works at once (SIGHUP)")
    r = o.request("DELETE", f"/api/v1/deployments/{dep}/keys/{k2id}")
    check(r.status == 204, "key revoked", r)
    check(wait_for(lambda: engine_chat(port, k2) == 401, timeout=10), "revoked key refused")
    r = o.get(f"/api/v1/deployments/{dep}/keys")
    check(r.status == 200 and len(r.json["data"]) == 2 and all("key" not in k for k in r.json["data"]), "keys listed", r)
    r = o.get(f"/api/v1/deployments/{dep}/logs?lines=5")
    check(r.status == 200 and b"ready" in r.body, "engine log", r)
    r = v.get(f"/api/v1/deployments/{dep}/metrics")
    check(r.status == 200 and b"vllm:num_requests_running" in r.body, "engine metrics through the admin", r.status)
    r = o.request("DELETE", f"/api/v1/models/{up_id}")
    check(r.status == 409 and r.error_code() == "in_use", "a deployed model cannot be deleted", r)

    # a crash: state failed with the reason, restarted after the backoff
    os.kill(d["pid"], signal.SIGKILL)
    f = wait_for(lambda: (lambda j: j if j["state"] == "failed" else None)(deployment(v, dep)), timeout=10)
    check(f and "signal 9" in f["reason"] and f["restarts"] == 1, "a killed engine is reported", f)
    d2 = wait_for(lambda: (lambda j: j if j["state"] == "ready" else None)(deployment(v, dep)), timeout=60)
    check(d2 and d2["pid"] != d["pid"], "and restarted", d2)
    check(engine_chat(port, key) == 200, "the key survives a restart")
    # stop, start, change options (a restart), delete
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "stopped"})
    # the reply already says the engine is on its way down, not "ready"
    check(r.status == 200 and r.json["desired"] == "stopped" and r.json["state"] in ("stopping", "stopped"),
          "stop asked", r)
    s = wait_for(lambda: (lambda j: j if j["state"] == "stopped" else None)(deployment(v, dep)), timeout=40)
    check(s and s["pid"] is None, "stopped", s)
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "sideways"})
    check(r.status == 422, "bad desired state 422", r)
    o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "running"})
    check(wait_for(lambda: deployment(v, dep)["state"] == "ready", timeout=60), "started again")
    # stopped and started again at once: it ends ready, not stuck "stopping"
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "stopped"})
    r2 = o.request("PATCH", f"/api/v1/deployments/{dep}", {"desired": "running"})
    check(r.status == 200 and r2.status == 200 and r2.json["desired"] == "running", "stop and start at once", r2)
    check(wait_for(lambda: deployment(v, dep)["state"] == "ready", timeout=60), "and ready again",
          deployment(v, dep))
    # the same with both calls between two of the supervisor's ticks (the
    # row they leave, written here): the engine it never stopped is ready
    pid = deployment(v, dep)["pid"]
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    db.execute("UPDATE deployments SET state = 'stopping' WHERE id = ?", (dep,))
    db.commit()
    db.close()
    d = wait_for(lambda: (lambda j: j if j["state"] != "stopping" else None)(deployment(v, dep)), timeout=10)
    check(d and d["state"] == "ready" and d["pid"] == pid, "a stop taken back before the tick leaves it ready", d)
    pid = deployment(v, dep)["pid"]
    r = o.request("PATCH", f"/api/v1/deployments/{dep}", {"options": {"chat_template": "chatml", "ctx": 256}})
    check(r.status == 200 and r.json["options"]["ctx"] == 256, "options changed", r)
    d3 = wait_for(lambda: (lambda j: j if j["state"] == "ready" and j["pid"] != pid else None)(deployment(v, dep)), 60)
    check(d3 is not None, "restarted with the new options", d3)
    r = o.request("DELETE", f"/api/v1/deployments/{dep}")
    check(r.status == 204, "deployment deleted", r)
    check(wait_for(lambda: engine_chat_gone(port), timeout=40), "its engine stopped")
    r = o.request("DELETE", f"/api/v1/models/{up_id}")
    check(r.status == 204 and not os.path.exists(os.path.join(adm.state, "models", "up1.gguf")),
          "an uploaded model's file goes with it", r)


def test_stream(o, dep):
    """A streamed chat through the proxy says what the whole one says."""
    ask = {"messages": [{"role": "user", "content": "Tell me a story"}], "max_tokens": 24, "temperature": 0}
    whole = o.post(f"/api/v1/deployments/{dep}/v1/chat/completions", ask)
    r = o.open_stream(f"/api/v1/deployments/{dep}/v1/chat/completions",
                      dict(ask, stream=True, stream_options={"include_usage": True}))
    ctype = r.getheader("Content-Type")
    text, n, usage, done = stream_text(r)
    check(r.status == 200 and ctype == "text/event-stream" and done, "a chat streams through the proxy", (r.status, ctype))
    want = whole.json["choices"][0]["message"]["content"] if whole.status == 200 else None
    check(n > 2 and text == want and usage and usage["completion_tokens"] == whole.json["usage"]["completion_tokens"],
          "its events add up to the whole answer, usage included", (n, text, want, usage))
    r = o.open_stream(f"/api/v1/deployments/{dep}/v1/completions",
                      {"prompt": "Once", "max_tokens": 8, "temperature": 0, "stream": True})
    text, n, _, done = stream_text(r)
    check(r.status == 200 and done and n >= 1, "a completion streams too", (r.status, n, text))


def engine_chat_gone(port):
    try:
        engine_chat(port, None)
        return False
    except OSError:
        return True


def test_audit_metrics(adm, a, o, v):
    r = a.get("/api/v1/audit?limit=500")
    actions = {e["action"] for e in r.json["data"]}
    for want in ("auth.login", "user.create", "token.create", "token.revoke", "model.create", "model.upload",
                 "deployment.create", "deployment.update", "deployment.delete", "settings.set"):
        check(want in actions, f"audit has {want}")
    e = [e for e in r.json["data"] if e["action"] == "model.upload" and e["result"] == "ok"][0]
    check(e["actor"] == "olga" and e["remote_addr"] == "127.0.0.1" and e["at"] > 0, "audit says who, where, when", e)
    check(v.get("/api/v1/audit").status == 403, "viewer cannot read the audit log")
    r = a.get("/api/v1/audit?limit=0")
    check(r.status == 422, "audit limit checked", r)
    r = v.get("/metrics")
    check(r.status == 200 and b"privai_admin_up 1" in r.body and b'privai_admin_logins_total{result="failed"}' in r.body,
          "metrics", r.status)


def role_matrix(adm, a, o, v):
    """Every route: anonymous gets 401 unless public; a role below the
    route's minimum gets 403 before the handler runs."""
    out = subprocess.run([os.path.join(BUILD, "privai-admin"), "--list-routes"], capture_output=True, text=True)
    routes = [line.split() for line in out.stdout.splitlines()]
    check(len(routes) >= 40, "route list", len(routes))
    rank = {"viewer": 1, "operator": 2, "admin": 3}
    who = {"viewer": v, "operator": o}
    anon = adm.client()
    for method, pattern, role in routes:
        path = pattern.replace("{id}", "999999").replace("{key}", "999999").replace("{name}", "none.db")
        if role == "public":
            continue
        r = anon.request(method, path, body={} if method in ("POST", "PUT", "PATCH") else None)
        check(r.status == 401, f"anonymous {method} {pattern} -> 401", r)
        for name, c in who.items():
            if rank[name] < rank[role]:
                r = c.request(method, path, body={} if method in ("POST", "PUT", "PATCH") else None)
                check(r.status == 403 and r.error_code() == "forbidden", f"{name} {method} {pattern} -> 403", r)
    return routes


def test_openapi(routes):
    import yaml
    spec = yaml.safe_load(open(os.path.join(ROOT, "docs", "api", "openapi.yaml")))
    documented = set()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            if method in ("get", "post", "put", "patch", "delete"):
                documented.add((method.upper(), path))
                role = op.get("x-min-role")
                live = [r for r in routes if r[0] == method.upper() and r[1] == path]
                if live:
                    check(role == live[0][2], f"openapi role of {method.upper()} {path}", f"{role} vs {live[0][2]}")
                check("responses" in op and any(k.startswith("2") for k in map(str, op["responses"])),
                      f"openapi {method.upper()} {path} documents success")
    served = {(m, p) for m, p, _ in routes}
    check(served - documented == set(), "every live route is documented", sorted(served - documented))
    check(documented - served == set(), "every documented route is live", sorted(documented - served))


def test_tls(tmp):
    """Outside dev mode: a generated self-signed certificate (valid for
    127.0.0.1), HTTPS only, Secure cookies; dev mode refuses a public address."""
    import ssl
    state = os.path.join(tmp, "tls")
    pw = os.path.join(tmp, "tls.pw")
    with open(pw, "w") as f:
        f.write(PW + "\n")
    log = open(state + ".log", "wb")
    p = subprocess.Popen([os.path.join(BUILD, "privai-admin"), "--port", "0", "--state-dir", state,
                          "--engine-ports", "19170-19179"], stdout=log, stderr=log,
                         env=dict(os.environ, PRIVAI_ADMIN_PASSWORD_FILE=pw))
    try:
        port = wait_for(lambda: (lambda m: int(m.group(1)) if m else None)(
            __import__("re").search(r"console on https://127\.0\.0\.1:(\d+)/", open(state + ".log").read())), 20)
        check(port is not None, "starts with HTTPS")
        ctx = ssl.create_default_context(cafile=os.path.join(state, "tls", "cert.pem"))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10)
        conn.request("POST", "/api/v1/auth/login", body=json.dumps({"name": "admin", "password": PW}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        r.read()
        sc = r.getheader("Set-Cookie") or ""
        check(r.status == 200 and "Secure" in sc and "HttpOnly" in sc, "HTTPS login, Secure cookie", sc)
        check(oct(os.stat(os.path.join(state, "tls", "key.pem")).st_mode & 0o777) == "0o600", "key is 0600")
        try:
            c2 = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c2.request("GET", "/api/v1/health")
            plain = c2.getresponse().status
        except (OSError, http.client.HTTPException):
            plain = None
        check(plain != 200, "no plain HTTP outside dev mode", plain)
    finally:
        p.terminate()
        p.wait()
    r = subprocess.run([os.path.join(BUILD, "privai-admin"), "--dev", "--host", "0.0.0.0", "--state-dir", state],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "loopback" in r.stderr, "dev mode refuses a public address", r.stderr)
    # every path under the state directory must fit its buffer: a longer
    # one is refused at start, not cut into another path later
    deep = os.path.join(tmp, "d" * 200, "e" * 200, "f" * 200, "g" * 200, "h" * 200, "i" * 100)
    r = subprocess.run([os.path.join(BUILD, "privai-admin"), "--dev", "--port", "0", "--state-dir", deep],
                       capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "--state-dir is longer than 1024 bytes" in r.stderr and not os.path.exists(deep),
          "a state directory longer than 1024 bytes is refused before anything is made", (r.returncode, r.stderr))


def test_kill9(tmp):
    """kill -9 while users are being created: every acknowledged user is
    there after a restart, and the database is intact."""
    adm = Admin(BUILD, os.path.join(tmp, "k9"), PW, ports="19150-19159")
    c = adm.client()
    c.login("admin", PW)
    done, stop = [], threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            try:
                r = c.post("/api/v1/users", {"name": f"k{i}", "password": PW, "role": "viewer"}, timeout=5)
                if r.status == 201:
                    done.append(f"k{i}")
            except OSError:
                return
            i += 1

    t = threading.Thread(target=writer)
    t.start()
    time.sleep(2.0)
    adm.proc.send_signal(signal.SIGKILL)
    adm.proc.wait()
    stop.set()
    t.join()
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"))
    check(db.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "integrity_check ok after kill -9")
    names = {row[0] for row in db.execute("SELECT name FROM users")}
    db.close()
    check(len(done) > 0 and set(done) <= names, "every acknowledged write survived kill -9", f"{len(done)} acked")
    adm.start()
    c2 = adm.client()
    check(c2.login("admin", PW).status == 200, "restarts after kill -9")
    adm.stop()


def main():
    tmp = tempfile.mkdtemp(prefix="privai-admin-test-")
    roots = [os.path.join(tmp, "models-a")]
    os.makedirs(roots[0])
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=["--model-root", roots[0], "--login-rate", "1000"])
    try:
        test_basics(adm)
        a, o, v = setup_users(adm)
        test_auth(adm, a)
        test_users(adm, a, o, v)
        test_tokens(adm, a, o, v)
        demo_id, up_id = test_models(adm, a, o, v, roots)
        test_deployments(adm, a, o, v, demo_id, up_id)
        test_audit_metrics(adm, a, o, v)
        routes = role_matrix(adm, a, o, v)
        test_openapi(routes)
        test_settings_backups(adm, a, o, v)
        check(adm.stop() == 0, "SIGTERM: clean exit")
        # the per-address login limit, on a daemon with the default rate
        lim = Admin(BUILD, os.path.join(tmp, "lim"), PW, ports="19160-19169")
        codes = [lim.client().post("/api/v1/auth/login", {"name": "x", "password": "y" * 10}).status for _ in range(12)]
        check(codes[:10] == [401] * 10 and codes[10] == 429, "11th login in a minute from one address 429", codes)
        lim.stop()
        test_tls(tmp)
        test_kill9(tmp)
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop(signal.SIGKILL)
        clean_up(tmp, 80)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
