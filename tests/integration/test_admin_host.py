"""privai-admin's host health: the preflight report privai-tune wrote and
privai-fabric's status socket, read on each heartbeat, checked, stored with
the node and shown by GET /api/v1/nodes; and the same checks on a host
report another node sends.

The preflight report is a real `privai-tune check --output` over the bad
HGX fixture tree, the status socket a real `privai-fabric serve` over the
good one; the broken answers come from a stand-in socket server.

usage: python3 tests/integration/test_admin_host.py BUILD_DIR"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE_TREES = os.path.join(ROOT, "tests", "fixtures", "sysfs", "make-trees.py")
XEON = os.path.join(ROOT, "tests", "fixtures", "hosts", "xeon-amx-2s")
PW = "correct horse battery staple"


def self_host(a):
    return a.get("/api/v1/nodes/1").json["inventory"]["host"]


def wait_host(a, pred, what, timeout=15):
    """Wait for this node's stored host part to satisfy pred; check it."""
    last = {}

    def probe():
        nonlocal last
        last = self_host(a)
        return pred(last)
    check(wait_for(probe, timeout), what, json.dumps(last)[:600])
    return last


class StandIn:
    """A unix socket that answers every connection with `answer` (bytes),
    or with nothing at all while `answer` is None."""

    def __init__(self, path):
        self.path, self.answer, self.stop = path, b"", False
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.held = []
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                c, _ = self.sock.accept()
            except OSError:
                continue
            if self.answer is None:
                self.held.append(c)  # say nothing, keep it open
                continue
            try:
                c.recv(4096)
                c.sendall(self.answer)
            except OSError:
                pass
            c.close()

    def close(self):
        self.stop = True
        self.thread.join()
        for c in self.held:
            c.close()
        self.sock.close()
        os.unlink(self.path)


def http(body, code=200):
    return f"HTTP/1.1 {code} X\r\nContent-Type: application/json\r\n\r\n".encode() + body


