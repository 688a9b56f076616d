/*
 * FI_PEEK on nicmsg's provider (fi_tagged(3)): a peek that finds a message completes with its
 * length, tag, remote CQ data and flags, and leaves it queued; one that finds none leaves an
 * FI_ENOMSG error entry. FI_PEEK | FI_DISCARD drops the message found, and needs no context
 * (only FI_CLAIM keeps anything in one): the provider refused a NULL context with -FI_EINVAL.
 * A claimed message received into a buffer too short completes with FI_ETRUNC, its bytes
 * placed (len) and the rest (olen) making up the message, and nothing written past len.
 * Prints "peek: ok" and exits 0, or says what failed.
 *
 *   cc -o peek peek.c -lfabric && FI_PROVIDER_PATH=DIR ./peek
 */
#define CHECK_NAME "peek"
#include "check.h"
#include <rdma/fi_tagged.h>

#define REMOTE_DATA 0xabcd
#define MESSAGE_BYTES 100
#define SHORT_BYTES 40

static char message[MESSAGE_BYTES];

/* Peeks with `flags` under `context` for the message of `tag`; -FI_ENOMSG if none is there,
 * else 0 and its entry. */
static int peek(struct node *n, struct node *other, uint64_t tag, uint64_t flags,
		struct fi_context *context, struct fi_cq_tagged_entry *entry)
{
	struct fi_msg_tagged msg = {.addr = FI_ADDR_UNSPEC, .tag = tag, .context = context};
	CHECK(fi_trecvmsg(n->ep, &msg, flags));
	struct fi_cq_err_entry error;
	ssize_t got = read_entry(n, other, entry, &error);
	if (got == 1)
		return 0;
	if (got != -FI_EAVAIL || error.err != FI_ENOMSG)
		FAIL("a peek gave %zd (err %d), neither an entry nor FI_ENOMSG", got, error.err);
	if (error.op_context != context || error.flags != (FI_RECV | FI_TAGGED))
		FAIL("the FI_ENOMSG entry has the wrong context or flags %#llx",
		     (unsigned long long)error.flags);
	return -FI_ENOMSG;
}

/* Peeks until the message of `tag` has arrived. */
static void peek_until_found(struct node *n, struct node *other, uint64_t tag, uint64_t flags,
			     struct fi_context *context, struct fi_cq_tagged_entry *entry)
{
	for (long tries = 0; tries < 10000000; tries++)
		if (peek(n, other, tag, flags, context, entry) == 0)
			return;
	FAIL("the message of tag %llu never came", (unsigned long long)tag);
}

/* Sends the message with remote CQ data; the send's completion is read by `wait_sent`. */
static void send_message(struct node *sender, fi_addr_t to, uint64_t tag,
			 struct fi_context *send)
{
	CHECK(fi_tsenddata(sender->ep, message, sizeof(message), NULL, REMOTE_DATA, to, tag,
			   send));
}

static void wait_sent(struct node *sender, struct node *receiver, struct fi_context *send)
{
	struct fi_cq_tagged_entry entry;
	struct fi_cq_err_entry error;
	if (read_entry(sender, receiver, &entry, &error) != 1 || entry.op_context != send)
		FAIL("the send did not complete");
}

/* A peek's entry describes the message, and the message stays for a receive. */
static void check_peek(struct node *sender, struct node *receiver, fi_addr_t to)
{
	struct fi_context send, peeker, receive;
	struct fi_cq_tagged_entry entry;
	if (peek(receiver, sender, 1, FI_PEEK, &peeker, &entry) != -FI_ENOMSG)
		FAIL("a peek found a message nobody sent");
	send_message(sender, to, 1, &send);
	peek_until_found(receiver, sender, 1, FI_PEEK, &peeker, &entry);
	if (entry.op_context != &peeker || entry.len != MESSAGE_BYTES || entry.tag != 1 ||
	    entry.data != REMOTE_DATA ||
	    entry.flags != (FI_RECV | FI_TAGGED | FI_REMOTE_CQ_DATA))
		FAIL("the peek's entry: len %zu, tag %llu, data %#llx, flags %#llx", entry.len,
		     (unsigned long long)entry.tag, (unsigned long long)entry.data,
		     (unsigned long long)entry.flags);
	if (entry.buf)
		FAIL("the peek's entry has a buffer, but no bytes were asked for");
	char in[MESSAGE_BYTES];
	CHECK(fi_trecv(receiver->ep, in, sizeof(in), NULL, FI_ADDR_UNSPEC, 1, 0, &receive));
	struct fi_cq_err_entry error;
	if (read_entry(receiver, sender, &entry, &error) != 1 || entry.op_context != &receive ||
	    memcmp(in, message, sizeof(in)))
		FAIL("the peeked message was not there to receive");
	wait_sent(sender, receiver, &send);
}

