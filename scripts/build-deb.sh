#!/bin/sh
# Build privai's Debian package from a finished build tree:
#   scripts/build-deb.sh BUILD OUT_DIR VERSION
# Binaries (stripped), units, preset, sysusers, polkit rule, the console,
# the demo model, default config and docs; Depends from dpkg-shlibdeps;
# timestamps clamped to SOURCE_DATE_EPOCH (the last commit's time when
# unset) so the same tree gives the same package.
set -eu
BUILD=$1
OUT=$2
VERSION=$3
TOP=$(cd "$(dirname "$0")/.." && pwd)
: "${SOURCE_DATE_EPOCH:=$(git -C "$TOP" log -1 --format=%ct 2>/dev/null || echo 0)}"
export SOURCE_DATE_EPOCH
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
R=$STAGE/root

install -d "$R/DEBIAN" "$R/usr/bin" "$R/usr/lib/systemd/system" "$R/usr/lib/systemd/system-preset" \
	"$R/usr/lib/sysusers.d" "$R/usr/share/privai/demo" "$R/usr/share/doc/privai" \
	"$R/etc/privai"
for b in privai-admin privai-engine privai-tune privai-fabric privai-firstboot privai-bench; do
	install -m 0755 "$BUILD/$b" "$R/usr/bin/$b"
	strip --strip-unneeded "$R/usr/bin/$b"
done
# the CUDA backend, where this build has one: privai-engine dlopen()s it
# from ../lib/privai when --device cuda is asked for (cuBLAS comes with
# the NVIDIA driver stack, not from this package), and NCCL's collectives
# for GPU ranks beside it
for so in privai-cuda.so privai-nccl.so; do
	[ -f "$BUILD/$so" ] || continue
	install -d "$R/usr/lib/privai"
	install -m 0644 "$BUILD/$so" "$R/usr/lib/privai/$so"
	strip --strip-unneeded "$R/usr/lib/privai/$so"
done
# privai-fabric validate's all-reduce measurement, where it looks after
# PATH (out of /usr/bin: dpkg-shlibdeps knows no package of libnccl)
if [ -f "$BUILD/privai-nccl-perf" ]; then
	install -m 0755 "$BUILD/privai-nccl-perf" "$R/usr/lib/privai/privai-nccl-perf"
	strip --strip-unneeded "$R/usr/lib/privai/privai-nccl-perf"
fi
# the collectives of a model split over CPU ranks, dlopen()ed from the
# same place: MPI (--tp N under mpirun) and Gloo (ranks started apart by
# each node's admin, meeting at --dist-init)
install -d "$R/usr/lib/privai"
for so in privai-mpi.so privai-gloo.so; do
	install -m 0644 "$BUILD/$so" "$R/usr/lib/privai/$so"
	strip --strip-unneeded "$R/usr/lib/privai/$so"
done
install -m 0644 "$TOP"/appliance/systemd/*.service "$TOP"/appliance/systemd/*.timer "$R/usr/lib/systemd/system/"
install -m 0644 "$TOP/appliance/systemd/preset/90-privai.preset" "$R/usr/lib/systemd/system-preset/"
install -m 0644 "$TOP/appliance/systemd/sysusers/privai.conf" "$R/usr/lib/sysusers.d/"
cp -r "$TOP/webui" "$R/usr/share/privai/webui"
rm -rf "$R/usr/share/privai/webui/README.md" "$R/usr/share/privai/webui/node_modules" \
	"$R/usr/share/privai/webui/package.json" "$R/usr/share/privai/webui/package-lock.json"
test -f "$R/usr/share/privai/webui/vendor/uPlot.esm.js" || { echo "build-deb: webui/vendor is missing (make all)" >&2; exit 1; }
install -m 0644 "$BUILD/demo/privai-demo.gguf" "$R/usr/share/privai/demo/"
install -m 0644 "$TOP/packaging/appliance.conf" "$R/etc/privai/appliance.conf"
install -d "$R/usr/lib/systemd/network"
install -m 0644 "$TOP/packaging/90-privai-dhcp.network" "$R/usr/lib/systemd/network/"
for d in README.md docs/operations.md docs/architecture.md docs/api/openapi.yaml; do
	install -m 0644 "$TOP/$d" "$R/usr/share/doc/privai/"
done
for s in postinst prerm postrm; do
	install -m 0755 "$TOP/packaging/debian/$s" "$R/DEBIAN/$s"
done
echo /etc/privai/appliance.conf > "$R/DEBIAN/conffiles"

# Depends: what the binaries link, as Debian's own tool says
mkdir -p "$STAGE/shl/debian"
printf 'Source: privai\n\nPackage: privai\nArchitecture: amd64\n' > "$STAGE/shl/debian/control"
DEPENDS=$(cd "$STAGE/shl" && dpkg-shlibdeps -O $(for b in "$R"/usr/bin/*; do printf -- '-e%s ' "$b"; done) 2>/dev/null |
	sed -n 's/^shlibs:Depends=//p')
# the engines are units of user privai's manager, reached on its session bus;
# oneDNN is dlopen()ed by the engine (engine/src/kernels/cpu_onednn.c), and
# Open MPI by privai-mpi.so, which the engine dlopen()s: dpkg-shlibdeps
# sees neither; mpirun starts the ranks of a split model
DEPENDS="$DEPENDS, systemd (>= 252), dbus-user-session, libdnnl2, libopenmpi3, openmpi-bin, libgloo0"
SIZE_KB=$(du -sk --exclude=DEBIAN "$R" | cut -f1)
sed -e "s/@VERSION@/$VERSION/" -e "s/@SIZE_KB@/$SIZE_KB/" -e "s/@DEPENDS@/$DEPENDS/" \
	"$TOP/packaging/debian/control.in" > "$R/DEBIAN/control"
(cd "$R" && find . -type f ! -path './DEBIAN/*' -print0 | sort -z | xargs -0 md5sum | sed 's# \./# #') \
	> "$R/DEBIAN/md5sums"
find "$R" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$OUT"
dpkg-deb --root-owner-group -Zxz --build "$R" "$OUT/privai_${VERSION}_amd64.deb" >/dev/null
echo "$OUT/privai_${VERSION}_amd64.deb: $(du -h "$OUT/privai_${VERSION}_amd64.deb" | cut -f1), installed $SIZE_KB KiB"
