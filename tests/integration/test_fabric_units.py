"""privai-fabric driving Fabric Manager's unit through a real systemd user
manager (sd-bus), with tests/fabric_double/fake-fabricmanager.sh standing
in for nv-fabricmanager: status of a missing unit, start waiting for
ready with the config written first, stop, a version mismatch refused
before anything starts, a Fabric Manager that fails at start-up reported
as failed (no Restart=) or as a restart loop (Restart=on-failure), and
`serve` bringing Fabric Manager up and answering GET /status on its unix
socket until SIGTERM.  Also discovery on the live host through
libibverbs.

usage: python3 tests/integration/test_fabric_units.py BUILD_DIR"""
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, summary, wait_for  # noqa: E402
from test_admin_units import start_manager, stop_manager, systemctl, unit_props  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FABRIC = os.path.join(ROOT, BUILD, "privai-fabric")
MAKE_TREES = os.path.join(ROOT, "tests", "fixtures", "sysfs", "make-trees.py")
FAKE_FM = os.path.join(ROOT, "tests", "fabric_double", "fake-fabricmanager.sh")
UNIT = "nvidia-fabricmanager.service"
FM_CFG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"


class UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost", timeout=10)
        self.path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(10)
        self.sock.connect(self.path)


def get(sock, path, method="GET"):
    c = UnixHTTP(sock)
    c.request(method, path)
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def env_for(xdg, tree, **extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("PRIVAI_FABRIC_")}
    e.pop("DBUS_SESSION_BUS_ADDRESS", None)
    e.update(XDG_RUNTIME_DIR=xdg, PRIVAI_FABRIC_BUS="user", PRIVAI_FABRIC_ROOT=tree, PRIVAI_FABRIC_CONFIG="/dev/null",
             PRIVAI_FABRIC_READY_TIMEOUT="20")
    e.update(extra)
    return e


