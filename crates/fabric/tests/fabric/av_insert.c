/*
 * fi_av_insert's FI_SYNC_ERR on nicmsg's provider: `context` is an array of ints, one per
 * address, set to 0 for an address inserted and to a positive fabric errno for one that was
 * not (fi_av(3)); the provider left it as it was, so an application read its own initial
 * values as the outcome. Flags fi_av_insert does not know are refused with -FI_EBADFLAGS, and
 * FI_SYNC_ERR without an array with -FI_EINVAL. Prints "av_insert: ok" and exits 0, or says
 * what failed.
 *
 *   cc -o av_insert av_insert.c -lfabric && FI_PROVIDER_PATH=DIR ./av_insert
 */
#define CHECK_NAME "av_insert"
#include "check.h"
#include <netinet/in.h>

/* What `errors` must hold after an insert of a good, a bad (port 0) and a good address. */
static void check_sync_errors(const int *errors, const fi_addr_t *at, int inserted)
{
	if (inserted != 2)
		FAIL("the insert of two good addresses and a bad one gave %d", inserted);
	if (at[0] == FI_ADDR_NOTAVAIL || at[1] != FI_ADDR_NOTAVAIL || at[2] == FI_ADDR_NOTAVAIL)
		FAIL("the bad address got an fi_addr, or a good one none");
	if (errors[0] != 0 || errors[2] != 0)
		FAIL("FI_SYNC_ERR left %d and %d for the addresses inserted, not 0", errors[0],
		     errors[2]);
	if (errors[1] <= 0 || errors[1] == 99)
		FAIL("FI_SYNC_ERR left %d for the address refused, not a positive fabric errno",
		     errors[1]);
}

int main(void)
{
	struct fi_info *info;
	struct fid_fabric *fabric;
	struct fid_domain *domain;
	open_domain(FI_TAGGED, &info, &fabric, &domain);
	struct node n;
	open_node(info, domain, &n, FI_WAIT_NONE);
	struct sockaddr_in addresses[3];
	for (int i = 0; i < 3; i++)
		memcpy(&addresses[i], n.name, sizeof(addresses[i]));
	addresses[1].sin_port = 0; /* no endpoint has port 0: refused */
	int errors[3] = {99, 99, 99};
	fi_addr_t at[3];
	int inserted = fi_av_insert(n.av, addresses, 3, at, FI_SYNC_ERR, errors);
	check_sync_errors(errors, at, inserted);
	int refused = fi_av_insert(n.av, addresses, 1, at, FI_SYNC_ERR, NULL);
	if (refused != -FI_EINVAL)
		FAIL("FI_SYNC_ERR without an array of errors gave %d, not -FI_EINVAL", refused);
	refused = fi_av_insert(n.av, addresses, 1, at, 1ULL << 62, NULL);
	if (refused != -FI_EBADFLAGS)
		FAIL("an unknown flag gave %d, not -FI_EBADFLAGS", refused);
	CHECK(fi_av_insert(n.av, addresses, 1, at, FI_MORE, NULL) - 1);
	close_all((struct node *[]){&n}, 1, domain, fabric, info);
	printf("av_insert: ok\n");
	return 0;
}
