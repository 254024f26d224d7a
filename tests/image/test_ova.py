#!/usr/bin/env python3
"""Check an OVA the way vSphere's import reads it: test_ova.py OVA FIRSTBOOT
(make image-test, on build/image/privai.ova), or test_ova.py --small BUILD
(make test: scripts/build-ova.py run on a 64 MiB streamOptimized disk, so the
descriptor is checked on every change without building the image).

DMTF's OVF envelope schema (DSP8023) cannot be downloaded here, so this
checks what the schema and vSphere require of it:
- the archive: ustar, the .ovf descriptor first, the manifest next, every
  file the descriptor references present, nothing else; the manifest's
  SHA256 lines match each file;
- the envelope: References, DiskSection, NetworkSection, VirtualSystem, in
  that order; ids unique (files, disks, item InstanceIDs, property keys);
  every reference resolves (disk fileRef, HostResource, item Parent, a
  network adapter's Connection); capacity units in the 'byte * 2^N' form
  and the disk's capacity equal to the VMDK's own; the disk format
  streamOptimized and the VMDK's header saying so;
- each rasd/vssd element list in the CIM schema's (alphabetical) order;
- the ProductSection: a property for each key privai-firstboot reads
  (--keys-json), OVF types and qualifiers it knows, secrets marked as
  passwords, every property user-configurable with a label."""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration"))
from adminlib import check, summary  # noqa: E402

OVF = "{http://schemas.dmtf.org/ovf/envelope/1}"
RASD = "{http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData}"
VSSD = "{http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData}"
OVF_TYPES = {"uint8", "sint8", "uint16", "sint16", "uint32", "sint32", "uint64", "sint64", "string", "boolean",
             "real32", "real64"}
QUALIFIER = re.compile(r'^(MinLen\(\d+\)|MaxLen\(\d+\)|ValueMap\{"[^"]*"(,"[^"]*")*\})$')
UNITS = re.compile(r"^byte( \* 2\^\d+)?$")


def archive(path):
    with open(path, "rb") as f:
        magic = f.read(512)[257:263]
    check(magic == b"ustar\x00", "the OVA is a POSIX ustar archive", magic)
    with tarfile.open(path) as tar:
        members = tar.getmembers()
        files = {m.name: tar.extractfile(m).read() for m in members if m.isfile()}
    names = [m.name for m in members]
    check(len(names) >= 3 and names[0].endswith(".ovf") and names[1].endswith(".mf"),
          "the descriptor comes first in the archive, the manifest next", names)
    check(all(m.isfile() and "/" not in m.name for m in members), "only plain files, no folders", names)
    return names, files


def manifest(names, files):
    lines = files[names[1]].decode().splitlines()
    sums = {}
    for line in lines:
        m = re.match(r"^SHA256\(([^)]+)\)= ([0-9a-f]{64})$", line)
        check(m is not None, "manifest lines read 'SHA256(FILE)= HEX'", line)
        if m:
            sums[m.group(1)] = m.group(2)
    for name in names:
        if name == names[1]:
            continue
        check(sums.get(name) == hashlib.sha256(files[name]).hexdigest(), f"manifest sum of {name} matches")
    check(set(sums) == set(names) - {names[1]}, "the manifest lists every other file and no other", sorted(sums))


def cim_order(elements, ns, what):
    tags = [e.tag.replace(ns, "") for e in elements]
    check(all(e.tag.startswith(ns) for e in elements) and tags == sorted(tags),
          f"{what}: elements in the CIM schema's order", tags)


