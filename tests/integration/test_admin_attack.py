"""privai-admin as an attacker sees it.

Every route the router has (privai-admin --list-routes --json: a route
added later is covered without touching this file) is sent by every kind
of caller an attacker can be or steal: nobody, a forged or dead token, an
expired, a revoked token, a token made with a revoked token, a session and
a token from before their account's password changed, a session whose
password is still one-time, a token of such an account, a viewer's and an
operator's session (with and without the CSRF header), read- and
write-scoped tokens of an operator and of an admin.  Each must get exactly
the answer docs/api/openapi.yaml documents ("Authentication"):

  dead or no credentials             401 unauthenticated
  one-time password, other routes    403 password_change_required
  role below the route's             403 forbidden
  read-scoped token, a change        403 read_only_token
  session, a change without CSRF     403 csrf
  otherwise                          what an admin gets for the same request

Then the rules around them: a token never makes a stronger or longer-lived
token; NUL in a string is refused naming the field, nothing stored; one
password rule (API, OpenAPI, console); the store, backups and the
one-time password file are 0600 in 0700 directories, tightened when found
open; the one-time password never reaches the log; refusals are audited
under the action's name; a taken port fails the first start before
anything is created.

usage: python3 tests/integration/test_admin_attack.py BUILD_DIR"""
import json
import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, Client, check, clean_up, summary  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PW = "correct horse battery staple"
RANK = {"viewer": 1, "operator": 2, "admin": 3}
AUTH_CODES = {"unauthenticated", "forbidden", "read_only_token", "csrf", "password_change_required"}


def routes():
    out = subprocess.run([os.path.join(BUILD, "privai-admin"), "--list-routes", "--json"], capture_output=True,
                         text=True, check=True)
    return [json.loads(line) for line in out.stdout.splitlines()]


def concrete(pattern):
    """A path for a pattern that names nothing that exists: handlers that
    pass the checks answer 404 or 422 and change nothing."""
    return (pattern.replace("{id}", "999999").replace("{key}", "999999").replace("{name}", "none.db")
            .replace("{model}", "999999"))


def send(c, rt, path=None, csrf=True):
    body = {} if rt["method"] in ("POST", "PUT", "PATCH") else None
    return c.request(rt["method"], path or concrete(rt["pattern"]), body=body, csrf=csrf, timeout=30)


def token_client(adm, token):
    c = adm.client()
    c.token = token
    return c


def cookie_client(adm, cookie):
    c = adm.client()
    c.cookie, c.csrf = cookie, "forged"
    return c


def make_token(c, name, scopes, **extra):
    r = c.post("/api/v1/tokens", {"name": name, "scopes": scopes, **extra})
    check(r.status == 201, f"setup: token {name}", r)
    return r.json.get("token", ""), r.json.get("id", 0)


def db_exec(adm, sql, *args):
    con = sqlite3.connect(os.path.join(adm.state, "privai.db"), timeout=10)
    con.execute(sql, args)
    con.commit()
    con.close()


