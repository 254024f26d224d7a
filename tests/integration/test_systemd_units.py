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
            for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateNetwork=yes"):
                check(option in text, f"{name}: {option}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
