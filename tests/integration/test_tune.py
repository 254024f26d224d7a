"""privai-tune over every host fixture tree (tests/fixtures/sysfs): the
report's statuses and fixes, JSON shape, exit status; apply then revert
leaving the tree byte-identical (contents, modes, links, no file or
directory added), dry-run changing nothing, a second apply changing
nothing, revert with nothing applied; broken input (a garbage tree, a
missing root, a bad profile, a tampered state file) answered clearly,
never a crash or a hang.

usage: python3 tests/integration/test_tune.py BUILD_DIR"""
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, summary  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TUNE = os.path.join(ROOT, BUILD, "privai-tune")
MAKE_TREES = os.path.join(ROOT, "tests", "fixtures", "sysfs", "make-trees.py")
STATE = "var/lib/privai/tune/applied.json"


def tune(*args, timeout=30):
    try:
        return subprocess.run([TUNE, *args], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"privai-tune {' '.join(args)} finished within {timeout} s")
        return subprocess.CompletedProcess(args, 124, "", "timeout")


def report(tree, *extra):
    r = tune("check", "--json", "--root", tree, *extra)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        check(False, f"check --json on {os.path.basename(tree)} prints JSON", r.stdout[:200] + r.stderr[:200])
        return r, {"checks": [], "summary": {}}
    return r, doc


def by_id(doc):
    return {c["id"]: c for c in doc["checks"]}


def snapshot(tree):
    """Every entry's type, mode and contents (or link target), by path."""
    out = {}
    for dirpath, dirs, files in os.walk(tree):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, tree)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_mode, hashlib.sha256(open(p, "rb").read()).hexdigest())
            else:
                out[rel] = ("other", st.st_mode)
    return out


def diff(a, b):
    keys = sorted(set(a) | set(b))
    return [k for k in keys if a.get(k) != b.get(k)][:5]


def expect(doc, tree, wanted):
    """wanted: id -> status, or (status, substring of found or fix)."""
    got = by_id(doc)
    for cid, want in wanted.items():
        status, text = (want, None) if isinstance(want, str) else want
        c = got.get(cid)
        if not check(c is not None, f"{tree}: check {cid} present"):
            continue
        check(c["status"] == status, f"{tree}: {cid} is {status}", f"got {c['status']}: {c['found']}")
        if text is not None:
            check(text in c["found"] or text in c["fix"] or text in c["expected"],
                  f"{tree}: {cid} says '{text}'", json.dumps(c))
        if c["status"] in ("warn", "fail"):
            check(c["fix"] != "" or c["expected"] != "", f"{tree}: {cid} ({c['status']}) gives a fix or an expectation")


