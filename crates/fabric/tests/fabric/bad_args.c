/*
 * Arguments libfabric's API allows but that make no sense, given to nicmsg's provider: each
 * call answers a negative FI_E* code and leaves the object working, instead of crashing,
 * corrupting memory or doing something other than what was asked. Prints "bad_args: ok" and
 * exits 0, or says what failed.
 *
 *   cc -o bad_args bad_args.c -lfabric && FI_PROVIDER_PATH=DIR ./bad_args
 */
#define CHECK_NAME "bad_args"
#include "check.h"
#include <rdma/fi_tagged.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* `got` must be the error `wanted`. */
static void expect(const char *what, long got, int wanted)
{
	if (got != wanted)
		FAIL("%s gave %ld, not %d (%s)", what, got, wanted, fi_strerror(-wanted));
}

/* An insert of more addresses than a vector holds, so many that the count added to the
 * vector's size wraps around, is refused before any address is read; the vector still
 * holds what it held. */
static void check_vector_count(struct node *n, struct node *peer)
{
	fi_addr_t at = insert_peer(n, peer);
	expect("fi_av_insert of SIZE_MAX addresses",
	       fi_av_insert(n->av, peer->name, SIZE_MAX, NULL, 0, NULL), -FI_ENOSPC);
	expect("fi_av_insert of SIZE_MAX - 1 addresses",
	       fi_av_insert(n->av, peer->name, SIZE_MAX - 1, NULL, 0, NULL), -FI_ENOSPC);
	char found[64];
	size_t len = sizeof(found);
	CHECK(fi_av_lookup(n->av, at, found, &len));
	if (len != peer->name_len || memcmp(found, peer->name, len))
		FAIL("the vector lost its address after a refused insert");
}

/* Reads one completion of `n`'s queue (-FI_EAVAIL for an error), progressing `other`. */
static ssize_t read_one(struct node *n, struct node *other, struct fi_cq_tagged_entry *entry)
{
	for (long spins = 0; spins < 100000000; spins++) {
		ssize_t got = fi_cq_read(n->cq, entry, 1);
		if (got != -FI_EAGAIN)
			return got;
		struct fi_cq_tagged_entry ignored;
		fi_cq_read(other->cq, &ignored, 1);
	}
	FAIL("no completion");
}

/* A null buffer with a length is refused (it was taken as an empty one: a send of nothing
 * that succeeded, a receive that could only truncate); with length 0 it is an empty message,
 * which arrives. */
static void check_null_buffers(struct node *a, struct node *b, fi_addr_t to_b)
{
	expect("fi_tsend of 16 bytes at NULL", fi_tsend(a->ep, NULL, 16, NULL, to_b, 4, NULL),
	       -FI_EINVAL);
	expect("fi_tinject of 16 bytes at NULL", fi_tinject(a->ep, NULL, 16, to_b, 4), -FI_EINVAL);
	expect("fi_senddata of 16 bytes at NULL",
	       fi_senddata(a->ep, NULL, 16, NULL, 1, to_b, NULL), -FI_EINVAL);
	char piece[8] = "piece";
	struct iovec iov[2] = {{piece, sizeof(piece)}, {NULL, 8}};
	expect("fi_tsendv with a NULL piece of 8 bytes",
	       fi_tsendv(a->ep, iov, NULL, 2, to_b, 4, NULL), -FI_EINVAL);
	expect("fi_trecv into 16 bytes at NULL",
	       fi_trecv(b->ep, NULL, 16, NULL, FI_ADDR_UNSPEC, 4, 0, NULL), -FI_EINVAL);
	expect("fi_recv into 16 bytes at NULL", fi_recv(b->ep, NULL, 16, NULL, FI_ADDR_UNSPEC, NULL),
	       -FI_EINVAL);
	/* Nothing of the refused sends arrives: the empty message is the first of tag 4. */
	static int receive, send;
	CHECK(fi_trecv(b->ep, NULL, 0, NULL, FI_ADDR_UNSPEC, 4, 0, &receive));
	CHECK(fi_tsend(a->ep, NULL, 0, NULL, to_b, 4, &send));
	struct fi_cq_tagged_entry entry;
	if (read_one(a, b, &entry) != 1 || entry.op_context != &send)
		FAIL("the empty send did not complete");
	if (read_one(b, a, &entry) != 1 || entry.op_context != &receive || entry.len != 0)
		FAIL("the empty message did not arrive as one (%zu bytes)", entry.len);
}

