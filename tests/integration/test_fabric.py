"""privai-fabric over the host fixture trees (tests/fixtures/sysfs):
discovery with RDMA ports and pairing, NCCL's topology file for the HGX
node and the VM guest (parsed as XML, every GPU under one switch with
its NIC, NVLinks, NIC speed/GUID) and its checker (files NCCL's reader
stops on, stale hardware, a broken pairing), the vSphere VM class report,
Fabric Manager's config merge (other lines kept, idempotent, bad values
and a foreign file refused with nothing written), and broken input (0 or
17 GPUs, a garbage tree) answered clearly.  The systemd part (Fabric
Manager's lifecycle and the status socket) is test_fabric_units.py.

usage: python3 tests/integration/test_fabric.py BUILD_DIR"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import check, summary  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FABRIC = os.path.join(ROOT, BUILD, "privai-fabric")
MAKE_TREES = os.path.join(ROOT, "tests", "fixtures", "sysfs", "make-trees.py")
FM_CFG = "usr/share/nvidia/nvswitch/fabricmanager.cfg"
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PRIVAI_FABRIC_")}


def fabric(*args, env=None, timeout=30, cwd=None):
    e = dict(CLEAN_ENV, PRIVAI_FABRIC_CONFIG="/dev/null")
    e.update(env or {})
    try:
        return subprocess.run([FABRIC, *args], capture_output=True, text=True, timeout=timeout, env=e, cwd=cwd)
    except subprocess.TimeoutExpired:
        check(False, f"privai-fabric {' '.join(args)} finished within {timeout} s")
        return subprocess.CompletedProcess(args, 124, "", "timeout")


def no_crash(r, what):
    check(r.returncode in (0, 1, 2), f"{what}: exits 0, 1 or 2, no crash", f"rc={r.returncode} {r.stderr[-300:]}")
    check("Sanitizer" not in r.stderr and "runtime error" not in r.stderr, f"{what}: no sanitizer report",
          r.stderr[-500:])


def discover(tree):
    r = fabric("discover", "--json", "--root", tree)
    no_crash(r, f"discover {os.path.basename(tree)}")
    try:
        return json.loads(r.stdout)
    except ValueError:
        check(False, f"discover --json on {os.path.basename(tree)} prints JSON", r.stdout[:200] + r.stderr[:200])
        return {"gpus": [], "nics": [], "nvswitches": []}


def test_discover(trees):
    d = discover(trees["hgx-h100"])
    check(len(d["gpus"]) == 8 and len(d["nvswitches"]) == 4 and len(d["nics"]) == 8,
          "HGX: 8 GPUs, 4 NVSwitches, 8 RDMA NICs", (len(d["gpus"]), len(d["nvswitches"]), len(d["nics"])))
    check([g["nic"] for g in d["gpus"]] == [f"mlx5_{k}" for k in range(8)] and
          all(g["pairing"] == "switch" for g in d["gpus"]), "HGX: GPUk paired with mlx5_k under its switch",
          [(g["nic"], g["pairing"]) for g in d["gpus"]])
    switches = [g["switch"] for g in d["gpus"]]
    check(switches == ["0000:16:00.0"] * 2 + ["0000:38:00.0"] * 2 + ["0000:9b:00.0"] * 2 + ["0000:bc:00.0"] * 2,
          "HGX: the GPUs sit two to a switch", switches)
    nic = d["nics"][0]
    port = nic.get("rdma", {}).get("ports", [{}])[0]
    check(port.get("state") == "ACTIVE" and port.get("rate_mbps") == 400000 and port.get("link_layer") == "InfiniBand",
          "HGX: mlx5_0 port 1 ACTIVE at 400000 Mb/s InfiniBand", port)
    check(nic.get("rdma", {}).get("sys_image_guid") == "0xb83fd20300aa0000", "HGX: mlx5_0's GUID read",
          nic.get("rdma"))
    check(d["rdma_source"] == "sysfs" and "not the live host" in d.get("rdma_note", ""),
          "under --root the RDMA ports come from sysfs, and it says so", (d["rdma_source"], d.get("rdma_note")))
    check(d["driver_version"] == "550.54.15" and d["fabricmanager_version"] == "550.54.15",
          "HGX: driver and Fabric Manager versions", (d["driver_version"], d["fabricmanager_version"]))

    bad = discover(trees["hgx-h100-bad"])
    check([g["nic"] for g in bad["gpus"][:2]] == [None, None] and bad["gpus"][2]["nic"] == "mlx5_0",
          "bad HGX: GPU0 and GPU1 have no NIC under their switch; GPU2 takes mlx5_0 under its own",
          [g["nic"] for g in bad["gpus"]])
    check(bad["fabricmanager_version"] == "550.54.14", "bad HGX: the mismatched Fabric Manager version read")

    vm = discover(trees["vm-guest"])
    check(vm["guest"] and vm["virtual_pcie"] and [g["nic"] for g in vm["gpus"]] == ["mlx5_0", "mlx5_1"] and
          all(g["pairing"] == "numa" for g in vm["gpus"]),
          "VM: a guest on a flat bus, GPUk paired with the k-th NIC", vm)

    for name, gpus in (("gpus-0", 0), ("gpus-17", 16), ("xeon-amx", 0)):
        d = discover(trees[name])
        check(len(d["gpus"]) == gpus, f"{name}: {gpus} GPUs listed", len(d["gpus"]))
    check(discover(trees["gpus-17"])["gpus_seen"] == 17, "gpus-17: the 17th GPU is counted, not dropped silently")

    r = fabric("discover", "--root", trees["garbage"])
    no_crash(r, "discover garbage")
    check(r.returncode == 0 and "GPU" in r.stdout, "garbage tree: discover still reports what it could read",
          r.stdout[:300] + r.stderr[:300])
    d = discover(trees["garbage"])
    probs = [x for x in d["gpus"] + d["nics"] if x.get("problem")]
    check(len(probs) >= 2, "garbage tree: unreadable attributes named per device", [x.get("problem") for x in probs])

    r = fabric("discover", "--root", "/nonexistent-root")
    no_crash(r, "discover on a missing root")
    check(r.returncode == 0 and "0 GPUs" in r.stdout, "a missing root is an empty node, clearly", r.stdout + r.stderr)
    r = fabric("discover", "--bogus")
    check(r.returncode == 2 and "--bogus" in r.stderr, "an unknown option: exit 2 naming it", r.stderr)


def parse_xml(text, what):
    try:
        return ET.fromstring(text)
    except ET.ParseError as e:
        check(False, f"{what} parses as XML", str(e))
        return ET.Element("system")


def nccl_dialect(text, what):
    """What NCCL's own reader (src/graph/xml.cc) stops on."""
    check(not text.lstrip().startswith("<?xml"), f"{what}: no XML declaration (NCCL's reader stops on it)")
    check("\t" not in text, f"{what}: no tabs (NCCL's reader takes spaces and newlines only)")
    for tag in re.findall(r"<[^>]*>", text):
        check("  " not in tag.strip("<>/ ").strip() and "\n" not in tag, f"{what}: one space between attributes",
              tag)
        attrs = re.findall(r'\s([a-z_]+)="([^"]*)"', tag)
        if len(attrs) > 16 or any(len(v) > 254 for _, v in attrs):
            check(False, f"{what}: at most 16 attributes of under 255 characters", tag)


