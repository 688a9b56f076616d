/* Endpoints: opening one on its own nicmsg engine (src/endpoint.rs), binding its address
 * vector and completion queues, enabling, closing, cancelling, and its name. The operations
 * that move messages are in messages.c. */
#include "provider.h"

static int ep_bind_locked(struct nicmsg_ep *ep, struct fid *bfid, uint64_t flags)
{
	switch (bfid->fclass) {
	case FI_CLASS_AV: {
		struct nicmsg_av *av = (struct nicmsg_av *)bfid;
		if (ep->av == av)
			return 0;
		/* One vector an endpoint: its fi_addr values name entries of that vector only. */
		if (ep->av)
			return -FI_EINVAL;
		ep->av = av;
		av->bound++;
		return 0;
	}
	case FI_CLASS_CQ: {
		struct nicmsg_cq *cq = (struct nicmsg_cq *)bfid;
		if (!(flags & (FI_TRANSMIT | FI_RECV)))
			return -FI_EINVAL;
		/* One queue a direction: rebinding would leave the old queue holding the endpoint. */
		if (((flags & FI_TRANSMIT) && ep->tx_cq && ep->tx_cq != cq) ||
		    ((flags & FI_RECV) && ep->rx_cq && ep->rx_cq != cq))
			return -FI_EINVAL;
		int attached = cq_attach(cq, ep);
		if (attached)
			return attached;
		if (flags & FI_TRANSMIT) {
			ep->tx_cq = cq;
			ep->tx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		if (flags & FI_RECV) {
			ep->rx_cq = cq;
			ep->rx_selective = flags & FI_SELECTIVE_COMPLETION;
		}
		return 0;
	}
	case FI_CLASS_EQ:
		return 0; /* nothing of an RDM endpoint reports there */
	default:
		return -FI_ENOSYS;
	}
}

static int ep_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	return LOCKED(ep_bind_locked((struct nicmsg_ep *)fid, bfid, flags));
}

static int ep_control(struct fid *fid, int command, void *arg)
{
	(void)arg;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (command != FI_ENABLE)
		return -FI_ENOSYS;
	if (!ep->tx_cq && !ep->rx_cq)
		return -FI_ENOCQ;
	ep->enabled = true;
	return 0;
}

struct nicmsg_ep *open_endpoints;

void endpoints_add(struct nicmsg_ep *ep)
{
	ep->prev_open = NULL;
	ep->next_open = open_endpoints;
	if (open_endpoints)
		open_endpoints->prev_open = ep;
	open_endpoints = ep;
}

void endpoints_remove(struct nicmsg_ep *ep)
{
	if (ep->prev_open)
		ep->prev_open->next_open = ep->next_open;
	else
		open_endpoints = ep->next_open;
	if (ep->next_open)
		ep->next_open->prev_open = ep->prev_open;
	ep->prev_open = ep->next_open = NULL;
}

static int ep_close(struct fid *fid)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	pthread_mutex_lock(&provider_lock);
	endpoints_remove(ep);
	cq_detach(ep->tx_cq, ep);
	if (ep->rx_cq != ep->tx_cq)
		cq_detach(ep->rx_cq, ep);
	if (ep->av)
		ep->av->bound--;
	void *engine = ep->engine;
	ep->engine = NULL;
	pthread_mutex_unlock(&provider_lock);
	nf_close(engine);
	release(ep->parent);
	free(ep);
	return 0;
}

/* fi_cancel: the operation posted with `context`. NULL names none: injects have no context,
 * and cancelling one would withdraw its message with no completion to say so. */
static ssize_t ep_cancel(fid_t fid, void *context)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (!context)
		return -FI_EINVAL;
	return LOCKED(nf_cancel(ep->engine, context));
}

STUB(int, ep_getopt, -FI_ENOPROTOOPT, fid_t fid, int level, int optname, void *optval, size_t *optlen)

STUB(int, ep_setopt, -FI_ENOPROTOOPT, fid_t fid, int level, int optname, const void *optval, size_t optlen)

STUB(int, ep_ctx, -FI_ENOSYS, struct fid_ep *sep, int index, struct fi_tx_attr *attr, struct fid_ep **tx_ep, void *context)

STUB(int, ep_rx_ctx, -FI_ENOSYS, struct fid_ep *sep, int index, struct fi_rx_attr *attr, struct fid_ep **rx_ep, void *context)

STUB(ssize_t, ep_size_left, -FI_ENOSYS, struct fid_ep *ep)

static int cm_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	union nf_addr name;
	int got = LOCKED(nf_name(ep->engine, &name));
	if (got)
		return got;
	size_t room = *addrlen, len = address_len(name.sa.sa_family);
	*addrlen = len;
	if (!addr || room < len)
		return -FI_ETOOSMALL;
	memcpy(addr, &name, len);
	return 0;
}

STUB(int, cm_setname, -FI_ENOSYS, fid_t fid, void *addr, size_t addrlen)

