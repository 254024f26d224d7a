#!/usr/bin/env python3
"""Tasks (issue 23) against a live privai-admin: a resumable upload is a
task whose progress follows the bytes kept and which ends with the model
it made; a discarded upload's task fails saying who discarded it; a
model registered by path has a hashing task ending with its SHA-256; a
deployment's start is a task from loading to ready; a backup is one; a
task running when the admin stops is failed at the next start, not left
running; the list filters by state, one task has its log, and every
signed-in user may read them.
Usage: test_admin_tasks.py BUILD"""
import hashlib
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "..", "shared", "fixtures", "models", "tiny-llama-spm-f16.gguf")
PW = "tasks-test-password-1"
OCTET = {"Content-Type": "application/octet-stream"}


def task(c, ref):
    for t in c.get("/api/v1/tasks?limit=1000").json["data"]:
        if t["ref"] == ref:
            return t
    return None


def test_upload(o, v, data):
    n = len(data)
    uid = o.post("/api/v1/uploads", {"name": "up", "size": n}).json["id"]
    t = task(v, f"upload:{uid}")
    check(t and t["kind"] == "upload" and t["state"] == "running" and t["progress"] == 0 and t["actor"] == "olga" and
          t["target"] == "up", "an upload begins a task, at 0", t)
    third = n // 3
    r = o.request("PUT", f"/api/v1/uploads/{uid}?offset=0", raw=data[:third], headers=OCTET)
    t = task(v, f"upload:{uid}")
    check(r.status == 200 and t["state"] == "running" and abs(t["progress"] - third / n) < 1e-9,
          "its progress is the share of bytes kept", t)
    running = v.get("/api/v1/tasks?state=running").json["data"]
    check([x["ref"] for x in running] == [f"upload:{uid}"], "listed among the running", running)
    r = o.request("PUT", f"/api/v1/uploads/{uid}?offset={third}", raw=data[third:], headers=OCTET)
    t = task(v, f"upload:{uid}")
    sha = hashlib.sha256(data).hexdigest()
    check(r.status == 201 and t["state"] == "done" and t["progress"] == 1 and t["ended_at"] >= t["started_at"] and
          t["result"].startswith("model up registered") and sha[:16] in t["result"], "it ends with the model", t)
    one = v.get(f"/api/v1/tasks/{t['id']}").json
    check(f"{third} of {n} bytes kept" in one["log"] and one["log"].rstrip().endswith("done"),
          "its log says each part", one.get("log"))

    uid = o.post("/api/v1/uploads", {"name": "gone", "size": n}).json["id"]
    o.request("DELETE", f"/api/v1/uploads/{uid}")
    t = task(v, f"upload:{uid}")
    check(t["state"] == "failed" and t["result"] == "discarded by olga", "a discarded upload's task says who", t)
    uid = o.post("/api/v1/uploads", {"name": "bad", "size": 16}).json["id"]
    o.request("PUT", f"/api/v1/uploads/{uid}?offset=0", raw=b"x" * 16, headers=OCTET)
    t = task(v, f"upload:{uid}")
    check(t["state"] == "failed" and "not a usable GGUF file" in t["result"], "a file that is no model fails its task", t)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-tasks-")
    root = os.path.join(tmp, "models")
    os.makedirs(root)
    shutil.copy(MODEL, os.path.join(root, "tiny.gguf"))
    data = open(MODEL, "rb").read()
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, extra=("--model-root", root), ports="19300-19309")
    try:
        a, o, v = users(adm, PW)
        test_upload(o, v, data)
        m = o.post("/api/v1/models", {"name": "tiny", "path": os.path.join(root, "tiny.gguf")}).json
        t = wait_for(lambda: (lambda x: x if x and x["state"] != "running" else None)(task(v, f"hash:{m['id']}")),
                     timeout=30)
        sha = hashlib.sha256(data).hexdigest()
        check(t and t["kind"] == "model.hash" and t["state"] == "done" and t["result"] == f"SHA-256 {sha}" and
              t["target"] == "tiny.gguf" and t["actor"] == "system", "hashing a model by path is a task", t)
        dep = o.post("/api/v1/deployments", {"name": "tiny", "model": "tiny", "placement": {"kind": "cpu", "threads": 1},
                                             "options": {"ctx": 256}}).json["id"]
        t = wait_for(lambda: (lambda x: x if x and x["state"] != "running" else None)(task(v, f"deployment:{dep}")),
                     timeout=90)
        check(t and t["kind"] == "deployment.start" and t["state"] == "done" and t["target"] == "tiny" and
              t["result"].startswith("ready"), "a deployment's start is a task until it is ready", t)
        b = a.post("/api/v1/system/backups").json
        t = task(v, f"backup:{b['name']}")
        check(t and t["kind"] == "backup.create" and t["state"] == "done" and t["actor"] == "admin", "a backup is a task", t)
        for q, field in (("state=bogus", "state"), ("limit=0", "limit"), ("limit=x", "limit")):
            r = v.get(f"/api/v1/tasks?{q}")
            check(r.status == 422 and r.json["error"].get("field") == field, f"tasks?{q} refused", r)
        check(v.get("/api/v1/tasks/99999").status == 404, "an unknown task is 404")
        check(adm.client().get("/api/v1/tasks").status == 401, "tasks need a signed-in user")
        check(len(v.get("/api/v1/tasks?limit=2").json["data"]) == 2, "limit caps the list")
        uid = o.post("/api/v1/uploads", {"name": "cut", "size": len(data)}).json["id"]
        check(adm.stop() == 0, "the admin exits cleanly (no sanitizer report)", open(adm.log_path).read()[-2000:])
        adm.start()
        v = adm.client()
        v.login("vic", PW)
        t = task(v, f"upload:{uid}")
        check(t["state"] == "failed" and t["result"] == "privai-admin stopped while it ran",
              "a task running at a stop is failed at the next start", t)
        o = adm.client()
        o.login("olga", PW)
        r = o.request("PUT", f"/api/v1/uploads/{uid}?offset=0", raw=data, headers=OCTET)
        ts = [x for x in v.get("/api/v1/tasks").json["data"] if x["ref"] == f"upload:{uid}" and x["target"] == "cut"]
        check(r.status == 201 and [x["state"] for x in ts] == ["done", "failed"],
              "going on with the upload after the restart is a new task", ts)
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop()
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
