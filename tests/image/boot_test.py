"""Boot the appliance image in qemu and check it through its REST API.

1. NoCloud seed (static address, host name, admin password, SSH key), UEFI:
   the console answers over HTTPS, the password signs in (not one-time),
   day-0 shows the host name and address applied, the node is named, the
   demo deployment answers a chat completion.
2. The same disk powered off and booted again, this time by a PC BIOS
   (SeaBIOS; the disk carries GRUB for both): all of it holds and day-0
   applies nothing twice.
3. The vSphere path: no seed, an ovf-env.xml on a CD instead, its
   properties the OVA descriptor's own (every ProductSection property,
   defaults where the test sets none, as vSphere sends them): they take
   effect.  This appliance is the leader of scenario 5.
4. A seed with a bad address and a bad password: the console answers at
   the DHCP address, day-0 reports both (record and machine console), the
   given password is refused and the one-time one is in force (read over
   SSH with the seed's key, as root would on the console).
5. A second appliance on a private qemu network with the first (a socket
   netdev between the two qemu processes, no host network): from its OVF
   properties (role member, the leader's URL, a join token and key pin made
   through the leader's API) it joins; both sides show it.

qemu runs with KVM when /dev/kvm is there, else TCG; ports are forwarded on
127.0.0.1 only; the images are never written (qcow2 overlays take the
writes).  Durations are printed for docs/performance.md.

usage: python3 tests/image/boot_test.py IMAGE_DIR [SCENARIOS]   (e.g. 1,2; default all)"""
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
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from adminlib import check, summary  # noqa: E402

IMAGE_DIR = sys.argv[1] if len(sys.argv) > 1 else "build/image"
SCENARIOS = {int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else "1,2,3,4,5").split(",")}
PW = "image test password 42"
HOST = "privai-boot-test"
BOOT_LIMIT_S = int(os.environ.get("PRIVAI_BOOT_LIMIT_S", "900"))
OVF_NS = "{http://schemas.dmtf.org/ovf/envelope/1}"
LEADER_IP, MEMBER_IP = "192.168.77.1", "192.168.77.2"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def iso(tmp, name, label, files):
    d = os.path.join(tmp, name + ".d")
    os.makedirs(d)
    for fname, text in files.items():
        open(os.path.join(d, fname), "w").write(text)
    out = os.path.join(tmp, name + ".iso")
    subprocess.run(["xorriso", "-as", "mkisofs", "-quiet", "-V", label, "-J", "-r", "-o", out, d], check=True,
                   capture_output=True)
    return out


def nocloud_iso(tmp, name, keys):
    body = "".join(f"  {k}: {json.dumps(v)}\n" for k, v in keys.items())
    return iso(tmp, name, "cidata", {"meta-data": f"instance-id: privai-{name}\nlocal-hostname: unused\n",
                                     "user-data": "#cloud-config\nprivai:\n" + body})


def ovf_env_iso(tmp, name, descriptor, values):
    """ovf-env.xml as vSphere writes it: every property of the descriptor's
    ProductSection, with the value given or the property's default."""
    env = ET.parse(descriptor).getroot()
    props = {p.get(OVF_NS + "key"): p.get(OVF_NS + "value", "") for p in env.iter(OVF_NS + "Property")}
    unknown = set(values) - set(props)
    check(not unknown, f"{name}: every property the test sets is one the OVA declares", unknown)
    lines = ['<?xml version="1.0" encoding="UTF-8"?>',
             '<Environment xmlns="http://schemas.dmtf.org/ovf/environment/1" '
             'xmlns:oe="http://schemas.dmtf.org/ovf/environment/1" oe:id="privai">',
             "  <PlatformSection><Kind>qemu</Kind></PlatformSection>", "  <PropertySection>"]
    for k, default in props.items():
        v = values.get(k, default)
        v = v.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
        lines.append(f'    <Property oe:key="{k}" oe:value="{v}"/>')
    lines += ["  </PropertySection>", "</Environment>", ""]
    return iso(tmp, name, "OVF ENV", {"ovf-env.xml": "\n".join(lines)})