def test_topology_hgx(trees, tmp):
    r = fabric("topology", "--root", trees["hgx-h100"])
    no_crash(r, "topology HGX")
    text = r.stdout
    nccl_dialect(text, "HGX topology")
    doc = parse_xml(text, "HGX topology")
    check(doc.tag == "system" and doc.get("version") == "1", "HGX topology: <system version=\"1\">")
    cpus = doc.findall("cpu")
    check([c.get("numaid") for c in cpus] == ["0", "1"] and all(c.get("arch") == "x86_64" and
          c.get("vendor") == "GenuineIntel" and c.get("familyid") == "6" and c.get("modelid") == "143" for c in cpus),
          "HGX topology: one <cpu> per NUMA node with arch, vendor, family and model", [c.attrib for c in cpus])
    check(cpus[0].get("affinity") == "000000ff,ffffffff,ffff0000,00000000,00ffffff,ffffffff",
          "HGX topology: NUMA 0's affinity is its CPUs 0-55,112-167 as a cpumap", cpus[0].get("affinity"))
    d = discover(trees["hgx-h100"])
    for g in d["gpus"]:
        gpu_pci = doc.find(f".//pci[@busid='{g['bdf']}']")
        nic = next(n for n in d["nics"] if n["name"] == g["nic"])
        net = doc.find(f".//net[@name='{g['nic']}']")
        switch = [p for p in doc.iter("pci") if gpu_pci in list(p)]
        nic_switch = [p for p in doc.iter("pci") if doc.find(f".//pci[@busid='{nic['bdf']}']") in list(p)]
        ok = (gpu_pci is not None and net is not None and switch and nic_switch and switch[0] is nic_switch[0] and
              switch[0].get("busid") == g["switch"] and switch[0].get("class") == "0x060400")
        check(ok, f"HGX topology: GPU{g['index']} {g['bdf']} and {g['nic']} under switch {g['switch']}",
              switch[0].attrib if switch else None)
        gpu = gpu_pci.find("gpu") if gpu_pci is not None else None
        links = [int(n.get("count")) for n in gpu.findall("nvlink")] if gpu is not None else []
        check(gpu is not None and gpu.get("dev") == str(g["index"]) and gpu.get("sm") == "90" and
              links == [5, 4, 4, 5] and all(n.get("tclass") == "0x068000" for n in gpu.findall("nvlink")),
              f"HGX topology: GPU{g['index']} dev, sm 90 and 18 NVLinks to the 4 NVSwitches (5 4 4 5)",
              gpu.attrib if gpu is not None else None)
    net = doc.find(".//net[@name='mlx5_3']")
    check(net is not None and net.get("speed") == "400000" and net.get("port") == "1" and
          net.get("guid") == "0xb83fd20300aa0300" and net.get("gdr") == "1",
          "HGX topology: mlx5_3's speed, port, GUID, and gdr (nvidia_peermem loaded)",
          net.attrib if net is not None else None)
    check(len(doc.findall(".//gpu")) == 8 and len(doc.findall(".//net")) == 8, "HGX topology: 8 GPUs and 8 NICs")
    path = os.path.join(tmp, "hgx.xml")
    r = fabric("topology", "--root", trees["hgx-h100"], "--write", path)
    check(r.returncode == 0 and open(path).read() == text, "topology --write writes what stdout shows",
          r.stderr)
    r = fabric("topology", "--root", trees["hgx-h100"], "--check", path)
    check(r.returncode == 0 and "matches this node" in r.stdout, "the written file checks clean against the node",
          r.stdout + r.stderr)
    r = fabric("topology", "--root", trees["hgx-h100"], "--write", "rel.xml", cwd=tmp)
    r2 = fabric("topology", "--root", trees["hgx-h100"], "--check", "rel.xml", cwd=tmp)
    check(r.returncode == 0 and os.path.exists(os.path.join(tmp, "rel.xml")) and r2.returncode == 0,
          "topology --write and --check take a path relative to the working directory", r.stderr + r2.stdout)
    r = fabric("topology", "--root", trees["hgx-h100-bad"], "--check", path)
    check(r.returncode == 1 and "not under one PCIe switch" not in r.stdout and "does not have" in r.stdout,
          "the good node's file checked on the bad node: the NICs it names elsewhere are stale", r.stdout)
    return text


