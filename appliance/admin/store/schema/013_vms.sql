-- privai-admin schema, version 13: workload VMs on a bare-metal install.
--
-- A VM is defined in libvirt from this row (vm/vm_xml.c): whole GPU and
-- RDMA NIC pairs passed through (devices, a JSON array of {bdf, role,
-- name}), vCPUs pinned to the GPUs' NUMA node (cpuset), memory from huge
-- pages, the 64-bit PCI hole sized for the devices' BARs.  libvirt holds
-- its running state; state here is the last one an operation left, and
-- GET /api/v1/vms asks libvirt for the live one.
CREATE TABLE vms (
    id              INTEGER PRIMARY KEY,
    name            TEXT NOT NULL UNIQUE,
    vcpus           INTEGER NOT NULL CHECK (vcpus >= 1),
    memory_gib      INTEGER NOT NULL CHECK (memory_gib >= 1),
    hugepages       INTEGER NOT NULL DEFAULT 1,
    image           TEXT NOT NULL,
    seed            TEXT,
    network         TEXT,
    devices         TEXT NOT NULL,
    numa_node       INTEGER,
    cpuset          TEXT,
    mmio_window_gib INTEGER,
    uuid            TEXT,
    state           TEXT NOT NULL DEFAULT 'defined',
    created_by      TEXT,
    created_at      INTEGER NOT NULL,
    updated_at      INTEGER NOT NULL
);
