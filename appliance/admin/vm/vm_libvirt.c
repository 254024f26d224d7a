/*
 * Workload VMs through libvirt's C API (vm.h).  One connection is kept
 * and shared (under its own lock), opened on first use and again when
 * libvirtd went away or another URI is asked for: libvirt's test driver
 * keeps its domains only while a connection is open, and a kept
 * connection spares libvirtd a handshake per request.  libvirt's errors
 * are taken from virGetLastError, with its default handler (which
 * prints to stderr) silenced.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libvirt/libvirt.h>
#include <libvirt/virterror.h>

#include "vm/vm.h"

static void
quiet(void *opaque, virErrorPtr e)
{
	(void)opaque;
	(void)e;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static pthread_mutex_t conn_mu = PTHREAD_MUTEX_INITIALIZER;
static virConnectPtr conn; /* under conn_mu, with conn_uri */
static char conn_uri[256];

static void
init(void)
{
	virSetErrorFunc(NULL, quiet);
}

static int
lv_fail(char *err, const char *what)
{
	virErrorPtr e = virGetLastError();

	snprintf(err, VM_ERR_LEN, "libvirt: %s: %s", what, e != NULL && e->message != NULL ? e->message : "failed");
	return -1;
}

/* The shared connection to uri, locked for the caller until
 * close_conn(); NULL (unlocked) with err when it cannot be opened. */
static virConnectPtr
open_conn(const char *uri, char *err)
{
	pthread_once(&once, init);
	pthread_mutex_lock(&conn_mu);
	if (conn != NULL && (strcmp(conn_uri, uri) != 0 || virConnectIsAlive(conn) != 1)) {
		virConnectClose(conn);
		conn = NULL;
	}
	if (conn == NULL && (conn = virConnectOpen(uri)) == NULL) {
		lv_fail(err, uri);
		pthread_mutex_unlock(&conn_mu);
		return NULL;
	}
	snprintf(conn_uri, sizeof(conn_uri), "%s", uri);
	return conn;
}

static void
close_conn(virConnectPtr c)
{
	(void)c;
	pthread_mutex_unlock(&conn_mu);
}

/* The domain type this connection's driver takes: "test" for libvirt's
 * test driver; "kvm" where /dev/kvm can be used, else "qemu" (emulated:
 * slow, but a guest still boots). */
static const char *
domain_type(virConnectPtr c)
{
	const char *t = virConnectGetType(c);

	if (t != NULL && strcmp(t, "TEST") == 0)
		return "test";
	return access("/dev/kvm", R_OK | W_OK) == 0 ? "kvm" : "qemu";
}

int
vm_define(const char *uri, const struct vm_spec *s, char *uuid, size_t uuid_size, char *err)
{
	virConnectPtr c = open_conn(uri, err);
	virDomainPtr d;
	char *xml, u[VIR_UUID_STRING_BUFLEN];
	int rc = -1;

	if (c == NULL)
		return -1;
	if ((xml = vm_domain_xml(s, domain_type(c))) == NULL) {
		snprintf(err, VM_ERR_LEN, "out of memory");
	} else if ((d = virDomainDefineXML(c, xml)) == NULL) {
		lv_fail(err, "defining the domain");
	} else {
		if (virDomainGetUUIDString(d, u) == 0)
			snprintf(uuid, uuid_size, "%s", u);
		virDomainFree(d);
		rc = 0;
	}
	free(xml);
	close_conn(c);
	return rc;
}

/* Open, look the domain up by name, and run op on it. */
static int
with_domain(const char *uri, const char *name, const char *what, int (*op)(virDomainPtr, int), int arg, char *err)
{
	virConnectPtr c = open_conn(uri, err);
	virDomainPtr d;
	int rc = -1;

	if (c == NULL)
		return -1;
	if ((d = virDomainLookupByName(c, name)) == NULL) {
		lv_fail(err, "finding the domain");
	} else {
		if (op(d, arg) == 0)
			rc = 0;
		else
			lv_fail(err, what);
		virDomainFree(d);
	}
	close_conn(c);
	return rc;
}

static int
op_start(virDomainPtr d, int arg)
{
	(void)arg;
	return virDomainCreate(d) < 0 ? -1 : 0;
}

static int
op_stop(virDomainPtr d, int force)
{
	return (force ? virDomainDestroy(d) : virDomainShutdown(d)) < 0 ? -1 : 0;
}

static int
op_undefine(virDomainPtr d, int arg)
{
	(void)arg;
	/* NVRAM and managed saves go with it: nothing of the VM is left
	 * behind; a driver without NVRAM (libvirt's test driver) refuses
	 * the flag, and is asked again without it */
	if (virDomainUndefineFlags(d, VIR_DOMAIN_UNDEFINE_NVRAM | VIR_DOMAIN_UNDEFINE_MANAGED_SAVE) == 0)
		return 0;
	virErrorPtr e = virGetLastError();
	if (e == NULL || e->code != VIR_ERR_INVALID_ARG)
		return -1;
	return virDomainUndefineFlags(d, VIR_DOMAIN_UNDEFINE_MANAGED_SAVE) < 0 ? -1 : 0;
}

int
vm_start(const char *uri, const char *name, char *err)
{
	return with_domain(uri, name, "starting the domain", op_start, 0, err);
}

int
vm_stop(const char *uri, const char *name, int force, char *err)
{
	return with_domain(uri, name, force ? "powering the domain off" : "shutting the domain down", op_stop, force,
			   err);
}

int
vm_undefine(const char *uri, const char *name, char *err)
{
	return with_domain(uri, name, "undefining the domain", op_undefine, 0, err);
}

const char *
vm_state(const char *uri, const char *name, char *err)
{
	virConnectPtr c = open_conn(uri, err);
	virDomainPtr d;
	const char *state = "unknown";
	int st, reason;

	if (c == NULL)
		return state;
	if ((d = virDomainLookupByName(c, name)) == NULL) {
		virErrorPtr e = virGetLastError();
		if (e != NULL && e->code == VIR_ERR_NO_DOMAIN)
			state = "missing";
		else
			lv_fail(err, "finding the domain");
	} else {
		if (virDomainGetState(d, &st, &reason, 0) < 0)
			lv_fail(err, "reading the domain's state");
		else
			state = st == VIR_DOMAIN_RUNNING || st == VIR_DOMAIN_BLOCKED      ? "running"
				: st == VIR_DOMAIN_PAUSED || st == VIR_DOMAIN_PMSUSPENDED ? "paused"
				: st == VIR_DOMAIN_CRASHED                                ? "crashed"
				: st == VIR_DOMAIN_SHUTDOWN                               ? "stopping"
											  : "stopped";
		virDomainFree(d);
	}
	close_conn(c);
	return state;
}

char *
vm_xml_of(const char *uri, const char *name, char *err)
{
	virConnectPtr c = open_conn(uri, err);
	virDomainPtr d;
	char *xml = NULL;

	if (c == NULL)
		return NULL;
	if ((d = virDomainLookupByName(c, name)) == NULL) {
		lv_fail(err, "finding the domain");
	} else {
		if ((xml = virDomainGetXMLDesc(d, 0)) == NULL)
			lv_fail(err, "reading the domain's XML");
		virDomainFree(d);
	}
	close_conn(c);
	return xml;
}