def test_topology_vm(trees):
    r = fabric("topology", "--root", trees["vm-guest"])
    no_crash(r, "topology VM")
    nccl_dialect(r.stdout, "VM topology")
    doc = parse_xml(r.stdout, "VM topology")
    switches = [p for p in doc.find("cpu").findall("pci")]
    check([s.get("busid") for s in switches] == ["ffff:ff:01.0", "ffff:ff:02.0"] and
          all(s.get("class") == "0x060400" for s in switches),
          "VM topology: a virtual switch per GPU-NIC pair", [s.attrib for s in switches])
    pairs = [([p.get("busid") for p in s.findall("pci")], [n.get("name") for n in s.iter("net")]) for s in switches]
    check(pairs == [(["0000:03:00.0", "0000:13:00.0"], ["mlx5_0"]), (["0000:0b:00.0", "0000:1b:00.0"], ["mlx5_1"])],
          "VM topology: GPU0 with mlx5_0, GPU1 with mlx5_1", pairs)
    check(doc.find(".//gpu").get("gdr") is None, "VM topology: gdr left to NCCL where nvidia_peermem is not loaded")
    check(doc.find(".//nvlink") is None, "VM topology: no NVLinks written where no NVSwitch is visible")


def check_file(tree, tmp, text, name):
    path = os.path.join(tmp, name + ".xml")
    with open(path, "w") as f:
        f.write(text)
    r = fabric("topology", "--root", tree, "--check", path)
    no_crash(r, f"check {name}")
    return r


def test_topology_check(trees, tmp, good):
    hgx = trees["hgx-h100"]
    cases = [
        ("declaration", '<?xml version="1.0"?>\n' + good, "XML declaration"),
        ("tabs", good.replace("  <cpu", "\t<cpu", 1), "no tabs"),
        ("two-spaces", good.replace('<cpu numaid="0" ', '<cpu numaid="0"  ', 1), "expected"),
        ("unquoted", good.replace('version="1"', "version=1", 1), "quoted"),
        ("unclosed", good.replace("</system>\n", ""), "not closed"),
        ("mismatched", good.replace("</cpu>", "</cpus>", 1), "does not close"),
        ("entity", good.replace('vendor="GenuineIntel"', 'vendor="Genuine&amp;Intel"', 1), "&"),
        ("version", good.replace('version="1"', 'version="2"', 1), "version 1 only"),
        ("no-width", good.replace(' link_width="16"', "", 1), "no link_width"),
        ("unknown", good.replace("<nic>", "<nic>\n<bogus/>", 1), "no element of NCCL's topology"),
        ("misplaced", good.replace("<nic>", '<net name="mlx5_0"/><nic>', 1), "<net> inside <pci>: NCCL ignores it there"),
        ("attrs", good.replace('<gpu dev="0"', '<gpu ' + " ".join(f'a{i}="1"' for i in range(17)) + ' dev="0"', 1),
         "more than NCCL's 16 attributes"),
        ("long", good.replace('vendor="GenuineIntel"', 'vendor="' + "x" * 300 + '"', 1), "longer than NCCL's"),
        ("text", good.replace("<nic>", "<nic>hello", 1), "NCCL takes no text"),
        ("gpu-missing", re.sub(r'      <pci busid="0000:18:00.0".*?\n      </pci>\n', "", good, count=1, flags=re.S),
         "GPU0 0000:18:00.0 is not in the file"),
        ("stale-nic", good.replace('name="mlx5_7"', 'name="mlx5_9"'), "RDMA device mlx5_9, which this node does not have"),
        ("stale-gpu", good.replace('busid="0000:bf:00.0"', 'busid="0000:ee:00.0"'), "GPU 0000:ee:00.0, which this node"),
        ("wrong-numa", good.replace('<cpu numaid="1"', '<cpu numaid="3"'), "sits on NUMA node 1"),
        ("empty", "", "no element"),
        ("binary", "<system version=\"1\">\x00</system>", "NUL"),
    ]
    # move mlx5_0's whole <pci> from switch 16 to switch 38: GPU0 loses its NIC's switch
    m = re.search(r'      <pci busid="0000:1a:00.0".*?\n      </pci>\n', good, flags=re.S)
    moved = good.replace(m.group(0), "", 1)
    anchor = '    <pci busid="0000:38:00.0"'
    i = moved.index(anchor)
    j = moved.index("\n", i) + 1
    cases.append(("moved-nic", moved[:j] + m.group(0) + moved[j:],
                  "GPU0 0000:18:00.0 and its NIC mlx5_0 0000:1a:00.0 are not under one PCIe switch"))
    for name, text, want in cases:
        r = check_file(hgx, tmp, text, name)
        check(r.returncode == 1 and want in r.stdout, f"topology --check: {name} is reported ('{want}')",
              r.stdout[-400:] + r.stderr[-200:])
    r = fabric("topology", "--root", hgx, "--check", os.path.join(tmp, "no-such.xml"))
    check(r.returncode == 2 and "no-such.xml" in r.stderr, "topology --check of a missing file: exit 2 naming it",
          r.stderr)
    r = check_file(hgx, tmp, good.replace("\n", "\r\n"), "crlf")
    check(r.returncode == 0, "topology --check: CRLF line ends are taken, as NCCL takes them", r.stdout)
    r = check_file(hgx, tmp, "<!-- written by hand -->\n" + good.replace("<nic>", "<nic><!-- a\ncomment -->", 1),
                   "comments")
    check(r.returncode == 0, "topology --check: comments are taken, as NCCL takes them", r.stdout)