def principals(adm, a):
    """name -> (client factory, what it is).  A factory, so callers that
    end their session (logout) get a fresh one each time."""
    for name, role, must in (("vic", "viewer", False), ("olga", "operator", False), ("otto", "operator", True),
                             ("paula", "operator", False), ("oscar", "operator", False)):
        r = a.post("/api/v1/users", {"name": name, "password": PW, "role": role, "must_change_password": must})
        check(r.status == 201, f"setup: user {name}", r)

    def session(name, password=PW):
        def f():
            c = adm.client()
            r = c.login(name, password)
            check(r.status == 200, f"setup: {name} logs in", r)
            return c
        return f

    def dead_session(c):
        return lambda: c

    o = session("olga")()
    read_tok, _ = make_token(o, "olga-read", ["read"])
    write_tok, _ = make_token(o, "olga-write", ["write"])
    expired_tok, expired_id = make_token(o, "olga-expired", ["write"])
    db_exec(adm, "UPDATE api_tokens SET expires_at = ? WHERE id = ?", int(time.time()) - 60, expired_id)
    revoked_tok, revoked_id = make_token(o, "olga-revoked", ["write"])
    check(o.request("DELETE", f"/api/v1/tokens/{revoked_id}").status == 204, "setup: revoke a token")
    # a token made with a token, whose parent is then revoked
    parent_tok, parent_id = make_token(o, "olga-parent", ["write"])
    child_tok, _ = make_token(token_client(adm, parent_tok), "olga-child", ["write"])
    check(o.request("DELETE", f"/api/v1/tokens/{parent_id}").status == 204, "setup: revoke the parent token")
    admin_read, _ = make_token(a, "admin-read", ["read"])
    admin_write, _ = make_token(a, "admin-write", ["write"])
    # paula: a session and a token from before her password changed
    p_old = session("paula")()
    p_tok, _ = make_token(p_old, "paula-ci", ["write"])
    p_now = session("paula")()
    r = p_now.post("/api/v1/auth/password", {"current_password": PW, "new_password": PW + " 2"})
    check(r.status == 200 and r.json["sessions_ended"] == 1 and len(r.json["tokens_revoked"]) == 1,
          "setup: paula changes her password: one other session ended, one token revoked", r)
    # oscar: an admin resets his password to a one-time one, keeping his token
    oscar = session("oscar")()
    oscar_tok, _ = make_token(oscar, "oscar-ci", ["write"])
    oid = [u for u in a.get("/api/v1/users").json["data"] if u["name"] == "oscar"][0]["id"]
    r = a.request("PATCH", f"/api/v1/users/{oid}", {"password": PW + " reset", "revoke_tokens": False})
    check(r.status == 200 and r.json["must_change_password"] == 1, "setup: oscar's password reset, one-time", r)

    return {
        "nobody": (lambda: adm.client(), "dead"),
        "forged token": (lambda: token_client(adm, "pat_" + "A" * 43), "dead"),
        "forged cookie": (lambda: cookie_client(adm, "s_" + "A" * 43), "dead"),
        "expired token": (lambda: token_client(adm, expired_tok), "dead"),
        "revoked token": (lambda: token_client(adm, revoked_tok), "dead"),
        "token made with a revoked token": (lambda: token_client(adm, child_tok), "dead"),
        "session from before a password change": (dead_session(p_old), "dead"),
        "token from before a password change": (lambda: token_client(adm, p_tok), "dead"),
        "session with a one-time password": (session("otto"), "one-time"),
        "token of an account reset to a one-time password": (lambda: token_client(adm, oscar_tok), "one-time"),
        "viewer session": (session("vic"), "viewer"),
        "viewer session, no CSRF header": (session("vic"), "viewer-nocsrf"),
        "operator session": (session("olga"), "operator"),
        "operator session, no CSRF header": (session("olga"), "operator-nocsrf"),
        "operator's read token": (lambda: token_client(adm, read_tok), "read-token"),
        "operator's write token": (lambda: token_client(adm, write_tok), "operator"),
        "admin's read token": (lambda: token_client(adm, admin_read), "read-token"),
        "admin's write token": (lambda: token_client(adm, admin_write), "operator"),
    }


def expected(kind, rt):
    """("refused", status, code): the documented refusal for this caller
    on this route; ("answer", status, code): a handler's answer that does
    not depend on the role; None: what an admin gets for the request."""
    changes = rt["method"] not in ("GET", "HEAD") and not rt["read_only"]
    if rt["public"]:
        return None
    if kind == "dead":
        return "refused", 401, "unauthenticated"
    if kind == "one-time" and not rt["one_time_ok"]:
        return "refused", 403, "password_change_required"
    if kind != "one-time":
        role = {"viewer": "viewer", "viewer-nocsrf": "viewer", "read-token": "viewer"}.get(kind, "operator")
        if RANK[role] < RANK[rt["role"]]:
            return "refused", 403, "forbidden"
        if kind == "read-token" and changes:
            return "refused", 403, "read_only_token"
        if kind.endswith("-nocsrf") and rt["method"] not in ("GET", "HEAD"):
            return "refused", 403, "csrf"
    return None


