"""Workload VMs through libvirt's C API, on libvirt's test driver
(test:///default, in privai-admin's own process): an HGX host readied for
passthrough (tests/fixtures/sysfs, tree hgx-vfio), a VM defined from a
GPU and the NIC discovery pairs with it, its domain XML valid by
libvirt's own schema (virt-xml-validate), started, listed, stopped,
undefined, audited; the refusals a passthrough needs: a device held by
another VM, one not bound to vfio-pci, an IOMMU group shared with a device
the VM would not own; RBAC.

usage: python3 tests/integration/test_admin_vms.py BUILD_DIR"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.dirname(__file__))
from adminlib import Admin, check, clean_up, summary, users  # noqa: E402

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE_TREES = os.path.join(ROOT, "tests", "fixtures", "sysfs", "make-trees.py")
PW = "correct horse battery staple"


def validate_xml(text, where):
    path = os.path.join(where, "domain.xml")
    with open(path, "w") as f:
        f.write(text)
    r = subprocess.run(["virt-xml-validate", path, "domain"], capture_output=True, text=True)
    return r.returncode == 0, r.stdout + r.stderr


def test_vms(adm, a, o, v, tmp):
    image = os.path.join(tmp, "privai.qcow2")
    with open(image, "wb") as f:
        f.write(b"QFI\xfb" + bytes(508))
    spec = {"name": "gpu-vm-0", "gpus": ["0000:18:00.0"], "vcpus": 8, "memory_gib": 64, "image": image}

    r = v.post("/api/v1/vms", spec)
    check(r.status == 403, "a viewer cannot define a VM", r)
    r = o.post("/api/v1/vms", spec)
    check(r.status == 201, "an operator defines a VM from GPU0", r)
    vm = r.json if r.status == 201 else {}
    devs = [(d["bdf"], d["role"], d["name"]) for d in vm.get("devices", [])]
    check(devs == [("0000:18:00.0", "gpu", "H100 SXM5 80GB"), ("0000:1a:00.0", "nic", "mlx5_0")],
          "the VM takes GPU0 and the NIC under its switch, mlx5_0", devs)
    # 128 GiB + 32 MiB of GPU BARs and 32 MiB of the NIC's, a sixteenth more, in 8 GiB steps; NUMA node 0's CPUs
    check(vm.get("mmio_window_gib") == 144 and vm.get("numa_node") == 0 and vm.get("cpuset") == "0,1,2,3,4,5,6,7" and
          vm.get("state") == "defined" and len(vm.get("uuid") or "") == 36, "the VM's window, NUMA node, pinned CPUs",
          vm)

    r = v.get(f"/api/v1/vms/{vm.get('id')}")
    xml = r.json.get("domain_xml") or "" if r.status == 200 else ""
    ok, why = validate_xml(xml, tmp)
    check(ok, "the domain XML libvirt holds validates with virt-xml-validate", why[-400:])
    try:
        dom = ET.fromstring(xml)
    except ET.ParseError:
        dom = ET.fromstring("<domain/>")
    hostdevs = [(h.find("source/address").get("bus"), h.get("managed")) for h in dom.findall("devices/hostdev")]
    check(hostdevs == [("0x18", "yes"), ("0x1a", "yes")], "both devices passed through, managed", hostdevs)
    check(dom.find("memoryBacking/hugepages/page") is not None and dom.find("memoryBacking/locked") is not None and
          dom.find("numatune/memory").get("nodeset") == "0" and
          [p.get("cpuset") for p in dom.findall("cputune/vcpupin")] == [str(c) for c in range(8)],
          "huge pages, locked, memory on node 0, each vCPU pinned", xml[:600])
    hole = dom.find("devices/controller[@model='pcie-root']/pcihole64")
    gib = {"KiB": 1 << 20, "MiB": 1 << 10, "GiB": 1}
    check(hole is not None and int(hole.text) / gib.get(hole.get("unit", "KiB"), 0) == 144 and
          dom.find("os/type").get("machine") == "q35" and
          dom.find("devices/disk/source").get("file") == image and
          dom.find("devices/serial/source").get("path") == os.path.join(tmp, "consoles", "gpu-vm-0.console.log"),
          "q35 with a 144 GiB 64-bit hole, the image as vda, the serial console to a file", xml)

    r = o.post(f"/api/v1/vms/{vm.get('id')}/start")
    check(r.status == 204, "the VM starts", r)
    r = v.get("/api/v1/vms")
    listed = [(x["name"], x["state"]) for x in r.json.get("data", [])] if r.status == 200 else []
    check(listed == [("gpu-vm-0", "running")] and r.json.get("libvirt_uri") == "test:///default",
          "GET /api/v1/vms: running, as libvirt says", r.json)
    r = o.post(f"/api/v1/vms/{vm.get('id')}/start")
    check(r.status == 409 and r.json["error"]["code"] == "running", "starting it twice: 409", r)

    # refusals: a device another VM holds (GPU0 itself, and GPU1 whose own NIC is free: not refused), a GPU on the
    # nvidia driver, a GPU sharing its IOMMU group with an NVSwitch, no such GPU, a NIC is not a GPU
    for gpus, status, code, words, what in (
            (["0000:18:00.0"], 409, "device_busy", "passed through to VM 'gpu-vm-0' already", "a GPU another VM holds"),
            (["0000:be:00.0"], 422, "not_vfio", "bound to nvidia, not vfio-pci", "a GPU not bound to vfio-pci"),
            (["0000:bf:00.0"], 422, "iommu_group", "shares its IOMMU group with 0000:62:00.0", "a shared IOMMU group"),
            (["0000:77:00.0"], 422, "invalid_field", "not a GPU of this host", "no such GPU"),
            (["0000:1b:00.0"], 422, "invalid_field", "not a GPU of this host", "a NIC named as a GPU"),
            (["0000:19:00.0", "0000:19:00.0"], 422, "invalid_field", "named twice", "a GPU named twice")):
        r = o.post("/api/v1/vms", dict(spec, name="other", gpus=gpus))
        check(r.status == status and r.json["error"]["code"] == code and words in r.json["error"]["message"],
              f"refused: {what}", r)
    for body, field, what in (
            (dict(spec, name="../x"), "name", "a name with a slash"),
            (dict(spec, name="other", image="relative.qcow2"), "image", "a relative image path"),
            (dict(spec, name="other", image=os.path.join(tmp, "none.qcow2")), "image", "an image that is not there"),
            (dict(spec, name="other", image="/etc/passwd"), "image", "a file outside --vm-image-dir"),
            (dict(spec, name="other", image=os.path.join(tmp, "consoles", "..", "..", "..", "etc", "passwd")), "image",
             "a way out of --vm-image-dir through .."),
            (dict(spec, name="other", gpus="0000:19:00.0"), "gpus", "gpus not a list"),
            (dict(spec, name="other", vcpus=0), "vcpus", "no vCPU"),
            (dict(spec, name="other", gpus=["0000:19:00.0"], vcpus=113), "gpus", "more vCPUs than the node's CPUs"),
            (dict(spec, name="other", colour="red"), "colour", "an unknown field")):
        r = o.post("/api/v1/vms", body)
        check(r.status == 422 and r.json["error"]["field"] == field, f"refused: {what}", r)
    r = o.post("/api/v1/vms", dict(spec))
    check(r.status == 409 and r.json["error"]["code"] == "name_taken", "refused: a name taken", r)
    check(len(v.get("/api/v1/vms").json["data"]) == 1, "nothing was defined by the refused requests")

    # a second VM with GPU1 and GPU2: two pairs, one NUMA node, a window for both
    r = o.post("/api/v1/vms", dict(spec, name="gpu-vm-1", gpus=["0000:19:00.0", "0000:3a:00.0"], hugepages=False))
    check(r.status == 201 and [d["bdf"] for d in r.json["devices"]] ==
          ["0000:19:00.0", "0000:1b:00.0", "0000:3a:00.0", "0000:3c:00.0"] and r.json["mmio_window_gib"] == 280,
          "a VM of two pairs", r)
    second = r.json.get("id") if r.status == 201 else 0

    r = o.request("DELETE", f"/api/v1/vms/{vm.get('id')}")
    check(r.status == 409 and "stop it first" in r.json["error"]["message"], "a running VM is not undefined", r)
    r = o.post(f"/api/v1/vms/{vm.get('id')}/stop", {"force": True})
    check(r.status == 204, "the VM powered off", r)
    check(v.get(f"/api/v1/vms/{vm.get('id')}").json["state"] == "stopped", "stopped, as libvirt says")
    r = o.post(f"/api/v1/vms/{vm.get('id')}/stop")
    check(r.status == 409 and r.json["error"]["code"] == "not_running", "stopping a stopped VM: 409", r)
    for i in (vm.get("id"), second):
        r = o.request("DELETE", f"/api/v1/vms/{i}")
        check(r.status == 204, f"VM {i} undefined", r)
    check(v.get("/api/v1/vms").json["data"] == [], "no VM left")
    r = o.post("/api/v1/vms", dict(spec, name="again"))
    check(r.status == 201, "GPU0 is free again once its VM is gone", r)
    o.request("DELETE", f"/api/v1/vms/{r.json.get('id')}")

    # a VM that joins this appliance: a NoCloud seed made for it, holding a join token of its own; admins only
    r = o.post("/api/v1/vms", dict(spec, name="member-vm", join=True))
    check(r.status == 403 and r.json["error"]["field"] == "join", "an operator cannot make a joining VM", r)
    r = a.post("/api/v1/vms", dict(spec, name="member-vm", join=True, seed=image))
    check(r.status == 422 and r.json["error"]["field"] == "join", "join and seed together refused", r)
    before = len(a.get("/api/v1/nodes/join-tokens").json["data"])
    r = a.post("/api/v1/vms", dict(spec, name="member-vm", join=True))
    seed = r.json.get("seed") or "" if r.status == 201 else ""
    check(r.status == 201 and seed == os.path.join(tmp, "consoles", "member-vm-seed.iso") and os.path.exists(seed) and
          os.stat(seed).st_mode & 0o777 == 0o600, "an admin defines a joining VM: its seed made, 0600", r)
    member = r.json.get("id") if r.status == 201 else 0
    out = os.path.join(tmp, "seed-out")
    x = subprocess.run(["xorriso", "-osirrox", "on", "-indev", seed, "-extract", "/", out], capture_output=True, text=True)
    ud = open(os.path.join(out, "user-data")).read() if x.returncode == 0 else ""
    md = open(os.path.join(out, "meta-data")).read() if x.returncode == 0 else ""
    vol = subprocess.run(["xorriso", "-indev", seed, "-pvd_info"], capture_output=True, text=True).stdout
    tokens = a.get("/api/v1/nodes/join-tokens").json["data"]
    check(ud.startswith("#cloud-config\n") and "role: member" in ud and f"join_url: {adm.url()}" in ud and
          "join_token: join_" in ud and "instance-id: member-vm" in md and "Volume Id    : cidata" in vol and
          len(tokens) == before + 1 and tokens[-1]["used_at"] is None,
          "the seed: a cidata volume whose user-data joins this console with a fresh token", (ud, md, vol[-300:]))
    xml = a.get(f"/api/v1/vms/{member}").json.get("domain_xml") or ""
    check(f"<source file='{seed}'/>" in xml and "device='cdrom'" in xml, "the seed attached as a CD-ROM", xml[-900:])
    check(a.request("DELETE", f"/api/v1/vms/{member}").status == 204 and not os.path.exists(seed),
          "the seed, with its token, goes with the VM")

    r = a.get("/api/v1/audit?action=vm.define")
    rows = [(e["target"], e["result"]) for e in r.json.get("data", [])] if r.status == 200 else []
    check(("gpu-vm-0", "ok") in rows and ("gpu-vm-1", "ok") in rows and any(x[1] == "refused" for x in rows),
          "definitions audited, refusals too", rows[:6])
    acts = {e["action"] for e in a.get("/api/v1/audit?target=gpu-vm-0").json.get("data", [])}
    check({"vm.define", "vm.start", "vm.poweroff", "vm.undefine"} <= acts, "each operation on a VM audited", acts)


def main():
    tmp = tempfile.mkdtemp(prefix="privai-vms-test-")
    trees = os.path.join(tmp, "trees")
    subprocess.run([sys.executable, MAKE_TREES, trees, "hgx-vfio"], check=True, capture_output=True)
    adm = Admin(BUILD, os.path.join(tmp, "state"), PW, ports="19180-19189",
                extra=["--sys-root", os.path.join(trees, "hgx-vfio"), "--libvirt-uri", "test:///default",
                       "--vm-dir", os.path.join(tmp, "consoles"), "--vm-image-dir", tmp,
                       "--login-rate", "1000"])
    try:
        a, o, v = users(adm, PW)
        test_vms(adm, a, o, v, tmp)
        check(adm.stop() == 0, "SIGTERM: clean exit")
    except Exception:
        check(False, "the suite ran to the end")
        raise
    finally:
        adm.stop(signal.SIGKILL)
        clean_up(tmp, 60)
        shutil.rmtree(tmp, ignore_errors=True)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
