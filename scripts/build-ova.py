#!/usr/bin/env python3
"""Wrap the appliance's streamOptimized VMDK into an OVA for vSphere:
build-ova.py VMDK KEYS_JSON APPLIANCE_CONF VERSION OUT_DIR

Writes OUT_DIR/privai.ovf (an OVF 1.x descriptor), privai.mf (SHA256 of
each file) and privai.ova (a ustar archive: the descriptor first, then the
manifest, then the disk, as vSphere reads them in order).

The ProductSection's properties are the day-0 keys that privai-firstboot
itself prints (--keys-json): what the deploy wizard asks is exactly what
the appliance reads back from guestinfo.ovfEnv.  Defaults come from the
appliance.conf shipped in the image.  SOURCE_DATE_EPOCH, when set, is every
archive member's time, so one commit gives the same OVA."""
import hashlib
import json
import os
import struct
import sys
import tarfile
import xml.etree.ElementTree as ET

OVF = "http://schemas.dmtf.org/ovf/envelope/1"
RASD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_ResourceAllocationSettingData"
VSSD = "http://schemas.dmtf.org/wbem/wscim/1/cim-schema/2/CIM_VirtualSystemSettingData"
VMW = "http://www.vmware.com/schema/ovf"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
VMDK_FORMAT = "http://www.vmware.com/interfaces/specifications/vmdk.html#streamOptimized"
NETWORK = "VM Network"
CPUS = int(os.environ.get("PRIVAI_OVA_CPUS", "4"))
MEMORY_MIB = int(os.environ.get("PRIVAI_OVA_MEMORY_MIB", "8192"))
HARDWARE_VERSION = "vmx-15"  # ESXi 6.7 U2 and later: EFI, pvscsi, vmxnet3

for prefix, uri in (("ovf", OVF), ("rasd", RASD), ("vssd", VSSD), ("vmw", VMW), ("xsi", XSI)):
    ET.register_namespace(prefix, uri)


def q(ns, name):
    return f"{{{ns}}}{name}"


def sub(parent, ns, tag, text=None, **attrs):
    e = ET.SubElement(parent, q(ns, tag), {q(OVF, k): v for k, v in attrs.items()})
    if text is not None:
        e.text = text
    return e


def vmdk_capacity(path):
    """The disk's size in bytes, from the sparse extent header."""
    with open(path, "rb") as f:
        head = f.read(512)
    if head[:4] != b"KDMV":
        sys.exit(f"build-ova: {path} is not a VMDK sparse extent")
    return struct.unpack_from("<Q", head, 12)[0] * 512


