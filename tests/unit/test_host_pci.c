/*
 * appliance/lib: PCI config-space decoding (ACS and ATS through the
 * extended-capability chain, truncated, looping and all-ones images),
 * link speeds, and hostfs's refusals: a FIFO, a directory, a dangling
 * link and garbage numbers are unreadable at once, never a hang.
 */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#include "hostfs.h"
#include "nvidia.h"
#include "pci.h"
#include "status.h"
#include "testlib.h"

static void
put32(unsigned char *cfg, unsigned off, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		cfg[off + i] = (unsigned char)(v >> (8 * i));
}

/* an extended capability header: id, version 1, next */
static uint32_t
ecap(unsigned id, unsigned next)
{
	return id | 1u << 16 | next << 20;
}

/* sysfs's resource file: the 64-bit memory BARs among lines 0-5, added up */
static void
test_resource(void)
{
	uint64_t b = 1;
	const char *h100 = "0x0000020001000000 0x0000020001ffffff 0x0000000000040200\n"
			   "0x0000022000000000 0x0000023fffffffff 0x000000000014220c\n"
			   "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
			   "0x0000024000000000 0x0000024001ffffff 0x000000000014220c\n"
			   "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
			   "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
			   "0x0000000000000000 0x0000000000000000 0x0000000000000000\n"
			   "0x0000030000000000 0x000003ffffffffff 0x000000000014220c\n";

	CHECK(pci_parse_resource(h100, &b) == 0 && b == (128ULL << 30) + (32ULL << 20),
	      "H100: BAR1 and BAR3 (64-bit), not the 32-bit BAR0 nor a window past line 5: %llu",
	      (unsigned long long)b);
	CHECK(pci_parse_resource("", &b) == 0 && b == 0, "an empty file: no BARs");
	CHECK(pci_parse_resource("0x0 0x0 0x14220c\n", &b) == 0 && b == 0, "an unassigned BAR counts nothing");
	CHECK(pci_parse_resource("not a line\n", &b) == APP_EFORMAT, "garbage refused");
	CHECK(pci_parse_resource("0x1 0x2 0x3 junk\n", &b) == APP_EFORMAT, "trailing junk refused");
	CHECK(pci_parse_resource("0x10 0xffffffffffffffff 0x14220c\n", &b) == APP_EFORMAT, "an impossible BAR refused");
	CHECK(nvidia_mmio64_window_gib((8ULL * ((128ULL << 30) + (32ULL << 20))) + (12ULL << 25)) == 1096,
	      "8 H100s, 8 NICs, 4 NVSwitches: a 1096 GiB window, not 2048 (%llu)",
	      (unsigned long long)nvidia_mmio64_window_gib((8ULL * ((128ULL << 30) + (32ULL << 20))) + (12ULL << 25)));
	CHECK(nvidia_mmio64_window_gib(0) == 8 && nvidia_mmio64_window_gib(32ULL << 20) == 16,
	      "a small device: at least 8 GiB of room, in 8 GiB steps");
}

static void
test_config(void)
{
	static unsigned char cfg[4096];
	struct pci_dev d;

	/* AER at 0x100 -> ACS at 0x148 (ctrl 0x5d) -> ATS at 0x150 (enabled) */
	memset(cfg, 0, sizeof(cfg));
	put32(cfg, 0x100, ecap(0x0001, 0x148));
	put32(cfg, 0x148, ecap(0x000d, 0x150));
	put32(cfg, 0x14c, 0x005d007f);
	put32(cfg, 0x150, ecap(0x000f, 0));
	put32(cfg, 0x154, 0x80000020);
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.has_config && d.acs_cap == 0x7f && d.acs_ctrl == 0x5d && d.ats_ctrl == 1,
	      "chain decoded: acs cap %x ctrl %x ats %d", d.acs_cap, d.acs_ctrl, d.ats_ctrl);
	CHECK((d.acs_ctrl & PCI_ACS_RR) && (d.acs_ctrl & PCI_ACS_DT), "redirect and direct-translated bits");

	put32(cfg, 0x154, 0x00000020);
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.ats_ctrl == 0, "ATS capability present but disabled: %d", d.ats_ctrl);

	/* only the 256-byte header readable (no CAP_SYS_ADMIN): nothing known */
	pci_parse_config(&d, cfg, 256);
	CHECK(!d.has_config && d.acs_ctrl == -1 && d.ats_ctrl == -1, "a 256-byte image has no extended space");
	pci_parse_config(&d, cfg, 0);
	CHECK(!d.has_config, "an empty image");

	/* a chain that points back at itself, or backwards, ends */
	memset(cfg, 0, sizeof(cfg));
	put32(cfg, 0x100, ecap(0x000d, 0x100));
	put32(cfg, 0x104, 0x00010001);
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.acs_ctrl == 1 && d.ats_ctrl == -1, "a self-loop reads once: acs %d ats %d", d.acs_ctrl, d.ats_ctrl);
	put32(cfg, 0x100, ecap(0x0001, 0x200));
	put32(cfg, 0x200, ecap(0x0001, 0x100));
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.acs_ctrl == -1, "a backward link ends the walk");

	/* a next pointer past the image, misaligned, or an all-ones read (device gone) */
	put32(cfg, 0x100, ecap(0x0001, 0xffc));
	pci_parse_config(&d, cfg, 0x200);
	CHECK(d.acs_ctrl == -1, "a next pointer past the image is not followed");
	put32(cfg, 0x100, ecap(0x0001, 0x14a));
	put32(cfg, 0x14a, ecap(0x000d, 0));
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.acs_ctrl == -1, "a misaligned next pointer is not followed");
	memset(cfg, 0xff, sizeof(cfg));
	pci_parse_config(&d, cfg, sizeof(cfg));
	CHECK(d.acs_ctrl == -1 && d.ats_ctrl == -1, "an all-ones image (a device that fell off the bus)");
}