def test_topology_refusals(trees, tmp):
    for name, want in (("xeon-amx", "no GPU"), ("gpus-0", "no GPU"), ("gpus-17", "17 GPUs"),
                       ("garbage", "CPU vendor cannot be read")):
        path = os.path.join(tmp, f"refused-{name}.xml")
        r = fabric("topology", "--root", trees[name], "--write", path)
        no_crash(r, f"topology {name}")
        check(r.returncode == 2 and want in r.stderr and not os.path.exists(path),
              f"topology on {name}: refused ('{want}'), nothing written", r.stderr)
    r = fabric("topology", "--root", trees["pcie-4gpu"])
    doc = parse_xml(r.stdout, "PCIe server topology")
    check(r.returncode == 0 and not any(p.get("busid", "").startswith("ffff") for p in doc.iter("pci")),
          "PCIe server: no virtual switch invented on bare metal (its GPU and NIC really cross the CPU)")


def vmclass(tree, *extra):
    r = fabric("vmclass", "--json", "--root", tree, *extra)
    no_crash(r, f"vmclass {os.path.basename(tree)}")
    try:
        return r, json.loads(r.stdout)
    except ValueError:
        return r, {"devices": [], "settings": [], "warnings": []}


def test_vmclass(trees):
    r, v = vmclass(trees["hgx-h100"])
    names = [d["name"].split()[0] for d in v["devices"]]
    want = [x for k in range(8) for x in (f"GPU{k}", f"NIC{k}")] + [f"NVSwitch{k}" for k in range(4)]
    check(names == want, "VM class: GPU0, NIC0, ..., GPU7, NIC7, then the 4 NVSwitches", names)
    settings = {s["key"]: s["value"] for s in v["settings"]}
    # the window: the passed devices' 64-bit BARs from sysfs (8 x (128 GiB + 32 MiB) GPUs, 8 NICs and 4
    # NVSwitches of 32 MiB: 1024.6 GiB), a sixteenth more, in 8 GiB steps; not 2048 (a power of two)
    check(settings == {"pciPassthru.use64bitMMIO": "TRUE", "pciPassthru.64bitMMIOSizeGB": "1096",
                       "pciPassthru.allowP2P": "TRUE", "pciPassthru.RelaxACSforP2P": "TRUE"},
          "VM class: 64-bit MMIO 1096 GB (the BARs' 1024.6 GiB and room), allowP2P, RelaxACSforP2P", settings)
    why = [s["why"] for s in v["settings"] if s["key"] == "pciPassthru.64bitMMIOSizeGB"]
    check(why and "add up to 1024.6 GiB" in why[0] and "estimated" not in why[0] and
          [d["bar64_bytes"] for d in v["devices"]][:2] == [(128 << 30) + (32 << 20), 32 << 20],
          "VM class: the window from each device's BARs", (why, [d.get("bar64_bytes") for d in v["devices"]][:3]))
    check(v["warnings"] == [], "VM class: no warning on the good board", v["warnings"])
    check([(x["item"].split(" (")[0], x["state"]) for x in v["host"]] ==
          [("ACS on the switch ports", "ok"), ("ACS Direct Translated P2P", "ok"), ("ATS on the NICs", "ok")],
          "VM class: the host's ACS, Direct Translated P2P and ATS checked", v["host"])
    r, v = vmclass(trees["hgx-h100"], "--shared-nvswitch")
    check(not any(d["role"] == "nvswitch" for d in v["devices"]) and "shared NVSwitch" in v["mode"],
          "VM class, shared NVSwitch mode: the switches stay with the host", v["mode"])
    r, v = vmclass(trees["hgx-h100-bad"])
    w = " ".join(v["warnings"])
    check("0000:18:00.0 has no NIC of its own" in w and "ATS off" in w,
          "VM class on the bad board: the unpaired GPUs and the NICs with ATS off are warned about", v["warnings"])
    ats = [x for x in v["host"] if x["item"] == "ATS on the NICs"]
    check(ats and ats[0]["state"] == "fix" and "6 of 6 paired NICs" in ats[0]["found"] and
          "ATS_ENABLED=true" in ats[0]["fix"], "VM class on the bad board: ATS off is a host fix", v["host"])
    r, v = vmclass(trees["vm-guest"])
    check({s["key"]: s["value"] for s in v["settings"]}.get("pciPassthru.64bitMMIOSizeGB") == "280" and v["host"] == [],
          "VM class for 2 GPUs and 2 NICs: 280 GB (256.1 GiB of BARs and room), nothing on a VM's virtual bridges",
          v["settings"])
    # a GPU whose resource file is garbage: its BARs are estimated, and the report says so
    r, v = vmclass(trees["garbage"])
    why = [s["why"] for s in v.get("settings", []) if s["key"] == "pciPassthru.64bitMMIOSizeGB"]
    check(why and "estimated where sysfs gave no resource file" in why[0], "VM class: unreadable BARs estimated",
          v.get("settings"))
    r = fabric("vmclass", "--root", trees["hgx-h100"])
    check(r.returncode == 0 and "pciPassthru.RelaxACSforP2P = TRUE" in r.stdout and " 0  GPU0 H100" in r.stdout,
          "vmclass prints the order and the settings for an operator", r.stdout[:400])
    r = fabric("vmclass", "--root", trees["xeon-amx"])
    check(r.returncode == 2 and "no GPU" in r.stderr, "vmclass on a CPU-only host: refused clearly", r.stderr)