/* FI_PEEK | FI_DISCARD with no context drops the message it finds. */
static void check_discard(struct node *sender, struct node *receiver, fi_addr_t to)
{
	struct fi_context send, peeker;
	send_message(sender, to, 2, &send);
	struct fi_cq_tagged_entry entry;
	peek_until_found(receiver, sender, 2, FI_PEEK, &peeker, &entry);
	struct fi_msg_tagged msg = {.addr = FI_ADDR_UNSPEC, .tag = 2, .context = NULL};
	ssize_t posted = fi_trecvmsg(receiver->ep, &msg, FI_PEEK | FI_DISCARD);
	if (posted)
		FAIL("FI_PEEK | FI_DISCARD with no context gave %zd", posted);
	struct fi_cq_err_entry error;
	if (read_entry(receiver, sender, &entry, &error) != 1 || entry.op_context ||
	    entry.len != MESSAGE_BYTES)
		FAIL("FI_PEEK | FI_DISCARD did not complete with the message's description");
	if (peek(receiver, sender, 2, FI_PEEK, &peeker, &entry) != -FI_ENOMSG)
		FAIL("the discarded message is still there");
	wait_sent(sender, receiver, &send);
}

/* A claimed message received into a buffer too short: FI_ETRUNC, and no byte past len. */
static void check_claimed_truncation(struct node *sender, struct node *receiver, fi_addr_t to)
{
	for (int i = 0; i < MESSAGE_BYTES; i++)
		message[i] = (char)(i * 7 + 1);
	struct fi_context send, claimer;
	send_message(sender, to, 3, &send);
	struct fi_cq_tagged_entry entry;
	peek_until_found(receiver, sender, 3, FI_PEEK | FI_CLAIM, &claimer, &entry);
	char in[MESSAGE_BYTES];
	memset(in, 0x77, sizeof(in));
	struct iovec iov = {in, SHORT_BYTES};
	struct fi_msg_tagged msg = {.msg_iov = &iov, .iov_count = 1, .addr = FI_ADDR_UNSPEC,
				    .tag = 3, .context = &claimer};
	CHECK(fi_trecvmsg(receiver->ep, &msg, FI_CLAIM));
	struct fi_cq_err_entry error;
	if (read_entry(receiver, sender, &entry, &error) != -FI_EAVAIL ||
	    error.err != FI_ETRUNC || error.op_context != &claimer)
		FAIL("the claimed message into %d bytes did not fail with FI_ETRUNC", SHORT_BYTES);
	if (error.len > SHORT_BYTES || error.len + error.olen < MESSAGE_BYTES - SHORT_BYTES ||
	    error.tag != 3 || error.data != REMOTE_DATA)
		FAIL("the truncation's entry: len %zu, olen %zu, tag %llu, data %#llx", error.len,
		     error.olen, (unsigned long long)error.tag, (unsigned long long)error.data);
	for (size_t i = 0; i < sizeof(in); i++)
		if (i < error.len ? in[i] != message[i] : in[i] != 0x77)
			FAIL("byte %zu of the truncated receive is wrong (len %zu)", i, error.len);
	wait_sent(sender, receiver, &send);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	struct node sender, receiver;
	open_two(FI_TAGGED, &info, &fabric, &domain, &sender, FI_WAIT_NONE, &receiver,
		 FI_WAIT_NONE);
	fi_addr_t to = insert_peer(&sender, &receiver);
	check_peek(&sender, &receiver, to);
	check_discard(&sender, &receiver, to);
	check_claimed_truncation(&sender, &receiver, to);
	close_all((struct node *[]){&sender, &receiver}, 2, domain, fabric, info);
	printf("peek: ok\n");
	return 0;
}
