#!/bin/sh
# Build the appliance's disk: scripts/build-image.sh DEB OUT_DIR
#
# A Debian 12 root file system from Debian's packages (mmdebstrap, with the
# apt sources this machine uses), privai installed from its own package
# (make deb) and enabled by its preset; then a GPT disk assembled from
# file-system images without loop devices or mounts:
#   1  BIOS boot  1 MiB  GRUB's core.img for PC BIOS (boot.img in the MBR)
#   2  EFI system 127 MiB FAT: GRUB as one standalone EFI binary
#   3  root       ext4 made with mkfs.ext4 -d from the tree
# Both GRUBs find the root by its UUID and read one menu, /boot/grub/grub.cfg.
# Outputs privai.raw, privai.qcow2, privai.vmdk (streamOptimized) and
# privai.ova (scripts/build-ova.py), with each one's size and the time the
# build took.  Needs root (mmdebstrap's root mode) and the network to
# Debian's archive, nothing else.
set -eu
DEB=$(realpath "$1")
OUT=$(realpath -m "$2")
TOP=$(cd "$(dirname "$0")/.." && pwd)
: "${SOURCE_DATE_EPOCH:=$(git -C "$TOP" log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH
ROOT_SIZE_MIB=${ROOT_SIZE_MIB:-4096}
START=$(date +%s)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/privai-image.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
TREE=$WORK/tree
mkdir -p "$OUT"

# the apt sources this machine uses: no archive is named here
SOURCES=""
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
	[ -f "$f" ] && SOURCES="$SOURCES $f"
done
[ -n "$SOURCES" ] || { echo "build-image: no apt sources on this machine" >&2; exit 1; }

# deterministic ids, so two builds of one commit describe the same disk
ROOT_UUID=$(python3 -c 'import sys, uuid; print(uuid.uuid5(uuid.NAMESPACE_URL, sys.argv[1]))' \
	"privai-root-$SOURCE_DATE_EPOCH")
ESP_ID=$(printf '%s' "$SOURCE_DATE_EPOCH" | sha256sum | cut -c1-8 | tr a-f A-F)

# the package's own Depends, installed by mmdebstrap from the archive, so
# that dpkg -i in the tree needs no network
PKG_DEPENDS=$(dpkg-deb --field "$DEB" Depends | tr ',' '\n' | sed 's/(.*)//; s/ //g' | grep -v '^$' | paste -sd, -)

echo "build-image: root file system (mmdebstrap)"
mmdebstrap --variant=minbase --mode=root \
	--include="systemd-sysv,udev,dbus,polkitd,systemd-timesyncd,systemd-resolved,linux-image-amd64,initramfs-tools,cloud-init,open-vm-tools,openssh-server,ca-certificates,iproute2,netbase,less,sudo,$PKG_DEPENDS" \
	--customize-hook="copy-in $DEB /tmp" \
	--customize-hook='chroot "$1" sh -c "dpkg -i /tmp/privai_*.deb && rm /tmp/privai_*.deb"' \
	--customize-hook="upload $TOP/images/cloud.cfg /etc/cloud/cloud.cfg.d/90-privai.cfg" \
	--customize-hook='mkdir -p "$1/etc/systemd/system/systemd-networkd-wait-online.service.d"' \
	--customize-hook="upload $TOP/images/wait-online.conf /etc/systemd/system/systemd-networkd-wait-online.service.d/50-privai.conf" \
	--customize-hook='chroot "$1" systemctl enable systemd-networkd.service systemd-resolved.service systemd-timesyncd.service' \
	--customize-hook='rm -f "$1/etc/hostname" "$1/etc/machine-id" "$1/var/lib/dbus/machine-id"; touch "$1/etc/machine-id"' \
	--customize-hook='chroot "$1" apt-get clean; rm -rf "$1"/var/lib/apt/lists/* "$1"/var/log/*.log "$1"/var/cache/debconf/*-old' \
	bookworm "$TREE" $SOURCES

# what takes the room: installed size by package group (docs/performance.md)
chroot "$TREE" dpkg-query -W -f='${Installed-Size}\t${Package}\n' | awk -F'\t' '
	$2 ~ /^(linux-image|firmware)/ { g = "kernel" }
	$2 ~ /^(cloud-init|python3|libpython|open-vm-tools|cloud-)/ { g = "cloud-init, python, open-vm-tools" }
	$2 ~ /^(systemd|udev|dbus|libsystemd|libudev|polkit|libpolkit)/ { g = "systemd, udev, dbus, polkit" }
	$2 == "privai" { g = "privai (binaries, console, demo model)" }
	$2 ~ /^(openssh|libssl|ca-certificates|libgnutls|libcurl|libnghttp|librtmp|libssh|libk5|libkrb|libgssapi)/ { g = "ssh, TLS, HTTP client" }
	$2 ~ /^(initramfs-tools|klibc|libklibc|busybox|kmod|libkmod|linux-base|zstd)/ { g = "initramfs tools" }
	{ if (g == "") g = "base system and other libraries"; kib[g] += $1; total += $1; g = "" }
	END { for (k in kib) printf "%8.1f MiB  %s\n", kib[k] / 1024, k; printf "%8.1f MiB  total\n", total / 1024 }' |
	sort -rn > "$OUT/installed-size.txt"
