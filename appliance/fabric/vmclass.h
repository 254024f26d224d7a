/*
 * The vSphere VM class a GPU VM on this host needs, as operators build it
 * by hand today: the PCI devices to pass through, in the order the guest
 * must see them (GPU0, its NIC, GPU1, its NIC, ..., then the NVSwitches
 * when the VM owns the whole board), and the advanced settings that make
 * peer-to-peer and the GPUs' large BARs work.
 */
#ifndef PRIVAI_VMCLASS_H
#define PRIVAI_VMCLASS_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "fabric.h"

/* shared_nvswitch: the NVSwitches stay with the host's (or a service
 * VM's) Fabric Manager instead of being passed through. */
cJSON *vmclass_json(const struct fabric *f, int shared_nvswitch);

/* The same, as an operator reads it. */
void vmclass_print(const cJSON *report, FILE *out);

#endif
