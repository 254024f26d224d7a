#!/bin/sh
# Install the Debian packages the build and the tests need, only when one is
# missing (apt-get update first, as a fresh machine has no package lists).
set -eu
PKGS="build-essential pkg-config libpcre2-dev libcjson-dev clang libclang-rt-14-dev libmicrohttpd-dev libsodium-dev libsystemd-dev libcurl4-openssl-dev libsqlite3-dev libgnutls28-dev libdnnl-dev libopenmpi-dev openmpi-bin libgloo-dev g++ libibverbs-dev ibverbs-providers libyaml-dev libxml2-dev libvirt-dev libvirt-clients libvirt-daemon libvirt-daemon-driver-qemu mmdebstrap qemu-system-x86 qemu-utils xorriso grub-efi-amd64-bin grub-pc-bin dosfstools mtools ovmf fdisk openssh-client python3 python3-yaml python3-jsonschema chromium systemd dbus-user-session openssl cppcheck clang-tidy clang-format bear"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# the browser tests' npm package needs node and npm, from whichever source
# the machine has them; Debian's when it has none
command -v npm >/dev/null 2>&1 || missing="$missing nodejs npm"
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends $missing