def reference(adm, a, rt):
    """What an admin session gets for the same request: the handler's own
    answer, which a caller that passes the checks must get too.  Logout
    uses a throwaway admin session."""
    if rt["pattern"] == "/api/v1/auth/logout":
        c = adm.client()
        c.login("admin", PW)
        return send(c, rt)
    return send(a, rt)


def test_matrix(adm, a, rts):
    who = principals(adm, a)
    refs, forged = {}, {}
    for rt in rts:
        refs[(rt["method"], rt["pattern"])] = reference(adm, a, rt)
        # a public route (its own secrets) answers any session or token
        # as it answers a forged one
        if rt["public"]:
            forged[(rt["method"], rt["pattern"], "token")] = send(token_client(adm, "pat_" + "B" * 43), rt)
            forged[(rt["method"], rt["pattern"], "cookie")] = send(cookie_client(adm, "s_" + "B" * 43), rt)
    # logout ends a session: each caller sends it last
    rts = sorted(rts, key=lambda rt: rt["pattern"] == "/api/v1/auth/logout")
    covered = 0
    for name, (make, kind) in who.items():
        c = make()
        for rt in rts:
            want = expected(kind, rt)
            if want is None and c.token and rt["pattern"] in ("/api/v1/auth/logout", "/api/v1/auth/password"):
                want = ("answer", 422, "not_a_session")  # both are for sessions only
            r = send(c, rt, csrf=not kind.endswith("-nocsrf"))
            label = f"{name}: {rt['method']} {rt['pattern']}"
            ref = refs[(rt["method"], rt["pattern"])]
            if rt["public"]:
                ref = forged[(rt["method"], rt["pattern"], "token" if c.token else "cookie")]
                check(r.status == ref.status and r.error_code() == ref.error_code() and
                      (r.status not in (200, 201, 204) or rt["pattern"] in ("/api/v1/health", "/readyz")),
                      f"{label} -> as for a forged credential ({ref.status} {ref.error_code()})", r)
            elif want is not None:
                check(r.status == want[1] and r.error_code() == want[2], f"{label} -> {want[1]} {want[2]}", r)
            else:
                check(r.status == ref.status and r.error_code() not in AUTH_CODES and
                      r.error_code() == ref.error_code(),
                      f"{label} -> the handler's answer ({ref.status} {ref.error_code()})", r)
            covered += 1
    check(covered == len(rts) * len(who), "every route for every caller", covered)
    # the anonymous answers of the routes that carry their own secrets
    anon = adm.client()
    for rt in rts:
        if rt["public"] and rt["pattern"] not in ("/api/v1/health", "/readyz", "/api/v1/auth/login",
                                                  "/api/v1/nodes/join"):
            r = send(anon, rt)
            check(r.status == 401 and r.error_code() == "unauthenticated",
                  f"nobody: {rt['method']} {rt['pattern']} -> 401 (its own secret)", r)
    r = send(anon, {"method": "POST", "pattern": "/api/v1/nodes/join", "read_only": False})
    check(r.status == 422 and r.json["error"]["field"] == "token", "nobody: join without a join token -> 422", r)