EXPECTED = {
    "hgx-h100": {
        "cpu.model": ("pass", "Xeon(R) Platinum 8480+; 2 sockets, 112 cores, 224 threads"),
        "cpu.amx": "pass", "cpu.avx512": "pass", "cpu.numa": ("pass", "2 nodes"),
        "cpu.governor": ("warn", "powersave"), "cpu.power_profile": ("warn", "balance_performance"),
        "mem.thp": ("warn", "always"), "mem.numa_balancing": "warn", "mem.swap": "pass", "mem.hugepages": "pass",
        "mem.memlock": ("fail", "DefaultLimitMEMLOCK=8M"),
        "gpu.count": ("pass", "8 x H100 SXM5 80GB (10de:2330)"), "gpu.driver": ("pass", "550.54.15"),
        "gpu.0.link": ("pass", "32.0 GT/s x16"), "gpu.7.reset": "pass",
        "gpu.persistence": "warn", "gpu.peermem": "pass",
        "fabric.manager": ("pass", "Fabric Manager 550.54.15 running, driver 550.54.15, 4 NVSwitches"),
        "pcie.devices": ("pass", "52 devices"), "pcie.iommu": ("pass", "iommu=pt"),
        "pcie.acs": ("pass", "Direct Translated P2P on"),
        "nic.0.ats": "pass", "nic.7.link": ("pass", "400 Gb/sec"),
        "pcie.pairing": ("pass", "GPU0-mlx5_0 GPU1-mlx5_1 GPU2-mlx5_2 GPU3-mlx5_3 GPU4-mlx5_4 GPU5-mlx5_5 GPU6-mlx5_6 GPU7-mlx5_7, each under one switch"),
        "pcie.mmio64": ("pass", "1056 GiB"), "vm.hypervisor": ("pass", "bare metal"),
    },
    "hgx-h100-bad": {
        "gpu.3.link": ("fail", "x8 of 32.0 GT/s x16"), "gpu.2.link": "pass",
        "gpu.5.reset": ("fail", "no function-level reset"), "gpu.4.reset": "pass",
        "gpu.peermem": ("fail", "nvidia_peermem is not loaded"),
        "fabric.manager": ("fail", "Fabric Manager 550.54.14 with driver 550.54.15"),
        "nic.0.ats": ("fail", "mlxconfig -d 0000:3c:00.0 set ATS_ENABLED=true"),
        "nic.7.ats": ("fail", "ATS off under ACS redirect"),
        "pcie.pairing": ("fail", "move the NIC 0000:3e:00.0 into a slot under switch 0000:16:00.0, beside GPU0"),
        "pcie.mmio64": "pass",
    },
    "pcie-4gpu": {
        "gpu.count": ("pass", "4 x H100 PCIe 80GB (10de:2331)"),
        "fabric.manager": ("skip", "no NVSwitch"), "gpu.persistence": "pass",
        "pcie.acs": "skip", "pcie.pairing": ("warn", "2 of 4 GPUs have a NIC of their own"),
        "pcie.mmio64": ("pass", "552 GiB in 6 windows"), "nic.1.link": ("pass", "4: ACTIVE"),
    },
    "xeon-amx": {
        "cpu.amx": ("pass", "amx_tile amx_bf16 amx_int8"), "gpu.count": ("skip", "CPU-inference node"),
        "mem.memlock": ("skip", "no RDMA NIC"), "pcie.pairing": "skip", "pcie.mmio64": "skip",
        "fabric.manager": "skip", "pcie.iommu": "skip",
    },
    "vm-guest": {
        "cpu.amx": ("fail", "kernel 5.15.0-105-generic"), "cpu.governor": ("skip", "a VM"),
        "vm.hypervisor": ("pass", "VMware, Inc. VMware20,1"), "vm.steal": ("warn", "5.0%"),
        "vm.passthrough": ("pass", "2 GPUs, 2 RDMA NICs"),
        "vm.nccl_topology": ("warn", "NCCL_TOPO_FILE"),
        "pcie.mmio64": ("fail", "pciPassthru.64bitMMIOSizeGB = 280 (the devices' 64-bit BARs, 256.1 GiB"),
        "pcie.pairing": ("pass", "a VM's flat topology"), "pcie.iommu": "skip", "nic.0.ats": "skip",
        "fabric.manager": ("skip", "service VM"),
    },
    "gpus-0": {
        "gpu.count": ("fail", "no GPU on the PCI bus, but 4 NVSwitches"), "pcie.pairing": "skip",
    },
    "gpus-17": {
        "gpu.count": ("fail", "17 NVIDIA GPUs on the PCI bus; only the first 16 are checked"),
        "gpu.15.link": "pass", "pcie.mmio64": ("fail", "2080 GiB"),
    },
    "garbage": {
        "cpu.model": ("warn", "no model name"),
        "pcie.devices": ("warn", "0000:18:00.0 (vendor class)"),
        "mem.thp": ("warn", "unreadable setting 'sometimes'"),
        "mem.numa_balancing": ("warn", "holds no setting"),
        "pcie.mmio64": ("fail", "no PCI bus window above 4 GiB"),
        "nic.2.ats": ("warn", "no ATS capability"),
    },
}

# what a check must say about a tree, once apply has run there
AFTER_APPLY = {
    "hgx-h100": {"cpu.governor": "pass", "cpu.power_profile": "pass", "mem.thp": "pass", "mem.numa_balancing": "pass",
                 "mem.memlock": ("pass", "60-privai-memlock.conf"),
                 "gpu.persistence": ("warn", "enabled but not running")},
    "xeon-amx": {"cpu.governor": "pass", "mem.thp": "pass", "mem.numa_balancing": "pass"},
    "vm-guest": {"mem.thp": "pass", "mem.memlock": "pass"},
}