def hardware(vs, disks, networks):
    hw = vs.find(OVF + "VirtualHardwareSection")
    check(hw is not None, "a VirtualHardwareSection")
    if hw is None:
        return
    check(hw.get(OVF + "transport") == "com.vmware.guestInfo", "the OVF environment goes to guestinfo.ovfEnv")
    system = hw.find(OVF + "System")
    check(system is not None and system.findtext(VSSD + "VirtualSystemType", "").startswith("vmx-"),
          "a System with a vmx- hardware version")
    if system is not None:
        cim_order(list(system), VSSD, "System")
    items = hw.findall(OVF + "Item")
    ids = [i.findtext(RASD + "InstanceID") for i in items]
    check(len(ids) == len(set(ids)) and None not in ids, "item InstanceIDs are unique", ids)
    by_type = {}
    for i in items:
        cim_order(list(i), RASD, f"item {i.findtext(RASD + 'ElementName')}")
        by_type.setdefault(i.findtext(RASD + "ResourceType"), []).append(i)
        parent = i.findtext(RASD + "Parent")
        check(parent is None or parent in ids, f"item {i.findtext(RASD + 'InstanceID')}'s Parent exists", parent)
        units = i.findtext(RASD + "AllocationUnits")
        if i.findtext(RASD + "ResourceType") == "4":
            check(units is not None and UNITS.match(units), "memory in 'byte * 2^N' units", units)
    check(len(by_type.get("3", [])) == 1 and int(by_type["3"][0].findtext(RASD + "VirtualQuantity")) >= 2,
          "one CPU item, two vCPUs or more")
    check(len(by_type.get("4", [])) == 1 and int(by_type["4"][0].findtext(RASD + "VirtualQuantity")) >= 4096,
          "one memory item, 4096 MB or more")
    for d in by_type.get("17", []):
        check(d.findtext(RASD + "HostResource") in {f"ovf:/disk/{x}" for x in disks},
              "the disk item's HostResource names a disk of the DiskSection", d.findtext(RASD + "HostResource"))
    check(len(by_type.get("17", [])) == len(disks), "one disk item per disk")
    for n in by_type.get("10", []):
        check(n.findtext(RASD + "Connection") in networks, "the network adapter's Connection is a declared network",
              n.findtext(RASD + "Connection"))
    check(by_type.get("10"), "a network adapter")
    configs = {c.get("{http://www.vmware.com/schema/ovf}key"): c.get("{http://www.vmware.com/schema/ovf}value")
               for c in hw.findall("{http://www.vmware.com/schema/ovf}Config")}
    check(configs.get("firmware") == "efi", "EFI firmware", configs)


def product(vs, keys):
    ps = vs.find(OVF + "ProductSection")
    check(ps is not None, "a ProductSection")
    if ps is None:
        return
    props = ps.findall(OVF + "Property")
    got = {p.get(OVF + "key"): p for p in props}
    check(len(got) == len(props), "property keys are unique")
    check(set(got) == {k["ovf_key"] for k in keys}, "a property for each key privai-firstboot reads, no other",
          sorted(got))
    for k in keys:
        p = got.get(k["ovf_key"])
        if p is None:
            continue
        quals = (p.get(OVF + "qualifiers") or "").split()
        check(p.get(OVF + "type") in OVF_TYPES and all(QUALIFIER.match(x) for x in quals),
              f"{k['ovf_key']}: an OVF type and known qualifiers", (p.get(OVF + "type"), quals))
        check(p.get(OVF + "userConfigurable") == "true" and p.findtext(OVF + "Label"),
              f"{k['ovf_key']}: user-configurable, with a label")
        check((p.get(OVF + "password") == "true") == k["secret"], f"{k['ovf_key']}: a password field iff secret")
        if "choices" in k:
            want = "ValueMap{" + ",".join(f'"{c}"' for c in k["choices"].split(",")) + "}"
            check(want in quals, f"{k['ovf_key']}: the wizard offers only {k['choices']}", quals)


def vmdk_checks(data, capacity_bytes):
    check(data[:4] == b"KDMV", "the disk is a VMDK sparse extent")
    if data[:4] != b"KDMV":
        return
    sectors, = struct.unpack_from("<Q", data, 12)
    desc_off, desc_len = struct.unpack_from("<QQ", data, 28)
    desc = data[desc_off * 512:(desc_off + desc_len) * 512].split(b"\0")[0].decode(errors="replace")
    check('createType="streamOptimized"' in desc, "the VMDK says it is streamOptimized", desc[:200])
    check(sectors * 512 == capacity_bytes, "the DiskSection's capacity is the VMDK's", (sectors * 512, capacity_bytes))