def test_tokens(adm, a):
    o = adm.client()
    o.login("olga", PW)
    w, wid = make_token(o, "w-2days", ["write"], expires_in_days=2)
    wc = token_client(adm, w)
    r = wc.post("/api/v1/tokens", {"name": "stronger", "scopes": ["admin"]})
    check(r.status == 403 and r.json["error"]["field"] == "scopes", "a write token cannot make an admin token", r)
    ac, _ = make_token(a, "a-2days", ["admin"], expires_in_days=2)
    r = token_client(adm, ac).post("/api/v1/tokens", {"name": "x", "scopes": ["admin"], "expires_in_days": 3})
    check(r.status == 422 and r.json["error"]["field"] == "expires_in_days", "a token cannot outlive its maker", r)
    r = wc.post("/api/v1/tokens", {"name": "child", "scopes": ["write"]})
    check(r.status == 201 and r.json["parent_token_id"] == wid and r.json["expires_at"] <= time.time() + 2 * 86400 + 5,
          "by default a token's token ends when it does", r)
    child = r.json.get("token", "")
    rc = token_client(adm, child)
    r = rc.post("/api/v1/tokens", {"name": "grandchild", "scopes": ["read"]})
    grand = r.json.get("token", "") if r.status == 201 else ""
    check(r.status == 201, "a token's token makes a token", r)
    r = token_client(adm, w).request("DELETE", f"/api/v1/tokens/{wid}")
    check(r.status == 204, "the maker is revoked", r)
    for t, what in ((child, "child"), (grand, "grandchild")):
        r = token_client(adm, t).get("/api/v1/models")
        check(r.status == 401 and r.error_code() == "unauthenticated", f"its {what} stops working with it", r)
    rows = {t["name"]: t for t in o.get("/api/v1/tokens").json["data"]}
    check(rows["child"]["revoked_at"] and "was revoked" in (rows["child"]["revoked_reason"] or ""),
          "the list says why", rows.get("child"))
    # a read token creates nothing, not even a read token
    ro = token_client(adm, make_token(o, "ro", ["read"])[0])
    n = len(o.get("/api/v1/tokens").json["data"])
    r = ro.post("/api/v1/tokens", {"name": "ro2", "scopes": ["read"]})
    check(r.status == 403 and r.error_code() == "read_only_token", "a read token makes no token", r)
    check(len(o.get("/api/v1/tokens").json["data"]) == n, "and none was stored")
    # a password change asked to keep tokens keeps them, and says so
    k, _ = make_token(o, "kept", ["write"])
    r = o.post("/api/v1/auth/password", {"current_password": PW, "new_password": PW + " new", "revoke_tokens": False})
    check(r.status == 200 and r.json["tokens_revoked"] == [], "revoke_tokens false keeps them", r)
    check(token_client(adm, k).get("/api/v1/models").status == 200, "the kept token works")
    check(o.get("/api/v1/auth/me").status == 200, "the session that changed it goes on")
    r = token_client(adm, k).post("/api/v1/auth/password", {"current_password": PW + " new", "new_password": PW})
    check(r.status == 422 and r.error_code() == "not_a_session", "a token cannot change the password", r)
    r = o.post("/api/v1/auth/password", {"current_password": PW + " new", "new_password": PW})
    check(r.status == 200 and len(r.json["tokens_revoked"]) >= 2, "by default the tokens go", r)
    check(token_client(adm, k).get("/api/v1/models").status == 401, "the revoked token is dead")


def test_one_time(adm, a):
    c = adm.client()
    c.login("otto", PW)
    r = c.get("/api/v1/auth/me")
    check(r.status == 200 and r.json["must_change_password"] is True, "a one-time account may ask who it is", r)
    r = c.post("/api/v1/users", {"name": "evil", "password": PW, "role": "admin", "must_change_password": False})
    check(r.status == 403 and r.error_code() == "password_change_required", "and create no admin", r)
    r = c.post("/api/v1/tokens", {"name": "t90", "scopes": ["write"], "expires_in_days": 90})
    check(r.status == 403 and r.error_code() == "password_change_required", "and no 90-day token", r)
    r = c.post("/api/v1/auth/password", {"current_password": PW, "new_password": PW})
    check(r.status == 422 and r.json["error"]["field"] == "new_password", "the one-time password is not kept", r)
    r = c.post("/api/v1/auth/password", {"current_password": PW, "new_password": "otto's own password"})
    check(r.status == 200, "it changes its password", r)
    check(c.get("/api/v1/models").status == 200, "then it may work, in the same session")
    names = [u["name"] for u in a.get("/api/v1/users").json["data"]]
    check("evil" not in names, "nothing was stored while one-time", names)


