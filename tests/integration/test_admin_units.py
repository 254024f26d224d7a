"""privai-admin running engines as transient systemd units, against a real
systemd user manager (its own XDG_RUNTIME_DIR, started in a private mount
namespace so it believes the host was booted with systemd): the unit and
its properties as the manager reports them, the engine's process outside
privai-admin's tree with no_new_privs set, a chat through it, a killed
engine restarted by the supervisor in a new unit, stop, an admin killed
with -9 or stopped leaving its engine serving and the next admin keeping
it (or replacing it when its settings changed), two admins on one manager
keeping apart, and a binary the manager cannot run.

usage: python3 tests/integration/test_admin_units.py BUILD_DIR"""
import http.client
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, BUILD, "demo", "privai-demo.gguf")
SYSTEMD = "/lib/systemd/systemd"
PW = "correct horse battery staple"


def start_manager(tmp):
    """A systemd user manager of our own, or (None, why) when this host cannot run one."""
    if not os.access(SYSTEMD, os.X_OK) or shutil.which("unshare") is None:
        return None, f"{SYSTEMD} or unshare is missing"
    xdg = os.path.join(tmp, "xdg")
    os.makedirs(xdg, mode=0o700)
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    log = open(os.path.join(tmp, "systemd.log"), "ab")
    # sd_booted() looks for /run/systemd/system: give the manager its own /run
    script = f"mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/system && exec {SYSTEMD} --user"
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], env=env, stdout=log, stderr=log,
                            start_new_session=True)
    ok = wait_for(lambda: proc.poll() is None and os.path.exists(os.path.join(xdg, "bus")) and
                  systemctl(xdg, "is-system-running").returncode in (0, 1), timeout=20)
    if not ok:
        stop_manager(proc)
        return None, "the user manager did not come up (see systemd.log)"
    return (proc, xdg), None


