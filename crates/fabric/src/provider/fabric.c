/* The fabric, its event queue (fi_pingpong opens one; nothing of an RDM endpoint reports
 * there), fi_trywait over completion queues, and the provider's description that libfabric
 * loads. */
#include "provider.h"

STUB(ssize_t, eq_read, -FI_EAGAIN, struct fid_eq *eq, uint32_t *event, void *buf, size_t len, uint64_t flags)

STUB(ssize_t, eq_readerr, -FI_EAGAIN, struct fid_eq *eq, struct fi_eq_err_entry *buf, uint64_t flags)

STUB(ssize_t, eq_write, -FI_ENOSYS, struct fid_eq *eq, uint32_t event, const void *buf, size_t len, uint64_t flags)

STUB(ssize_t, eq_sread, -FI_EAGAIN, struct fid_eq *eq, uint32_t *event, void *buf, size_t len, int timeout, uint64_t flags)

static const char *eq_strerror(struct fid_eq *eq, int prov_errno, const void *err_data,
			       char *buf, size_t len)
{
	(void)err_data;
	return error_text(prov_errno, buf, len);
}

static int eq_close(struct fid *fid)
{
	struct nicmsg_eq *eq = (struct nicmsg_eq *)fid;
	release(eq->parent);
	free(eq);
	return 0;
}

FID_OPS(eq_fid_ops, eq_close, no_bind, no_control);

static struct fi_ops_eq eq_ops = {
	.size = sizeof(struct fi_ops_eq),
	.read = eq_read,
	.readerr = eq_readerr,
	.write = eq_write,
	.sread = eq_sread,
	.strerror = eq_strerror,
};

static int fabric_eq_open(struct fid_fabric *fabric, struct fi_eq_attr *attr,
			  struct fid_eq **out, void *context)
{
	(void)attr;
	struct nicmsg_eq *eq = calloc(1, sizeof(*eq));
	if (!eq)
		return -FI_ENOMEM;
	eq->parent = adopt(&((struct nicmsg_fabric *)fabric)->children);
	eq->eq.fid.fclass = FI_CLASS_EQ;
	eq->eq.fid.context = context;
	eq->eq.fid.ops = &eq_fid_ops;
	eq->eq.ops = &eq_ops;
	*out = &eq->eq;
	return 0;
}

/* -- the fabric -- */

STUB(int, fabric_passive_ep, -FI_ENOSYS, struct fid_fabric *fabric, struct fi_info *info, struct fid_pep **pep, void *context)

STUB(int, fabric_wait_open, -FI_ENOSYS, struct fid_fabric *fabric, struct fi_wait_attr *attr, struct fid_wait **waitset)

/* fi_trywait: 0 if the application may sleep on the descriptors of the FI_WAIT_FD queues
 * `fids`, -FI_EAGAIN if one has completions to read first. */
static int fabric_trywait(struct fid_fabric *fabric, struct fid **fids, int count)
{
	(void)fabric;
	for (int i = 0; i < count; i++) {
		if (!fids[i] || fids[i]->fclass != FI_CLASS_CQ)
			return -FI_EINVAL;
		int ready = LOCKED(cq_trywait_locked((struct nicmsg_cq *)fids[i]));
		if (ready)
			return ready;
	}
	return 0;
}

static int fabric_domain2(struct fid_fabric *fabric, struct fi_info *info,
			  struct fid_domain **domain, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return fabric_domain(fabric, info, domain, context);
}

static int fabric_close(struct fid *fid)
{
	struct nicmsg_fabric *fabric = (struct nicmsg_fabric *)fid;
	if (LOCKED(fabric->children > 0))
		return -FI_EBUSY;
	free(fabric);
	return 0;
}

FID_OPS(fabric_fid_ops, fabric_close, no_bind, no_control);

static struct fi_ops_fabric fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = fabric_domain,
	.passive_ep = fabric_passive_ep,
	.eq_open = fabric_eq_open,
	.wait_open = fabric_wait_open,
	.trywait = fabric_trywait,
	.domain2 = fabric_domain2,
};

static int nicmsg_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *context)
{
	if (attr && attr->name && strcmp(attr->name, NICMSG_FABRIC_NAME))
		return -FI_ENODATA;
	struct nicmsg_fabric *fabric = calloc(1, sizeof(*fabric));
	if (!fabric)
		return -FI_ENOMEM;
	fabric->fabric.fid.fclass = FI_CLASS_FABRIC;
	fabric->fabric.fid.context = context;
	fabric->fabric.fid.ops = &fabric_fid_ops;
	fabric->fabric.ops = &fabric_ops;
	*out = &fabric->fabric;
	return 0;
}

static struct fi_provider nicmsg_provider = {
	.version = NICMSG_PROVIDER_VERSION,
	.fi_version = FI_VERSION(1, 17),
	.name = "nicmsg",
	.getinfo = nicmsg_getinfo,
	.fabric = nicmsg_fabric,
	.cleanup = NULL,
};

/* libfabric's entry point, `fi_prov_ini`, is exported by the Rust half (src/lib.rs): a Rust
 * library exports only its own symbols, and this call keeps this half in it (this file, and
 * the others through what it calls). */
struct fi_provider *nicmsg_provider_ini(void)
{
	return &nicmsg_provider;
}
