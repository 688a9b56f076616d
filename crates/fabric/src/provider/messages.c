/* The operations that move messages, msg and tagged: sends (inject, senddata, their vector
 * and msg forms), receives (directed or not), and FI_PEEK, FI_CLAIM and FI_DISCARD. Each
 * translates its addresses and flags and calls the Rust side under the provider's lock. */
#include "provider.h"

/* The destination's socket address, or NULL (an address the vector does not hold). */
static const union nf_addr *destination(struct nicmsg_ep *ep, fi_addr_t addr)
{
	return av_address(ep->av, addr);
}

/* A directed receive's source, or NULL for any (FI_ADDR_UNSPEC, or an endpoint that was not
 * given FI_DIRECTED_RECV, whose receives ignore the address). `*unknown` is set for an
 * address the vector does not hold. */
static const union nf_addr *source(struct nicmsg_ep *ep, fi_addr_t addr, bool *unknown)
{
	*unknown = false;
	if (!ep->directed || addr == FI_ADDR_UNSPEC)
		return NULL;
	const union nf_addr *found = av_address(ep->av, addr);
	*unknown = !found;
	return found;
}

static bool tx_wanted(struct nicmsg_ep *ep, uint64_t flags)
{
	return !ep->tx_selective || (flags & FI_COMPLETION);
}

static bool rx_wanted(struct nicmsg_ep *ep, uint64_t flags)
{
	return !ep->rx_selective || (flags & FI_COMPLETION);
}

/* The bytes `count` iovecs describe, saturating (NULL iovecs are refused later). */
static size_t iov_bytes(const struct iovec *iov, size_t count)
{
	size_t total = 0;
	for (size_t i = 0; iov && i < count; i++)
		total = iov[i].iov_len > SIZE_MAX - total ? SIZE_MAX : total + iov[i].iov_len;
	return total;
}

/* nf_send's `how` for a send with these operation flags. FI_TRANSMIT_COMPLETE and
 * FI_DELIVERY_COMPLETE ask for a completion only once the peer holds the message: the engine
 * otherwise completes short sends (and sends of 4 KiB to 64 KiB) as soon as it has copied
 * them, and a peer that died before taking one would lose a message its sender was told went. */
static int send_how(uint64_t flags)
{
	int how = 0;
	if (flags & FI_INJECT)
		how |= NF_SEND_INJECT;
	if (flags & (FI_TRANSMIT_COMPLETE | FI_DELIVERY_COMPLETE))
		how |= NF_SEND_CONFIRMED;
	return how;
}

/* A send with operation flags `flags`: the call's for the msg forms, the endpoint's
 * (tx_attr->op_flags) otherwise. The inject calls (`inject_call`) pass FI_INJECT and report
 * no completion; sendmsg with FI_INJECT reports one as any send does, and so does fi_send
 * (or fi_tsend, ...) of an endpoint whose default flags hold FI_INJECT: fi_endpoint(3) gives
 * the buffer back when the call returns, so its bytes are copied here too (they were not, and
 * an engine on its own thread sent what the application wrote into the buffer afterwards). */
static ssize_t send_locked(struct nicmsg_ep *ep, const struct iovec *iov, size_t count,
			   fi_addr_t dest, bool tagged, uint64_t tag, bool has_data, uint64_t data,
			   void *context, uint64_t flags, bool inject_call)
{
	bool inject = flags & FI_INJECT;
	bool wanted = !inject_call && tx_wanted(ep, flags);
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	/* Without a send queue, no completion could say when the buffer is free or that the
	 * peer failed (an inject's bytes are copied, and it reports nothing anyway). */
	if (!ep->tx_cq && !inject)
		return -FI_ENOCQ;
	/* The inject bound, for the inject calls and sendmsg's FI_INJECT alike: those bytes are
	 * copied here. */
	if (inject && iov_bytes(iov, count) > NICMSG_INJECT_SIZE)
		return -FI_EMSGSIZE;
	const union nf_addr *to = destination(ep, dest);
	if (!to)
		return -FI_EADDRNOTAVAIL;
	ssize_t posted = nf_send(ep->engine, iov, count, to, tagged, tag, has_data, data,
				 context, wanted, send_how(flags));
	progress_if_held(ep);
	return posted;
}

