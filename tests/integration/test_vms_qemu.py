"""A real guest through privai-admin's VM API: libvirt's session daemon
(qemu:///session, started by libvirt on first use) and qemu, under KVM
where /dev/kvm is usable, else emulated.  privai-admin runs as user
nobody here (setpriv), with a home of its own in the test's directory:
root's qemu:///session is the system daemon, which this test does not
install or start.  No passthrough device exists
here, so the VM has none (a CPU VM); what the test checks is the part
libvirt and qemu decide: the domain XML privai writes is accepted by the
qemu driver, the guest boots from the disk the test builds (a boot sector
that prints a line on the serial port, made into qcow2 with qemu-img),
its console reaches GET /api/v1/vms/{id}/console, and it stops and goes.

Behind `make test-vms` (it needs libvirt-daemon and its qemu driver, and
starts a session libvirtd): python3 tests/integration/test_vms_qemu.py BUILD_DIR"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, users, wait_for  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
PW = "correct horse battery staple"
BANNER = b"PRIVAI-GUEST-BOOTED"
NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]


def boot_disk(path):
    """A 1 MiB disk whose boot sector writes BANNER to COM1 and halts, as qcow2."""
    code = bytearray(b"\x31\xc0\x8e\xd8\xbe\x00\x00\xba\xf8\x03")  # xor ax,ax; mov ds,ax; mov si,msg; mov dx,0x3f8
    loop = len(code)
    code += b"\xac\x84\xc0\x74\x03\xee"  # lodsb; test al,al; jz done; out dx,al
    code += b"\xeb" + bytes([(loop - (len(code) + 2)) & 0xff])  # jmp loop
    done = len(code)
    code += b"\xfa\xf4\xeb" + bytes([(done - (len(code) + 3)) & 0xff])  # cli; hlt; jmp done
    code[5:7] = (0x7c00 + len(code)).to_bytes(2, "little")
    code += BANNER + b"\r\n\0"
    raw = path + ".raw"
    with open(raw, "wb") as f:
        f.write(bytes(code) + bytes(510 - len(code)) + b"\x55\xaa" + bytes((1 << 20) - 512))
    subprocess.run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", raw, path], check=True)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-vms-qemu-")
    image = os.path.join(tmp, "boot.qcow2")
    boot_disk(image)
    consoles = os.path.join(tmp, "consoles")
    env = {"HOME": os.path.join(tmp, "home"), "XDG_RUNTIME_DIR": os.path.join(tmp, "run")}
    for d in ("state", "home", "run"):
        os.makedirs(os.path.join(tmp, d), mode=0o700)
    for dirpath, _, files in os.walk(tmp):
        for p in [dirpath] + [os.path.join(dirpath, f) for f in files]:
            os.chown(p, NOBODY, NOBODY)
    os.chmod(tmp, 0o755)
    virsh = [*AS_NOBODY, "env", *[f"{k}={v}" for k, v in env.items()], "virsh", "-c", "qemu:///session"]
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, ports="19190-19199", prefix=AS_NOBODY, env_extra=env,
                extra=["--libvirt-uri", "qemu:///session", "--vm-dir", consoles, "--vm-image-dir", tmp,
                       "--login-rate", "1000"])
    vm_id = None
    try:
        a, o, v = users(adm, PW)
        r = o.post("/api/v1/vms", {"name": "privai-qemu-test", "vcpus": 1, "memory_gib": 1, "image": image,
                                   "hugepages": False})
        check(r.status == 201 and r.json["devices"] == [], "a CPU VM defined through the qemu driver", r)
        vm_id = r.json.get("id") if r.status == 201 else None
        if vm_id is None:
            return summary()
        xml = v.get(f"/api/v1/vms/{vm_id}").json.get("domain_xml") or ""
        kvm = subprocess.run([*AS_NOBODY, "test", "-r", "/dev/kvm", "-a", "-w", "/dev/kvm"]).returncode == 0
        check(("type='kvm'" if kvm else "type='qemu'") in xml, "the domain type follows /dev/kvm", xml[:80])
        t0 = time.monotonic()
        r = o.post(f"/api/v1/vms/{vm_id}/start")
        check(r.status == 204, "the guest starts", r)
        text = wait_for(lambda: (lambda c: c.body if c.status == 200 and BANNER in c.body else None)(
            v.get(f"/api/v1/vms/{vm_id}/console")), timeout=90, interval=0.5)
        check(text is not None, f"the guest booted from its disk and wrote on its console "
              f"({time.monotonic() - t0:.1f} s, {'KVM' if kvm else 'emulated'})", text)
        state = v.get("/api/v1/vms").json["data"][0]["state"]
        check(state == "running", "GET /api/v1/vms: running, as libvirt says", state)
        r = o.post(f"/api/v1/vms/{vm_id}/stop", {"force": True})
        check(r.status == 204 and wait_for(lambda: v.get(f"/api/v1/vms/{vm_id}").json["state"] == "stopped", 30),
              "the guest powered off", r)
        r = o.request("DELETE", f"/api/v1/vms/{vm_id}")
        check(r.status == 204, "the VM undefined", r)
        vm_id = None
        out = subprocess.run([*virsh, "list", "--all", "--name"], capture_output=True, text=True).stdout.split()
        check("privai-qemu-test" not in out, "libvirt holds no such domain any more", out)
        check(adm.stop() == 0, "SIGTERM: clean exit")
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        if vm_id is not None:  # leave no guest behind
            subprocess.run([*virsh, "destroy", "privai-qemu-test"], capture_output=True)
            subprocess.run([*virsh, "undefine", "privai-qemu-test"], capture_output=True)
        adm.stop(signal.SIGKILL)
        # the session daemon libvirt started for this home would linger two minutes
        subprocess.run(["pkill", "-u", str(NOBODY), "-f", "libvirtd --timeout"], capture_output=True)
        clean_up(tmp, 60)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
