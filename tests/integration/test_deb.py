"""`make deb`: the package the image installs.  Built twice from the same
tree it is byte for byte the same; it holds every binary, unit, the preset,
the sysusers file, the polkit rule, the console and the demo model, owned by
root with sane modes; its Depends cover every library the binaries link
(dpkg-shlibdeps) and systemd; its maintainer scripts parse; its units are
the project's; and its binaries run after extraction.

usage: python3 tests/integration/test_deb.py BUILD_DIR"""
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, summary  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

WANT = ["./usr/bin/privai-admin", "./usr/bin/privai-engine", "./usr/bin/privai-tune", "./usr/bin/privai-fabric",
        "./usr/bin/privai-firstboot", "./usr/lib/systemd/system/privai-admin.service",
        "./usr/lib/systemd/system/privai-firstboot.service", "./usr/lib/systemd/system/privai-preflight.timer",
        "./usr/lib/systemd/system-preset/90-privai.preset", "./usr/lib/sysusers.d/privai.conf",
"./usr/share/privai/webui/index.html",
        "./usr/share/privai/demo/privai-demo.gguf", "./etc/privai/appliance.conf",
        "./usr/share/doc/privai/operations.md", "./usr/lib/systemd/network/90-privai-dhcp.network"]


def build(out):
    return subprocess.run([os.path.join(ROOT, "scripts", "build-deb.sh"), BUILD, out, "0.0.1-test"],
                          capture_output=True, text=True, timeout=300)


def main():
    if shutil.which("dpkg-deb") is None:
        print("skip: dpkg-deb is not installed")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    tmp = tempfile.mkdtemp(prefix="privai-deb-")
    try:
        a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        p = build(a)
        deb = os.path.join(a, "privai_0.0.1-test_amd64.deb")
        check(p.returncode == 0 and os.path.exists(deb), "scripts/build-deb.sh builds the package", p.stderr[-800:])
        if not os.path.exists(deb):
            return summary()
        p2 = build(b)
        same = p2.returncode == 0 and hashlib.sha256(open(deb, "rb").read()).hexdigest() == \
            hashlib.sha256(open(os.path.join(b, os.path.basename(deb)), "rb").read()).hexdigest()
        check(same, "built twice, byte for byte the same (SOURCE_DATE_EPOCH)")
        listing = subprocess.run(["dpkg-deb", "--contents", deb], capture_output=True, text=True).stdout
        rows = {}
        for line in listing.splitlines():
            f = line.split()
            rows[f[5]] = (f[0], f[1])
        for w in WANT:
            check(w in rows, f"the package holds {w}")
        if os.path.exists(os.path.join(BUILD, "privai-cuda.so")):
            check("./usr/lib/privai/privai-cuda.so" in rows, "the package holds the CUDA backend where the engine "
                  "looks for it (../lib/privai from /usr/bin)")
        for so in ("privai-mpi.so", "privai-gloo.so"):
            check("./usr/lib/privai/" + so in rows, f"the package holds the collectives {so} beside it")
        check(all(owner == "root/root" for _, owner in rows.values()), "everything owned by root")
        check(all(mode[0] != "-" or mode[-2] != "w" for mode, _ in rows.values()), "nothing world-writable")
        check(all(rows[w][0] == "-rwxr-xr-x" for w in WANT if w.startswith("./usr/bin/")), "binaries 0755")
        info = subprocess.run(["dpkg-deb", "--field", deb, "Package", "Version", "Depends"], capture_output=True,
                              text=True).stdout
        deps = re.search(r"Depends: (.*)", info).group(1) if "Depends:" in info else ""
        for lib in ("libc6", "libcjson1", "libmicrohttpd12", "libsodium23", "libsqlite3-0", "libsystemd0",
                    "libyaml-0-2", "libxml2", "libgnutls30", "libcurl4", "systemd", "dbus-user-session",
                    "libopenmpi3", "openmpi-bin", "libgloo0"):
            check(re.search(rf"(^|, ){re.escape(lib)}( |,|$)", deps), f"Depends names {lib}", deps)
        x = os.path.join(tmp, "x")
        subprocess.run(["dpkg-deb", "-R", deb, x], check=True)
        check("/var/lib/systemd/linger/privai" in open(os.path.join(x, "DEBIAN", "postinst")).read(),
              "postinst lets privai's own systemd manager run from boot (lingering)")
        for s in ("postinst", "prerm", "postrm"):
            r = subprocess.run(["sh", "-n", os.path.join(x, "DEBIAN", s)], capture_output=True, text=True)
            check(r.returncode == 0, f"{s} parses", r.stderr)
        check(open(os.path.join(x, "DEBIAN", "conffiles")).read().split() == ["/etc/privai/appliance.conf"],
              "appliance.conf is a conffile (an administrator's edits survive upgrades)")
        for unit in os.listdir(os.path.join(ROOT, "appliance", "systemd")):
            src = os.path.join(ROOT, "appliance", "systemd", unit)
            if os.path.isfile(src):
                dst = os.path.join(x, "usr", "lib", "systemd", "system", unit)
                check(os.path.exists(dst) and open(dst).read() == open(src).read(), f"{unit} as in appliance/systemd")
        for b_ in ("privai-admin", "privai-firstboot", "privai-engine"):
            r = subprocess.run([os.path.join(x, "usr", "bin", b_), "--help"], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0 and "usage" in (r.stdout + r.stderr).lower(), f"the packaged {b_} runs",
                  (r.stdout + r.stderr)[-300:])
        r = subprocess.run(["file", os.path.join(x, "usr", "bin", "privai-admin")], capture_output=True, text=True)
        check(r.returncode != 0 or "not stripped" not in r.stdout, "binaries are stripped", r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