static void
test_speed(void)
{
	CHECK(pci_parse_speed("32.0 GT/s PCIe") == 32.0, "gen5");
	CHECK(pci_parse_speed("2.5 GT/s PCIe") == 2.5, "gen1");
	CHECK(pci_parse_speed("16.0 GT/s") == 16.0, "older kernels omit PCIe");
	CHECK(pci_parse_speed("Unknown") == 0 && pci_parse_speed("fast") == 0 && pci_parse_speed("") == 0 &&
		      pci_parse_speed("-8.0 GT/s") == 0 && pci_parse_speed("1e9 GT/s") == 0,
	      "garbage is 0");
}

static void
test_hostfs(void)
{
	char dir[] = "/tmp/privai-hostfs-XXXXXX", path[300], line[64], **names;
	long long v = 42;
	int n;

	if (mkdtemp(dir) == NULL) {
		CHECK(0, "mkdtemp");
		return;
	}
	snprintf(path, sizeof(path), "%s/fifo", dir);
	CHECK(mkfifo(path, 0600) == 0, "mkfifo");
	CHECK(hostfs_read_line(dir, "/fifo", line, sizeof(line)) == APP_ENOTFOUND, "a FIFO is unreadable, at once");
	snprintf(path, sizeof(path), "%s/sub", dir);
	CHECK(mkdir(path, 0700) == 0, "mkdir");
	CHECK(hostfs_read_line(dir, "/sub", line, sizeof(line)) == APP_ENOTFOUND, "a directory is unreadable");
	snprintf(path, sizeof(path), "%s/dangling", dir);
	CHECK(symlink("/nonexistent/x", path) == 0, "symlink");
	CHECK(hostfs_read_line(dir, "/dangling", line, sizeof(line)) == APP_ENOTFOUND, "a dangling link is unreadable");
	CHECK(hostfs_resolve(dir, "/dangling", path, sizeof(path)) == APP_ENOTFOUND, "and does not resolve");
	snprintf(path, sizeof(path), "%s/escape", dir);
	CHECK(symlink("/etc", path) == 0, "symlink");
	CHECK(hostfs_resolve(dir, "/escape", path, sizeof(path)) == APP_ENOTFOUND,
	      "a link out of the root does not resolve");

	CHECK(hostfs_write(dir, "/num", "0x10de\n", 7, 1) == 0, "write");
	CHECK(hostfs_read_long(dir, "/num", 16, &v) == 0 && v == 0x10de, "hex %llx", v);
	CHECK(hostfs_read_long(dir, "/num", 10, &v) == APP_EFORMAT, "hex is garbage as decimal");
	CHECK(hostfs_write(dir, "/num", "99999999999999999999999\n", 24, 0) == 0, "write in place");
	CHECK(hostfs_read_long(dir, "/num", 10, &v) == APP_EFORMAT, "an overflowing number is garbage");
	CHECK(hostfs_write(dir, "/num", "12  \n", 5, 0) == 0 && hostfs_read_long(dir, "/num", 10, &v) == 0 && v == 12,
	      "trailing blanks are trimmed");
	CHECK(hostfs_write(dir, "/num", "\n", 1, 0) == 0 &&
		      hostfs_read_line(dir, "/num", line, sizeof(line)) == APP_ENOTFOUND,
	      "an empty line is unreadable");
	CHECK(hostfs_read_long(dir, "/missing", 10, &v) == APP_ENOTFOUND, "a missing file is APP_ENOTFOUND");

	names = hostfs_list(dir, "/", 100, &n);
	CHECK(names != NULL && n == 5 && strcmp(names[0], "dangling") == 0 && strcmp(names[4], "sub") == 0,
	      "listing is sorted and complete: %d", n);
	hostfs_free_names(names, n);
	names = hostfs_list(dir, "/sub", 100, &n);
	CHECK(names != NULL && n == 0, "an empty directory is an empty list, not an error");
	hostfs_free_names(names, n);
	CHECK(hostfs_list(dir, "/missing", 100, &n) == NULL && n == 0, "a missing directory is NULL");

	snprintf(path, sizeof(path), "rm -rf %s", dir);
	CHECK(system(path) == 0, "clean up");
}

int
main(void)
{
	test_config();
	test_resource();
	test_speed();
	test_hostfs();
	return test_summary();
}