def test_fm_config(trees, tmp):
    tree = os.path.join(tmp, "fmcfg")
    shutil.copytree(trees["hgx-h100"], tree, symlinks=True)
    cfg = os.path.join(tree, FM_CFG)
    orig = open(cfg).read()
    r = fabric("fm-config", "--root", tree)
    check(r.returncode == 0 and "0 values to change" in r.stdout and open(cfg).read() == orig and
          not os.path.exists(cfg + ".privai-orig"), "fm-config with the package's defaults changes nothing",
          r.stdout + r.stderr)
    env = {"PRIVAI_FABRIC_MODE": "shared-nvswitch", "PRIVAI_FABRIC_LOG_LEVEL": "warning",
           "PRIVAI_FABRIC_BIND_ADDRESS": "10.0.0.5", "PRIVAI_FABRIC_STAY_RESIDENT_ON_FAILURES": "yes",
           "PRIVAI_FABRIC_ACCESS_LINK_FAILURE_MODE": "1"}
    r = fabric("fm-config", "--root", tree, "--dry-run", env=env)
    check(r.returncode == 0 and "5 values would change" in r.stdout and open(cfg).read() == orig,
          "fm-config --dry-run: says what would change, writes nothing", r.stdout + r.stderr)
    r = fabric("fm-config", "--root", tree, env=env)
    new = open(cfg).read()
    changed = {a: b for a, b in zip(orig.splitlines(), new.splitlines()) if a != b}
    check(r.returncode == 0 and len(orig.splitlines()) == len(new.splitlines()) and changed == {
        "LOG_LEVEL=4": "LOG_LEVEL=3", "BIND_INTERFACE_IP=127.0.0.1": "BIND_INTERFACE_IP=10.0.0.5",
        "FABRIC_MODE=0": "FABRIC_MODE=1", "FM_STAY_RESIDENT_ON_FAILURES=0": "FM_STAY_RESIDENT_ON_FAILURES=1",
        "ACCESS_LINK_FAILURE_MODE=0": "ACCESS_LINK_FAILURE_MODE=1"},
        "fm-config: the five values set where they stand, every other line as shipped", changed)
    check(open(cfg + ".privai-orig").read() == orig, "fm-config keeps the shipped file as .privai-orig")
    r = fabric("fm-config", "--root", tree, env=env)
    check(r.returncode == 0 and "0 values" in r.stdout and open(cfg).read() == new, "fm-config again: idempotent")
    r = fabric("fm-config", "--root", tree, env={"PRIVAI_FABRIC_MODE": "vgpu"})
    check(open(cfg + ".privai-orig").read() == orig and "FABRIC_MODE=2" in open(cfg).read(),
          "a later change keeps the first original", r.stdout)
    before = open(cfg).read()
    for key, value, want in (("PRIVAI_FABRIC_MODE", "cloud", "bare-metal, shared-nvswitch, vgpu"),
                             ("PRIVAI_FABRIC_BIND_ADDRESS", "fe80::1", "IPv4"),
                             ("PRIVAI_FABRIC_LOG_LEVEL", "loud", "none, critical"),
                             ("PRIVAI_FABRIC_TRUNK_LINK_FAILURE_MODE", "7", "from 0 to 1"),
                             ("PRIVAI_FABRIC_LOG_FILE", "/var/log/fm log", "absolute path"),
                             ("PRIVAI_FABRIC_FM_UNIT", "fm;rm -rf", "ending in .service")):
        r = fabric("fm-config", "--root", tree, env={key: value})
        check(r.returncode == 2 and key in r.stderr and want in r.stderr and open(cfg).read() == before,
              f"{key}={value!r}: refused naming it ('{want}'), config untouched", r.stderr)
    with open(cfg, "a") as f:
        f.write("this is not a config line\n")
    foreign = open(cfg).read()
    r = fabric("fm-config", "--root", tree, env={"PRIVAI_FABRIC_MODE": "bare-metal"})
    check(r.returncode == 2 and "line 24" in r.stderr and open(cfg).read() == foreign,
          "a config with a foreign line: refused naming the line, left as it is", r.stderr)
    r = fabric("fm-config", "--root", trees["vm-guest"])
    check(r.returncode == 2 and "is nvidia-fabricmanager installed" in r.stderr,
          "fm-config without Fabric Manager: says so", r.stderr)

    conf = os.path.join(tmp, "fabric.conf")
    with open(conf, "w") as f:
        f.write("# written by cloud-init\nPRIVAI_FABRIC_MODE=vgpu\nPRIVAI_FABRIC_LOG_LEVEL=error\n")
    shutil.copy(cfg + ".privai-orig", cfg)
    r = fabric("fm-config", "--root", tree, "--config", conf, env={"PRIVAI_FABRIC_CONFIG": ""})
    check(r.returncode == 0 and "FABRIC_MODE=2" in open(cfg).read() and "LOG_LEVEL=2" in open(cfg).read(),
          "settings from --config FILE", r.stdout + r.stderr)
    r = fabric("fm-config", "--root", tree, "--config", conf, env={"PRIVAI_FABRIC_MODE": "bare-metal"})
    check(r.returncode == 0 and "FABRIC_MODE=0" in open(cfg).read() and "LOG_LEVEL=2" in open(cfg).read(),
          "the environment wins over the config file", r.stdout + r.stderr)
    with open(conf, "a") as f:
        f.write("MODE=vgpu\n")
    r = fabric("fm-config", "--root", tree, "--config", conf)
    check(r.returncode == 2 and "fabric.conf:4" in r.stderr, "a bad config file line: named", r.stderr)