cat "$OUT/installed-size.txt"

KVER=$(ls "$TREE/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
[ -n "$KVER" ] || { echo "build-image: no kernel in the tree" >&2; exit 1; }
cat > "$TREE/etc/fstab" <<FSTAB
UUID=$ROOT_UUID / ext4 errors=remount-ro 0 1
FSTAB

echo "build-image: boot loaders (GRUB for UEFI and for BIOS)"
mkdir -p "$TREE/boot/grub"
cat > "$TREE/boot/grub/grub.cfg" <<GRUB
serial --unit=0 --speed=115200
terminal_input console serial
terminal_output console serial
set timeout=1
menuentry "privai" {
	linux /boot/vmlinuz-$KVER root=UUID=$ROOT_UUID ro console=tty0 console=ttyS0,115200n8
	initrd /boot/initrd.img-$KVER
}
GRUB
cat > "$WORK/find-root.cfg" <<GRUB
search --no-floppy --fs-uuid --set=root $ROOT_UUID
set prefix=(\$root)/boot/grub
GRUB
cat "$WORK/find-root.cfg" > "$WORK/efi.cfg"
echo 'configfile $prefix/grub.cfg' >> "$WORK/efi.cfg"
grub-mkstandalone -O x86_64-efi --modules="part_gpt ext2 search search_fs_uuid linux normal echo configfile" \
	--locales= --themes= --fonts= -o "$WORK/BOOTX64.EFI" "boot/grub/grub.cfg=$WORK/efi.cfg"
# BIOS: normal reads $prefix/grub.cfg itself once the early config set it
grub-mkimage -O i386-pc -o "$WORK/core.img" -c "$WORK/find-root.cfg" -p /boot/grub \
	biosdisk part_gpt ext2 search search_fs_uuid linux normal echo configfile serial terminal
mkfs.vfat -C -n PRIVAI-ESP -i "$ESP_ID" "$WORK/esp.img" $((127 * 1024)) >/dev/null
mmd -i "$WORK/esp.img" ::/EFI ::/EFI/BOOT
mcopy -i "$WORK/esp.img" "$WORK/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI

echo "build-image: root file system image (ext4)"
E2FSPROGS_FAKE_TIME=$SOURCE_DATE_EPOCH mkfs.ext4 -q -L privai-root -U "$ROOT_UUID" -E hash_seed="$ROOT_UUID" \
	-d "$TREE" "$WORK/root.img" "${ROOT_SIZE_MIB}M"

echo "build-image: disk"
RAW=$OUT/privai.raw
rm -f "$RAW"
truncate -s $((1 + 1 + 127 + ROOT_SIZE_MIB + 1))M "$RAW"
sfdisk --quiet "$RAW" <<PART
label: gpt
unit: sectors
first-lba: 2048
start=2048, size=2048, type=21686148-6449-6E6F-744E-656564454649, name="bios"
start=4096, size=$((127 * 2048)), type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name="esp"
start=$((4096 + 127 * 2048)), size=$((ROOT_SIZE_MIB * 2048)), type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name="root"
PART
dd if="$WORK/esp.img" of="$RAW" bs=1M seek=2 conv=notrunc,sparse status=none
dd if="$WORK/root.img" of="$RAW" bs=1M seek=129 conv=notrunc,sparse status=none
python3 "$TOP/scripts/install-bios-boot.py" "$RAW" "$WORK/core.img" /usr/lib/grub/i386-pc/boot.img 2048

echo "build-image: qcow2, VMDK, OVA"
qemu-img convert -q -c -O qcow2 "$RAW" "$OUT/privai.qcow2"
rm -f "$OUT/privai.vmdk"
qemu-img convert -q -O vmdk -o subformat=streamOptimized "$RAW" "$OUT/privai.vmdk"
# the keys the wizard asks for are the ones the installed privai-firstboot reads
chroot "$TREE" /usr/bin/privai-firstboot --keys-json > "$WORK/keys.json"
python3 "$TOP/scripts/build-ova.py" "$OUT/privai.vmdk" "$WORK/keys.json" "$TREE/etc/privai/appliance.conf" \
	"$(dpkg-deb --field "$DEB" Version)" "$OUT"
END=$(date +%s)
for f in "$RAW" "$OUT/privai.qcow2" "$OUT/privai.vmdk" "$OUT/privai.ova"; do
	echo "build-image: $f: $(du -h --apparent-size "$f" | cut -f1) ($(du -h "$f" | cut -f1) on disk)"
done
echo "build-image: kernel $KVER, root $ROOT_UUID, $((END - START)) s"
