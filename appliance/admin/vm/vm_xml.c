/* A workload VM's libvirt domain XML (vm.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vm/vm.h"

/* Text for an attribute or element: the five characters XML reserves escaped. */
static void
esc(FILE *fp, const char *s)
{
	for (; *s != '\0'; s++) {
		switch (*s) {
		case '&':
			fputs("&amp;", fp);
			break;
		case '<':
			fputs("&lt;", fp);
			break;
		case '>':
			fputs("&gt;", fp);
			break;
		case '\'':
			fputs("&apos;", fp);
			break;
		case '"':
			fputs("&quot;", fp);
			break;
		default:
			fputc(*s, fp);
		}
	}
}

static void
pci_address(FILE *fp, const char *bdf)
{
	unsigned dom = 0, bus = 0, slot = 0, fn = 0;

	sscanf(bdf, "%x:%x:%x.%x", &dom, &bus, &slot, &fn);
	fprintf(fp, "<address domain='0x%04x' bus='0x%02x' slot='0x%02x' function='0x%x'/>", dom, bus, slot, fn);
}

char *
vm_domain_xml(const struct vm_spec *s, const char *type)
{
	char *text = NULL;
	size_t len = 0;
	FILE *fp = open_memstream(&text, &len);

	if (fp == NULL)
		return NULL;
	fprintf(fp, "<domain type='%s'>\n  <name>", type);
	esc(fp, s->name);
	fprintf(fp, "</name>\n  <description>privai workload VM: ");
	for (int i = 0; i < s->n_devices; i++)
		fprintf(fp, "%s%s %s", i ? ", " : "", s->dev[i].name, s->dev[i].bdf);
	fprintf(fp, "</description>\n  <memory unit='GiB'>%d</memory>\n", s->memory_gib);
	/* huge pages, locked: no page of a DMA target moves, and the IOMMU
	 * maps 1 GiB at a time */
	if (s->hugepages)
		fprintf(fp, "  <memoryBacking>\n    <hugepages>\n      <page size='1' unit='G'/>\n    </hugepages>\n"
			    "    <locked/>\n  </memoryBacking>\n");
	if (s->cpuset[0] != '\0') {
		fprintf(fp, "  <vcpu placement='static' cpuset='%s'>%d</vcpu>\n  <cputune>\n", s->cpuset, s->vcpus);
		const char *c = s->cpuset;
		for (int v = 0; v < s->vcpus && *c != '\0'; v++) {
			int n = (int)strcspn(c, ",");
			fprintf(fp, "    <vcpupin vcpu='%d' cpuset='%.*s'/>\n", v, n, c);
			c += n + (c[n] == ',');
		}
		fprintf(fp, "  </cputune>\n");
	} else {
		fprintf(fp, "  <vcpu placement='static'>%d</vcpu>\n", s->vcpus);
	}
	if (s->numa_node >= 0)
		fprintf(fp, "  <numatune>\n    <memory mode='strict' nodeset='%d'/>\n  </numatune>\n", s->numa_node);
	fprintf(fp, "  <os>\n    <type arch='x86_64' machine='q35'>hvm</type>\n    <boot dev='hd'/>\n  </os>\n"
		    "  <features>\n    <acpi/>\n    <apic/>\n  </features>\n");
	/* the host's CPU as it is: AVX-512 and AMX for the engine's kernels
	 * (under emulation there is no host CPU to pass) */
	if (strcmp(type, "qemu") != 0)
		fprintf(fp, "  <cpu mode='host-passthrough' check='none'/>\n");
	fprintf(fp, "  <clock offset='utc'/>\n"
		    "  <on_poweroff>destroy</on_poweroff>\n  <on_reboot>restart</on_reboot>\n"
		    "  <on_crash>destroy</on_crash>\n  <devices>\n");
	/* q35's 64-bit PCI hole, sized for the devices' BARs (vSphere's
	 * pciPassthru.64bitMMIOSizeGB) */
	if (s->mmio_window_gib > 0)
		fprintf(fp,
			"    <controller type='pci' index='0' model='pcie-root'>\n"
			"      <pcihole64 unit='GiB'>%d</pcihole64>\n    </controller>\n",
			s->mmio_window_gib);
	fprintf(fp, "    <disk type='file' device='disk'>\n      <driver name='qemu' type='qcow2' cache='none'/>\n"
		    "      <source file='");
	esc(fp, s->image);
	fprintf(fp, "'/>\n      <target dev='vda' bus='virtio'/>\n    </disk>\n");
	if (s->seed[0] != '\0') {
		fprintf(fp, "    <disk type='file' device='cdrom'>\n      <driver name='qemu' type='raw'/>\n"
			    "      <source file='");
		esc(fp, s->seed);
		fprintf(fp, "'/>\n      <target dev='sda' bus='sata'/>\n      <readonly/>\n    </disk>\n");
	}
	if (s->network[0] != '\0') {
		fprintf(fp, "    <interface type='network'>\n      <source network='");
		esc(fp, s->network);
		fprintf(fp, "'/>\n      <model type='virtio'/>\n    </interface>\n");
	}
	for (int i = 0; i < s->n_devices; i++) {
		fprintf(fp, "    <hostdev mode='subsystem' type='pci' managed='yes'>\n      <source>\n        ");
		pci_address(fp, s->dev[i].bdf);
		fprintf(fp, "\n      </source>\n    </hostdev>\n");
	}
	if (s->console_log[0] != '\0') {
		fprintf(fp, "    <serial type='file'>\n      <source path='");
		esc(fp, s->console_log);
		fprintf(fp, "'/>\n      <target port='0'/>\n    </serial>\n");
	} else {
		fprintf(fp, "    <serial type='pty'/>\n    <console type='pty'/>\n");
	}
	fprintf(fp, "  </devices>\n</domain>\n");
	if (fclose(fp) != 0) {
		free(text);
		return NULL;
	}
	return text;
}