def read_conf(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def item(hw, **fields):
    """A rasd Item; its elements in the order the CIM schema's sequence
    requires (alphabetical), which vSphere's parser enforces."""
    e = sub(hw, OVF, "Item")
    for k in sorted(fields):
        sub(e, RASD, k, str(fields[k]))
    return e


def product_section(vs, keys, defaults, version):
    ps = sub(vs, OVF, "ProductSection", required="false")
    sub(ps, OVF, "Info", "The appliance's day-0 configuration: read by privai-firstboot at every boot")
    sub(ps, OVF, "Product", "privai")
    sub(ps, OVF, "Vendor", "privai")
    sub(ps, OVF, "Version", version.split("-")[0])
    sub(ps, OVF, "FullVersion", version)
    group = None
    for k in keys:
        if k["group"] != group:
            group = k["group"]
            sub(ps, OVF, "Category", group)
        quals = [f"MaxLen({k['max_length']})"]
        if "choices" in k:
            quals.append("ValueMap{" + ",".join(f'"{c}"' for c in k["choices"].split(",")) + "}")
        attrs = {"key": k["ovf_key"], "type": "string", "userConfigurable": "true",
                 "value": defaults.get(k["name"], ""), "qualifiers": " ".join(quals)}
        if k["secret"]:
            attrs["password"] = "true"
        p = sub(ps, OVF, "Property", **attrs)
        sub(p, OVF, "Label", k["label"])
        sub(p, OVF, "Description", k["description"] + (" (base64)" if k["base64_in_ovf"] else ""))


def hardware_section(vs):
    hw = sub(vs, OVF, "VirtualHardwareSection", transport="com.vmware.guestInfo")
    sub(hw, OVF, "Info", "Virtual hardware requirements")
    system = sub(hw, OVF, "System")
    for k, v in (("ElementName", "Virtual Hardware Family"), ("InstanceID", "0"),
                 ("VirtualSystemIdentifier", "privai"), ("VirtualSystemType", HARDWARE_VERSION)):
        sub(system, VSSD, k, v)
    item(hw, AllocationUnits="hertz * 10^6", Description="Number of virtual CPUs",
         ElementName=f"{CPUS} virtual CPU(s)", InstanceID=1, ResourceType=3, VirtualQuantity=CPUS)
    item(hw, AllocationUnits="byte * 2^20", Description="Memory size", ElementName=f"{MEMORY_MIB} MB of memory",
         InstanceID=2, ResourceType=4, VirtualQuantity=MEMORY_MIB)
    item(hw, Address=0, Description="SCSI controller", ElementName="SCSI controller 0", InstanceID=3,
         ResourceSubType="VirtualSCSI", ResourceType=6)
    item(hw, AddressOnParent=0, ElementName="Hard disk 1", HostResource="ovf:/disk/vmdisk1", InstanceID=4,
         Parent=3, ResourceType=17)
    item(hw, AddressOnParent=7, AutomaticAllocation="true", Connection=NETWORK,
         Description=f'VmxNet3 ethernet adapter on "{NETWORK}"', ElementName="Network adapter 1", InstanceID=5,
         ResourceSubType="VmxNet3", ResourceType=10)
    for key, value in (("firmware", "efi"), ("bootOptions.efiSecureBootEnabled", "false"),
                       ("tools.syncTimeWithHost", "false")):
        sub(hw, VMW, "Config", required="false").attrib.update({q(VMW, "key"): key, q(VMW, "value"): value})


def descriptor(vmdk, keys, defaults, version):
    env = ET.Element(q(OVF, "Envelope"), {"{http://www.w3.org/XML/1998/namespace}lang": "en-US"})
    refs = sub(env, OVF, "References")
    sub(refs, OVF, "File", href=os.path.basename(vmdk), id="file1", size=str(os.path.getsize(vmdk)))
    disks = sub(env, OVF, "DiskSection")
    sub(disks, OVF, "Info", "Virtual disk information")
    mib = vmdk_capacity(vmdk) // (1 << 20)
    sub(disks, OVF, "Disk", capacity=str(mib), capacityAllocationUnits="byte * 2^20", diskId="vmdisk1",
        fileRef="file1", format=VMDK_FORMAT)
    nets = sub(env, OVF, "NetworkSection")
    sub(nets, OVF, "Info", "The logical networks")
    sub(sub(nets, OVF, "Network", name=NETWORK), OVF, "Description", "The console's and the API's network")
    vs = sub(env, OVF, "VirtualSystem", id="privai")
    sub(vs, OVF, "Info", "The privai appliance")
    sub(vs, OVF, "Name", "privai")
    ann = sub(vs, OVF, "AnnotationSection")
    sub(ann, OVF, "Info", "What this appliance is")
    sub(ann, OVF, "Annotation", "privai: a private LLM inference appliance. Set the properties below; after power-on "
        "the console answers on https://HOST/ and its console screen shows the address.")
    product_section(vs, keys, defaults, version)
    os_section = sub(vs, OVF, "OperatingSystemSection", id="96")
    os_section.set(q(VMW, "osType"), "debian12_64Guest")
    sub(os_section, OVF, "Info", "The guest operating system")
    sub(os_section, OVF, "Description", "Debian GNU/Linux 12 (64-bit)")
    hardware_section(vs)
    ET.indent(env)
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(env, encoding="utf-8") + b"\n"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    vmdk, keys_json, conf, version, out = sys.argv[1:]
    keys = json.load(open(keys_json))
    os.makedirs(out, exist_ok=True)
    ovf, mf, ova = (os.path.join(out, "privai." + ext) for ext in ("ovf", "mf", "ova"))
    open(ovf, "wb").write(descriptor(vmdk, keys, read_conf(conf), version))
    with open(mf, "w") as f:
        for p in (ovf, vmdk):
            f.write(f"SHA256({os.path.basename(p)})= {sha256(p)}\n")
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    with tarfile.open(ova + ".tmp", "w", format=tarfile.USTAR_FORMAT) as tar:
        for p in (ovf, mf, vmdk):
            info = tar.gettarinfo(p, arcname=os.path.basename(p))
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = mtime, 0, 0, "", "", 0o644
            with open(p, "rb") as f:
                tar.addfile(info, f)
    os.replace(ova + ".tmp", ova)


if __name__ == "__main__":
    main()
