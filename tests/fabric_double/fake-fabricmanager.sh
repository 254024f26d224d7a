#!/bin/sh
# A stand-in for nv-fabricmanager under a real systemd unit, for tests of
# privai-fabric's lifecycle handling: it reads the config privai-fabric
# wrote (-c FILE), records what it saw, and then behaves as told by
# FAKE_FM_BEHAVIOR: "ok" keeps running, "fail" exits 1 at once the way
# Fabric Manager does when it cannot train the fabric.
set -u
config=""
while [ $# -gt 0 ]; do
	case "$1" in
	-c) config="$2"; shift 2 ;;
	*) shift ;;
	esac
done
[ -r "$config" ] || { echo "fake-fabricmanager: cannot read config '$config'" >&2; exit 2; }
mode=$(sed -n 's/^FABRIC_MODE=//p' "$config")
echo "fake-fabricmanager: FABRIC_MODE=$mode" >&2
[ -n "${FAKE_FM_SEEN:-}" ] && echo "FABRIC_MODE=$mode" >> "$FAKE_FM_SEEN"
case "${FAKE_FM_BEHAVIOR:-ok}" in
ok) exec sleep 100000 ;;
*) echo "fake-fabricmanager: fabric training failed" >&2; exit 1 ;;
esac
