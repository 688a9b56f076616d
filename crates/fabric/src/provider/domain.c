/* The domain: it opens endpoints, completion queues and address vectors, and counts them
 * (it closes only after them). Memory registration and the rest it does not offer. */
#include "provider.h"

static int domain_close(struct fid *fid)
{
	struct nicmsg_domain *domain = (struct nicmsg_domain *)fid;
	if (LOCKED(domain->children > 0))
		return -FI_EBUSY;
	release(domain->parent);
	fi_freeinfo(domain->info);
	free(domain);
	return 0;
}

STUB(int, domain_scalable_ep, -FI_ENOSYS, struct fid_domain *domain, struct fi_info *info, struct fid_ep **sep, void *context)

STUB(int, domain_cntr_open, -FI_ENOSYS, struct fid_domain *domain, struct fi_cntr_attr *attr, struct fid_cntr **cntr, void *context)

STUB(int, domain_poll_open, -FI_ENOSYS, struct fid_domain *domain, struct fi_poll_attr *attr, struct fid_poll **pollset)

STUB(int, domain_stx_ctx, -FI_ENOSYS, struct fid_domain *domain, struct fi_tx_attr *attr, struct fid_stx **stx, void *context)

STUB(int, domain_srx_ctx, -FI_ENOSYS, struct fid_domain *domain, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)

STUB(int, domain_query_atomic, -FI_ENOSYS, struct fid_domain *domain, enum fi_datatype datatype, enum fi_op op, struct fi_atomic_attr *attr, uint64_t flags)

STUB(int, domain_query_collective, -FI_ENOSYS, struct fid_domain *domain, enum fi_collective_op coll, struct fi_collective_attr *attr, uint64_t flags)

static int domain_endpoint2(struct fid_domain *domain, struct fi_info *info,
			    struct fid_ep **ep, uint64_t flags, void *context)
{
	if (flags)
		return -FI_ENOSYS;
	return domain_endpoint(domain, info, ep, context);
}

STUB(int, mr_reg, -FI_ENOSYS, struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)

STUB(int, mr_regv, -FI_ENOSYS, struct fid *fid, const struct iovec *iov, size_t count, uint64_t access, uint64_t offset, uint64_t requested_key, uint64_t flags, struct fid_mr **mr, void *context)

STUB(int, mr_regattr, -FI_ENOSYS, struct fid *fid, const struct fi_mr_attr *attr, uint64_t flags, struct fid_mr **mr)

FID_OPS(domain_fid_ops, domain_close, no_bind, no_control);

static struct fi_ops_domain domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = domain_av_open,
	.cq_open = domain_cq_open,
	.endpoint = domain_endpoint,
	.scalable_ep = domain_scalable_ep,
	.cntr_open = domain_cntr_open,
	.poll_open = domain_poll_open,
	.stx_ctx = domain_stx_ctx,
	.srx_ctx = domain_srx_ctx,
	.query_atomic = domain_query_atomic,
	.query_collective = domain_query_collective,
	.endpoint2 = domain_endpoint2,
};

static struct fi_ops_mr mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = mr_reg,
	.regv = mr_regv,
	.regattr = mr_regattr,
};

int fabric_domain(struct fid_fabric *fabric, struct fi_info *info, struct fid_domain **out,
		  void *context)
{
	if (info && info->domain_attr && info->domain_attr->name &&
	    strcmp(info->domain_attr->name, NICMSG_DOMAIN_NAME))
		return -FI_EINVAL;
	struct nicmsg_domain *domain = calloc(1, sizeof(*domain));
	if (!domain)
		return -FI_ENOMEM;
	domain->info = info ? fi_dupinfo(info) : NULL;
	domain->parent = adopt(&((struct nicmsg_fabric *)fabric)->children);
	domain->domain.fid.fclass = FI_CLASS_DOMAIN;
	domain->domain.fid.context = context;
	domain->domain.fid.ops = &domain_fid_ops;
	domain->domain.ops = &domain_ops;
	domain->domain.mr = &mr_ops;
	*out = &domain->domain;
	return 0;
}