def test_strings(adm, a):
    before = a.get("/api/v1/users").json["data"]
    uid = [u for u in before if u["name"] == "vic"][0]["id"]
    cases = [
        ("POST", "/api/v1/users", {"name": "ab\u0000cd", "password": PW, "role": "viewer"}, "name"),
        ("POST", "/api/v1/users", {"name": "abcd", "password": PW + "\u0000x", "role": "viewer"}, "password"),
        ("POST", "/api/v1/users", {"name\u0000x": "abcd", "password": PW, "role": "viewer"}, "name\\u0000x"),
        ("PATCH", f"/api/v1/users/{uid}", {"role": "viewer\u0000admin"}, "role"),
        ("POST", "/api/v1/tokens", {"name": "t\u0000", "scopes": ["read"]}, "name"),
        ("POST", "/api/v1/tokens", {"name": "t", "scopes": ["read\u0000admin"]}, "scopes"),
        ("POST", "/api/v1/models", {"name": "m", "path": "/tmp/x.gguf\u0000.txt"}, "path"),
        ("POST", "/api/v1/deployments", {"name": "d\u0000", "model": 1}, "name"),
        ("POST", "/api/v1/uploads", {"name": "u\u0000", "size_bytes": 10}, "name"),
        ("PUT", "/api/v1/settings/backup_keep", {"value": "3\u0000"}, "value"),
        ("POST", "/api/v1/nodes/join-tokens", {"name": "n\u0000"}, "name"),
        ("POST", "/api/v1/sizing", {"model": "x\u0000"}, "model"),
        ("POST", "/api/v1/auth/login", {"name": "admin\u0000", "password": PW}, "name"),
    ]
    for method, path, body, field in cases:
        r = a.request(method, path, body)
        check(r.status == 422 and r.json["error"].get("field") == field and "NUL" in r.json["error"]["message"],
              f"NUL in {field} of {method} {path} -> 422 naming it", r)
    check(a.get("/api/v1/users").json["data"] == before, "nothing stored or changed")
    for ch in ("\u0001", "\u001f", "\u007f", "\n"):
        r = a.post("/api/v1/users", {"name": f"ctl{ch}x", "password": PW, "role": "viewer"})
        check(r.status == 422 and r.json["error"]["field"] == "name", f"control character {ch!r} in a name", r)


def test_password_rule(adm, a):
    short, ok = "elevenchars", "twelve chars"
    r = a.post("/api/v1/users", {"name": "shorty", "password": short, "role": "viewer"})
    check(r.status == 422 and r.json["error"]["field"] == "password" and "12" in r.json["error"]["message"],
          "11 characters refused on create", r)
    r = a.post("/api/v1/users", {"name": "shorty", "password": "äöüäöüäöüäö", "role": "viewer"})
    check(r.status == 422, "11 characters in 22 bytes refused too", r)
    r = a.post("/api/v1/users", {"name": "longname1234", "password": "LONGNAME1234", "role": "viewer"})
    check(r.status == 422 and "name" in r.json["error"]["message"], "the name as password refused", r)
    r = a.post("/api/v1/users", {"name": "shorty", "password": ok, "role": "viewer", "must_change_password": False})
    check(r.status == 201, "12 characters accepted", r)
    sid = r.json.get("id")
    r = a.request("PATCH", f"/api/v1/users/{sid}", {"password": short})
    check(r.status == 422 and r.json["error"]["field"] == "password", "11 characters refused on reset", r)
    c = adm.client()
    c.login("shorty", ok)
    r = c.post("/api/v1/auth/password", {"current_password": ok, "new_password": short})
    check(r.status == 422 and r.json["error"]["field"] == "new_password", "11 characters refused on change", r)
    check(adm.client().login("shorty", ok).status == 200, "the old password still works after the refusals")
    spec = open(os.path.join(ROOT, "docs", "api", "openapi.yaml")).read()
    lens = re.findall(r"(?:password|new_password): \{type: string, minLength: (\d+)", spec)
    check(lens and set(lens) == {"12"}, "the OpenAPI says 12 wherever a password is set", lens)
    console = "".join(open(os.path.join(dp, f)).read() for dp, _, fs in os.walk(os.path.join(ROOT, "webui", "js"))
                      for f in fs if f.endswith(".js"))
    mins = re.findall(r"minlength: (\d+)", console)
    check(mins and set(mins) == {"12"}, "the console asks for 12 wherever a password is set", mins)


def mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_modes(adm, a):
    r = a.post("/api/v1/system/backups", {})
    check(r.status == 201, "a backup", r)
    st = adm.state
    for p in ("privai.db", "privai.db-wal", "privai.db-shm"):
        check(mode(os.path.join(st, p)) == 0o600, f"{p} is 0600", oct(mode(os.path.join(st, p))))
    for d in ("", "backups", "models", "deployments"):
        check(mode(os.path.join(st, d)) == 0o700, f"{d or 'the state directory'} is 0700", oct(mode(os.path.join(st, d))))
    files = os.listdir(os.path.join(st, "backups"))
    check(files and all(mode(os.path.join(st, "backups", f)) == 0o600 for f in files), "backups are 0600",
          [(f, oct(mode(os.path.join(st, "backups", f)))) for f in files])
    # found open: tightened at the next start
    adm.stop()
    os.chmod(st, 0o755)
    os.chmod(os.path.join(st, "privai.db"), 0o644)
    os.chmod(os.path.join(st, "backups"), 0o755)
    adm.start()
    check(mode(st) == 0o700 and mode(os.path.join(st, "privai.db")) == 0o600 and
          mode(os.path.join(st, "backups")) == 0o700, "an open state directory is tightened at start",
          (oct(mode(st)), oct(mode(os.path.join(st, "privai.db")))))


def test_first_start(tmp):
    """The one-time password reaches a file of the admin's own, not the log;
    a taken port fails the start with nothing created."""
    state = os.path.join(tmp, "fresh")
    log = os.path.join(tmp, "fresh.log")
    env = {k: v for k, v in os.environ.items() if k != "PRIVAI_ADMIN_PASSWORD_FILE"}
    env["PRIVAI_ENGINE_RUNNER"] = "child"
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    args = [os.path.join(BUILD, "privai-admin"), "--dev", "--state-dir", state, "--engine-ports", "19250-19259"]
    with open(log, "wb") as f:
        p = subprocess.run(args + ["--port", str(port)], env=env, stdout=f, stderr=f, timeout=60)
    text = open(log, errors="replace").read()
    check(p.returncode == 1 and f"127.0.0.1:{port}" in text and "in use" in text.lower(),
          "a taken port fails the first start, naming it", text)
    check(not os.path.exists(os.path.join(state, "privai.db")) and
          not os.path.exists(os.path.join(state, "initial-admin-password")), "and nothing was created",
          os.listdir(state) if os.path.exists(state) else "no state directory")
    holder.close()
    open(log, "wb").close()
    with open(log, "ab") as f:
        proc = subprocess.Popen(args + ["--port", "0"], env=env, stdout=f, stderr=f)
    try:
        deadline = time.time() + 20
        m = None
        while time.time() < deadline and m is None:
            m = re.search(r"console on http://127\.0\.0\.1:(\d+)/", open(log, errors="replace").read())
            time.sleep(0.05)
        pwfile = os.path.join(state, "initial-admin-password")
        password = open(pwfile).read().strip() if os.path.exists(pwfile) else ""
        text = open(log, errors="replace").read()
        if not check(m and len(password) == 20, "the one-time password is in a file", (password, text)):
            return
        check(password and password not in text and pwfile in text, "the log names the file, not the password", text)
        check(mode(pwfile) == 0o600 and mode(state) == 0o700, "the file is 0600 in a 0700 directory")
        c = Client(int(m.group(1)))
        r = c.login("admin", password)
        check(r.status == 200 and r.json["must_change_password"] is True, "it signs in, one-time", r)
        r = c.post("/api/v1/auth/password", {"current_password": password, "new_password": "the admin's own one"})
        check(r.status == 200 and not os.path.exists(pwfile), "changed: the file is gone", r)
        check(password not in open(os.path.join(state, "privai.db"), "rb").read().decode("latin-1"),
              "the store holds no plain password")
    finally:
        proc.terminate()
        proc.wait(30)