static ssize_t recv_locked(struct nicmsg_ep *ep, const struct iovec *iov, size_t count,
			   fi_addr_t src, bool tagged, uint64_t tag, uint64_t ignore,
			   void *context, bool wanted)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	/* Without a receive queue the message would be taken and its completion dropped. */
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	bool unknown;
	const union nf_addr *from = source(ep, src, &unknown);
	if (unknown)
		return -FI_EADDRNOTAVAIL;
	ssize_t posted = nf_recv(ep->engine, iov, count, from, tagged, tag, ignore, context,
				 wanted);
	progress_if_held(ep);
	return posted;
}

/* What FI_PEEK | FI_CLAIM writes beside the claim, in fi_context.internal[1]: a FI_CLAIM
 * receive whose context lacks it was given a context no peek claimed with (fresh memory, as
 * often zeroed, would otherwise name the claim numbered 0: another context's message). */
static const char claim_mark;
#define CLAIM_MARK ((void *)&claim_mark)

/* FI_PEEK: answers at once, with the message's description or FI_ENOMSG, in the receive
 * completion queue. With FI_CLAIM the message found is also taken: the claim that names it
 * is kept in the operation's fi_context (libfabric requires one for FI_CLAIM), where the
 * FI_CLAIM receive with the same context finds it. With FI_DISCARD (and no FI_CLAIM), the
 * message found is dropped at once. */
static ssize_t peek_locked(struct nicmsg_ep *ep, const struct fi_msg_tagged *msg,
			   uint64_t flags)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	/* A discard claims the message too, but keeps nothing in the context: only FI_CLAIM
	 * needs one (fi_tagged(3)); FI_PEEK | FI_DISCARD with none was refused. */
	bool claiming = flags & (FI_CLAIM | FI_DISCARD);
	if ((flags & FI_CLAIM) && !msg->context)
		return -FI_EINVAL;
	if (!cq_room(ep->rx_cq, 1))
		return -FI_EAGAIN;
	bool unknown;
	const union nf_addr *from = source(ep, msg->addr, &unknown);
	if (unknown)
		return -FI_EADDRNOTAVAIL;
	struct nf_completion found;
	uint64_t claim = 0;
	int got = nf_peek(ep->engine, from, 1, msg->tag, msg->ignore, msg->context, &found,
			  claiming ? &claim : NULL);
	if (got < 0)
		return got;
	if (!got) {
		memset(&found, 0, sizeof(found));
		found.context = msg->context;
		found.tagged = 1;
		found.err = FI_ENOMSG;
	} else if (flags & FI_CLAIM) {
		((struct fi_context *)msg->context)->internal[0] = (void *)(uintptr_t)claim;
		((struct fi_context *)msg->context)->internal[1] = CLAIM_MARK;
	} else if (flags & FI_DISCARD) {
		int dropped = nf_discard(ep->engine, claim);
		if (dropped < 0)
			return dropped;
	}
	cq_push(ep->rx_cq, ep, &found);
	return 0;
}

/* FI_CLAIM without FI_PEEK: receives (or with FI_DISCARD drops) the message an earlier
 * FI_PEEK | FI_CLAIM with the same context claimed. */
static ssize_t claimed_locked(struct nicmsg_ep *ep, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	if (!ep->enabled)
		return -FI_EOPBADSTATE;
	if (!msg->context)
		return -FI_EINVAL;
	if (msg->iov_count > NICMSG_IOV_LIMIT)
		return -FI_EINVAL;
	if (!ep->rx_cq)
		return -FI_ENOCQ;
	const struct fi_context *claimed = msg->context;
	if (claimed->internal[1] != CLAIM_MARK)
		return -FI_EINVAL; /* no FI_PEEK | FI_CLAIM with this context */
	uint64_t claim = (uintptr_t)claimed->internal[0];
	if (!(flags & FI_DISCARD)) {
		ssize_t posted = nf_recv_claimed(ep->engine, msg->msg_iov, msg->iov_count, claim,
						 msg->context, rx_wanted(ep, flags));
		progress_if_held(ep);
		return posted;
	}
	if (!cq_room(ep->rx_cq, 1))
		return -FI_EAGAIN;
	int dropped = nf_discard(ep->engine, claim);
	if (dropped < 0)
		return dropped;
	struct nf_completion done;
	memset(&done, 0, sizeof(done));
	done.context = msg->context;
	done.tagged = 1;
	done.wanted = 1;
	if (rx_wanted(ep, flags))
		cq_push(ep->rx_cq, ep, &done);
	return 0;
}

static ssize_t msg_recv(struct fid_ep *fid, void *buf, size_t len, void *desc,
			fi_addr_t src_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	return LOCKED(recv_locked(ep, &iov, 1, src_addr, false, 0, 0, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t msg_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			 size_t count, fi_addr_t src_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, iov, count, src_addr, false, 0, 0, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t msg_recvmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, false, 0, 0,
				  msg->context, rx_wanted(ep, flags)));
}

