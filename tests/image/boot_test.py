"""Boot the appliance image in qemu and check it through its REST API only.

Scenario 1: a NoCloud seed carrying a static address, a host name, an admin
password and an SSH key: the console answers over HTTPS, the password logs
in (not one-time), the day-0 record shows the host name and the static
address applied, the demo deployment answers a chat completion.
Scenario 2: the machine powered off and booted again: all of it holds and
day-0 configuration applies nothing twice.

qemu runs with KVM when /dev/kvm is there, else TCG; ports are forwarded on
127.0.0.1 only; the image is never written (a qcow2 overlay takes the
writes).  The durations are printed for docs/performance.md.

usage: python3 tests/image/boot_test.py IMAGE_DIR"""
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from adminlib import check, summary  # noqa: E402

IMAGE_DIR = sys.argv[1] if len(sys.argv) > 1 else "build/image"
PW = "image test password 42"
HOST = "privai-boot-test"
BOOT_LIMIT_S = int(os.environ.get("PRIVAI_BOOT_LIMIT_S", "900"))
SSH_KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f boot-test")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def seed_iso(tmp):
    d = os.path.join(tmp, "seed")
    os.makedirs(d)
    open(os.path.join(d, "meta-data"), "w").write("instance-id: privai-boot-test-1\nlocal-hostname: unused\n")
    open(os.path.join(d, "user-data"), "w").write(f"""#cloud-config
privai:
  hostname: {HOST}
  ip: 10.0.2.15/24
  gateway: 10.0.2.2
  dns: [10.0.2.3]
  admin_password: "{PW}"
  ssh_key: "{SSH_KEY}"
""")
    iso = os.path.join(tmp, "seed.iso")
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-V", "cidata", "-J", "-r", "-o", iso, d], check=True,
                   capture_output=True)
    return iso


class VM:
    def __init__(self, tmp, base, iso):
        self.tmp, self.iso = tmp, iso
        self.disk = os.path.join(tmp, "disk.qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", os.path.abspath(base), "-F", "qcow2",
                        self.disk], check=True)
        self.vars = os.path.join(tmp, "vars.fd")
        shutil.copy("/usr/share/OVMF/OVMF_VARS_4M.fd", self.vars)
        self.port = free_port()
        self.proc = None

    def start(self, log_name):
        self.serial = os.path.join(self.tmp, log_name)
        accel = ["-accel", "kvm", "-cpu", "host"] if os.access("/dev/kvm", os.W_OK) else ["-accel", "tcg", "-cpu", "max"]
        self.proc = subprocess.Popen([
            "qemu-system-x86_64", "-machine", "q35", *accel, "-m", "3072", "-smp", "2", "-display", "none",
            "-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
            "-drive", f"if=pflash,format=raw,file={self.vars}",
            "-drive", f"file={self.disk},if=virtio,format=qcow2",
            "-drive", f"file={self.iso},media=cdrom,readonly=on",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:443", "-device", "virtio-net-pci,netdev=n0",
            "-serial", f"file:{self.serial}", "-no-reboot"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.started = time.time()

    def request(self, method, path, body=None, headers=None, timeout=30):
        ctx = ssl._create_unverified_context()
        c = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=timeout, context=ctx)
        h = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        try:
            return r.status, json.loads(raw) if raw else None, r.headers
        except ValueError:
            return r.status, None, r.headers

    def wait_console(self):
        while time.time() - self.started < BOOT_LIMIT_S:
            if self.proc.poll() is not None:
                return None
            try:
                st, j, _ = self.request("GET", "/api/v1/health", timeout=5)
                if st == 200:
                    return time.time() - self.started
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(2)
        return None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()  # power off, as a hypervisor's hard stop
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n=60):
        try:
            return "\n".join(open(self.serial, errors="replace").read().splitlines()[-n:])
        except OSError:
            return ""


def session(vm):
    st, j, h = vm.request("POST", "/api/v1/auth/login", {"name": "admin", "password": PW})
    if st != 200:
        return None, st, j
    cookie = h.get("Set-Cookie", "").split(";")[0]
    return {"Cookie": cookie, "X-CSRF-Token": j["csrf_token"]}, st, j


def check_appliance(vm, label):
    auth, st, j = session(vm)
    check(auth is not None and j.get("must_change_password") is False,
          f"{label}: the admin password from the seed signs in, not one-time", (st, j))
    if auth is None:
        return None
    st, a, _ = vm.request("GET", "/api/v1/system/appliance", headers=auth)
    fb = (a or {}).get("firstboot") or {}
    steps = {s["step"]: s for s in fb.get("steps", [])}
    return auth, steps


def scenario(vm, label, first):
    t = vm.wait_console()
    check(t is not None, f"{label}: the console answers over HTTPS", vm.tail())
    if t is None:
        return None
    print(f"{label}: power-on to console answering: {t:.0f} s", flush=True)
    got = check_appliance(vm, label)
    if got is None:
        return t
    auth, steps = got
    want = "applied" if first else "unchanged"
    for step in ("hostname", "network", "admin_password", "ssh_key"):
        state = steps.get(step, {}).get("state")
        ok = state == want or (not first and step == "admin_password" and state == "unchanged")
        check(ok, f"{label}: day-0 {step} {want}", steps.get(step))
    check(HOST in steps.get("hostname", {}).get("message", "") and
          "10.0.2.15/24" in steps.get("network", {}).get("message", ""),
          f"{label}: the given host name and static address", steps)
    st, nodes, _ = vm.request("GET", "/api/v1/nodes", headers=auth)
    names = [n.get("name") for n in (nodes or {}).get("data", [])]
    check(st == 200 and HOST in names, f"{label}: the node is named {HOST}", names)
    st, deps, _ = vm.request("GET", "/api/v1/deployments", headers=auth)
    demo = [d for d in (deps or {}).get("data", []) if d.get("name") == "demo"]
    check(demo, f"{label}: the demo deployment exists", deps)
    if demo:
        deadline = time.time() + 300
        while time.time() < deadline and demo[0].get("state") not in ("running", "failed"):
            time.sleep(3)
            st, d, _ = vm.request("GET", f"/api/v1/deployments/{demo[0]['id']}", headers=auth)
            demo = [d] if st == 200 else demo
        st, out, _ = vm.request("POST", f"/api/v1/deployments/{demo[0]['id']}/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8},
                                headers=auth, timeout=120)
        check(st == 200 and out and out.get("choices"), f"{label}: the demo deployment answers a chat completion",
              (st, out, {k: demo[0].get(k) for k in ("state", "reason", "unit")}))
    return t


def main():
    base = os.path.join(IMAGE_DIR, "privai.qcow2")
    for tool in ("qemu-system-x86_64", "qemu-img", "xorriso"):
        if shutil.which(tool) is None:
            print(f"skip: {tool} is not installed")
            print("0 passed, 0 failed, 1 skipped")
            return 0
    if not os.path.exists(base):
        print(f"{base} is missing: make image first")
        print("0 passed, 1 failed, 0 skipped")
        return 1
    tmp = tempfile.mkdtemp(prefix="privai-boot-")
    vm = VM(tmp, base, seed_iso(tmp))
    try:
        vm.start("serial-1.log")
        t1 = scenario(vm, "first boot", True)
        vm.stop()
        if t1 is not None:
            vm.start("serial-2.log")
            scenario(vm, "second boot", False)
            vm.stop()
    finally:
        vm.stop()
        if os.environ.get("KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
