#!/bin/sh
# Run every suite and print one closing line "N passed, N failed" summing
# the suites' own counts.  BUILDS lists the build trees to test (the plain
# one and the ASan+UBSan one in `make test`); the fuzzer runs once.
# FUZZ_SECONDS bounds it (default 30).
set -u
BUILDS=${BUILDS:-${BUILD:-build}}
total_pass=0
total_fail=0
total_skip=0
failed_suites=""

outs=$(mktemp -d)
trap 'rm -rf "$outs"' EXIT

# Run a suite, keeping its output, exit status and seconds under $outs/KEY.
suite_exec() {
	key=$1
	shift
	started=$(date +%s)
	"$@" >"$outs/$key.out" 2>&1
	echo $? >"$outs/$key.rc"
	echo $(($(date +%s) - started)) >"$outs/$key.took"
}

# Print a finished suite's last lines and its summary; add its counts.
suite_report() {
	name=$1
	key=$2
	echo "== $name"
	out=$(cat "$outs/$key.out")
	rc=$(cat "$outs/$key.rc")
	took=$(cat "$outs/$key.took")
	echo "$out" | grep -av '^[0-9]* passed, [0-9]* failed' | sed 's/^/   /' | tail -40
	line=$(echo "$out" | grep -aE '^[0-9]+ passed, [0-9]+ failed' | tail -1)
	p=$(echo "$line" | sed -n 's/^\([0-9]*\) passed.*/\1/p')
	f=$(echo "$line" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')
	k=$(echo "$line" | sed -n 's/.* \([0-9]*\) skipped.*/\1/p')
	total_skip=$((total_skip + ${k:-0}))
	if [ -z "$line" ]; then
		p=0
		f=1
		echo "   (no summary line; exit $rc)"
	elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1 # a crash after the summary still counts
		echo "   (exit $rc)"
	fi
	echo "   $line ($took s)"
	total_pass=$((total_pass + p))
	total_fail=$((total_fail + f))
	[ "$f" -ne 0 ] && failed_suites="$failed_suites $name"
	return 0
}

run_suite() {
	name=$1
	shift
	suite_exec one "$@"
	suite_report "$name" one
}

# Suites that mostly wait (for heartbeats, timeouts, peers: 2-9 s of CPU
# in 10-45 s each, measured) start side by side; `wait`, then
# suite_report each in order.  Each has its own state directories, its
# consoles on ports the kernel picks and its engines on a port range no
# other of them uses.
start_suite() {
	key=$1
	shift
	suite_exec "$key" "$@" &
}

for BUILD in $BUILDS; do
	export BUILD
	for t in "$BUILD"/tests/test_*; do
		run_suite "$BUILD/$(basename "$t")" "$t"
	done
	run_suite "$BUILD/cli" tests/cli/test_cli.sh
	run_suite "$BUILD/serve (HTTP)" python3 tests/integration/test_serve.py
	run_suite "$BUILD/serve through the OpenAI SDK (node)" node tests/sdk/openai.test.mjs "$BUILD"
	run_suite "$BUILD/tensor parallel (mpirun)" python3 tests/integration/test_engine_tp.py "$BUILD"
	run_suite "$BUILD/admin (HTTP)" python3 tests/integration/test_admin.py "$BUILD"
	run_suite "$BUILD/admin as an attacker (HTTP)" python3 tests/integration/test_admin_attack.py "$BUILD"
	start_suite cluster python3 tests/integration/test_admin_cluster.py "$BUILD"
	start_suite host python3 tests/integration/test_admin_host.py "$BUILD"
	start_suite remote python3 tests/integration/test_admin_remote.py "$BUILD"
	start_suite gpu python3 tests/integration/test_admin_gpu_deploy.py "$BUILD"
	start_suite fabric python3 tests/integration/test_fabric.py "$BUILD"
	wait
	suite_report "$BUILD/admin cluster (HTTP)" cluster
	suite_report "$BUILD/admin host health (HTTP)" host
	suite_report "$BUILD/admin remote deployments (HTTP)" remote
	suite_report "$BUILD/admin GPU placements (HTTP)" gpu
	suite_report "$BUILD/fabric (fixture hosts)" fabric
	# not beside the others: once in five runs side by side its split
	# deployment's second rank never came up (not seen alone)
	run_suite "$BUILD/admin deployments split over nodes (HTTP)" python3 tests/integration/test_admin_group.py "$BUILD"
	run_suite "$BUILD/admin workload VMs (libvirt test driver)" python3 tests/integration/test_admin_vms.py "$BUILD"
	run_suite "$BUILD/a real qemu guest through the VM API (libvirt session)" python3 tests/integration/test_vms_qemu.py "$BUILD"
	run_suite "$BUILD/admin streaming proxy (HTTP)" python3 tests/integration/test_admin_stream.py "$BUILD"
	run_suite "$BUILD/admin resumable uploads (HTTP)" python3 tests/integration/test_admin_uploads.py "$BUILD"
	run_suite "$BUILD/admin LoRA adapters (HTTP)" python3 tests/integration/test_admin_lora.py "$BUILD"
	run_suite "$BUILD/admin metrics history (HTTP)" python3 tests/integration/test_admin_metrics.py "$BUILD"
	run_suite "$BUILD/admin tasks (HTTP)" python3 tests/integration/test_admin_tasks.py "$BUILD"
	run_suite "$BUILD/admin TLS (HTTPS)" python3 tests/integration/test_admin_tls.py "$BUILD"
	run_suite "$BUILD/admin engine units (systemd)" python3 tests/integration/test_admin_units.py "$BUILD"
	run_suite "$BUILD/firstboot (scratch roots)" python3 tests/integration/test_firstboot.py "$BUILD"
	run_suite "$BUILD/tune (fixture hosts)" python3 tests/integration/test_tune.py "$BUILD"
	run_suite "$BUILD/fabric units (systemd)" python3 tests/integration/test_fabric_units.py "$BUILD"
done
# the portable and AVX2 kernels must be as right as the best ones
BUILD=$(echo $BUILDS | cut -d' ' -f1)
for simd in scalar avx2; do
	run_suite "$BUILD/test_golden (PRIVAI_SIMD=$simd)" env PRIVAI_SIMD=$simd "$BUILD/tests/test_golden"
done
# the GPU deployment check (scripts/gpu-check.sh runs it on a lent GPU):
# here its steps with a CPU placement in the GPU one's place, so the script
# itself is known to work before a GPU's time is spent on it
run_suite "$BUILD/a GPU deployment through the admin (CPU stand-in)" env PRIVAI_DEPLOY_CHECK_CPU=1 \
	python3 tests/integration/test_gpu_deploy.py "$BUILD" "${PRIVAI_FIXTURES:-../shared/fixtures}/models/tiny-llama-spm-q4_0.gguf"
# the units as systemd reads them, once
run_suite "systemd units (systemd-analyze)" python3 tests/integration/test_systemd_units.py "$BUILD"
# the Debian package the image installs, once
run_suite "$BUILD/package (dpkg-deb)" python3 tests/integration/test_deb.py "$BUILD"
run_suite "$BUILD/OVA descriptor and manifest (small disk)" python3 tests/image/test_ova.py --small "$BUILD"
# the code as read, not run: layers, cppcheck, clang-tidy, format (make lint)
run_suite "lint (layers, cppcheck, clang-tidy, clang-format)" env BUILD="$BUILD" scripts/lint.sh
# the console in headless Chromium, once, against the first build
run_suite "$BUILD/console (Chromium)" node tests/browser/console.test.mjs "$BUILD" "$BUILD/screenshots"
run_suite "$BUILD/console fixes (Chromium)" node tests/browser/console_fixes.test.mjs "$BUILD" "$BUILD/screenshots"
run_suite "$BUILD/console metrics and tasks (Chromium)" node tests/browser/console_ops.test.mjs "$BUILD" "$BUILD/screenshots"
run_suite "$BUILD/console GPU group over nodes (Chromium)" node tests/browser/console_gpu_group.test.mjs "$BUILD" \
	"$BUILD/screenshots"
run_suite "$BUILD/console workload VMs (Chromium, libvirt test driver)" node tests/browser/console_vms.test.mjs "$BUILD" \
	"$BUILD/screenshots"
# the appliance booted in qemu (make test IMAGE_TEST=1 builds the image first)
if [ "${IMAGE_TEST:-}" = "1" ]; then
	run_suite "image boot: seed, reboot by BIOS (qemu)" python3 tests/image/boot_test.py build/image 1,2
fi
if [ "${SKIP_FUZZ:-}" != "1" ]; then
	BUILD=$(echo $BUILDS | cut -d' ' -f1)
	export BUILD
	run_suite fuzz tests/fuzz/run.sh
fi

[ -n "$failed_suites" ] && echo "failed suites:$failed_suites"
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