static ssize_t msg_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			 size_t count, fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, iov, count, dest_addr, false, 0, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_sendmsg(struct fid_ep *fid, const struct fi_msg *msg, uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, false, 0,
				  flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags,
				  false));
}

static ssize_t msg_inject(struct fid_ep *fid, const void *buf, size_t len, fi_addr_t dest_addr)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, false, 0, NULL, FI_INJECT,
				  true));
}

static ssize_t msg_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			    uint64_t data, fi_addr_t dest_addr, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, true, data, context,
				  ep->tx_op_flags, false));
}

static ssize_t msg_injectdata(struct fid_ep *fid, const void *buf, size_t len, uint64_t data,
			      fi_addr_t dest_addr)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, false, 0, true, data, NULL, FI_INJECT,
				  true));
}

static ssize_t tagged_recv(struct fid_ep *fid, void *buf, size_t len, void *desc,
			   fi_addr_t src_addr, uint64_t tag, uint64_t ignore, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = buf, .iov_len = len};
	return LOCKED(recv_locked(ep, &iov, 1, src_addr, true, tag, ignore, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t tagged_recvv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			    size_t count, fi_addr_t src_addr, uint64_t tag, uint64_t ignore,
			    void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(recv_locked(ep, iov, count, src_addr, true, tag, ignore, context,
				  rx_wanted(ep, ep->rx_op_flags)));
}

static ssize_t tagged_recvmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	if (flags & FI_PEEK)
		return LOCKED(peek_locked(ep, msg, flags));
	if (flags & FI_CLAIM)
		return LOCKED(claimed_locked(ep, msg, flags));
	if (flags & FI_DISCARD)
		return -FI_EINVAL; /* FI_DISCARD goes with FI_PEEK or FI_CLAIM */
	return LOCKED(recv_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, true, msg->tag,
				  msg->ignore, msg->context, rx_wanted(ep, flags)));
}

static ssize_t tagged_send(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			   fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_sendv(struct fid_ep *fid, const struct iovec *iov, void **desc,
			    size_t count, fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	return LOCKED(send_locked(ep, iov, count, dest_addr, true, tag, false, 0, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_sendmsg(struct fid_ep *fid, const struct fi_msg_tagged *msg,
			      uint64_t flags)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	/* `msg->ignore` is not read: it means nothing on a send (Open MPI leaves it unset). */
	return LOCKED(send_locked(ep, msg->msg_iov, msg->iov_count, msg->addr, true, msg->tag,
				  flags & FI_REMOTE_CQ_DATA, msg->data, msg->context, flags,
				  false));
}

static ssize_t tagged_inject(struct fid_ep *fid, const void *buf, size_t len,
			     fi_addr_t dest_addr, uint64_t tag)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, false, 0, NULL, FI_INJECT,
				  true));
}

static ssize_t tagged_senddata(struct fid_ep *fid, const void *buf, size_t len, void *desc,
			       uint64_t data, fi_addr_t dest_addr, uint64_t tag, void *context)
{
	(void)desc;
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, true, data, context,
				  ep->tx_op_flags, false));
}

static ssize_t tagged_injectdata(struct fid_ep *fid, const void *buf, size_t len,
				 uint64_t data, fi_addr_t dest_addr, uint64_t tag)
{
	struct nicmsg_ep *ep = (struct nicmsg_ep *)fid;
	struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
	return LOCKED(send_locked(ep, &iov, 1, dest_addr, true, tag, true, data, NULL, FI_INJECT,
				  true));
}

struct fi_ops_msg msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = msg_recv,
	.recvv = msg_recvv,
	.recvmsg = msg_recvmsg,
	.send = msg_send,
	.sendv = msg_sendv,
	.sendmsg = msg_sendmsg,
	.inject = msg_inject,
	.senddata = msg_senddata,
	.injectdata = msg_injectdata,
};

struct fi_ops_tagged tagged_ops = {
	.size = sizeof(struct fi_ops_tagged),
	.recv = tagged_recv,
	.recvv = tagged_recvv,
	.recvmsg = tagged_recvmsg,
	.send = tagged_send,
	.sendv = tagged_sendv,
	.sendmsg = tagged_sendmsg,
	.inject = tagged_inject,
	.senddata = tagged_senddata,
	.injectdata = tagged_injectdata,
};