def envelope(names, files, keys):
    try:
        env = ET.fromstring(files[names[0]])
    except ET.ParseError as e:
        check(False, "the descriptor is well-formed XML", e)
        return
    check(env.tag == OVF + "Envelope", "the root is an OVF 1.x Envelope", env.tag)
    order = [c.tag.replace(OVF, "") for c in env]
    want = ["References", "DiskSection", "NetworkSection", "VirtualSystem"]
    check([t for t in order if t in want] == want and order[-1] == "VirtualSystem",
          "References, DiskSection, NetworkSection, VirtualSystem in that order", order)
    file_refs = {f.get(OVF + "id"): f for f in env.iterfind(f"{OVF}References/{OVF}File")}
    check(len(file_refs) == len(env.findall(f"{OVF}References/{OVF}File")), "file ids are unique")
    for fid, f in file_refs.items():
        href = f.get(OVF + "href")
        check(href in files and int(f.get(OVF + "size", "-1")) == len(files[href]),
              f"file {fid}: {href} is in the archive with the size given", href)
    disks = {}
    for d in env.iterfind(f"{OVF}DiskSection/{OVF}Disk"):
        did = d.get(OVF + "diskId")
        check(did not in disks, f"disk {did}: its id is unique")
        disks[did] = d
        ref = file_refs.get(d.get(OVF + "fileRef"))
        check(ref is not None, f"disk {did}: its fileRef is a File of References")
        units = d.get(OVF + "capacityAllocationUnits", "byte")
        check(UNITS.match(units) is not None, f"disk {did}: capacity units 'byte * 2^N'", units)
        check(d.get(OVF + "format", "").endswith("#streamOptimized"), f"disk {did}: streamOptimized format")
        if ref is not None and UNITS.match(units):
            shift = int(units.split("^")[1]) if "^" in units else 0
            vmdk_checks(files[ref.get(OVF + "href")], int(d.get(OVF + "capacity")) << shift)
    networks = {n.get(OVF + "name") for n in env.iterfind(f"{OVF}NetworkSection/{OVF}Network")}
    check(networks, "a network is declared")
    vs = env.find(OVF + "VirtualSystem")
    if vs is None:
        return
    check(vs.get(OVF + "id") and vs.findtext(OVF + "Info"), "the VirtualSystem has an id and an Info")
    hardware(vs, disks, networks)
    product(vs, keys)


def small_ova(build, tmp):
    """build-ova.py on a small empty disk, with BUILD's privai-firstboot."""
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raw, vmdk, keys = (os.path.join(tmp, f) for f in ("disk.raw", "privai.vmdk", "keys.json"))
    with open(raw, "wb") as f:
        f.truncate(64 << 20)
    subprocess.run(["qemu-img", "convert", "-q", "-O", "vmdk", "-o", "subformat=streamOptimized", raw, vmdk],
                   check=True)
    with open(keys, "wb") as f:
        subprocess.run([os.path.join(build, "privai-firstboot"), "--keys-json"], check=True, stdout=f)
    out = os.path.join(tmp, "out")
    subprocess.run([sys.executable, os.path.join(top, "scripts", "build-ova.py"), vmdk, keys,
                    os.path.join(top, "packaging", "appliance.conf"), "0.0.0-test", out], check=True)
    return os.path.join(out, "privai.ova"), os.path.join(build, "privai-firstboot")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    tmp = None
    if sys.argv[1] == "--small":
        if shutil.which("qemu-img") is None:
            print("skip: qemu-img is not installed")
            print("0 passed, 0 failed, 1 skipped")
            return 0
        tmp = tempfile.mkdtemp(prefix="privai-ova-")
        ova, firstboot = small_ova(sys.argv[2], tmp)
    else:
        ova, firstboot = sys.argv[1:]
    try:
        return check_ova(ova, firstboot)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def check_ova(ova, firstboot):
    keys = json.loads(subprocess.run([firstboot, "--keys-json"], check=True, capture_output=True).stdout)
    names, files = archive(ova)
    manifest(names, files)
    envelope(names, files, keys)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
