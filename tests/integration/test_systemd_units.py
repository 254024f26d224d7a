"""The appliance's systemd units (appliance/systemd): `systemd-analyze
verify` accepts each one, with the installed binary paths pointed at this
build; the same verify refuses a unit with a misspelt directive (so a pass
means something); and `systemd-analyze security --offline` rates every
service's exposure at 3.0 or less (systemd's "OK" band), which removing
the hardening options would break.

usage: python3 tests/integration/test_systemd_units.py BUILD_DIR"""
import glob
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
UNITS = sorted(glob.glob(os.path.join(ROOT, "appliance", "systemd", "*.*")))
MAX_EXPOSURE = 3.0


def installed_copy(tmp, unit):
    """The unit as the image installs it, its /usr/bin/privai-* pointing at this build."""
    text = open(unit).read()
    text = re.sub(r"/usr/bin/(privai-[a-z]+)", lambda m: os.path.join(ROOT, BUILD, m.group(1)), text)
    path = os.path.join(tmp, os.path.basename(unit))
    open(path, "w").write(text)
    return path, text


def verify(*paths):
    return subprocess.run(["systemd-analyze", "verify", *paths], capture_output=True, text=True, timeout=60)


def test_packaging(tmp):
    """The preset enables units that exist; the sysusers file makes the
    privai account."""
    units = {os.path.basename(u) for u in UNITS}
    preset = open(os.path.join(ROOT, "appliance", "systemd", "preset", "90-privai.preset")).read()
    named = re.findall(r"^enable (\S+)$", preset, re.M)
    check(named and all(n in units for n in named), "the preset enables only units the project has", named)
    check("privai-admin.service" in named, "the preset enables privai-admin")
    if shutil.which("systemd-sysusers"):
        root = os.path.join(tmp, "sysroot")
        os.makedirs(os.path.join(root, "etc"))
        r = subprocess.run(["systemd-sysusers", f"--root={root}",
                            os.path.join(ROOT, "appliance", "systemd", "sysusers", "privai.conf")],
                           capture_output=True, text=True, timeout=60)
        passwd = open(os.path.join(root, "etc", "passwd")).read() if os.path.exists(os.path.join(root, "etc", "passwd")) else ""
        check(r.returncode == 0 and re.search(r"^privai:x:\d+:\d+:.*:/var/lib/privai:/usr/sbin/nologin$", passwd, re.M),
              "systemd-sysusers makes the privai account", r.stderr + passwd)


def main():
    if shutil.which("systemd-analyze") is None:
        print("skip: systemd-analyze is not installed")
        print("0 passed, 0 failed, 1 skipped")
        return 0
    check(len(UNITS) >= 3, "appliance/systemd holds the units", str(UNITS))
    tmp = tempfile.mkdtemp(prefix="privai-units-")
    try:
        copies = []
        for unit in UNITS:
            path, text = installed_copy(tmp, unit)
            copies.append(path)
            for binary in re.findall(r"^Exec\w+=[-@:+!]*(\S+)", text, re.M):
                check(os.access(binary, os.X_OK), f"{os.path.basename(unit)}: {binary} is built")
        r = verify(*copies)
        check(r.returncode == 0 and r.stdout.strip() == "" and r.stderr.strip() == "",
              "systemd-analyze verify accepts every unit", r.stdout + r.stderr)
        for path in copies:
            r = verify(path)
            check(r.returncode == 0 and (r.stdout + r.stderr).strip() == "",
                  f"verify {os.path.basename(path)} alone", r.stdout + r.stderr)
        # a misspelt directive must be caught, or the passes above prove nothing
        bad = os.path.join(tmp, "privai-broken.service")
        open(bad, "w").write(open(copies[0]).read().replace("[Service]", "[Service]\nProtectSysem=strict", 1)
                             if copies[0].endswith(".service") else "[Service]\nProtectSysem=strict\nExecStart=/bin/true\n")
        r = verify(bad)
        check("ProtectSysem" in r.stderr + r.stdout, "verify reports a misspelt directive", r.stdout + r.stderr)
        os.unlink(bad)
        for path in copies:
            if not path.endswith(".service"):
                continue
            name = os.path.basename(path)
            r = subprocess.run(["systemd-analyze", "security", "--offline=true", path], capture_output=True, text=True,
                               timeout=60)
            m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", r.stdout + r.stderr)
            if check(m is not None, f"{name}: systemd-analyze security rates it", (r.stdout + r.stderr)[-300:]):
                check(float(m.group(1)) <= MAX_EXPOSURE, f"{name}: exposure {m.group(1)} <= {MAX_EXPOSURE}")
            text = open(path).read()
            # the control plane serves the network; the rest never touch it
            net = ("RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK", "User=privai",
                   "CapabilityBoundingSet=CAP_NET_BIND_SERVICE") if name == "privai-admin.service" \
                else ("PrivateNetwork=yes",)
            # privai-firstboot writes root's authorized_keys: home read-only but for /root
            home = {"privai-firstboot.service": "ProtectHome=no",  # root's authorized_keys
                    "privai-admin.service": "ProtectHome=read-only",  # its user manager's bus in /run/user
                    }.get(name, "ProtectHome=yes")
            for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", home, *net):
                check(option in text, f"{name}: {option}")
        test_packaging(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
