"""Helpers for the privai-admin integration tests: start the daemon on a
loopback port with its own state directory, talk JSON over HTTP as a
session (cookie + CSRF) or with a bearer token, and count checks."""
import http.client
import json
import os
import re
import signal
import subprocess
import time

PASSED = 0
FAILED = 0


def check(cond, what, detail=""):
    global PASSED, FAILED
    if cond:
        PASSED += 1
    else:
        FAILED += 1
        print(f"FAIL: {what} {detail}", flush=True)
    return cond


def clean_up(tmp, lines=80):
    """After a suite: show the daemons' logs if anything failed, then remove tmp."""
    import shutil
    if FAILED:
        for log in sorted(f for f in os.listdir(tmp) if f.endswith(".log")):
            print(f"--- {log} (last {lines} lines)")
            print("\n".join(open(os.path.join(tmp, log), errors="replace").read().splitlines()[-lines:]))
    shutil.rmtree(tmp, ignore_errors=True)


def summary():
    print(f"{PASSED} passed, {FAILED} failed, 0 skipped")
    return 1 if FAILED else 0


class Admin:
    """A privai-admin process: state in `state`, port read from its log."""

    def __init__(self, build, state, password, extra=(), env_extra=None, ports="19100-19149", dev=True, prefix=()):
        self.build, self.state = build, state
        self.scheme = "http" if dev else "https"
        os.makedirs(state, exist_ok=True)
        self.pwfile = os.path.join(state, "..", os.path.basename(state) + ".pw")
        with open(self.pwfile, "w") as f:
            f.write(password + "\n")
        # children unless a suite asks for systemd units, whatever the host booted with
        env = dict(os.environ, PRIVAI_ADMIN_PASSWORD_FILE=self.pwfile, PRIVAI_ENGINE_RUNNER="child")
        env.update(env_extra or {})
        self.log_path = state + ".log"
        self.log = open(self.log_path, "ab")
        self.args = [*prefix, os.path.join(build, "privai-admin"), *(["--dev"] if dev else []), "--port", "0",
                     "--state-dir", state, "--engine-ports", ports, *extra]
        self.env = env
        self.start()

    def start(self):
        start_size = os.path.getsize(self.log_path)
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=self.log, stderr=self.log)
        deadline = time.time() + 20
        while time.time() < deadline:
            with open(self.log_path, "rb") as f:
                f.seek(start_size)
                text = f.read().decode(errors="replace")
            m = re.search(r"console on " + self.scheme + r"://127\.0\.0\.1:(\d+)/", text)
            if m:
                self.port = int(m.group(1))
                return
            if self.proc.poll() is not None:
                raise RuntimeError("privai-admin exited: " + text)
            time.sleep(0.05)
        raise RuntimeError("privai-admin did not start")

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def client(self):
        if self.scheme == "https":
            import ssl
            return Client(self.port, ssl._create_unverified_context())
        return Client(self.port)

    def url(self):
        return f"{self.scheme}://127.0.0.1:{self.port}"


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def error_code(self):
        return (self.json or {}).get("error", {}).get("code")

    def __repr__(self):
        return f"<{self.status} {self.body[:300]!r}>"


class Client:
    """One user agent: keeps the session cookie and CSRF token, or a token."""

    def __init__(self, port, tls_context=None):
        self.port = port
        self.tls_context = tls_context  # HTTPS with this context, else plain HTTP
        self.cookie = None
        self.csrf = None
        self.token = None

    def request(self, method, path, body=None, raw=None, headers=None, csrf=True, timeout=60):
        h = dict(headers or {})
        if self.cookie:
            h["Cookie"] = "privai_session=" + self.cookie
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if csrf and self.csrf and method not in ("GET", "HEAD"):
            h["X-CSRF-Token"] = self.csrf
        data = raw
        if body is not None:
            data = json.dumps(body).encode()
            h.setdefault("Content-Type", "application/json")
        if self.tls_context is not None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.tls_context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
        except (BrokenPipeError, ConnectionResetError):
            # the daemon answers some requests before their body is read
            # (a refused upload part) and closes; the answer is still there
            # to read, as curl or a browser would
            pass
        r = conn.getresponse()
        resp = Response(r.status, r.headers, r.read())
        conn.close()
        return resp

    def open_stream(self, path, body, timeout=60):
        """POST body and return the response unread, for reading events as they come."""
        h = {"Content-Type": "application/json"}
        if self.cookie:
            h["Cookie"] = "privai_session=" + self.cookie
            h["X-CSRF-Token"] = self.csrf
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        if self.tls_context is not None:
            conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=self.tls_context)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        conn.request("POST", path, body=json.dumps(body).encode(), headers=h)
        return conn.getresponse()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def login(self, name, password):
        r = self.post("/api/v1/auth/login", {"name": name, "password": password})
        if r.status == 200:
            m = re.search(r"privai_session=([^;]*)", r.headers.get("Set-Cookie", ""))
            self.cookie = m.group(1) if m else None
            self.csrf = r.json["csrf_token"]
        return r