/* Reads of a queue holding a send's successful completion: a count of 0 reads nothing (it
 * answered -FI_EAVAIL, an error fi_cq_readerr then did not find), a NULL buffer for entries
 * is refused (it was written to), and the completion is still there to read. */
static void check_queue_reads(struct node *a, struct node *b, fi_addr_t to_b)
{
	static char message[] = "read me", in[16];
	CHECK(fi_trecv(b->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 5, 0, in));
	CHECK(fi_tsend(a->ep, message, sizeof(message), NULL, to_b, 5, message));
	ssize_t got = -FI_EAGAIN;
	for (long spins = 0; spins < 100000000 && got == -FI_EAGAIN; spins++) {
		got = fi_cq_read(a->cq, NULL, 0);
		struct fi_cq_tagged_entry ignored;
		fi_cq_read(b->cq, &ignored, 1);
	}
	expect("fi_cq_read of 0 entries with one queued", got, 0);
	struct fi_cq_err_entry error = {0};
	expect("fi_cq_readerr with no error queued", fi_cq_readerr(a->cq, &error, 0), -FI_EAGAIN);
	expect("fi_cq_read into NULL", fi_cq_read(a->cq, NULL, 1), -FI_EINVAL);
	expect("fi_cq_readfrom into NULL", fi_cq_readfrom(a->cq, NULL, 1, NULL), -FI_EINVAL);
	expect("fi_cq_sread into NULL", fi_cq_sread(a->cq, NULL, 1, NULL, 0), -FI_EINVAL);
	expect("fi_cq_readerr into NULL", fi_cq_readerr(a->cq, NULL, 0), -FI_EINVAL);
	struct fi_cq_tagged_entry entry;
	if (fi_cq_read(a->cq, &entry, 1) != 1 || entry.op_context != message)
		FAIL("the send's completion is gone after the refused reads");
}

/* FI_INJECT on fi_tsendmsg is bound by inject_size as fi_tinject is (it copied whatever it
 * was given, up to the 1 GiB message bound). */
static void check_inject_size(struct fi_info *info, struct node *a, fi_addr_t to_b)
{
	size_t limit = info->tx_attr->inject_size;
	char *bytes = calloc(1, 2 * limit + 2);
	struct iovec over = {bytes, limit + 1};
	struct iovec halves[2] = {{bytes, limit / 2 + 1}, {bytes, limit / 2 + 1}};
	struct fi_msg_tagged msg = {.msg_iov = &over, .iov_count = 1, .addr = to_b, .tag = 6};
	expect("fi_tsendmsg with FI_INJECT of inject_size + 1 bytes",
	       fi_tsendmsg(a->ep, &msg, FI_INJECT), -FI_EMSGSIZE);
	msg.msg_iov = halves;
	msg.iov_count = 2;
	expect("fi_tsendmsg with FI_INJECT of two pieces past inject_size",
	       fi_tsendmsg(a->ep, &msg, FI_INJECT), -FI_EMSGSIZE);
	expect("fi_tinject of inject_size + 1 bytes", fi_tinject(a->ep, bytes, limit + 1, to_b, 6),
	       -FI_EMSGSIZE);
	struct iovec exact = {bytes, limit};
	msg.msg_iov = &exact;
	msg.iov_count = 1;
	CHECK(fi_tsendmsg(a->ep, &msg, FI_INJECT));
	free(bytes);
}

/* Peeks with FI_PEEK | FI_CLAIM under `context` until `n`'s message of `tag` is there. */
static void peek_claim(struct node *n, struct node *other, uint64_t tag,
		       struct fi_context *context)
{
	struct fi_msg_tagged msg = {.addr = FI_ADDR_UNSPEC, .tag = tag, .context = context};
	for (long tries = 0; tries < 10000000; tries++) {
		CHECK(fi_trecvmsg(n->ep, &msg, FI_PEEK | FI_CLAIM));
		struct fi_cq_tagged_entry entry;
		ssize_t got = read_one(n, other, &entry);
		if (got == 1 && entry.op_context == context)
			return;
		struct fi_cq_err_entry error = {0};
		if (got != -FI_EAVAIL || fi_cq_readerr(n->cq, &error, 0) != 1 ||
		    error.err != FI_ENOMSG)
			FAIL("FI_PEEK | FI_CLAIM gave neither the message nor FI_ENOMSG");
	}
	FAIL("the message to claim never came");
}

