/* fi_getinfo: what the provider offers (an RDM endpoint, tagged and untagged, over UDP),
 * checked against the caller's hints and described in the attributes libfabric defines. */
#include "provider.h"

const uint64_t nicmsg_caps = FI_MSG | FI_TAGGED | FI_SEND | FI_RECV | FI_DIRECTED_RECV |
			     FI_REMOTE_CQ_DATA | FI_LOCAL_COMM | FI_REMOTE_COMM | FI_SOURCE;
static const uint64_t nicmsg_primary_caps = FI_MSG | FI_TAGGED;
static const uint64_t nicmsg_msg_order = FI_ORDER_SAS | FI_ORDER_RAR | FI_ORDER_WAW |
					 FI_ORDER_RAW | FI_ORDER_WAR;

static char *duplicate(const char *text)
{
	return text ? strdup(text) : NULL;
}

/* Whether the hints leave room for what nicmsg offers (libfabric's core checks none of it). */
static bool hints_allow(const struct fi_info *hints)
{
	if (!hints)
		return true;
	if (hints->caps & ~nicmsg_caps)
		return false;
	if (hints->ep_attr) {
		if (hints->ep_attr->type != FI_EP_UNSPEC && hints->ep_attr->type != FI_EP_RDM)
			return false;
		if (hints->ep_attr->max_msg_size > NICMSG_MAX_MSG_SIZE)
			return false;
		if (hints->ep_attr->tx_ctx_cnt > 1 || hints->ep_attr->rx_ctx_cnt > 1)
			return false;
	}
	if (hints->addr_format != FI_FORMAT_UNSPEC && hints->addr_format != FI_SOCKADDR &&
	    hints->addr_format != address_format())
		return false;
	if (hints->fabric_attr && hints->fabric_attr->name &&
	    strcmp(hints->fabric_attr->name, NICMSG_FABRIC_NAME))
		return false;
	if (hints->domain_attr) {
		const struct fi_domain_attr *d = hints->domain_attr;
		if (d->name && strcmp(d->name, NICMSG_DOMAIN_NAME))
			return false;
		if (d->cq_data_size > 4)
			return false;
		/* Any mr_mode is fine: nicmsg needs no memory registration. */
	}
	if (hints->tx_attr) {
		if (hints->tx_attr->inject_size > NICMSG_INJECT_SIZE)
			return false;
		if (hints->tx_attr->iov_limit > NICMSG_IOV_LIMIT)
			return false;
		if (hints->tx_attr->msg_order & ~nicmsg_msg_order)
			return false;
	}
	if (hints->rx_attr) {
		if (hints->rx_attr->iov_limit > NICMSG_IOV_LIMIT)
			return false;
		if (hints->rx_attr->msg_order & ~nicmsg_msg_order)
			return false;
	}
	return true;
}

static uint64_t granted_caps(const struct fi_info *hints)
{
	uint64_t asked = hints ? hints->caps : 0;
	if (!(asked & nicmsg_primary_caps))
		return nicmsg_caps;
	/* The primary capabilities asked for (fi_pingpong takes FI_TAGGED, if offered, as a
	 * request to use it), with sending and receiving, and every secondary one but FI_SOURCE,
	 * which costs a lookup per receive and is given only to those who ask. */
	uint64_t caps = asked & nicmsg_caps;
	if (!(asked & (FI_SEND | FI_RECV)))
		caps |= FI_SEND | FI_RECV;
	return caps | (nicmsg_caps & ~(nicmsg_primary_caps | FI_SEND | FI_RECV | FI_SOURCE));
}

static struct fi_info *describe(const struct fi_info *hints)
{
	struct fi_info *info = fi_dupinfo(NULL);
	if (!info)
		return NULL;
	info->caps = granted_caps(hints);
	info->mode = 0;
	info->addr_format = address_format();

	info->tx_attr->caps = info->caps;
	info->tx_attr->op_flags = hints && hints->tx_attr ? hints->tx_attr->op_flags : 0;
	info->tx_attr->msg_order = nicmsg_msg_order;
	info->tx_attr->comp_order = FI_ORDER_NONE;
	info->tx_attr->inject_size = NICMSG_INJECT_SIZE;
	info->tx_attr->size = NICMSG_QUEUE_SIZE;
	info->tx_attr->iov_limit = NICMSG_IOV_LIMIT;
	info->tx_attr->rma_iov_limit = 0;

	info->rx_attr->caps = info->caps;
	info->rx_attr->op_flags = hints && hints->rx_attr ? hints->rx_attr->op_flags : 0;
	info->rx_attr->msg_order = nicmsg_msg_order;
	info->rx_attr->comp_order = FI_ORDER_NONE;
	info->rx_attr->total_buffered_recv = 0;
	info->rx_attr->size = NICMSG_QUEUE_SIZE;
	info->rx_attr->iov_limit = NICMSG_IOV_LIMIT;

	info->ep_attr->type = FI_EP_RDM;
	info->ep_attr->protocol = FI_PROTO_UNSPEC;
	info->ep_attr->max_msg_size = NICMSG_MAX_MSG_SIZE;
	info->ep_attr->mem_tag_format = ~0ULL;
	info->ep_attr->tx_ctx_cnt = 1;
	info->ep_attr->rx_ctx_cnt = 1;

	struct fi_domain_attr *d = info->domain_attr;
	const struct fi_domain_attr *hd = hints ? hints->domain_attr : NULL;
	d->name = duplicate(NICMSG_DOMAIN_NAME);
	d->threading = hd && hd->threading ? hd->threading : FI_THREAD_SAFE;
	d->control_progress = FI_PROGRESS_AUTO;
	/* The engine progresses on its own thread, or on its standby thread while the
	 * application is away: data moves without the application's calls either way. */
	d->data_progress = FI_PROGRESS_AUTO;
	d->resource_mgmt = FI_RM_ENABLED;
	d->av_type = hd && hd->av_type ? hd->av_type : FI_AV_UNSPEC;
	d->mr_mode = 0;
	d->cq_data_size = 4;
	d->cq_cnt = 64;
	d->ep_cnt = 64;
	d->tx_ctx_cnt = 64;
	d->rx_ctx_cnt = 64;
	d->max_ep_tx_ctx = 1;
	d->max_ep_rx_ctx = 1;
	d->caps = FI_LOCAL_COMM | FI_REMOTE_COMM;
	d->mr_iov_limit = 1;

	info->fabric_attr->name = duplicate(NICMSG_FABRIC_NAME);
	info->fabric_attr->prov_name = NULL; /* libfabric's core fills it in */
	info->fabric_attr->prov_version = NICMSG_PROVIDER_VERSION;
	info->nic = NULL;
	return info;
}

int nicmsg_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		   const struct fi_info *hints, struct fi_info **out)
{
	(void)version, (void)node, (void)service, (void)flags;
	if (!hints_allow(hints))
		return -FI_ENODATA;
	struct fi_info *info = describe(hints);
	if (!info)
		return -FI_ENOMEM;
	*out = info;
	return 0;
}