def fabric(env, *args, timeout=60):
    try:
        return subprocess.run([FABRIC, *args], capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        check(False, f"privai-fabric {' '.join(args)} finished within {timeout} s")
        return subprocess.CompletedProcess(args, 124, "", "timeout")


def install_unit(xdg, tree, tmp, behavior, restart):
    d = os.path.join(xdg, "systemd", "user")
    os.makedirs(d, exist_ok=True)
    seen = os.path.join(tmp, "fm-seen")
    with open(os.path.join(d, UNIT), "w") as f:
        f.write("[Unit]\nDescription=stand-in for NVIDIA Fabric Manager (tests)\n"
                "StartLimitIntervalSec=0\n\n[Service]\n"
                f"Environment=FAKE_FM_BEHAVIOR={behavior} FAKE_FM_SEEN={seen}\n"
                f"ExecStart={FAKE_FM} -c {os.path.join(tree, FM_CFG)}\n"
                + ("Restart=on-failure\nRestartSec=300ms\n" if restart else ""))
    systemctl(xdg, "daemon-reload")
    systemctl(xdg, "reset-failed", UNIT)
    return seen


def remove_unit(xdg):
    systemctl(xdg, "stop", UNIT)
    try:
        os.unlink(os.path.join(xdg, "systemd", "user", UNIT))
    except FileNotFoundError:
        pass
    systemctl(xdg, "daemon-reload")


def test_lifecycle(xdg, trees, tmp):
    hgx = trees["hgx-h100"]
    env = env_for(xdg, hgx)
    r = fabric(env, "fm", "status", "--json")
    st = json.loads(r.stdout or "{}")
    check(r.returncode == 1 and st.get("verdict") == "not-installed" and "not-found" in st.get("problem", ""),
          "fm status with no unit: not-installed, exit 1", r.stdout + r.stderr)

    seen = install_unit(xdg, hgx, tmp, "ok", restart=False)
    env_mode = dict(env, PRIVAI_FABRIC_MODE="shared-nvswitch")
    t0 = time.monotonic()
    r = fabric(env_mode, "fm", "start")
    took = time.monotonic() - t0
    props = unit_props(xdg, UNIT, "ActiveState", "SubState")
    check(r.returncode == 0 and "Fabric Manager: ready" in r.stdout and props.get("ActiveState") == "active",
          "fm start: the unit started and reported ready", r.stdout + r.stderr + str(props))
    check(took >= 2.5, "fm start waited for the unit to stay up (settle period), not just for the job", took)
    check(os.path.exists(seen) and "FABRIC_MODE=1" in open(seen).read(),
          "Fabric Manager started with the config written first (FABRIC_MODE=1)",
          open(seen).read() if os.path.exists(seen) else None)
    r = fabric(env_mode, "fm", "status", "--json")
    st = json.loads(r.stdout or "{}")
    check(r.returncode == 0 and st.get("verdict") == "ready" and st.get("state", {}).get("active") == "active" and
          st.get("mode") == "shared-nvswitch" and st.get("version") == "550.54.15",
          "fm status --json: ready, with the unit's state, mode and version", r.stdout)
    pid = st.get("state", {}).get("main_pid")
    r = fabric(env, "fm", "start")
    props = unit_props(xdg, UNIT, "MainPID")
    check(r.returncode == 0 and "config" in r.stdout and "updated" in r.stdout and props.get("MainPID") != str(pid),
          "fm start with a changed config restarts the running Fabric Manager", r.stdout + str(props))
    r = fabric(env, "fm", "stop")
    check(r.returncode == 0 and "stopped" in r.stdout and unit_props(xdg, UNIT, "ActiveState")["ActiveState"] ==
          "inactive", "fm stop: the unit stopped", r.stdout + r.stderr)
    r = fabric(env, "fm", "status")
    check(r.returncode == 1 and "stopped" in r.stdout and "fm start" in r.stdout,
          "fm status when stopped: exit 1 with the fix", r.stdout)
    r = fabric(env, "fm", "restart")
    check(r.returncode == 0 and "ready" in r.stdout, "fm restart: ready again", r.stdout + r.stderr)
    fabric(env, "fm", "stop")

    bad = env_for(xdg, trees["hgx-h100-bad"])
    r = fabric(bad, "fm", "start")
    check(r.returncode == 1 and "550.54.14 does not match driver 550.54.15" in r.stderr and
          unit_props(xdg, UNIT, "ActiveState")["ActiveState"] == "inactive",
          "fm start with Fabric Manager 550.54.14 against driver 550.54.15: refused, nothing started", r.stderr)
    r = fabric(bad, "fm", "status", "--json")
    check(json.loads(r.stdout or "{}").get("verdict") == "version-mismatch", "fm status: version-mismatch", r.stdout)

    r = fabric(env_for(xdg, trees["vm-guest"]), "fm", "start")
    check(r.returncode == 0 and "not needed" in r.stdout, "fm start on a node without NVSwitches: not needed",
          r.stdout + r.stderr)

    install_unit(xdg, hgx, tmp, "fail", restart=False)
    r = fabric(env, "fm", "start")
    check(r.returncode == 1 and "Fabric Manager: failed" in r.stdout and "exit status 1" in r.stderr,
          "a Fabric Manager that fails at start-up: failed, exit status named", r.stdout + r.stderr)
    r = fabric(env, "fm", "status", "--json")
    st = json.loads(r.stdout or "{}")
    check(st.get("verdict") == "failed" and "/var/log/fabricmanager.log" in st.get("problem", ""),
          "fm status: failed, pointing at the log", r.stdout)

    install_unit(xdg, hgx, tmp, "fail", restart=True)
    r = fabric(env, "fm", "start")
    check(r.returncode == 1 and "restart loop" in r.stdout and "keeps restarting" in r.stderr,
          "a failing Fabric Manager under Restart=on-failure: a restart loop", r.stdout + r.stderr)
    r = fabric(env, "fm", "status", "--json")
    check(json.loads(r.stdout or "{}").get("verdict") == "restart-loop", "fm status: restart-loop", r.stdout)
    fabric(env, "fm", "stop")
    remove_unit(xdg)


def test_serve(xdg, trees, tmp):
    hgx = trees["hgx-h100"]
    install_unit(xdg, hgx, tmp, "ok", restart=False)
    sock = os.path.join(tmp, "fabric.sock")
    env = env_for(xdg, hgx, PRIVAI_FABRIC_STATUS_SOCKET=sock, PRIVAI_FABRIC_INTERVAL="1",
                  PRIVAI_FABRIC_NCCL_TOPO_FILE="/etc/privai/nccl-topo.xml")
    # a run that stopped between its bind and its rename left this
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(sock + ".new")
    stale.close()
    log = open(os.path.join(tmp, "serve.log"), "w")
    proc = subprocess.Popen([FABRIC, "serve"], env=env, stdout=log, stderr=log)
    try:
        up = wait_for(lambda: os.path.exists(sock), timeout=20)
        check(up, "serve: the status socket appears", open(os.path.join(tmp, "serve.log")).read())
        if not up:
            return
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(sock)
            accepted = True
        except OSError as e:
            accepted = e
        probe.close()
        check(accepted is True and not os.path.exists(sock + ".new"),
              "serve: the socket listens as soon as its path appears (bound as .new, renamed), a stale .new replaced",
              accepted)
        check(oct(os.stat(sock).st_mode & 0o777) in ("0o600", "0o660"), "serve: the socket is not world-writable",
              oct(os.stat(sock).st_mode))
        def verdict_is(want):
            try:
                return json.loads(get(sock, "/status")[1])["fabric_manager"]["verdict"] == want
            except OSError:
                return False  # not answering: reported below with its exit status and log
        ready = wait_for(lambda: verdict_is("ready"), timeout=20)
        if not ready:
            # once a CI run saw the socket refuse connections here, and no log
            check(False, "serve answers GET /status and says ready",
                  "exit status %r; log: %s" % (proc.poll(), open(os.path.join(tmp, "serve.log")).read()[-3000:]))
            return
        code, body = get(sock, "/status")
        doc = json.loads(body)
        check(code == 200 and doc["fabric_manager"]["ready"] is True,
              "serve started Fabric Manager, and GET /status says ready", body[:300])
        check(len(doc["node"]["gpus"]) == 8 and doc["nccl_topology"]["present"] is False and
              doc["nccl_topology"]["needed"] is False, "GET /status: the node, and no topology file needed on "
              "bare metal", doc["nccl_topology"])
        # the engines' NCCL settings: written, kept current, an operator's edit left alone
        env_file = os.path.join(hgx, "etc", "privai", "nccl.env")
        ne = doc.get("nccl_env") or {}
        names = {s["name"]: s.get("value") for s in ne.get("settings", [])}
        text = open(env_file).read() if os.path.exists(env_file) else ""
        check(ne.get("path") == "/etc/privai/nccl.env" and ne.get("state") in ("written", "current") and
              names.get("NCCL_NET_GDR_LEVEL") == "PIX" and "\nNCCL_P2P_LEVEL=NVL\n" in text,
              "serve writes nccl.env, and GET /status lists its settings", (ne, text[:200]))
        wait_for(lambda: json.loads(get(sock, "/status")[1])["nccl_env"]["state"] == "current", timeout=10)
        with open(env_file, "w") as f:
            f.write("# mine\nNCCL_IB_HCA=mlx5_0\n")
        edited = wait_for(lambda: json.loads(get(sock, "/status")[1])["nccl_env"]["state"] == "hand-edited",
                          timeout=10)
        check(edited and open(env_file).read() == "# mine\nNCCL_IB_HCA=mlx5_0\n",
              "serve leaves a hand-edited nccl.env alone, and says so", open(env_file).read())
        os.unlink(env_file)
        back = wait_for(lambda: os.path.exists(env_file) and "NCCL_P2P_LEVEL=NVL" in open(env_file).read(), timeout=10)
        check(back, "serve writes nccl.env again once it is removed")
        systemctl(xdg, "stop", UNIT)
        stopped = wait_for(lambda: json.loads(get(sock, "/status")[1])["fabric_manager"]["verdict"] == "stopped",
                           timeout=20)
        check(stopped, "serve sees Fabric Manager stop within its interval")
        code, _ = get(sock, "/status", method="POST")
        check(code == 405, "POST /status: 405", code)
        code, _ = get(sock, "/nope")
        check(code == 404, "GET /nope: 404", code)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            rc = proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        log.close()
    text = open(os.path.join(tmp, "serve.log")).read()
    check(rc == 0 and not os.path.exists(sock), "serve: SIGTERM exits 0 and removes the socket", (rc, text[-300:]))
    check("Sanitizer" not in text and "runtime error" not in text, "serve: no sanitizer report", text[-500:])
    with open(sock, "w") as f:
        f.write("not a socket")
    r = fabric(env, "serve", timeout=20)
    check(r.returncode == 2 and "not a socket" in r.stderr and open(sock).read() == "not a socket",
          "serve with a regular file at the socket path: refused, the file left alone", r.stderr)
    os.unlink(sock)
    with open(sock + ".new", "w") as f:
        f.write("not a socket")
    r = fabric(env, "serve", timeout=20)
    check(r.returncode == 2 and "fabric.sock.new exists and is not a socket" in r.stderr and
          open(sock + ".new").read() == "not a socket" and not os.path.exists(sock),
          "serve with a regular file where it binds (PATH.new): refused, the file left alone", r.stderr)
    remove_unit(xdg)


def test_verbs():
    e = {k: v for k, v in os.environ.items() if not k.startswith("PRIVAI_FABRIC_")}
    e["PRIVAI_FABRIC_CONFIG"] = "/dev/null"
    r = subprocess.run([FABRIC, "discover", "--json"], capture_output=True, text=True, timeout=30, env=e)
    doc = json.loads(r.stdout or "{}")
    note = doc.get("rdma_note", "")
    check(r.returncode == 0 and (doc.get("rdma_source") == "libibverbs" or "libibverbs" in note),
          "discover on the live host asks libibverbs (here: " + (note or doc.get("rdma_source", "?")) + ")",
          r.stdout[:300] + r.stderr[:300])


def main():
    test_verbs()
    tmp = tempfile.mkdtemp(prefix="privai-fabric-units-")
    try:
        out = os.path.join(tmp, "trees")
        subprocess.run([sys.executable, MAKE_TREES, out, "hgx-h100", "hgx-h100-bad", "vm-guest"], check=True,
                       capture_output=True)
        trees = {n: os.path.join(out, n) for n in os.listdir(out)}
        mgr, why = start_manager(tmp)
        if mgr is None:
            print(f"SKIP: Fabric Manager lifecycle tests: {why}")
        else:
            proc, xdg = mgr
            try:
                test_lifecycle(xdg, trees, tmp)
                test_serve(xdg, trees, tmp)
            finally:
                stop_manager(proc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary()


if __name__ == "__main__":
    main()