def test_reports(trees):
    for name, wanted in EXPECTED.items():
        tree = os.path.join(trees, name)
        r, doc = report(tree)
        s = doc.get("summary", {})
        check(r.returncode == (1 if s.get("fail") else 0), f"{name}: exit status {r.returncode} follows the failures",
              r.stderr)
        check(doc.get("root") == tree and doc.get("profile") in ("gpu-inference", "cpu-inference"),
              f"{name}: the report names its root and profile")
        check(sum(s.get(k, 0) for k in ("pass", "warn", "fail", "skip")) == len(doc["checks"]) > 15,
              f"{name}: the summary counts every check", json.dumps(s))
        ids = [c["id"] for c in doc["checks"]]
        check(len(ids) == len(set(ids)), f"{name}: check ids are unique")
        for c in doc["checks"]:
            if c["status"] == "skip":
                check(c["found"] != "", f"{name}: skipped {c['id']} says why")
        expect(doc, name, wanted)
    # the text form carries the same verdicts and the fixes
    r = tune("check", "--root", os.path.join(trees, "hgx-h100-bad"))
    check(r.returncode == 1 and "fail  pcie.pairing" in r.stdout and "fix: mlxconfig -d" in r.stdout,
          "text report of the bad HGX tree shows failures and fixes", r.stdout[-400:])
    # profiles: the default follows the GPUs, and can be named
    check(report(os.path.join(trees, "xeon-amx"))[1].get("profile") == "cpu-inference", "a CPU-only host defaults to cpu-inference")
    check(report(os.path.join(trees, "hgx-h100"))[1].get("profile") == "gpu-inference", "a GPU host defaults to gpu-inference")
    r, doc = report(os.path.join(trees, "xeon-amx"), "--profile", "gpu-inference")
    check(doc.get("profile") == "gpu-inference", "--profile overrides the default")


def test_apply_revert(trees):
    for name in ("hgx-h100", "hgx-h100-bad", "pcie-4gpu", "xeon-amx", "vm-guest", "gpus-17", "garbage"):
        tree = os.path.join(trees, name)
        before = snapshot(tree)
        r = tune("apply", "--dry-run", "--root", tree)
        check(r.returncode == 0 and "would make" in r.stdout, f"{name}: dry-run plans", r.stdout[-300:] + r.stderr)
        check(snapshot(tree) == before, f"{name}: dry-run changes nothing", str(diff(before, snapshot(tree))))
        r = tune("apply", "--root", tree)
        check(r.returncode == 0, f"{name}: apply succeeds", r.stdout[-300:] + r.stderr)
        applied = snapshot(tree)
        check(applied != before and STATE in applied, f"{name}: apply changed the tree and recorded it")
        for cid, want in AFTER_APPLY.get(name, {}).items():
            expect(report(tree)[1], name + " after apply", {cid: want})
        r = tune("apply", "--root", tree)
        check(r.returncode == 0 and "making 0 changes" in r.stdout, f"{name}: a second apply changes nothing",
              r.stdout[-200:])
        check(snapshot(tree) == applied, f"{name}: a second apply leaves the tree as the first did",
              str(diff(applied, snapshot(tree))))
        r = tune("revert", "--root", tree)
        check(r.returncode == 0 and "restored" in r.stdout, f"{name}: revert succeeds", r.stdout[-200:] + r.stderr)
        after = snapshot(tree)
        check(after == before, f"{name}: apply then revert leaves the tree byte-identical", str(diff(before, after)))
        r = tune("revert", "--root", tree)
        check(r.returncode == 0 and "nothing to revert" in r.stdout, f"{name}: revert with nothing applied is a no-op")
        check(snapshot(tree) == before, f"{name}: the second revert changes nothing")

    # specific values on the HGX tree: what apply wrote, what revert put back
    tree = os.path.join(trees, "hgx-h100")
    gov = os.path.join(tree, "sys/devices/system/cpu/cpu5/cpufreq/scaling_governor")
    thp = os.path.join(tree, "sys/kernel/mm/transparent_hugepage/enabled")
    irq = os.path.join(tree, "proc/irq/217/smp_affinity_list")
    tune("apply", "--root", tree)
    check(open(gov).read() == "performance\n", "apply writes the governor", open(gov).read())
    check(open(thp).read() == "always [madvise] never\n", "apply selects madvise as the kernel would show it", open(thp).read())
    check(open(irq).read() == "56-111,168-223\n", "a socket-1 NIC's interrupts go to socket 1's CPUs", open(irq).read())
    link = os.path.join(tree, "etc/systemd/system/multi-user.target.wants/nvidia-persistenced.service")
    check(os.readlink(link) == "/lib/systemd/system/nvidia-persistenced.service", "apply enables nvidia-persistenced")
    state = json.load(open(os.path.join(tree, STATE)))
    olds = {c["path"]: c["old"] for c in state["changes"]}
    check(olds.get("/sys/devices/system/cpu/cpu5/cpufreq/scaling_governor") == "powersave" and
          olds.get("/sys/kernel/mm/transparent_hugepage/enabled") == "[always] madvise never",
          "the state file records the old values")
    # someone changes a value after apply: revert still restores the original
    open(gov, "w").write("schedutil\n")
    tune("apply", "--root", tree)
    recorded = [c["old"] for c in json.load(open(os.path.join(tree, STATE)))["changes"]
                if c["path"] == "/sys/devices/system/cpu/cpu5/cpufreq/scaling_governor"]
    check(recorded == ["powersave"], "re-apply keeps the one record of the first old value", str(recorded))
    tune("revert", "--root", tree)
    check(open(gov).read() == "powersave\n", "revert restores the value from before the first apply", open(gov).read())
    check(not os.path.exists(os.path.join(tree, "var/lib/privai")), "revert removes the directories apply created")