def stop_manager(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def systemctl(xdg, *args):
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
    env.pop("DBUS_SESSION_BUS_ADDRESS", None)
    return subprocess.run(["systemctl", "--user", "--no-pager", *args], env=env, capture_output=True, text=True,
                          timeout=30)


def unit_props(xdg, unit, *names):
    out = systemctl(xdg, "show", unit, "-p", ",".join(names)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def engine_units(xdg):
    out = systemctl(xdg, "list-units", "--all", "--plain", "--no-legend", "privai-engine-*").stdout
    return sorted(line.split()[0] for line in out.splitlines() if line.strip())


def deployment(c, dep_id):
    return c.get(f"/api/v1/deployments/{dep_id}").json


def ready(c, dep_id, old_pid=None):
    def f():
        d = deployment(c, dep_id)
        return d if d["state"] == "ready" and d["pid"] != old_pid else None
    return wait_for(f, timeout=90)


def proc_status(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def health(port):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None


def test_unit(adm, a, xdg):
    text = open(adm.log_path, errors="replace").read()
    check("engines run as transient units of the systemd user manager" in text, "the admin says how engines run")
    d = ready(a, 1)
    check(d is not None and d["unit"] and d["unit"].startswith("privai-engine-") and d["unit"].endswith("-1.service"),
          "the demo deployment is ready in a named unit", d)
    if d is None:
        return None
    unit = d["unit"]
    p = unit_props(xdg, unit, "ActiveState", "MainPID", "Type", "Slice", "NoNewPrivileges", "Description",
                   "StandardOutput", "ExecStart")
    check(p.get("ActiveState") == "active" and p.get("MainPID") == str(d["pid"]),
          "the manager runs it, with the pid the API reports", (p, d["pid"]))
    check(p.get("Type") == "exec" and p.get("Slice") == "privai.slice" and p.get("NoNewPrivileges") == "yes",
          "Type=exec, in privai.slice, NoNewPrivileges", p)
    check(p.get("Description") == "privai engine for deployment demo", "described by its deployment", p)
    text = systemctl(xdg, "cat", unit).stdout
    log = os.path.join(adm.state, "deployments", "1", "engine.log")
    check(p.get("StandardOutput") == "append" and f"StandardOutput=append:{log}" in text and
          f"StandardError=append:{log}" in text, "stdout and stderr appended to the deployment's log", text)
    check("--port" in p.get("ExecStart", "") and "--api-key-file" in p.get("ExecStart", ""),
          "ExecStart is the engine's command line", p.get("ExecStart"))
    check(proc_status(d["pid"], "NoNewPrivs") == "1", "the kernel has no_new_privs set on the engine")
    ppid = proc_status(d["pid"], "PPid")
    check(ppid is not None and int(ppid) != adm.proc.pid, "the engine is not privai-admin's child", ppid)
    if os.geteuid() == 0:
        p = unit_props(xdg, unit, "ProtectSystem", "ProtectHome", "LimitMEMLOCK")
        check(p == {"ProtectSystem": "strict", "ProtectHome": "read-only", "LimitMEMLOCK": "infinity"},
              "a manager running as root also gets the namespace hardening and memlock", p)
    r = a.post("/api/v1/deployments/1/v1/chat/completions",
               {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})
    check(r.status == 200 and r.json["choices"][0]["message"]["role"] == "assistant", "a chat through the unit", r)
    return d


def test_cpu_sets(a, xdg, demo):
    """A placement with threads gets CPUs of its own, through CPUAffinity= and
    AllowedCPUs=; the node's CPUs are not handed out twice unless asked."""
    cpus = len(os.sched_getaffinity(0))
    if cpus < 2:
        print(f"SKIP: CPU sets need two CPUs, this machine gives {cpus}")
        return
    model = demo["model_id"]
    every = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
    p = unit_props(xdg, demo["unit"], "ExecStart")
    check(f"--max-threads {cpus} " in p.get("ExecStart", "") and "--threads" not in p.get("ExecStart", ""),
          f"a shared engine starts with a thread for each of the {cpus} CPUs, to follow the pool", p)
    got = []
    for name in ("pin-a", "pin-b"):
        r = a.post("/api/v1/deployments", {"name": name, "model": model, "placement": {"kind": "cpu", "threads": 1}})
        check(r.status == 201, f"{name}: one thread of its own", r)
        if r.status != 201:
            return
        d = ready(a, r.json["id"])
        check(d is not None and d.get("cpus") is not None and d["cpus"].isdigit(), f"{name} runs on one CPU", d)
        if d is None or not d.get("cpus"):
            return
        p = unit_props(xdg, d["unit"], "CPUAffinity", "AllowedCPUs")
        check(p.get("CPUAffinity") == d["cpus"] and p.get("AllowedCPUs") == d["cpus"],
              f"{name}'s unit has CPUAffinity= and AllowedCPUs= {d['cpus']}", p)
        check(proc_status(d["pid"], "Cpus_allowed_list") == d["cpus"], f"the kernel runs {name} on CPU {d['cpus']}",
              proc_status(d["pid"], "Cpus_allowed_list"))
        got.append(d)
        if name == "pin-a" and cpus == 2:
            # the demo deployment (threads 0) moves off pin-a's CPU, in place
            other = str(({0, 1} - {int(d["cpus"])}).pop())
            moved = wait_for(lambda: proc_status(demo["pid"], "Cpus_allowed_list") == other and
                             deployment(a, demo["id"]).get("cpus") == other, timeout=10)
            check(moved, "an engine without threads of its own leaves the CPU pin-a took",
                  (proc_status(demo["pid"], "Cpus_allowed_list"), deployment(a, demo["id"]).get("cpus")))
            check(deployment(a, demo["id"])["pid"] == demo["pid"], "moved without a restart")
    check(got[0]["cpus"] != got[1]["cpus"], "two placements with a thread each get different CPUs",
          [d["cpus"] for d in got])
    if cpus == 2:
        r = a.post("/api/v1/deployments", {"name": "pin-c", "model": model, "placement": {"kind": "cpu", "threads": 1}})
        check(r.status == 409 and r.json["error"]["code"] == "cpus_exhausted" and
              r.json["error"]["field"] == "placement.threads" and "pin-a (1)" in r.json["error"]["message"] and
              "pin-b (1)" in r.json["error"]["message"], "a third is refused, naming who holds the CPUs", r)
        r = a.post("/api/v1/deployments", {"name": "pin-c", "model": model,
                                           "placement": {"kind": "cpu", "threads": 1, "oversubscribe": True}})
        check(r.status == 201 and r.json["placement"] == {"kind": "cpu", "threads": 1, "oversubscribe": True},
              "placement.oversubscribe lets it share", r)
        if r.status == 201:
            a.request("DELETE", f"/api/v1/deployments/{r.json['id']}")
    # stopped, a deployment gives its CPUs back; started again, it is checked again
    r = a.request("PATCH", f"/api/v1/deployments/{got[0]['id']}", {"desired": "stopped"})
    check(r.status == 200, "pin-a stopped", r)
    r = a.post("/api/v1/deployments", {"name": "pin-d", "model": model, "placement": {"kind": "cpu", "threads": 1}})
    check(r.status == 201, "its CPU is free again", r)
    if cpus == 2:
        r2 = a.request("PATCH", f"/api/v1/deployments/{got[0]['id']}", {"desired": "running"})
        check(r2.status == 409 and r2.json["error"]["code"] == "cpus_exhausted",
              "starting pin-a again while pin-b and pin-d hold the CPUs is refused", r2)
    for d in got + ([r.json] if r.status == 201 else []):
        a.request("DELETE", f"/api/v1/deployments/{d['id']}")
    # with no CPU held any more, the demo deployment has all of them again
    back = wait_for(lambda: proc_status(demo["pid"], "Cpus_allowed_list") in (every, f"0-{cpus - 1}"), timeout=30)
    check(back, "it gets the CPUs back when they are given up", proc_status(demo["pid"], "Cpus_allowed_list"))


def test_killed_engine(a, xdg, d):
    restarts = d["restarts"]
    os.kill(d["pid"], signal.SIGKILL)
    n = ready(a, 1, old_pid=d["pid"])
    check(n is not None and n["restarts"] == restarts + 1 and n["unit"] == d["unit"],
          "killed with -9: the supervisor restarts it in the same unit", n)
    if n is not None:
        p = unit_props(xdg, n["unit"], "ActiveState", "MainPID")
        check(p == {"ActiveState": "active", "MainPID": str(n["pid"])}, "the manager has the new process", p)
    aud = a.get("/metrics").body.decode()
    check('privai_admin_deployment_restarts_total{deployment="demo"} 1' in aud, "the restart is counted", aud[-400:])
    return n


def test_stop_start(a, xdg, d):
    r = a.request("PATCH", "/api/v1/deployments/1", {"desired": "stopped"})
    check(r.status == 200, "stop asked", r)
    s = wait_for(lambda: (lambda j: j if j["state"] == "stopped" else None)(deployment(a, 1)), timeout=40)
    check(s is not None and s["pid"] is None and s["unit"] is None, "stopped: no pid, no unit", s)
    check(wait_for(lambda: engine_units(xdg) == [], 10), "the unit is gone from the manager", engine_units(xdg))
    check(proc_status(d["pid"], "State") is None, "the engine process is gone")
    a.request("PATCH", "/api/v1/deployments/1", {"desired": "running"})
    n = ready(a, 1, old_pid=d["pid"])
    check(n is not None and engine_units(xdg) == [n["unit"]], "started again in a fresh unit", n)
    return n


def chat(c):
    r = c.post("/api/v1/deployments/1/v1/chat/completions",
               {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4})
    return r.status == 200 and r.json["choices"][0]["message"]["role"] == "assistant"


def new_log(adm, since):
    with open(adm.log_path, errors="replace") as f:
        f.seek(since)
        return f.read()


def test_admin_restart(adm, a, xdg, d):
    """Under systemd an engine outlives its admin; the next admin keeps it
    when it runs what it would start, and replaces it otherwise."""
    adm.stop(signal.SIGKILL)
    time.sleep(0.5)
    check(unit_props(xdg, d["unit"], "ActiveState") == {"ActiveState": "active"} and health(d["port"]) == 200,
          "privai-admin killed with -9: its engine still serves", health(d["port"]))
    mark = os.path.getsize(adm.log_path)
    while time.time() < d["started_at"] + 3:  # an adoption time would then differ from the start
        time.sleep(0.2)
    restarted_at = int(time.time())
    adm.start()
    a2 = adm.client()
    a2.login("admin", PW)
    n = ready(a2, 1)
    check(n is not None and n["pid"] == d["pid"] and n["unit"] == d["unit"],
          "the restarted admin kept the running engine: same process, same unit", n or deployment(a2, 1))
    check(n is not None and abs(n["started_at"] - d["started_at"]) <= 1 and n["started_at"] < restarted_at - 1,
          "its started_at is when the engine started, not when it was adopted",
          ((n or {}).get("started_at"), d["started_at"], restarted_at))
    check("kept 1 engine(s) a previous run left serving (demo); replaced 0" in new_log(adm, mark),
          "and says so in its log", new_log(adm, mark)[-300:])
    check(chat(a2), "a chat through the kept engine with the new admin's key (it reread its key file)")
    check(engine_units(xdg) == [d["unit"]], "no second unit", engine_units(xdg))

    # SIGTERM leaves it serving too
    check(adm.stop() == 0 and health(d["port"]) == 200 and proc_status(d["pid"], "State") is not None,
          "privai-admin stopped with SIGTERM: its engine goes on serving")
    # settings changed behind its back: the next admin must not keep the old engine
    db = sqlite3.connect(os.path.join(adm.state, "privai.db"), timeout=10)
    db.execute("UPDATE deployments SET options = json_set(options, '$.ctx', 256) WHERE id = 1")
    db.commit()
    db.close()
    mark = os.path.getsize(adm.log_path)
    adm.start()
    a2 = adm.client()
    a2.login("admin", PW)
    n = ready(a2, 1, old_pid=d["pid"])
    check(n is not None and n["unit"] == d["unit"] and proc_status(d["pid"], "State") is None,
          "an engine that runs other settings is replaced in the same unit", n or deployment(a2, 1))
    check("kept 0 engine(s) a previous run left serving; replaced 1" in new_log(adm, mark),
          "and the log says it was replaced", new_log(adm, mark)[-300:])
    check(n is not None and "--ctx" in unit_props(xdg, n["unit"], "ExecStart").get("ExecStart", "") and chat(a2),
          "the new engine runs the new settings and answers")
    return a2, n


def test_two_admins(tmp, xdg, d):
    """A second admin on the same manager keeps to its own units; its engine
    binary is upgraded while it is stopped, so its next start replaces the
    engine rather than keep the old code running."""
    env = {"XDG_RUNTIME_DIR": xdg, "PRIVAI_ENGINE_RUNNER": "systemd-user"}
    engine = os.path.join(tmp, "engine-copy")
    shutil.copy2(os.path.join(BUILD, "privai-engine"), engine)
    b = Admin(BUILD, os.path.join(tmp, "b"), PW, extra=("--demo-model", DEMO, "--engine", engine), env_extra=env,
              ports="19190-19199")
    bc = b.client()
    bc.login("admin", PW)
    e = ready(bc, 1)
    check(e is not None and e["unit"] != d["unit"], "a second admin's engine has a unit of its own", e)
    check(proc_status(d["pid"], "State") is not None, "starting the second admin left the first's engine alone")
    if e is None:
        b.stop()
        return
    b.stop()
    shutil.copy2(os.path.join(BUILD, "privai-engine"), engine + ".new")
    os.rename(engine + ".new", engine)  # as a package upgrade does
    mark = os.path.getsize(b.log_path)
    b.start()
    bc = b.client()
    bc.login("admin", PW)
    n = ready(bc, 1, old_pid=e["pid"])
    check(n is not None and proc_status(e["pid"], "State") is None and "replaced 1" in new_log(b, mark),
          "an engine whose binary was upgraded is replaced, not kept", new_log(b, mark)[-300:])
    r = bc.request("DELETE", "/api/v1/deployments/1")
    check(r.status == 204, "the second admin's deployment deleted", r)
    check(wait_for(lambda: engine_units(xdg) == [d["unit"]], 20), "deleting it stopped only its own unit",
          engine_units(xdg))
    check(proc_status(d["pid"], "State") is not None, "the first admin's engine still runs")
    b.stop()


def test_bad_binary(tmp, xdg):
    """An engine path the manager cannot execute: failed, with the manager's reason."""
    env = {"XDG_RUNTIME_DIR": xdg, "PRIVAI_ENGINE_RUNNER": "systemd-user"}
    bogus = os.path.join(tmp, "not-an-engine")
    with open(bogus, "w") as f:
        f.write("this is not a program\n")
    os.chmod(bogus, 0o755)
    c = Admin(BUILD, os.path.join(tmp, "c"), PW, extra=("--demo-model", DEMO, "--engine", bogus), env_extra=env,
              ports="19190-19199")
    cc = c.client()
    cc.login("admin", PW)
    f = wait_for(lambda: (lambda j: j if j["state"] == "failed" else None)(deployment(cc, 1)), timeout=30)
    check(f is not None and "could not execute the engine binary" in (f["reason"] or ""),
          "failed with the manager's reason (exit 203)", f)
    check(f is not None and f["unit"] is None and f["pid"] is None, "no unit or pid recorded for it", f)
    c.stop()


def test_options(tmp):
    """The mode is checked; a systemd mode without its manager is an error naming the bus."""
    exe = os.path.join(BUILD, "privai-admin")
    r = subprocess.run([exe, "--dev", "--port", "0", "--state-dir", os.path.join(tmp, "o1"),
                        "--engine-runner", "sideways"], capture_output=True, text=True, timeout=30)
    check(r.returncode == 2 and "--engine-runner is auto, systemd, systemd-user or child" in r.stderr,
          "a bad --engine-runner is refused", r.stderr)
    env = dict(os.environ, XDG_RUNTIME_DIR=os.path.join(tmp, "no-such-runtime"),
               DBUS_SYSTEM_BUS_ADDRESS="unix:path=" + os.path.join(tmp, "no-such-bus"))
    for mode, bus in (("systemd", "system"), ("systemd-user", "user")):
        r = subprocess.run([exe, "--dev", "--port", "0", "--state-dir", os.path.join(tmp, "o-" + mode),
                            "--engine-runner", mode], capture_output=True, text=True, env=env, timeout=30)
        check(r.returncode == 1 and f"systemd {bus} bus" in r.stderr, f"--engine-runner {mode} with no manager: "
              "a clear error", r.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-units-")
    test_options(tmp)
    mgr, why = start_manager(tmp)
    if mgr is None:
        print(f"SKIP: transient units need a systemd user manager: {why}")
        print("0 passed, 0 failed, 1 skipped")
        clean_up(tmp)
        return 0
    proc, xdg = mgr
    try:
        env = {"XDG_RUNTIME_DIR": xdg, "PRIVAI_ENGINE_RUNNER": "systemd-user"}
        adm = Admin(BUILD, os.path.join(tmp, "a"), PW, extra=("--demo-model", DEMO), env_extra=env,
                    ports="19180-19189")
        a = adm.client()
        a.login("admin", PW)
        d, d2 = test_unit(adm, a, xdg), None
        if d is not None:
            test_cpu_sets(a, xdg, d)
            d = test_killed_engine(a, xdg, d) or d
            d = test_stop_start(a, xdg, d) or d
            a, d2 = test_admin_restart(adm, a, xdg, d)
            if d2 is not None:
                test_two_admins(tmp, xdg, d2)
        test_bad_binary(tmp, xdg)
        adm.stop()
        check(engine_units(xdg) == [d2["unit"]] if d2 else False, "a stopped admin leaves its engine serving",
              engine_units(xdg))
        systemctl(xdg, "stop", "privai.slice")
        check(wait_for(lambda: engine_units(xdg) == [], 30), "systemctl stop privai.slice stops every engine",
              engine_units(xdg))
    finally:
        stop_manager(proc)
        clean_up(tmp)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