def test_preflight(a, pre, report):
    bad = [c for c in report["checks"] if c["status"] in ("warn", "fail")]
    p = wait_host(a, lambda h: h["preflight"]["state"] == "ok", "the preflight report is read")["preflight"]
    check(p["summary"] == report["summary"] and p["profile"] == report["profile"],
          "its counts and profile as privai-tune wrote them", p["summary"])
    check([c["id"] for c in p["checks"]] == [c["id"] for c in bad] and len(bad) >= 10,
          "only its warn and fail checks are kept, in order", [c["id"] for c in p["checks"]])
    pairing = [c for c in p["checks"] if c["id"] == "pcie.pairing"]
    check(pairing and pairing[0]["status"] == "fail" and pairing[0]["fix"] and pairing[0]["expected"],
          "the bad pairing is there with its fix", pairing[:1])
    check(abs(p["checked_at"] - os.stat(pre).st_mtime) < 2, "checked_at is when the file was written", p)

    text = open(pre).read()
    doc = json.loads(text)

    def changed(fn):
        d = json.loads(text)
        fn(d)
        return json.dumps(d)

    def first_fail(d):
        return [c for c in d["checks"] if c["status"] == "fail"][0]
    broken = [
        ("not JSON", text[: len(text) // 2], "is not JSON"),
        ("a status privai-tune never gives", changed(lambda d: d["checks"][0].update(status="bogus")),
         "checks[0].status must be pass"),
        ("a summary that disagrees with its checks", changed(lambda d: d["summary"].update(fail=d["summary"]["fail"] + 1)),
         "summary.fail must be"),
        ("an id with odd characters", changed(lambda d: d["checks"][0].update(id="../etc")), "id must be 1 to 64"),
        ("a fix of 600 bytes", changed(lambda d: first_fail(d).update(fix="x" * 600)),
         "fix must be a string of at most 512"),
        ("a check without its fix", changed(lambda d: first_fail(d).pop("fix")), "fix must be a string"),
        ("600 checks", changed(lambda d: d.update(checks=d["checks"] * 12)), "at most 512"),
    ]
    for what, content, reason in broken:
        with open(pre, "w") as f:
            f.write(content)
        wait_host(a, lambda h: h["preflight"]["state"] == "error" and reason in h["preflight"]["error"],
                  f"a preflight file with {what} is an error naming it")
        inv = a.get("/api/v1/nodes/1").json["inventory"]
        check(inv["cpu"]["model"] and inv["host"]["fabric"]["state"] == "ok", f"{what}: the rest of the report stays")
    os.unlink(pre)
    os.mkdir(pre)
    wait_host(a, lambda h: "not a regular file" in h["preflight"].get("error", ""), "a directory is not a report")
    os.rmdir(pre)
    wait_host(a, lambda h: h["preflight"]["state"] == "missing" and "privai-preflight.service" in h["preflight"]["error"],
              "no file: missing, saying which unit writes it")
    with open(pre, "w") as f:
        json.dump(doc, f)
    wait_host(a, lambda h: h["preflight"]["state"] == "ok", "a good file again is read again")


def test_fabric(a, sock, serve, tmp):
    f = wait_host(a, lambda h: h["fabric"]["state"] == "ok", "privai-fabric's status is read")["fabric"]
    fm = f["fabric_manager"]
    check(fm["needed"] is True and fm["nvswitches"] == 4 and fm["version"] == fm["driver_version"],
          "Fabric Manager needed on the 4-NVSwitch node, versions as found", fm)
    check(fm["verdict"] == "unknown" and "cannot reach the systemd" in fm["problem"],
          "without systemd's bus the verdict is unknown, saying why", fm)
    check(f["nccl_topology"]["present"] is False and f["nccl_topology"]["problems"] == [], "no NCCL topology file", f)
    check("node" not in f and "gpus" not in json.dumps(f), "the node's whole inventory is not copied", list(f))
    env = f.get("nccl_env") or {}
    names = {s["name"]: s["value"] for s in env.get("settings", [])}
    check(env.get("path") == "/etc/privai/nccl.env" and env.get("state") in ("written", "current") and
          names.get("NCCL_P2P_LEVEL") == "NVL" and names.get("NCCL_TOPO_FILE", "absent") is None and
          all(s["why"] for s in env["settings"]), "the engines' NCCL settings, with their reasons", env)
    check(f.get("validation", "absent") is None, "no fabric validation yet: null", f.get("validation", "absent"))
    # privai-fabric validate (its tools played by tests/fixtures/fabric-tools): GPUDirect below its mark
    tools = os.path.join(ROOT, "tests", "fixtures", "fabric-tools")
    venv = dict(os.environ, PATH=tools + ":" + os.environ["PATH"], FAKE_IB="gdr-slow", FAKE_NCCL="pass",
                PRIVAI_FABRIC_CONFIG="/dev/null")
    v = subprocess.run([os.path.join(BUILD, "privai-fabric"), "validate", "--root", os.path.join(tmp, "trees", "hgx-h100")],
                       env=venv, capture_output=True, text=True, timeout=120)
    check(v.returncode == 1 and "4 failed" in v.stdout, "privai-fabric validate ran and kept its report", v.stdout[-300:])
    val = wait_host(a, lambda h: (h["fabric"].get("validation") or {}).get("failed") == 4,
                    "the validation reaches the node's host health")["fabric"].get("validation") or {}
    gdr = [t for t in val.get("tests", []) if t["kind"] == "rdma-gdr"]
    check(val.get("passed") == 5 and val.get("checked_at", 0) > 1.7e9 and len(gdr) == 4 and
          gdr[0]["state"] == "fail" and gdr[0]["measured"] == 188.4 and gdr[0]["mark"] == 380 and
          any("NCCL_NET_GDR_LEVEL" in h for h in gdr[0]["hints"]), "the validation's figures, marks and hints", gdr[:1])
    serve.send_signal(signal.SIGTERM)
    serve.wait(10)
    wait_host(a, lambda h: h["fabric"]["state"] == "missing" and "not serving" in h["fabric"]["error"],
              "privai-fabric stopped: missing")
    s = StandIn(sock)
    try:
        good = json.loads(subprocess.check_output(["cat", os.path.join(tmp, "status.json")]))
        cases = [
            ("answers 500", http(b"{}", 500), "answered 500"),
            ("is not HTTP", b"hello\n", "is not HTTP"),
            ("answers text", http(b"not json"), "is not JSON"),
            ("gives an unknown verdict", http(json.dumps(dict(good, fabric_manager=dict(
                good["fabric_manager"], verdict="great"))).encode()), "verdict is not one"),
            ("sends 65 problems", http(json.dumps(dict(good, nccl_topology=dict(
                good["nccl_topology"], problems=["p"] * 65))).encode()), "at most 64"),
            ("names a setting that is not NCCL's", http(json.dumps(dict(good, nccl_env=dict(
                good["nccl_env"], settings=[{"name": "LD_PRELOAD", "value": "/x.so", "why": "w"}]))).encode()),
             "needs a name NCCL_"),
            ("gives an unknown nccl_env state", http(json.dumps(dict(good, nccl_env=dict(
                good["nccl_env"], state="fine"))).encode()), "a state privai-fabric gives"),
            ("gives a validation test an unknown state", http(json.dumps(dict(good, validation={
                "checked_at": 1.8e9, "passed": 0, "failed": 0, "not_run": 0,
                "tests": [{"kind": "rdma", "name": "x", "state": "great", "hints": []}]})).encode()),
             "validation.tests[0] needs a kind and state"),
            ("sends a 300 KB answer", http(b" " * 300000), "longer than"),
            ("never answers", None, "within 2000 ms"),
        ]
        for what, answer, reason in cases:
            s.answer = answer
            wait_host(a, lambda h: h["fabric"]["state"] == "error" and reason in h["fabric"]["error"],
                      f"a status socket that {what} is an error naming it", 20)
        s.answer = http(json.dumps(good).encode())
        wait_host(a, lambda h: h["fabric"]["state"] == "ok", "a good answer again is read again", 20)
        r = a.get("/api/v1/health")
        check(r.status == 200, "the console kept answering meanwhile", r)
    finally:
        s.close()


def test_remote(adm, a, report):
    """A host part in another node's report is checked again."""
    anon = adm.client()
    tok = a.post("/api/v1/nodes/join-tokens", {}).json["token"]
    base = {"cpu": {"model": "x", "flags": "", "cores": 4}, "memory_bytes": 1 << 30, "numa": [], "nics": []}
    r = anon.post("/api/v1/nodes/join", {"token": tok, "name": "far", "url": "http://127.0.0.1:9", "report": base})
    check(r.status == 201, "a node joins by REST", r)
    nid, secret = r.json["node_id"], r.json["secret"]
    mine = self_host(a)
    hdr = {"X-Privai-Node-Secret": secret}

    def beat(host):
        r = anon.post(f"/api/v1/nodes/{nid}/heartbeat", {"report": dict(base, host=host)}, headers=hdr)
        check(r.status == 200, "a heartbeat with a host part is accepted", r)
        return a.get(f"/api/v1/nodes/{nid}").json["inventory"]["host"]

    got = beat(mine)
    check(got == mine, "a good host part is stored as sent", json.dumps(got)[:300])
    bad_pre = dict(mine["preflight"], checks=[dict(mine["preflight"]["checks"][0], status="bogus")])
    got = beat(dict(mine, preflight=bad_pre))
    check(got["preflight"]["state"] == "error" and "checks[0].status" in got["preflight"]["error"] and
          got["fabric"] == mine["fabric"], "a bad preflight part is stored as an error, the fabric part kept", got)
    got = beat(dict(mine, fabric={"state": "weird", "error": "x"}))
    check(got["fabric"]["state"] == "error" and "fabric.state must be ok, missing or error" in got["fabric"]["error"],
          "an unknown fabric state is an error", got["fabric"])
    got = beat(dict(mine, fabric={"state": "missing", "error": "privai-fabric is not serving"}))
    check(got["fabric"] == {"state": "missing", "error": "privai-fabric is not serving"}, "missing is passed on", got)
    got = beat("nonsense")
    check(got["preflight"]["state"] == "error" and got["fabric"]["state"] == "error", "a host part that is not an object")
    extra = dict(mine, preflight=dict(mine["preflight"], injected="<script>"))
    got = beat(extra)
    check("injected" not in json.dumps(got) and got["preflight"]["state"] == "ok", "unknown fields are dropped", got)
    many = dict(mine["preflight"], checks=[dict(mine["preflight"]["checks"][0], id=f"c{i}", status="warn")
                                           for i in range(200)],
                summary={"pass": 0, "warn": 200, "fail": 0, "skip": 0})
    got = beat(dict(mine, preflight=many))
    check(got["preflight"]["summary"]["warn"] == 200 and len(got["preflight"]["checks"]) == 96,
          "at most 96 problems are kept, all counted", got["preflight"]["summary"])
    check(a.request("DELETE", f"/api/v1/nodes/{nid}").status == 204, "remove the node")


def main():
    tmp = tempfile.mkdtemp(prefix="privai-host-test-")
    trees = os.path.join(tmp, "trees")
    subprocess.run([sys.executable, MAKE_TREES, trees], check=True, capture_output=True)
    pre = os.path.join(tmp, "preflight.json")
    tune = subprocess.run([os.path.join(BUILD, "privai-tune"), "check", "--root", os.path.join(trees, "hgx-h100-bad"),
                           "--output", pre], capture_output=True, text=True)
    check(tune.returncode == 1 and os.path.exists(pre), "privai-tune check wrote the bad node's report", tune.stderr)
    report = json.load(open(pre))
    sock = os.path.join(tmp, "fabric.sock")
    fenv = {k: v for k, v in os.environ.items() if not k.startswith(("PRIVAI_FABRIC_", "DBUS_"))}
    fenv.update(PRIVAI_FABRIC_CONFIG="/dev/null", PRIVAI_FABRIC_STATUS_SOCKET=sock, PRIVAI_FABRIC_BUS="user",
                PRIVAI_FABRIC_INTERVAL="2",
                XDG_RUNTIME_DIR=os.path.join(tmp, "no-bus"))
    os.mkdir(fenv["XDG_RUNTIME_DIR"])
    serve = subprocess.Popen([os.path.join(BUILD, "privai-fabric"), "serve", "--root", os.path.join(trees, "hgx-h100")],
                             env=fenv, stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, "serve.log"), "w"))
    wait_for(lambda: os.path.exists(sock), 10)
    out = subprocess.run(["curl", "-s", "--unix-socket", sock, "http://x/status"], capture_output=True)
    with open(os.path.join(tmp, "status.json"), "wb") as f:
        f.write(out.stdout)
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, ports="19130-19139",
                extra=["--node-name", "hgx", "--sys-root", XEON, "--heartbeat-s", "1", "--login-rate", "1000",
                       "--preflight-file", pre, "--fabric-socket", sock])
    try:
        a, _, _ = users(adm, PW)
        test_preflight(a, pre, report)
        test_fabric(a, sock, serve, tmp)
        test_remote(adm, a, report)
        check(adm.stop() == 0, "SIGTERM: clean exit")
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop(signal.SIGKILL)
        if serve.poll() is None:
            serve.kill()
        clean_up(tmp, 60)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