def test_bad_input(trees):
    r = tune("check", "--root", os.path.join(trees, "no-such-tree"))
    check(r.returncode == 2 and "no-such-tree" in r.stderr and "No such file" in r.stderr,
          "a missing root is named", r.stderr)
    r = tune("check", "--profile", "fastest", "--root", os.path.join(trees, "hgx-h100"))
    check(r.returncode == 2 and "no profile named 'fastest'" in r.stderr and "gpu-inference" in r.stderr,
          "an unknown profile is named with the ones there are", r.stderr)
    r = tune("frobnicate")
    check(r.returncode == 2 and "unknown command 'frobnicate'" in r.stderr, "an unknown command is named", r.stderr)
    r = tune("revert", "--dry-run")
    check(r.returncode == 2 and "--dry-run belongs to apply" in r.stderr, "--dry-run outside apply is refused", r.stderr)
    r = tune("--help")
    check(r.returncode == 0 and "privai-tune apply" in r.stdout and "--root DIR" in r.stdout, "--help")
    empty = os.path.join(trees, "empty")
    os.makedirs(empty)
    r, doc = report(empty)
    got = by_id(doc)
    check(r.returncode == 1 and got.get("cpu.model", {}).get("status") == "fail" and
          got.get("pcie.devices", {}).get("status") == "fail", "an empty root fails cpu.model and pcie.devices",
          json.dumps(doc.get("summary")))
    env = dict(os.environ, PRIVAI_TUNE_ROOT=os.path.join(trees, "vm-guest"))
    r = subprocess.run([TUNE, "check", "--json"], capture_output=True, text=True, env=env, timeout=30)
    check('"root":\t"' + env["PRIVAI_TUNE_ROOT"] in r.stdout or env["PRIVAI_TUNE_ROOT"] in r.stdout,
          "PRIVAI_TUNE_ROOT sets the root")

    # a state file that is not ours, or names a path apply never writes
    tree = os.path.join(trees, "xeon-amx")
    before = snapshot(tree)
    os.makedirs(os.path.join(tree, os.path.dirname(STATE)), exist_ok=True)
    for bad, why in ((b"not json", "not a privai-tune state file"),
                     (json.dumps({"changes": [{"kind": "file", "path": "/etc/shadow", "old": "", "existed": False}]}).encode(),
                      "names a path apply never writes"),
                     (json.dumps({"changes": [{"kind": "attr", "path": "/proc/sys/vm/../../../etc/passwd", "old": "x"}]}).encode(),
                      "names a path apply never writes"),
                     (json.dumps({"changes": [{"kind": "chmod", "path": "/proc/sys/vm/swappiness", "old": "1"}]}).encode(),
                      "malformed")):
        open(os.path.join(tree, STATE), "wb").write(bad)
        r = tune("revert", "--root", tree)
        check(r.returncode == 1 and why in r.stderr, f"a tampered state file is refused ({why})", r.stderr)
        r = tune("apply", "--root", tree)
        check(r.returncode == 1 and why in r.stderr, f"apply refuses to build on a tampered state file ({why})", r.stderr)
    shutil.rmtree(os.path.join(tree, "var"))   # the xeon tree has no /var of its own
    check(snapshot(tree) == before, "refused state files changed nothing", str(diff(before, snapshot(tree))))


def main():
    tmp = tempfile.mkdtemp(prefix="privai-tune-")
    try:
        subprocess.run([sys.executable, MAKE_TREES, tmp], check=True, capture_output=True)
        test_reports(tmp)
        test_apply_revert(tmp)
        test_bad_input(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