/* FI_CLAIM with a context no FI_PEEK | FI_CLAIM used is refused: a fresh context (zeroed)
 * named the first claim an endpoint made, and took another context's claimed message. The
 * claiming context then receives it. Fresh endpoints: their first claim is the one a zeroed
 * context would name. */
static void check_claim_without_peek(struct fi_info *info, struct fid_domain *domain)
{
	struct node a, b;
	open_node(info, domain, &a, FI_WAIT_NONE);
	open_node(info, domain, &b, FI_WAIT_NONE);
	fi_addr_t to_b = insert_peer(&a, &b);
	static char message[] = "claimed";
	CHECK(fi_tsend(a.ep, message, sizeof(message), NULL, to_b, 7, message));
	struct fi_context peeker = {{0}}, stranger = {{0}};
	peek_claim(&b, &a, 7, &peeker);
	char in[16] = {0};
	struct iovec iov = {in, sizeof(in)};
	struct fi_msg_tagged msg = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
				    .tag = 7, .context = &stranger};
	expect("FI_CLAIM with a context no peek claimed with", fi_trecvmsg(b.ep, &msg, FI_CLAIM),
	       -FI_EINVAL);
	expect("FI_CLAIM | FI_DISCARD with a context no peek claimed with",
	       fi_trecvmsg(b.ep, &msg, FI_CLAIM | FI_DISCARD), -FI_EINVAL);
	msg.context = &peeker;
	CHECK(fi_trecvmsg(b.ep, &msg, FI_CLAIM));
	struct fi_cq_tagged_entry entry;
	if (read_one(&b, &a, &entry) != 1 || entry.op_context != &peeker || strcmp(in, message))
		FAIL("the claiming context did not receive its claimed message");
	struct node *nodes[] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		CHECK(fi_close(&nodes[i]->ep->fid));
		CHECK(fi_close(&nodes[i]->cq->fid));
		CHECK(fi_close(&nodes[i]->av->fid));
	}
}

/* An endpoint bound to a queue for one direction only: operations of the other direction,
 * whose completions would have nowhere to go, are refused (a receive took its message and
 * dropped the completion); an inject, which reports nothing, still goes. */
static void check_one_queue(struct fi_info *info, struct fid_domain *domain, struct node *peer)
{
	struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
	struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_TAGGED};
	struct fid_av *av;
	struct fid_cq *cq;
	struct fid_ep *send_only, *receive_only;
	CHECK(fi_av_open(domain, &av_attr, &av, NULL));
	CHECK(fi_cq_open(domain, &cq_attr, &cq, NULL));
	CHECK(fi_endpoint(domain, info, &send_only, NULL));
	CHECK(fi_endpoint(domain, info, &receive_only, NULL));
	CHECK(fi_ep_bind(send_only, &av->fid, 0));
	CHECK(fi_ep_bind(receive_only, &av->fid, 0));
	CHECK(fi_ep_bind(send_only, &cq->fid, FI_TRANSMIT));
	CHECK(fi_ep_bind(receive_only, &cq->fid, FI_RECV));
	CHECK(fi_enable(send_only));
	CHECK(fi_enable(receive_only));
	fi_addr_t to;
	CHECK(fi_av_insert(av, peer->name, 1, &to, 0, NULL) - 1);
	char buf[16] = "one way";
	expect("fi_trecv without a receive queue",
	       fi_trecv(send_only, buf, sizeof(buf), NULL, FI_ADDR_UNSPEC, 10, 0, buf),
	       -FI_ENOCQ);
	expect("fi_tsend without a send queue",
	       fi_tsend(receive_only, buf, sizeof(buf), NULL, to, 10, buf), -FI_ENOCQ);
	CHECK(fi_tinject(receive_only, buf, sizeof(buf), to, 10));
	CHECK(fi_close(&send_only->fid));
	CHECK(fi_close(&receive_only->fid));
	CHECK(fi_close(&cq->fid));
	CHECK(fi_close(&av->fid));
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node a, b;
	open_two(FI_TAGGED | FI_MSG, &info, &fabric, &domain,
		 &a, FI_WAIT_NONE, &b, FI_WAIT_NONE);
	check_vector_count(&a, &b);
	fi_addr_t to_b = insert_peer(&a, &b);
	check_null_buffers(&a, &b, to_b);
	check_queue_reads(&a, &b, to_b);
	check_inject_size(info, &a, to_b);
	check_claim_without_peek(info, domain);
	check_one_queue(info, domain, &b);
	close_all((struct node *[]){&a, &b}, 2, domain, fabric, info);
	printf("bad_args: ok\n");
	return 0;
}