def nccl_env(tree):
    r = fabric("nccl-env", "--json", "--root", tree)
    no_crash(r, f"nccl-env {os.path.basename(tree)}")
    try:
        return {s["name"]: s for s in json.loads(r.stdout)}
    except ValueError:
        check(False, f"nccl-env --json on {os.path.basename(tree)} prints JSON", r.stdout[:200] + r.stderr[:200])
        return {}


def test_nccl_env(trees, tmp):
    def val(env, name):
        return env.get(name, {}).get("value", "absent")

    def why(env, name):
        return env.get(name, {}).get("why", "")

    # HGX: the 8 paired NICs on port 1, exact names; GPUDirect through the switches; NVLink only; InfiniBand
    # (no GID index); the default route's interface as PID 1 sees it; no topology file on bare metal
    e = nccl_env(trees["hgx-h100"])
    check(val(e, "NCCL_IB_HCA") == "=" + ",".join(f"mlx5_{k}:1" for k in range(8)) and
          "GPU0-mlx5_0 (same PCIe switch)" in why(e, "NCCL_IB_HCA"), "nccl-env HGX: NCCL_IB_HCA, each NIC by its GPU", e)
    check(val(e, "NCCL_NET_GDR_LEVEL") == "PIX" and "8 of 8" in why(e, "NCCL_NET_GDR_LEVEL"),
          "nccl-env HGX: GPUDirect RDMA where GPU and NIC share a switch", e.get("NCCL_NET_GDR_LEVEL"))
    check(val(e, "NCCL_P2P_LEVEL") == "NVL" and "4 NVSwitches" in why(e, "NCCL_P2P_LEVEL"), "nccl-env HGX: P2P over NVLink",
          e.get("NCCL_P2P_LEVEL"))
    check(val(e, "NCCL_SOCKET_IFNAME") == "=eno1" and "NCCL_IB_GID_INDEX" not in e and val(e, "NCCL_TOPO_FILE") is None,
          "nccl-env HGX: bootstrap on the default route's eno1, no GID index on InfiniBand, no topology file", e)
    # the miscabled board without nvidia_peermem: GPU0 and GPU1 have no NIC of their own; GDR left to NCCL
    e = nccl_env(trees["hgx-h100-bad"])
    check("left out: GPU0 (no NIC of its own), GPU1 (no NIC of its own)" in why(e, "NCCL_IB_HCA") and
          "mlx5_2" not in val(e, "NCCL_IB_HCA"), "nccl-env bad HGX: GPUs without a NIC named", e.get("NCCL_IB_HCA"))
    check(val(e, "NCCL_NET_GDR_LEVEL") is None and "modprobe nvidia_peermem" in why(e, "NCCL_NET_GDR_LEVEL"),
          "nccl-env bad HGX: no peer memory, GDR not forced, the fix named", e.get("NCCL_NET_GDR_LEVEL"))
    # PCIe server with RoCE: the RoCE v2 GID on the IPv4 address (index 3); pairs only by NUMA node; P2P left
    e = nccl_env(trees["pcie-4gpu"])
    check(val(e, "NCCL_IB_GID_INDEX") == "3" and "IPv4" in why(e, "NCCL_IB_GID_INDEX") and
          val(e, "NCCL_NET_GDR_LEVEL") == "PXB" and val(e, "NCCL_P2P_LEVEL") is None and
          val(e, "NCCL_IB_HCA") == "=mlx5_0:1,mlx5_1:1", "nccl-env PCIe RoCE: GID 3, GDR only through switches, P2P "
          "left to NCCL", e)
    # VM: RoCE without an address (the hint), no P2P over virtual PCIe, the topology file once it exists,
    # the default route from /proc/net/route
    vm = trees["vm-guest"]
    e = nccl_env(vm)
    check(val(e, "NCCL_IB_GID_INDEX") is None and "give its interface an IP address" in why(e, "NCCL_IB_GID_INDEX") and
          val(e, "NCCL_P2P_LEVEL") == "LOC" and val(e, "NCCL_SOCKET_IFNAME") == "=ens192",
          "nccl-env VM: the GID hint, no PCIe P2P, bootstrap on ens192", e)
    check(val(e, "NCCL_TOPO_FILE") is None and "topology --write /etc/privai/nccl-topo.xml" in why(e, "NCCL_TOPO_FILE"),
          "nccl-env VM: the missing topology file named", e.get("NCCL_TOPO_FILE"))
    r = fabric("topology", "--root", vm)
    os.makedirs(os.path.join(vm, "etc", "privai"), exist_ok=True)
    with open(os.path.join(vm, "etc", "privai", "nccl-topo.xml"), "w") as f:
        f.write(r.stdout)
    e = nccl_env(vm)
    check(val(e, "NCCL_TOPO_FILE") == "/etc/privai/nccl-topo.xml", "nccl-env VM: NCCL_TOPO_FILE once written", e)
    # no GPU-NIC pair: NCCL_IB_HCA unset with why; a garbage tree answered
    e = nccl_env(trees["xeon-amx"])
    check(val(e, "NCCL_IB_HCA") is None and "TCP sockets" in why(e, "NCCL_IB_HCA"), "nccl-env CPU host: no RDMA", e)
    nccl_env(trees["garbage"])

    # the file: every setting under its reason; privai-engine's GPU ranks take it (its reader refuses any line
    # that is not NCCL_NAME=VALUE or a comment)
    conf = os.path.join(tmp, "nccl-conf")
    os.makedirs(conf, exist_ok=True)
    r = fabric("nccl-env", "--root", vm, "--write", os.path.join(conf, "nccl.env"))
    text = open(os.path.join(conf, "nccl.env")).read() if r.returncode == 0 else ""
    lines = [x for x in text.splitlines() if x and not x.startswith("#")]
    check(r.returncode == 0 and text.startswith("# privai-fabric nccl-env: written from this node's discovery.") and
          lines == ["NCCL_IB_HCA==mlx5_0:1,mlx5_1:1", "NCCL_P2P_LEVEL=LOC", "NCCL_SOCKET_IFNAME==ens192",
                    "NCCL_TOPO_FILE=/etc/privai/nccl-topo.xml"] and "# NCCL_IB_GID_INDEX not set" in text,
          "nccl-env --write: the settings, each under its reason", text)
    engine = os.path.join(ROOT, BUILD, "privai-engine")
    model = os.path.join(ROOT, "..", "shared", "fixtures", "models", "tiny-llama-spm-q8_0.gguf")
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_")}
    env.update(PRIVAI_NCCL_CONFIG_DIR=conf, CUDA_VISIBLE_DEVICES="GPU-a")
    r = subprocess.run([engine, "eval", "--device", "cuda", "-m", model, "--prompt-ids", "1", "--dump-logits",
                        os.path.join(tmp, "logits"), "--tp", "2", "--dist-init", "127.0.0.1:1", "--node-rank", "0"],
                       capture_output=True, text=True, timeout=60, env=env)
    check("NCCL settings: NCCL_IB_HCA==mlx5_0:1,mlx5_1:1 (nccl.env), NCCL_P2P_LEVEL=LOC (nccl.env), "
          "NCCL_SOCKET_IFNAME==ens192 (nccl.env), NCCL_TOPO_FILE=/etc/privai/nccl-topo.xml (nccl.env)" in r.stderr,
          "privai-engine's GPU ranks take the written file", r.stderr[-600:])