def users(adm, password):
    """An admin session, and an operator (olga) and a viewer (vic) made by it and signed in."""
    a = adm.client()
    a.login("admin", password)
    for name, role in (("olga", "operator"), ("vic", "viewer")):
        a.post("/api/v1/users", {"name": name, "password": password, "role": role, "must_change_password": False})
    o, v = adm.client(), adm.client()
    o.login("olga", password)
    v.login("vic", password)
    return a, o, v


def dep_of(c, dep):
    """Deployment dep as client c sees it, or None."""
    r = c.get(f"/api/v1/deployments/{dep}")
    return r.json if r.status == 200 else None


def children_of(pid):
    """The pids of pid's children (an engine's local ranks)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def wait_for(fn, timeout=60, interval=0.2):
    """Poll fn until it returns a true value (returned) or time runs out (None)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = fn()
        if v:
            return v
        time.sleep(interval)
    return None


def next_event(resp):
    """The next server-sent event's data (str), or None at the end of the stream."""
    data = []
    while True:
        line = resp.readline()
        if not line:
            return "\n".join(data) if data else None
        line = line.decode().rstrip("\r\n")
        if line == "":
            if data:
                return "\n".join(data)
            continue
        if line.startswith("data:"):
            data.append(line[5:].lstrip(" "))


def stream_text(resp):
    """Read a chat or completion stream to its end: (text, events, usage, done)."""
    text, n, usage, done = "", 0, None, False
    while (e := next_event(resp)) is not None:
        if e == "[DONE]":
            done = True
            continue
        n += 1
        j = json.loads(e)
        usage = j.get("usage") or usage
        for ch in j.get("choices") or []:
            text += (ch.get("delta") or {}).get("content") or ch.get("text") or ""
    return text, n, usage, done



def leader_and_node_b(build, tmp, password, demo, leader_ports, b_ports):
    """A leader console with the demo model and a node-b that joined it
    with a token made there, both beating every second.  Returns the two
    Admins (node-b None when it failed to start) and the leader's admin,
    operator and viewer clients; node-b has joined when this returns."""
    adm = Admin(build, os.path.join(tmp, "leader"), password, ports=leader_ports,
                extra=["--node-name", "leader", "--heartbeat-s", "1", "--demo-model", demo, "--login-rate", "1000"])
    a, o, v = users(adm, password)
    tok = a.post("/api/v1/nodes/join-tokens", {}).json["token"]
    b = Admin(build, os.path.join(tmp, "b"), password, ports=b_ports, env_extra={"PRIVAI_JOIN_TOKEN": tok},
              extra=["--node-name", "node-b", "--join", f"http://127.0.0.1:{adm.port}", "--heartbeat-s", "1"])
    node = wait_for(lambda: [n for n in a.get("/api/v1/nodes").json["data"] if n["name"] == "node-b"], 15)
    check(node and node[0]["state"] == "ready", "node-b joined", node)
    return adm, b, a, o, v, node[0]["id"] if node else None


def thread_ids(pid, comm=None):
    """The ids of pid's threads (those named comm), as /proc lists them."""
    out = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if comm is None or f.read().strip() == comm:
                    out.append(int(tid))
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return out


def connection_policies(pid):
    """The scheduling policy of each of pid's libmicrohttpd connection
    threads (the engine's and the admin's alike)."""
    out = []
    for tid in thread_ids(pid, "MHD-connection"):
        try:
            out.append(os.sched_getscheduler(tid))
        except ProcessLookupError:
            pass  # a thread that ended meanwhile
    return out