STUB(int, cm_getpeer, -FI_ENOSYS, struct fid_ep *ep, void *addr, size_t *addrlen)

STUB(int, cm_connect, -FI_ENOSYS, struct fid_ep *ep, const void *addr, const void *param, size_t paramlen)

STUB(int, cm_listen, -FI_ENOSYS, struct fid_pep *pep)

STUB(int, cm_accept, -FI_ENOSYS, struct fid_ep *ep, const void *param, size_t paramlen)

STUB(int, cm_reject, -FI_ENOSYS, struct fid_pep *pep, fid_t handle, const void *param, size_t paramlen)

STUB(int, cm_shutdown, -FI_ENOSYS, struct fid_ep *ep, uint64_t flags)

STUB(int, cm_join, -FI_ENOSYS, struct fid_ep *ep, const void *addr, uint64_t flags, struct fid_mc **mc, void *context)

FID_OPS(ep_fid_ops, ep_close, ep_bind, ep_control);

static struct fi_ops_ep ep_ops = {
	.size = sizeof(struct fi_ops_ep),
	.cancel = ep_cancel,
	.getopt = ep_getopt,
	.setopt = ep_setopt,
	.tx_ctx = ep_ctx,
	.rx_ctx = ep_rx_ctx,
	.rx_size_left = ep_size_left,
	.tx_size_left = ep_size_left,
};

static struct fi_ops_cm cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.setname = cm_setname,
	.getname = cm_getname,
	.getpeer = cm_getpeer,
	.connect = cm_connect,
	.listen = cm_listen,
	.accept = cm_accept,
	.reject = cm_reject,
	.shutdown = cm_shutdown,
	.join = cm_join,
};

/* The address the endpoint binds: NICMSG_BIND_IP if set (IPv4 or IPv6), else IPv4
 * loopback; any free port. Its family is the provider's address format. */
static void bind_address(union nf_addr *bind)
{
	memset(bind, 0, sizeof(*bind));
	const char *ip = getenv("NICMSG_BIND_IP");
	if (ip && *ip) {
		if (inet_pton(AF_INET, ip, &bind->in.sin_addr) == 1) {
			bind->in.sin_family = AF_INET;
			return;
		}
		if (inet_pton(AF_INET6, ip, &bind->in6.sin6_addr) == 1) {
			bind->in6.sin6_family = AF_INET6;
			return;
		}
		fprintf(stderr, "nicmsg provider: NICMSG_BIND_IP=%s is not an IPv4 or IPv6 address; "
				"binding loopback\n", ip);
	}
	memset(bind, 0, sizeof(*bind));
	bind->in.sin_family = AF_INET;
	bind->in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
}

/* The address format of the endpoints this process opens (their bind address's family). */
uint32_t address_format(void)
{
	union nf_addr bind;
	bind_address(&bind);
	return bind.sa.sa_family == AF_INET6 ? FI_SOCKADDR_IN6 : FI_SOCKADDR_IN;
}

int domain_endpoint(struct fid_domain *domain, struct fi_info *info, struct fid_ep **out,
		    void *context)
{
	if (info && info->ep_attr && info->ep_attr->type != FI_EP_RDM &&
	    info->ep_attr->type != FI_EP_UNSPEC)
		return -FI_EINVAL;
	struct nicmsg_ep *ep = calloc(1, sizeof(*ep));
	if (!ep)
		return -FI_ENOMEM;
	union nf_addr bind;
	bind_address(&bind);
	char reason[256] = "";
	ep->engine = LOCKED(nf_open(&bind, reason, sizeof(reason)));
	if (!ep->engine) {
		fprintf(stderr, "nicmsg provider: cannot open an endpoint: %s\n", reason);
		free(ep);
		return -FI_EOTHER;
	}
	ep->automatic = LOCKED(nf_progress_is_automatic(ep->engine));
	uint64_t caps = info ? info->caps : nicmsg_caps;
	ep->directed = caps & FI_DIRECTED_RECV;
	ep->source = caps & FI_SOURCE;
	ep->tx_op_flags = info && info->tx_attr ? info->tx_attr->op_flags : 0;
	ep->rx_op_flags = info && info->rx_attr ? info->rx_attr->op_flags : 0;
	ep->parent = adopt(&((struct nicmsg_domain *)domain)->children);
	ep->ep.fid.fclass = FI_CLASS_EP;
	ep->ep.fid.context = context;
	ep->ep.fid.ops = &ep_fid_ops;
	ep->ep.ops = &ep_ops;
	ep->ep.cm = &cm_ops;
	ep->ep.msg = &msg_ops;
	ep->ep.tagged = &tagged_ops;
	ep->ep.rma = &no_rma;
	ep->ep.atomic = &no_atomic;
	ep->ep.collective = &no_collective;
	pthread_mutex_lock(&provider_lock);
	endpoints_add(ep);
	pthread_mutex_unlock(&provider_lock);
	*out = &ep->ep;
	return 0;
}