TOOLS = os.path.join(ROOT, "tests", "fixtures", "fabric-tools")


def validate(tree, *args, fake=None, path=None, timeout=120):
    env = dict(FAKE_IB="pass", FAKE_NCCL="pass", PATH=(path or TOOLS) + ":" + os.environ["PATH"])
    env.update(fake or {})
    r = fabric("validate", "--root", tree, "--json", *args, env=env, timeout=timeout)
    no_crash(r, f"validate {' '.join(args)} on {os.path.basename(tree)}")
    try:
        rep = json.loads(r.stdout)
    except ValueError:
        check(False, "validate --json prints JSON", r.stdout[:300] + r.stderr[:300])
        rep = {"tests": []}
    return r, rep


def test_validate(trees, tmp):
    hgx, pcie = trees["hgx-h100"], trees["hgx-h100-bad"]
    log = os.path.join(tmp, "tools.log")
    # the good board: 4 NIC pairs from host and GPU memory at 393.5 of 400 Gb/s (mark 380), all-reduce 468.3 of
    # ~480 GB/s (mark 408); the report kept, with its date
    r, rep = validate(hgx, fake={"FAKE_LOG": log})
    states = [(t["kind"], t["state"]) for t in rep["tests"]]
    check(r.returncode == 0 and states == [("rdma", "pass"), ("rdma-gdr", "pass")] * 4 + [("nccl-node", "pass")] and
          rep["passed"] == 9 and rep["failed"] == 0, "validate on the HGX board: 9 passed", states)
    first = rep["tests"][0]
    check(first["name"] == "mlx5_0 -> mlx5_1" and first["measured"] == 393.52 and first["mark"] == 380 and
          "95 % of the ports' 400 Gb/s" in first["mark_why"], "validate: an RDMA figure with its mark", first)
    nccl = rep["tests"][-1]
    check(nccl["measured"] == 468.3 and nccl["mark"] == 408 and nccl["bytes"] == 1 << 30,
          "validate: the all-reduce's bus bandwidth at 1 GiB against 85 % of 480 GB/s", nccl)
    # server and client start together, so the order they log in is the scheduler's
    calls = open(log).read().splitlines()
    check(any("ib_write_bw -d mlx5_0 -i 1 -p 18515" in c and "127.0.0.1" not in c for c in calls) and
          any("-d mlx5_1" in c and "127.0.0.1" in c and "--report_gbits" in c for c in calls) and
          any("--use_cuda=0" in c for c in calls) and any(c.startswith("privai-nccl-perf -g 8") for c in calls),
          "validate: ib_write_bw server and client per pair, GPU memory on GPU0, privai-nccl-perf on 8 GPUs", calls[:4])
    kept = os.path.join(hgx, "var", "lib", "privai-fabric", "validation.json")
    saved = json.load(open(kept)) if os.path.exists(kept) else {}
    check(saved.get("tests") == rep["tests"] and saved.get("checked_at", 0) > 1.7e9, "validate keeps its report",
          kept)

    # failures and their hints: GPUDirect slower than host memory; a RoCE link short with MTU 1500
    r, rep = validate(hgx, "--rdma", fake={"FAKE_IB": "gdr-slow"})
    gdr = [t for t in rep["tests"] if t["kind"] == "rdma-gdr"]
    check(r.returncode == 1 and gdr and all(t["state"] == "fail" and t["measured"] == 188.4 for t in gdr) and
          any("NCCL_NET_GDR_LEVEL=PIX" in h for h in gdr[0]["hints"]) and
          all(t["state"] == "pass" for t in rep["tests"] if t["kind"] == "rdma"),
          "validate: GPUDirect below its mark fails with the GDR hint, host memory passes", gdr[:1])
    r, rep = validate(trees["pcie-4gpu"], "--rdma", fake={"FAKE_IB": "slow"})
    t = rep["tests"][0] if rep["tests"] else {}
    hints = " ".join(t.get("hints", []))
    check(r.returncode == 1 and t.get("state") == "fail" and "MTU" in hints and "PFC" in hints and
          "ip link set ens2f0np0 mtu 9000" in hints, "validate on RoCE: short of the mark, with MTU and PFC hints", t)
    # no peer memory: GPUDirect not measured, the fix named; the NICs' ATS off would be named on a GDR failure
    r, rep = validate(pcie, "--rdma")
    skipped = [t for t in rep["tests"] if t["kind"] == "rdma-gdr"]
    check(skipped and skipped[0]["state"] == "skipped" and "nvidia_peermem" in skipped[0]["why"] and
          rep["not_run"] == 1, "validate without nvidia_peermem: GPUDirect skipped, saying why", skipped)

    # the tools misbehaving: garbage, a connection refused, a hang killed at the deadline, a tool missing
    r, rep = validate(hgx, "--rdma", fake={"FAKE_IB": "garbage"})
    check(r.returncode == 1 and all(t["state"] == "error" and "no result table" in t["why"] for t in rep["tests"]),
          "validate: garbage output is an error naming it", rep["tests"][:1])
    r, rep = validate(hgx, "--rdma", fake={"FAKE_IB": "fail"})
    check(all(t["state"] == "error" and "exited with status 1" in t["why"] and "Couldn't connect" in t["why"]
              for t in rep["tests"]), "validate: a failing tool's status and words", rep["tests"][:1])
    t0 = time.monotonic()
    r, rep = validate(hgx, "--rdma", "--deadline", "1", fake={"FAKE_IB": "hang"})
    took = time.monotonic() - t0
    check(all(t["state"] == "error" and "did not finish within its deadline" in t["why"] for t in rep["tests"]) and
          took < 40, f"validate: a hung tool is killed at its deadline ({took:.1f} s for 8 runs)", rep["tests"][:1])
    out = subprocess.run(["pgrep", "-f", "sleep 617"], capture_output=True, text=True).stdout.split()
    check(out == [], "validate: nothing of a hung tool is left running", out)
    bare = os.path.join(tmp, "no-tools")
    os.makedirs(bare, exist_ok=True)
    r, rep = validate(hgx, "--rdma", path=bare)
    check(r.returncode == 0 and all(t["state"] == "skipped" and "not installed" in t["why"] and
                                    "apt-get install perftest" in t["hints"] for t in rep["tests"]),
          "validate without perftest: skipped, with the package to install", rep["tests"][:1])
    os.symlink(os.path.join(TOOLS, "ib_write_bw"), os.path.join(bare, "ib_write_bw"))
    r, rep = validate(hgx, "--nccl", path=bare)
    check(r.returncode == 1 and rep["tests"][0]["state"] == "error" and "privai-nccl-perf is not installed" in
          rep["tests"][0]["why"], "validate without privai-nccl-perf: an error naming it", rep["tests"])

    # all-reduce: a board fallen back to PCIe, wrong values, garbage, a hang; across 2 nodes
    r, rep = validate(hgx, "--nccl", fake={"FAKE_NCCL": "slow"})
    t = rep["tests"][0]
    check(r.returncode == 1 and t["state"] == "fail" and t["measured"] == 190.2 and
          any("Fabric Manager" in h for h in t["hints"]), "validate: an all-reduce at PCIe speed fails, Fabric Manager "
          "named first", t)
    r, rep = validate(hgx, "--nccl", fake={"FAKE_NCCL": "wrong"})
    check(rep["tests"][0]["state"] == "error" and "wrong values" in rep["tests"][0]["why"],
          "validate: wrong all-reduce results are an error, whatever the speed", rep["tests"][0])
    for case, why in (("garbage", "a result row is not"), ("hang", "deadline")):
        r, rep = validate(hgx, "--nccl", "--deadline", "2", fake={"FAKE_NCCL": case})
        check(rep["tests"][0]["state"] == "error" and why in rep["tests"][0]["why"], f"validate: all-reduce {case}",
              rep["tests"][0])
    r, rep = validate(hgx, "--nccl", "--nnodes", "2", "--node-rank", "0", "--nccl-init", "10.0.0.1:29600",
                      fake={"FAKE_LOG": log})
    across = rep["tests"][-1]
    check(across["kind"] == "nccl-nodes" and across["measured"] == 352.1 and across["mark"] == 320 and
          across["state"] == "pass" and "400 GB/s" in across["mark_why"],
          "validate across 2 nodes: 352.1 GB/s against 80 % of 8 NICs x 50 GB/s", across)
    check("privai-nccl-perf -g 8 -b 1M -e 1G --init 10.0.0.1:29600 --nnodes 2 --node-rank 0" in open(log).read(),
          "validate passes the rendezvous on to privai-nccl-perf")
    r = fabric("validate", "--root", hgx, "--nnodes", "2")
    check(r.returncode == 2 and "--nccl-init" in r.stderr, "validate: 2 nodes without a rendezvous refused", r.stderr)
    r, rep = validate(trees["xeon-amx"])
    check(r.returncode == 0 and [t["state"] for t in rep["tests"]] == ["skipped", "skipped"],
          "validate on a CPU host: nothing to measure, said so", rep["tests"])


def main():
    tmp = tempfile.mkdtemp(prefix="privai-fabric-")
    try:
        out = os.path.join(tmp, "trees")
        subprocess.run([sys.executable, MAKE_TREES, out], check=True, capture_output=True)
        trees = {n: os.path.join(out, n) for n in os.listdir(out)}
        test_discover(trees)
        good = test_topology_hgx(trees, tmp)
        test_topology_vm(trees)
        test_topology_check(trees, tmp, good)
        test_topology_refusals(trees, tmp)
        test_vmclass(trees)
        test_fm_config(trees, tmp)
        test_nccl_env(trees, tmp)
        test_validate(trees, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary()


if __name__ == "__main__":
    main()
