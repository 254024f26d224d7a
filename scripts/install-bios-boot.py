#!/usr/bin/env python3
"""Make a GPT disk image boot with a PC BIOS, without loop devices:
install-bios-boot.py DISK CORE_IMG BOOT_IMG START_LBA

What grub-bios-setup does for a disk whose BIOS boot partition starts at
START_LBA, done on a plain file (grub-bios-setup wants a block device):
- core.img goes into that partition; the block list at the end of its
  first sector (diskboot.img) is pointed at its remaining sectors;
- boot.img becomes the MBR's code, told where core.img starts, with the
  drive-number check replaced by no-ops (a hard disk: some BIOSes pass
  the wrong drive), keeping the protective MBR's partition table.
Fails, naming the problem, when core.img does not fit the partition."""
import struct
import sys

SECTOR = 512
KERNEL_SECTOR = 0x5C        # boot.img: LBA of core.img's first sector (64 bits)
DRIVE_CHECK = 0x66          # boot.img: a 2-byte jump that skips the drive check
TABLE_START = 0x1B8         # MBR: disk signature and partition table onwards
BLOCKLIST = SECTOR - 12     # diskboot.img: start (64), length (16), segment (16)
GPT_BIOS_BOOT = bytes.fromhex("4861682149646F6E744E656564454649")  # 21686148-6449-6E6F-744E-656564454649 on disk


def bios_partition_sectors(disk, start):
    """The BIOS boot partition's length in sectors, from the GPT."""
    disk.seek(SECTOR)
    hdr = disk.read(SECTOR)
    if hdr[:8] != b"EFI PART":
        sys.exit("install-bios-boot: no GPT header at LBA 1")
    entries_lba, count, size = struct.unpack_from("<QII", hdr, 72)
    disk.seek(entries_lba * SECTOR)
    table = disk.read(count * size)
    for i in range(count):
        e = table[i * size:(i + 1) * size]
        first, last = struct.unpack_from("<QQ", e, 32)
        if e[:16] == GPT_BIOS_BOOT and first == start:
            return last - first + 1
    sys.exit(f"install-bios-boot: no BIOS boot partition starts at LBA {start}")


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    disk_path, core_path, boot_path, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    core = bytearray(open(core_path, "rb").read())
    boot = bytearray(open(boot_path, "rb").read())
    if len(boot) != SECTOR:
        sys.exit(f"install-bios-boot: {boot_path} is {len(boot)} bytes, not one sector")
    core += bytes(-len(core) % SECTOR)
    nsec = len(core) // SECTOR
    with open(disk_path, "r+b") as disk:
        room = bios_partition_sectors(disk, start)
        if nsec > room:
            sys.exit(f"install-bios-boot: core.img needs {nsec} sectors; the partition has {room}")
        if nsec - 1 > 0xFFFF:
            sys.exit("install-bios-boot: core.img is too large for one block-list entry")
        struct.pack_into("<QH", core, BLOCKLIST, start + 1, nsec - 1)
        disk.seek(0)
        mbr = disk.read(SECTOR)
        if mbr[510:] != b"\x55\xaa":
            sys.exit("install-bios-boot: the disk has no protective MBR")
        struct.pack_into("<Q", boot, KERNEL_SECTOR, start)
        boot[DRIVE_CHECK:DRIVE_CHECK + 2] = b"\x90\x90"
        boot[TABLE_START:] = mbr[TABLE_START:]
        disk.seek(0)
        disk.write(boot)
        disk.seek(start * SECTOR)
        disk.write(core)
    print(f"install-bios-boot: core.img ({nsec} sectors) at LBA {start}, boot.img in the MBR")


if __name__ == "__main__":
    main()