class VM:
    def __init__(self, tmp, name, base, cd, private=None):
        """private: ("listen" | "connect", port) puts a first NIC on a
        socket network shared with another qemu; the user-mode NIC (DHCP,
        forwarded ports) comes after it."""
        self.tmp, self.name, self.cd, self.private = tmp, name, cd, private
        self.disk = os.path.join(tmp, name + ".qcow2")
        subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", os.path.abspath(base), "-F", "qcow2",
                        self.disk], check=True)
        self.vars = os.path.join(tmp, name + "-vars.fd")
        shutil.copy("/usr/share/OVMF/OVMF_VARS_4M.fd", self.vars)
        self.port, self.ssh_port = free_port(), free_port()
        self.proc = None

    def start(self, log_name, firmware="uefi"):
        self.serial = os.path.join(self.tmp, log_name)
        accel = ["-accel", "kvm", "-cpu", "host"] if os.access("/dev/kvm", os.W_OK) else ["-accel", "tcg", "-cpu", "max"]
        fw = ["-drive", "if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd",
              "-drive", f"if=pflash,format=raw,file={self.vars}"] if firmware == "uefi" else []
        nics = []
        if self.private:
            mode, port = self.private
            nics += ["-netdev", f"socket,id=p0,{mode}=127.0.0.1:{port}",
                     "-device", "virtio-net-pci,netdev=p0,addr=0x5,mac=52:54:00:77:00:0" + ("1" if mode == "listen" else "2")]
        nics += ["-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{self.port}-:443,"
                 f"hostfwd=tcp:127.0.0.1:{self.ssh_port}-:22", "-device", "virtio-net-pci,netdev=n0,addr=0x6"]
        self.proc = subprocess.Popen([
            "qemu-system-x86_64", "-machine", "q35", *accel, "-m", "3072", "-smp", "2", "-display", "none", *fw,
            "-drive", f"file={self.disk},if=virtio,format=qcow2",
            "-drive", f"file={self.cd},media=cdrom,readonly=on", *nics,
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

    def console_text(self):
        try:
            return open(self.serial, errors="replace").read()
        except OSError:
            return ""

    def tail(self, n=60):
        return "\n".join(self.console_text().splitlines()[-n:])


def session(vm, password=PW):
    st, j, h = vm.request("POST", "/api/v1/auth/login", {"name": "admin", "password": password})
    if st != 200:
        return None, st, j
    cookie = h.get("Set-Cookie", "").split(";")[0]
    return {"Cookie": cookie, "X-CSRF-Token": j["csrf_token"]}, st, j


def booted(vm, label):
    t = vm.wait_console()
    check(t is not None, f"{label}: the console answers over HTTPS", vm.tail())
    if t is not None:
        print(f"{label}: power-on to console answering: {t:.0f} s", flush=True)
    return t


def day0(vm, auth):
    st, a, _ = vm.request("GET", "/api/v1/system/appliance", headers=auth)
    fb = (a or {}).get("firstboot") or {}
    return {s["step"]: s for s in fb.get("steps", [])}


def signed_in(vm, label):
    auth, st, j = session(vm)
    check(auth is not None and j.get("must_change_password") is False,
          f"{label}: the admin password given signs in, not one-time", (st, j))
    return auth


def check_demo(vm, auth, label):
    st, deps, _ = vm.request("GET", "/api/v1/deployments", headers=auth)
    demo = [d for d in (deps or {}).get("data", []) if d.get("name") == "demo"]
    check(demo, f"{label}: the demo deployment exists", deps)
    if not demo:
        return
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


def check_named(vm, auth, label, host):
    st, nodes, _ = vm.request("GET", "/api/v1/nodes", headers=auth)
    names = [n.get("name") for n in (nodes or {}).get("data", [])]
    check(st == 200 and host in names, f"{label}: the node is named {host}", names)
    return (nodes or {}).get("data", [])


def scenario_seeded(vm, label, first, firmware):
    vm.start(f"{vm.name}-{'first' if first else 'second'}.log", firmware)
    t = booted(vm, label)
    if t is None:
        return None
    auth = signed_in(vm, label)
    if auth is None:
        return t
    steps = day0(vm, auth)
    want = "applied" if first else "unchanged"
    for step in ("hostname", "network", "admin_password", "ssh_key"):
        check(steps.get(step, {}).get("state") == want, f"{label}: day-0 {step} {want}", steps.get(step))
    check(HOST in steps.get("hostname", {}).get("message", "") and
          "10.0.2.15/24" in steps.get("network", {}).get("message", ""),
          f"{label}: the given host name and static address", steps)
    check_named(vm, auth, label, HOST)
    check_demo(vm, auth, label)
    return t


def scenario_bad_values(tmp, base, key_file, pubkey):
    label = "bad values"
    vm = VM(tmp, "bad", base, nocloud_iso(tmp, "bad-seed", {
        "hostname": "privai-bad", "ip": "10.0.2.15/40", "gateway": "10.0.2.2", "admin_password": "short",
        "ssh_key": pubkey}))
    try:
        vm.start("bad.log")
        if booted(vm, f"{label}: at the DHCP address") is None:
            return
        st, j, _ = vm.request("POST", "/api/v1/auth/login", {"name": "admin", "password": "short"})
        check(st == 401, f"{label}: the refused password does not sign in", (st, j))
        console = vm.console_text()
        check("privai-firstboot: network fallback: kept DHCP: ip from cloud-init" in console and
              "privai-firstboot: admin_password refused" in console,
              f"{label}: the machine's console names the refused keys and their source", vm.tail(40))
        ssh = subprocess.run(["ssh", "-i", key_file, "-p", str(vm.ssh_port), "-o", "StrictHostKeyChecking=no",
                              "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=20",
                              "root@127.0.0.1", "cat /var/lib/privai/initial-admin-password"],
                             capture_output=True, text=True, timeout=90)
        one_time = ssh.stdout.strip()
        check(ssh.returncode == 0 and len(one_time) >= 12, f"{label}: root reads the one-time password (SSH key "
              "from the seed)", ssh.stderr[-500:])
        auth, st, j = session(vm, one_time)
        check(auth is not None and j.get("must_change_password") is True,
              f"{label}: the one-time password is in force", (st, j))
        if auth is None:
            return
        st, j, _ = vm.request("GET", "/api/v1/nodes", headers=auth)
        check(st == 403 and (j or {}).get("error", {}).get("code") == "password_change_required",
              f"{label}: and must be changed before anything else", (st, j))
        st, j, _ = vm.request("POST", "/api/v1/auth/password", {"current_password": one_time, "new_password": PW},
                              headers=auth)
        check(st == 200, f"{label}: the admin changes it", (st, j))
        steps = day0(vm, auth)
        check(steps.get("network", {}).get("state") == "fallback" and
              "ip from cloud-init" in steps["network"].get("message", ""),
              f"{label}: day-0 kept DHCP, naming the key and its source", steps.get("network"))
        check(steps.get("admin_password", {}).get("state") == "refused", f"{label}: day-0 refused the password",
              steps.get("admin_password"))
        check(steps.get("hostname", {}).get("state") == "applied", f"{label}: the good values still applied",
              steps.get("hostname"))
    finally:
        vm.stop()


def leader_values():
    return {"privai.hostname": "privai-leader", "privai.ip": f"{LEADER_IP}/24", "privai.gateway": "192.168.77.254",
            "privai.dns": "192.168.77.254", "privai.admin_password": PW, "privai.role": "leader"}


def scenario_ovf(tmp, base, descriptor, sock_port):
    label = "OVF environment"
    vm = VM(tmp, "leader", base, ovf_env_iso(tmp, "leader-env", descriptor, leader_values()), ("listen", sock_port))
    vm.start("leader.log")
    if booted(vm, label) is None:
        return vm, None
    auth = signed_in(vm, label)
    if auth is None:
        return vm, None
    steps = day0(vm, auth)
    for step in ("hostname", "network"):
        check(steps.get(step, {}).get("state") == "applied" and "(from ovf (" in steps[step].get("message", ""),
              f"{label}: day-0 {step} applied from the OVF environment", steps.get(step))
    check(steps.get("admin_password", {}).get("state") == "applied", f"{label}: day-0 admin_password applied",
          steps.get("admin_password"))
    check(f"{LEADER_IP}/24" in steps.get("network", {}).get("message", ""), f"{label}: the static address",
          steps.get("network"))
    check_named(vm, auth, label, "privai-leader")
    return vm, auth


def scenario_member(tmp, base, descriptor, sock_port, leader, leader_auth):
    label = "member"
    st, tok, _ = leader.request("POST", "/api/v1/nodes/join-tokens", {}, headers=leader_auth)
    check(st == 201 and tok.get("leader_url") == f"https://{LEADER_IP}",
          "the leader's join token names its static address as its URL", (st, tok))
    if st != 201:
        return
    vm = VM(tmp, "member", base, ovf_env_iso(tmp, "member-env", descriptor, {
        "privai.hostname": "privai-member", "privai.ip": f"{MEMBER_IP}/24", "privai.gateway": LEADER_IP,
        "privai.admin_password": PW, "privai.role": "member", "privai.join_url": tok["leader_url"],
        "privai.join_token": tok["token"], "privai.join_pin": tok.get("leader_pin", "")}), ("connect", sock_port))
    try:
        vm.start("member.log")
        if booted(vm, label) is None:
            return
        auth = signed_in(vm, label)
        node = None
        deadline = time.time() + 300
        while time.time() < deadline:
            st, nodes, _ = leader.request("GET", "/api/v1/nodes", headers=leader_auth)
            node = next((n for n in (nodes or {}).get("data", []) if n.get("name") == "privai-member"), None)
            if node and node.get("state") == "ready":
                break
            time.sleep(5)
        check(node is not None and node.get("state") == "ready" and node.get("url") == f"https://{MEMBER_IP}",
              f"{label}: the leader lists the member, ready, at its static address", node)
        if auth is not None:
            st, c, _ = vm.request("GET", "/api/v1/cluster", headers=auth)
            m = (c or {}).get("membership") or {}
            check(st == 200 and m.get("leader_url") == f"https://{LEADER_IP}" and m.get("state") == "ready",
                  f"{label}: the member shows its leader, ready", (st, c))
            steps = day0(vm, auth)
            check(steps.get("cluster", {}).get("state") == "applied", f"{label}: day-0 cluster applied",
                  steps.get("cluster"))
    finally:
        vm.stop()


def main():
    base = os.path.join(IMAGE_DIR, "privai.qcow2")
    descriptor = os.path.join(IMAGE_DIR, "privai.ovf")
    for tool in ("qemu-system-x86_64", "qemu-img", "xorriso", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            print(f"skip: {tool} is not installed")
            print("0 passed, 0 failed, 1 skipped")
            return 0
    for f in (base, descriptor):
        if not os.path.exists(f):
            print(f"{f} is missing: make image first")
            print("0 passed, 1 failed, 0 skipped")
            return 1
    tmp = tempfile.mkdtemp(prefix="privai-boot-")
    key_file = os.path.join(tmp, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "boot-test", "-f", key_file], check=True)
    pubkey = open(key_file + ".pub").read().strip()
    vms = []
    try:
        if SCENARIOS & {1, 2}:
            vm = VM(tmp, "seeded", base, nocloud_iso(tmp, "seed", {
                "hostname": HOST, "ip": "10.0.2.15/24", "gateway": "10.0.2.2", "dns": "10.0.2.3",
                "admin_password": PW, "ssh_key": pubkey}))
            vms.append(vm)
            t1 = scenario_seeded(vm, "first boot (UEFI)", True, "uefi") if 1 in SCENARIOS else 0
            vm.stop()
            if t1 is not None and 2 in SCENARIOS:
                scenario_seeded(vm, "second boot (BIOS)", False, "bios")
                vm.stop()
        if SCENARIOS & {3, 5}:
            sock_port = free_port()
            leader, auth = scenario_ovf(tmp, base, descriptor, sock_port)
            vms.append(leader)
            if 5 in SCENARIOS and auth is not None:
                scenario_member(tmp, base, descriptor, sock_port, leader, auth)
            leader.stop()
        if 4 in SCENARIOS:
            scenario_bad_values(tmp, base, key_file, pubkey)
    finally:
        for vm in vms:
            vm.stop()
        if os.environ.get("KEEP"):
            print("kept", tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