def test_audit_names(a, rts):
    """Every change refused in the matrix is in the audit log under its
    action's own name (token.create, not POST /api/v1/tokens)."""
    for rt in rts:
        if rt["method"] in ("GET", "HEAD") or rt["read_only"] or rt["public"] or rt["action"] is None:
            continue
        r = a.get(f"/api/v1/audit?action={rt['action']}&result=refused&limit=1000")
        rows = [e for e in r.json["data"] if (e.get("detail") or {}).get("request") == rt["pattern"]] \
            if r.status == 200 else []
        check(rows, f"refusals of {rt['method']} {rt['pattern']} are audited as {rt['action']}", r.status)
    r = a.get("/api/v1/audit?result=refused&limit=1000")
    bad = [e["action"] for e in r.json["data"] if e["action"].startswith(("POST ", "PUT ", "PATCH ", "DELETE "))]
    check(r.status == 200 and not bad, "no refusal is named by its URL", bad[:5])


def test_reset_password(adm):
    """privai-admin reset-password: root only, beside the running admin; the
    account's sessions and tokens die, the new password is one-time."""
    a = adm.client()
    a.login("admin", PW)
    a.post("/api/v1/users", {"name": "lost", "password": PW, "role": "operator", "must_change_password": False})
    c = adm.client()
    c.login("lost", PW)
    tok, _ = make_token(c, "lost-ci", ["write"])
    for _ in range(5):  # locked out as well
        adm.client().login("lost", "not the password at all")
    cmd = [os.path.join(BUILD, "privai-admin"), "reset-password", "lost", "--state-dir", adm.state]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    m = re.search(r"one-time password (\S+)", p.stdout)
    check(p.returncode == 0 and m and "sessions ended: 1, API tokens revoked: 1" in p.stdout,
          "reset-password prints a new one-time password", (p.returncode, p.stdout, p.stderr))
    check(c.get("/api/v1/auth/me").status == 401 and token_client(adm, tok).get("/api/v1/models").status == 401,
          "the account's session and token are dead")
    n = adm.client()
    r = n.login("lost", m.group(1) if m else "")
    check(r.status == 200 and r.json["must_change_password"] is True, "the new password signs in, one-time, unlocked", r)
    check(n.get("/api/v1/models").error_code() == "password_change_required", "and must be changed first")
    r = a.get("/api/v1/audit?action=user.password_reset")
    check(r.status == 200 and r.json["data"] and r.json["data"][0]["actor"].startswith("root") and
          r.json["data"][0]["target"] == "lost", "the reset is audited", r)
    p = subprocess.run(cmd[:2] + ["nobody-here"] + cmd[3:], capture_output=True, text=True, timeout=60)
    check(p.returncode == 1 and "no user" in p.stderr, "an unknown user is refused", p.stderr)
    if os.geteuid() == 0 and os.path.exists("/usr/bin/setpriv"):
        p = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] + cmd,
                           capture_output=True, text=True, timeout=60)
        check(p.returncode == 1 and "root" in p.stderr and "one-time password" not in p.stdout,
              "anyone but root is refused", (p.returncode, p.stderr))


def test_memory(adm):
    """What a memory dump of the admin would give an attacker after a
    login, a password change and a new token: none of their secrets (the
    store holds hashes; request and reply bodies and cookies are wiped)."""
    if BUILD.rstrip("/").endswith("-san"):
        print("memory scan: not under ASan (its allocator and shadow are not the admin's)")
        return
    old, new = "Quartz-Mango-Zebra-4417-old", "Quartz-Mango-Zebra-4417-new"
    a = adm.client()  # the admin was restarted on another port (test_modes)
    a.login("admin", PW)
    a.post("/api/v1/users", {"name": "mem", "password": old, "role": "operator", "must_change_password": False})
    c = adm.client()
    c.login("mem", old)
    r = c.post("/api/v1/auth/password", {"current_password": old, "new_password": new})
    c.login("mem", new)
    tok = c.post("/api/v1/tokens", {"name": "mem", "scopes": ["read"]}).json.get("token", "")
    check(r.status == 200 and tok, "setup: password changed, token made", r)
    needles = {"the old password": old.encode(), "the new password": new.encode(), "the new token": tok.encode(),
               "the session cookie": (c.cookie or "").encode()}
    found, scanned = scan_memory(adm, needles)
    # a reply still being sent holds its body until the connection's
    # thread wipes it: only what is left once the requests are over counts
    for _ in range(5):
        if not found:
            break
        time.sleep(0.3)
        found, scanned = scan_memory(adm, needles)
    if scanned < 0:
        return
    check(scanned > 1 << 20 and not found, f"no secret in the admin's memory ({scanned >> 20} MiB read)", found)


def scan_memory(adm, needles):
    """The needles found in the admin's writable memory, and the bytes
    read (-1 when the memory cannot be read)."""
    found, scanned = {}, 0
    try:
        with open(f"/proc/{adm.proc.pid}/maps") as maps, open(f"/proc/{adm.proc.pid}/mem", "rb") as mem:
            for line in maps:
                f = line.split()
                lo, hi = (int(x, 16) for x in f[0].split("-"))
                # writable memory of the process: heap, stacks, anonymous maps
                if "rw" not in f[1] or hi - lo > (1 << 30) or (len(f) > 5 and f[5].startswith("/")):
                    continue
                try:
                    mem.seek(lo)
                    data = mem.read(hi - lo)
                except OSError:
                    continue
                scanned += len(data)
                for what, n in needles.items():
                    if n and n in data:
                        found.setdefault(what, []).append(f[0])
    except PermissionError as e:
        print(f"memory scan: cannot read the admin's memory ({e}); not checked")
        return {}, -1
    return found, scanned


def main():
    tmp = tempfile.mkdtemp(prefix="privai-attack-")
    rts = routes()
    check(len(rts) >= 70 and all(r["action"] for r in rts if r["method"] not in ("GET", "HEAD") and
                                 not r["read_only"]), "the router lists its routes with their actions", len(rts))
    # logins are rate-limited per address; this suite signs in dozens of times
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=("--login-rate", "1000"), ports="19200-19249")
    try:
        a = adm.client()
        check(a.login("admin", PW).status == 200, "admin logs in")
        test_matrix(adm, a, rts)
        test_audit_names(a, rts)
        test_tokens(adm, a)
        test_one_time(adm, a)
        test_strings(adm, a)
        test_password_rule(adm, a)
        test_modes(adm, a)
        test_first_start(tmp)
        test_reset_password(adm)
        test_memory(adm)
        check(adm.stop() == 0, "the admin exits cleanly (no sanitizer report)", open(adm.log_path).read()[-2000:])
    finally:
        adm.stop()
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
