/* MPI-semantics stress test of the C ABI (include/nicmsg.h): the phases and the driver; the
 * machinery they share (plans, message content, requests and their checks, completion styles,
 * the watchdog) is in stress.h.
 *
 * Every rank runs this program: `nicmsg run -n N -- ./stress [options]`. Every rank derives the
 * whole job's plan from --seed (splitmix64), so each knows what every other rank sends it, and
 * checks every byte, every status field, guard bytes around every receive buffer, MPI's
 * non-overtaking order, wildcard matching, probes, cancels, truncation, waitall/waitany/test and
 * the credit and barrier rules. Any failure prints a line naming rank, phase, round, peer and
 * message, and the program exits non-zero; a watchdog (alarm) turns a hang into a failure that
 * says where each rank was.
 *
 * Build: PKG_CONFIG_PATH=pkgconfig cc -std=c11 -O2 -Wall -Wextra examples/c/stress.c \
 *          $(pkg-config --cflags --libs nicmsg) -o stress
 * Run:   nicmsg run -n 4 -- ./stress --rounds 20 --max-size 256K --compute-seconds 3  (small)
 *        nicmsg run -n 4 -- ./stress                                (full scale: 4 MiB, 60 s)
 *        ./stress --help                                            (options and phases)
 * The phases are listed in PHASES below; `--phases a,b` runs some, `--skip a,b` leaves some out.
 */
#include "stress.h"

/* ------------------------------------------------------------------------------------------
 * Phases
 * ------------------------------------------------------------------------------------------ */

enum {
    PH_SIZES,
    PH_MIXED,
    PH_WILDCARD,
    PH_BARRIER,
    PH_CREDITS,
    PH_CREDITBARRIER,
    PH_PROBE,
    PH_PROBEANY,
    PH_CANCEL_RECV,
    PH_CANCEL_SEND,
    PH_CANCEL_RNDV,
    PH_TRUNCATE,
    PH_WAITANY,
    PH_COMPUTE,
    PH_COUNT,
    PH_CONTROL = 15 /* tags of the test's own bookkeeping (phase numbers 0..15 fit the tags) */
};

/* Messages per ordered pair and round: fewer with more ranks, to keep a round short. */
static uint32_t pair_max(void) {
    return np <= 4 ? 5 : 3;
}

/* sizes: every boundary size between every pair of ranks, exact receives. */
static void phase_sizes(unsigned round) {
    rng_t r = plan_rng(PH_SIZES, round);
    plan_t p;
    plan_init(&p, (size_t)np * np * nsizes);
    for (uint32_t s = 0; s < np; s++)
        for (uint32_t d = 0; d < np; d++)
            for (unsigned k = 0; d != s && k < nsizes; k++)
                plan_add(&p, s, d, PH_SIZES, round, tag_of(PH_SIZES, round, k % 3), sizes[k],
                         EXACT);
    run_traffic(&p, PH_SIZES, round, (int)below(&r, 2));
    plan_free(&p);
}

/* Plans a round of random traffic. wildcards: ANY_TAG classes even with the receives posted
 * before a barrier (the wildcard phase); otherwise ANY_TAG receives are only used when no
 * barrier runs while they are pending, so that phase does not depend on the barrier's
 * traffic being invisible (the barrier and wildcard phases test that). */
static int plan_traffic(plan_t *p, unsigned phase, unsigned round, int wildcards) {
    rng_t r = plan_rng(phase, round);
    int prepost = wildcards ? 1 : (int)below(&r, 2);
    int anytag = wildcards || !prepost;
    plan_init(p, (size_t)np * np * pair_max());
    for (uint32_t d = 0; d < np; d++) {
        int anyany = wildcards && below(&r, 3) == 0;
        for (uint32_t s = 0; s < np; s++) {
            if (s == d) continue;
            int cls = anyany ? ANYANY : (int)below(&r, anytag ? 3 : 2);
            if (!anyany && !anytag && cls == 1) cls = TAGGROUP;
            uint32_t n = below(&r, pair_max() + 1);
            for (uint32_t k = 0; k < n; k++) {
                /* TAGGROUP tags are never used by the other classes (see above). */
                uint32_t tag = cls == TAGGROUP ? tag_of(phase, round, 8 + below(&r, 2))
                                               : tag_of(phase, round, below(&r, 3));
                size_t len = pick_size(&r, cls == TAGGROUP || cls == ANYANY ? HEADER : 0);
                plan_add(p, s, d, phase, round, tag, len, cls);
            }
        }
    }
    return prepost;
}

/* mixed: random traffic, all receive classes, pre-posted or unexpected, every completion
 * style. */
static void phase_mixed(unsigned round) {
    plan_t p;
    int prepost = plan_traffic(&p, PH_MIXED, round, 0);
    run_traffic(&p, PH_MIXED, round, prepost);
    plan_free(&p);
}

/* wildcard: ANY_SOURCE and ANY_TAG receives posted before the messages arrive: post, barrier,
 * send. The barrier runs while the wildcard receives are pending. */
static void phase_wildcard(unsigned round) {
    plan_t p;
    plan_traffic(&p, PH_WILDCARD, round, 1);
    run_traffic(&p, PH_WILDCARD, round, 1);
    plan_free(&p);
}

/* Before each barrier (no rank has left the last one, so nothing "late" was sent yet): no
 * pending wildcard receive may complete, and iprobe may only see "early" messages (the first
 * of their sender's). */
static void check_quiet(batch_t *b, plan_t *p) {
    char d[200], e[160];
    for (size_t i = 0; i < b->n; i++) {
        op_t *op = &b->ops[i];
        if (op->kind != RECV || !b->reqs[i]) continue;
        int flag = 0;
        nicmsg_status st;
        step("nicmsg_test of a pending wildcard receive between barriers", -1);
        int rc = nicmsg_test(&b->reqs[i], &flag, &st);
        if (flag) {
            fail("%s completed between barriers, before any message for it was sent: %s, "
                 "rank %u, tag %#x, %llu bytes (library-internal traffic?)",
                 describe_op(op, d), nicmsg_error_string(rc), st.source, st.tag,
                 (unsigned long long)st.len);
            op->done = 1; /* do not check it again */
        }
    }
    int flag = 0;
    nicmsg_status st;
    step("nicmsg_iprobe(ANY_SOURCE, ANY_TAG) between barriers", -1);
    MUST(nicmsg_iprobe(comm, ANY_SRC, ANY_TAG, &flag, &st));
    if (!flag) return;
    count.probes++;
    if (st.tag > NICMSG_TAG_UB) {
        fail("iprobe(ANY_SOURCE, ANY_TAG) between barriers saw tag %#x (%llu bytes from "
             "rank %u): library-internal traffic",
             st.tag, (unsigned long long)st.len, st.source);
        return;
    }
    for (size_t i = 0; i < p->n; i++) {
        msg_t *m = &p->msgs[i];
        if (m->src != st.source || m->dst != me || p->cls[i] != EXACT || m->seq != 0) continue;
        if (m->tag != st.tag || m->len != st.len)
            fail("iprobe(ANY_SOURCE, ANY_TAG) between barriers: rank %u, tag %#x, %llu bytes; "
                 "expected the sender's first message, %s",
                 st.source, st.tag, (unsigned long long)st.len, describe_msg(m, e));
        return;
    }
    fail("iprobe(ANY_SOURCE, ANY_TAG) between barriers saw a message from rank %u (tag %#x, "
         "%llu bytes) although that rank sent nothing yet",
         st.source, st.tag, (unsigned long long)st.len);
}

/* barrier: barriers while sends and wildcard receives are pending on the same ranks. Per pair,
 * "early" messages are sent before the barriers and received (exactly) after them, so their
 * sends are pending; "late" messages are received by wildcard receives posted before the
 * barriers and sent after them. Pending wildcard receives must not complete with the
 * barrier's traffic, and iprobe must not see it. */
static void phase_barrier(unsigned round) {
    rng_t r = plan_rng(PH_BARRIER, round), mine = local_rng(PH_BARRIER, round);
    plan_t p;
    plan_init(&p, (size_t)np * np * 4);
    for (uint32_t d = 0; d < np; d++) {
        int anyany = below(&r, 3) == 0; /* every message to d is late, received by ANY/ANY */
        for (uint32_t s = 0; s < np; s++) {
            if (s == d) continue;
            uint32_t kind = anyany ? 1 : below(&r, 3); /* 0 early, 1 late, 2 none */
            /* Early messages stay below the eager credits: the credits phase tests more. */
            uint32_t n = kind == 2 ? 0 : 1 + below(&r, kind == 0 ? 4 : 3);
            int cls = anyany ? ANYANY : kind == 0 ? EXACT : below(&r, 2) ? SOURCE : TAGGROUP;
            for (uint32_t k = 0; k < n; k++) {
                uint32_t tag = tag_of(PH_BARRIER, round,
                                      cls == EXACT    ? below(&r, 3)
                                      : cls == SOURCE ? 16 + below(&r, 2)
                                                      : 24 + below(&r, 2));
                size_t len = pick_size(&r, cls == EXACT ? 0 : HEADER);
                plan_add(&p, s, d, PH_BARRIER, round, tag, len, cls);
            }
        }
    }
    /* The plan split: early messages (EXACT) and late ones (the wildcard classes). */
    plan_t early, late;
    plan_init(&early, p.n);
    plan_init(&late, p.n);
    for (size_t i = 0; i < p.n; i++) {
        plan_t *part = p.cls[i] == EXACT ? &early : &late;
        part->msgs[part->n] = p.msgs[i];
        part->cls[part->n++] = p.cls[i];
    }
    batch_t b;
    batch_init(&b, p.n);
    /* Pending across the barriers: (source, ANY_TAG), (ANY_SOURCE, tag), (ANY_SOURCE, ANY_TAG). */
    post_receives_of(&b, &late, &mine);
    post_sends_of(&b, &early, &mine, EXPECT_SUCCESS);
    unsigned barriers = 2 + below(&r, 3);
    where_batch = &b;
    for (unsigned k = 0; k < barriers; k++) {
        /* Not after the last barrier: peers that left it send their late messages. */
        check_quiet(&b, &early);
        barrier("barrier with sends and wildcard receives pending");
    }
    post_sends_of(&b, &late, &mine, EXPECT_SUCCESS);
    post_receives_of(&b, &early, &mine);
    complete_all(&b, &mine);
    check_order(&b);
    check_all_received(&early);
    check_all_received(&late);
    /* The next round's early messages must not reach this round's wildcard receives. */
    barrier("barrier at the end of the round");
    batch_free(&b);
    plan_free(&early);
    plan_free(&late);
    plan_free(&p);
}

/* The peers of a ring shift that changes every round: this rank sends to `to`, receives from
 * `from`. */
static void ring_peers(unsigned round, uint32_t *to, uint32_t *from) {
    uint32_t shift = 1 + round % (np - 1);
    *to = (me + shift) % np;
    *from = (me + np - shift) % np;
}

/* Eager messages (small and up to the eager limit) from every rank to its ring successor. */
static void plan_eager_burst(plan_t *p, unsigned phase, unsigned round, uint32_t tag,
                             uint32_t count_min, uint32_t count_spread) {
    rng_t r = plan_rng(phase, round);
    plan_init(p, (size_t)np * (count_min + count_spread + 2));
    uint32_t shift = 1 + round % (np - 1);
    for (uint32_t s = 0; s < np; s++) {
        uint32_t n = count_min + below(&r, count_spread + 1);
        for (uint32_t k = 0; k < n; k++) {
            size_t len = below(&r, 2) ? pick_between(&r, 0, SMALL_SEND)
                                      : pick_between(&r, SMALL_SEND + 1, EAGER_LIMIT);
            plan_add(p, s, (s + shift) % np, phase, round, tag, len, EXACT);
        }
    }
}

/* Posts receives for every message `from` sent this rank with `tag`, in order. */
static void post_exact_receives(batch_t *b, plan_t *p, uint32_t from, uint32_t tag, rng_t *r,
                                int any_tag) {
    for (size_t i = 0; i < p->n; i++) {
        msg_t *m = &p->msgs[i];
        if (m->src != from || m->dst != me || m->tag != tag || m->taken) continue;
        post_recv(b, from, any_tag ? ANY_TAG : tag, (size_t)m->len + below(r, 2), m, NULL, 0,
                  EXPECT_SUCCESS);
    }
}

/* credits: 12-24 eager messages wait unmatched at a receiver (more than its 8 credits for the
 * sender), followed by one with another tag; the receiver first receives that later one
 * (MPI-valid: it must not deadlock), then the rest in order. */
static void phase_credits(unsigned round) {
    rng_t mine = local_rng(PH_CREDITS, round);
    uint32_t a = tag_of(PH_CREDITS, round, 1), later = tag_of(PH_CREDITS, round, 2);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    plan_t p;
    plan_eager_burst(&p, PH_CREDITS, round, a, EAGER_CREDITS + 4, 12);
    /* Each sender's last message: the later one, any size. */
    rng_t r = plan_rng(PH_CREDITS, round + 100000);
    msg_t *lasts[1] = {NULL};
    for (uint32_t s = 0; s < np; s++) {
        uint32_t d = (s + 1 + round % (np - 1)) % np;
        msg_t *m = plan_add(&p, s, d, PH_CREDITS, round, later, pick_size(&r, 0), EXACT);
        if (d == me) lasts[0] = m;
    }
    batch_t sends, recvs;
    batch_init(&sends, p.n);
    batch_init(&recvs, p.n);
    post_sends_of(&sends, &p, &mine, EXPECT_SUCCESS);
    /* Wait until the burst is here (a blocking probe also tests probe), then take the later
     * message first. */
    nicmsg_status st;
    step("nicmsg_probe for the first of the unmatched burst", from);
    MUST(nicmsg_probe(comm, from, a, &st));
    count.probes++;
    msg_t *first = NULL;
    for (size_t i = 0; i < p.n && !first; i++)
        if (p.msgs[i].src == from && p.msgs[i].dst == me && p.msgs[i].seq == 0) first = &p.msgs[i];
    if (st.source != from || st.tag != a || st.len != first->len)
        fail("probe(%u, %#x) reported rank %u, tag %#x, %llu bytes; expected %llu bytes", from, a,
             st.source, st.tag, (unsigned long long)st.len, (unsigned long long)first->len);
    size_t i = post_recv(&recvs, below(&mine, 2) ? from : ANY_SRC, later, (size_t)lasts[0]->len,
                         lasts[0], NULL, 0, EXPECT_SUCCESS);
    waiting_on(&recvs, "receive of a later tag while more messages than credits wait unmatched",
               from);
    nicmsg_status lst;
    int rc = nicmsg_wait(&recvs.reqs[i], &lst);
    finish(&recvs, i, rc, &lst);
    post_exact_receives(&recvs, &p, from, a, &mine, (int)below(&mine, 2));
    complete_all(&recvs, &mine);
    check_order(&recvs);
    complete_all(&sends, &mine);
    check_all_received(&p);
    batch_free(&recvs);
    batch_free(&sends);
    plan_free(&p);
}

/* creditbarrier: more unmatched eager messages than credits to one peer, then barriers; the
 * receives are posted only after them (MPI-valid: the barrier must complete). */
static void phase_creditbarrier(unsigned round) {
    rng_t mine = local_rng(PH_CREDITBARRIER, round);
    uint32_t a = tag_of(PH_CREDITBARRIER, round, 1);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    (void)to;
    plan_t p;
    plan_eager_burst(&p, PH_CREDITBARRIER, round, a, EAGER_CREDITS + 4, 12);
    batch_t b;
    batch_init(&b, p.n);
    post_sends_of(&b, &p, &mine, EXPECT_SUCCESS);
    where_batch = &b;
    barrier("barrier with more unmatched eager sends than credits pending");
    barrier("second barrier with more unmatched eager sends than credits pending");
    post_exact_receives(&b, &p, from, a, &mine, 0);
    complete_all(&b, &mine);
    check_order(&b);
    check_all_received(&p);
    batch_free(&b);
    plan_free(&p);
}

/* Every message of the round is received and the next round's wait for the barrier: while the
 * peers (half of them) enter it, iprobe(ANY_SOURCE, ANY_TAG) must find nothing for 50 ms. */
static void probe_while_peers_enter_the_barrier(void) {
    step("iprobe(ANY_SOURCE, ANY_TAG) while peers enter the barrier", -1);
    for (double until = now_s() + 0.05; now_s() < until;) {
        int flag = 0;
        nicmsg_status st;
        MUST(nicmsg_iprobe(comm, ANY_SRC, ANY_TAG, &flag, &st));
        if (flag) {
            fail("iprobe(ANY_SOURCE, ANY_TAG) after every message of the round was received "
                 "found rank %u, tag %#x, %llu bytes: the barrier's traffic",
                 st.source, st.tag, (unsigned long long)st.len);
            return;
        }
        sched_yield();
    }
}

/* probe / probeany: for every message, probe (blocking or an iprobe loop) with a pattern that
 * accepts it, then receive exactly the probed message by its source and tag into a buffer of
 * its length. probe uses (source, tag) and (ANY_SOURCE, tag): the tags change every round, so
 * no barrier is needed between rounds. probeany uses (source, ANY_TAG) and (ANY_SOURCE,
 * ANY_TAG), which would also see the next round's messages, so its rounds end with a barrier,
 * which peers may enter while this rank still probes: the probe must not see its traffic. */
static void run_probe(unsigned phase, unsigned round, int any_tag) {
    rng_t r = plan_rng(phase, round), mine = local_rng(phase, round);
    plan_t p;
    plan_init(&p, (size_t)np * np * 3);
    for (uint32_t s = 0; s < np; s++)
        for (uint32_t d = 0; d < np; d++) {
            uint32_t n = s == d ? 0 : below(&r, 4);
            for (uint32_t k = 0; k < n; k++)
                plan_add(&p, s, d, phase, round, tag_of(phase, round, below(&r, 3)),
                         pick_size(&r, 0), EXACT);
        }
    batch_t sends;
    batch_init(&sends, p.n);
    post_sends_of(&sends, &p, &mine, EXPECT_SUCCESS);
    for (;;) {
        /* A message still to come, and a pattern that accepts it. */
        size_t left = 0, pick;
        for (size_t i = 0; i < p.n; i++) left += p.msgs[i].dst == me && !p.msgs[i].taken;
        if (!left) break;
        pick = below(&mine, (uint32_t)left);
        msg_t *target = NULL;
        for (size_t i = 0; i < p.n && !target; i++)
            if (p.msgs[i].dst == me && !p.msgs[i].taken && pick-- == 0) target = &p.msgs[i];
        uint32_t src = below(&mine, 2) ? ANY_SRC : target->src;
        uint32_t tag = any_tag ? ANY_TAG : target->tag;
        nicmsg_status st;
        memset(&st, 0xCC, sizeof st);
        char a[24], t[24], e[160];
        if (below(&mine, 2)) {
            step("nicmsg_probe", src == ANY_SRC ? -1 : (long)src);
            MUST(nicmsg_probe(comm, src, tag, &st));
        } else {
            step("nicmsg_iprobe loop", src == ANY_SRC ? -1 : (long)src);
            for (int flag = 0; !flag;) {
                MUST(nicmsg_iprobe(comm, src, tag, &flag, &st));
                if (!flag) sched_yield();
            }
        }
        count.probes++;
        if (st.tag > NICMSG_TAG_UB || st.source >= np) {
            fail("probe(%s, %s) reported rank %u, tag %#x, %llu bytes: library-internal traffic",
                 rank_text(src, a), tag_text(tag, t), st.source, st.tag,
                 (unsigned long long)st.len);
            break;
        }
        /* The probed message: the first of its sender's not yet received that the pattern
         * accepts (non-overtaking applies to probes too). */
        msg_t *m = NULL;
        for (size_t i = 0; i < p.n && !m; i++)
            if (p.msgs[i].src == st.source && p.msgs[i].dst == me && !p.msgs[i].taken &&
                matches(src, tag, &p.msgs[i]))
                m = &p.msgs[i];
        if (!m || m->tag != st.tag || m->len != st.len) {
            fail("probe(%s, %s) reported rank %u, tag %#x, %llu bytes; expected %s",
                 rank_text(src, a), tag_text(tag, t), st.source, st.tag, (unsigned long long)st.len,
                 m ? describe_msg(m, e) : "no message from that rank");
            break;
        }
        batch_t one;
        batch_init(&one, 1);
        post_recv(&one, st.source, st.tag, (size_t)st.len + below(&mine, 2), m, NULL, 0,
                  EXPECT_SUCCESS);
        complete_all(&one, &mine);
        batch_free(&one);
    }
    complete_all(&sends, &mine);
    check_all_received(&p);
    if (any_tag) {
        if ((me + round) % 2 == 0) probe_while_peers_enter_the_barrier();
        barrier("barrier at the end of the round");
    }
    batch_free(&sends);
    plan_free(&p);
}

static void phase_probe(unsigned round) {
    run_probe(PH_PROBE, round, 0);
}

static void phase_probeany(unsigned round) {
    run_probe(PH_PROBEANY, round, 1);
}

/* cancel_recv: receives nobody sends to are cancelled (NICMSG_ERR_CANCELLED, buffer untouched,
 * status.source the named peer); a receive cancelled right after posting, racing its message,
 * either gets it or is cancelled and the message goes to the next receive; waitall returns
 * the first error. */
static void phase_cancel_recv(unsigned round) {
    rng_t r = plan_rng(PH_CANCEL_RECV, round), mine = local_rng(PH_CANCEL_RECV, round);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    plan_t p;
    plan_init(&p, (size_t)np * 2);
    msg_t *race = NULL, *plain = NULL;
    for (uint32_t s = 0; s < np; s++) {
        uint32_t d = (s + 1 + round % (np - 1)) % np;
        msg_t *m1 = plan_add(&p, s, d, PH_CANCEL_RECV, round, tag_of(PH_CANCEL_RECV, round, 1),
                             pick_size(&r, 0), EXACT);
        msg_t *m2 = plan_add(&p, s, d, PH_CANCEL_RECV, round, tag_of(PH_CANCEL_RECV, round, 2),
                             pick_size(&r, 0), EXACT);
        if (d == me) race = m1, plain = m2;
    }
    batch_t sends, b;
    batch_init(&sends, 2);
    batch_init(&b, 4);
    post_sends_of(&sends, &p, &mine, EXPECT_SUCCESS);
    size_t unsent = post_recv(&b, from, tag_of(PH_CANCEL_RECV, round, 10), 300, NULL, NULL, 0,
                              EXPECT_CANCELLED);
    size_t anysrc = post_recv(&b, ANY_SRC, tag_of(PH_CANCEL_RECV, round, 11), 300, NULL, NULL, 0,
                              EXPECT_CANCELLED);
    post_recv(&b, from, plain->tag, (size_t)plain->len, plain, NULL, 0, EXPECT_SUCCESS);
    size_t raced = post_recv(&b, from, race->tag, (size_t)race->len, race, NULL, 0,
                             EXPECT_CANCELLED_OR_SUCCESS);
    if (below(&mine, 2)) compute(below(&mine, 500) * 1e-6);
    cancel_op(&b, raced);
    if (below(&mine, 2)) {
        cancel_op(&b, unsent);
        cancel_op(&b, anysrc);
    } else {
        cancel_op(&b, anysrc);
        cancel_op(&b, unsent);
    }
    complete_waitall(&b);
    if (b.ops[raced].rc == NICMSG_ERR_CANCELLED) {
        /* The message is still there for the next receive. */
        batch_t again;
        batch_init(&again, 1);
        post_recv(&again, from, race->tag, (size_t)race->len, race, NULL, 0, EXPECT_SUCCESS);
        complete_all(&again, &mine);
        batch_free(&again);
    }
    complete_all(&sends, &mine);
    check_all_received(&p);
    batch_free(&b);
    batch_free(&sends);
    plan_free(&p);
}

/* Cancelled sends this rank must never receive; checked at the end of the phase. */
static msg_t *never;
static size_t never_n, never_cap;

/* cancel_send / cancel_rndv: sends to a rank that has not posted their receives are cancelled.
 * Each either is cancelled (NICMSG_ERR_CANCELLED, status names the destination) or was
 * delivered anyway (success); a report message then tells the receiver which were delivered,
 * and it receives exactly those. In half of the rounds a credit's worth of eager "filler"
 * messages goes first, so the candidates wait in the sender's queue, where a cancel can take
 * them back; the receiver drains the fillers without waiting for anything else. */
static void run_cancel_send(unsigned phase, unsigned round, size_t lo, size_t hi, size_t lo2,
                            size_t hi2) {
    rng_t r = plan_rng(phase, round), mine = local_rng(phase, round);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    int fillers = (int)below(&r, 2);
    plan_t p;
    plan_init(&p, (size_t)np * (EAGER_CREDITS + 4));
    for (uint32_t s = 0; s < np; s++) {
        uint32_t d = (s + 1 + round % (np - 1)) % np, n = 2 + below(&r, 3);
        for (uint32_t k = 0; fillers && k < EAGER_CREDITS; k++)
            plan_add(&p, s, d, phase, round, tag_of(phase, round, 16 + k),
                     pick_between(&r, SMALL_SEND + 1, EAGER_LIMIT), EXACT);
        for (uint32_t k = 0; k < n; k++)
            plan_add(&p, s, d, phase, round, tag_of(phase, round, 32 + k),
                     k % 2 ? pick_between(&r, lo, hi) : pick_between(&r, lo2, hi2), EXACT);
    }
    /* Sender: fillers, candidates; maybe let them start; cancel each candidate; complete. */
    batch_t filled, sends;
    batch_init(&filled, EAGER_CREDITS);
    batch_init(&sends, 4);
    for (size_t i = 0; i < p.n; i++) {
        msg_t *m = &p.msgs[i];
        if (m->src != me) continue;
        if (tag_k(m->tag) < 32)
            post_send(&filled, m, EXPECT_SUCCESS);
        else
            post_send(&sends, m, EXPECT_CANCELLED_OR_SUCCESS);
    }
    if (below(&mine, 2)) compute(below(&mine, 2000) * 1e-6);
    size_t order[4], n = sends.n;
    for (size_t i = 0; i < n; i++) order[i] = i;
    shuffle(order, n, &mine);
    for (size_t i = 0; i < n; i++) cancel_op(&sends, order[i]);
    complete_all(&sends, &mine);
    /* The report: per candidate, its tag, whether it was delivered, its length and seq. */
    unsigned char report[4 * 16];
    for (size_t i = 0; i < n; i++) {
        put32(report + 16 * i, sends.ops[i].tag);
        put32(report + 16 * i + 4, sends.ops[i].rc == NICMSG_SUCCESS);
        put32(report + 16 * i + 8, (uint32_t)sends.ops[i].cap);
        put32(report + 16 * i + 12, sends.ops[i].msg->seq);
    }
    uint32_t report_tag = tag_of(phase, round, 63);
    nicmsg_request *report_req;
    step("sending the cancel report", to);
    MUST(nicmsg_isend(comm, report, 16 * n, to, report_tag, &report_req));
    /* Receiver: the fillers, the report, then exactly the delivered candidates. */
    batch_t recvs;
    batch_init(&recvs, EAGER_CREDITS + 4);
    for (size_t i = 0; i < p.n; i++) {
        msg_t *m = &p.msgs[i];
        if (m->dst == me && tag_k(m->tag) < 32)
            post_recv(&recvs, from, m->tag, (size_t)m->len, m, NULL, 0, EXPECT_SUCCESS);
    }
    complete_all(&recvs, &mine);
    unsigned char got[4 * 16];
    nicmsg_status st;
    step("receiving the cancel report", from);
    MUST(nicmsg_recv(comm, got, sizeof got, from, report_tag, &st));
    step("completing the cancel report's send", to);
    MUST(nicmsg_wait(&report_req, NULL));
    size_t entries = (size_t)st.len / 16;
    for (size_t i = 0; i < entries; i++) {
        uint32_t tag = get32(got + 16 * i), delivered = get32(got + 16 * i + 4);
        uint32_t len = get32(got + 16 * i + 8), seq = get32(got + 16 * i + 12);
        msg_t *m = NULL;
        for (size_t j = 0; j < p.n && !m; j++)
            if (p.msgs[j].src == from && p.msgs[j].dst == me && p.msgs[j].seq == seq)
                m = &p.msgs[j];
        if (!m || m->tag != tag || m->len != len || delivered > 1) {
            fail("the cancel report from rank %u does not match the plan (entry %zu: tag %#x, "
                 "len %u, seq %u, delivered %u)",
                 from, i, tag, len, seq, delivered);
            continue;
        }
        if (delivered) {
            post_recv(&recvs, from, tag, len + below(&mine, 2), m, NULL, 0, EXPECT_SUCCESS);
        } else {
            if (never_n == never_cap) {
                never_cap = never_cap ? 2 * never_cap : 64;
                msg_t *grown = xmalloc(never_cap * sizeof *never);
                if (never_n) memcpy(grown, never, never_n * sizeof *never);
                free(never);
                never = grown;
            }
            never[never_n++] = *m;
        }
    }
    complete_all(&recvs, &mine);
    complete_all(&filled, &mine);
    batch_free(&recvs);
    batch_free(&filled);
    batch_free(&sends);
    plan_free(&p);
}

/* After the phase's last barrier: no cancelled send may have arrived. */
static void check_never_arrived(void) {
    char e[160];
    for (size_t i = 0; i < never_n; i++) {
        int flag = 0;
        nicmsg_status st;
        step("iprobe for cancelled sends", never[i].src);
        MUST(nicmsg_iprobe(comm, never[i].src, never[i].tag, &flag, &st));
        if (flag)
            fail("%s was cancelled (its send returned NICMSG_ERR_CANCELLED) but arrived anyway "
                 "(%llu bytes)",
                 describe_msg(&never[i], e), (unsigned long long)st.len);
    }
    never_n = 0;
}

static void phase_cancel_send(unsigned round) {
    /* Short sends (complete when started, so the cancel usually comes too late) and eager. */
    run_cancel_send(PH_CANCEL_SEND, round, 0, SMALL_SEND, SMALL_SEND + 1, EAGER_LIMIT);
}

static void phase_cancel_rndv(unsigned round) {
    /* Rendezvous: the receiver holds only the request to send. */
    run_cancel_send(PH_CANCEL_RNDV, round, EAGER_LIMIT + 1, MiB, EAGER_LIMIT + 1, EAGER_LIMIT + 1);
}

/* truncate: a receive shorter than the message gets NICMSG_ERR_TRUNCATE with the message's
 * source, tag and full length, and nothing is written; the message is consumed (the next
 * receive gets the next one). The send succeeds: as in MPI, truncation is the receiver's
 * error. Short, eager and rendezvous messages; an exact and an ANY_SOURCE receive. */
static void phase_truncate(unsigned round) {
    rng_t r = plan_rng(PH_TRUNCATE, round), mine = local_rng(PH_TRUNCATE, round);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    (void)to;
    int prepost = (int)below(&r, 2);
    plan_t p;
    plan_init(&p, (size_t)np * 8);
    for (uint32_t s = 0; s < np; s++) {
        uint32_t d = (s + 1 + round % (np - 1)) % np;
        for (unsigned k = 0; k < 4; k++) {
            size_t len = k == 0   ? pick_between(&r, 1, SMALL_SEND)
                         : k == 1 ? pick_between(&r, SMALL_SEND + 1, EAGER_LIMIT)
                         : k == 2 ? pick_between(&r, EAGER_LIMIT + 1, opt.max_size)
                                  : pick_size(&r, 1);
            uint32_t tag = tag_of(PH_TRUNCATE, round, k);
            plan_add(&p, s, d, PH_TRUNCATE, round, tag, len, EXACT);              /* truncated */
            plan_add(&p, s, d, PH_TRUNCATE, round, tag, pick_size(&r, 0), EXACT); /* follows it */
        }
    }
    batch_t b;
    batch_init(&b, p.n * 2);
    if (!prepost) post_sends_of(&b, &p, &mine, EXPECT_SUCCESS);
    for (size_t i = 0; i < p.n; i++) {
        msg_t *m = &p.msgs[i];
        if (m->dst != me) continue;
        if (m->seq % 2 == 0) {
            size_t len = (size_t)m->len, cap = below(&mine, 3) == 0 ? len - 1
                                               : below(&mine, 2)    ? len / 2
                                                                    : 0;
            uint32_t src = tag_k(m->tag) == 3 ? ANY_SRC : m->src;
            post_recv(&b, src, m->tag, cap, m, NULL, 0, EXPECT_TRUNCATE);
        } else {
            post_recv(&b, m->src, m->tag, (size_t)m->len, m, NULL, 0, EXPECT_SUCCESS);
        }
    }
    if (prepost) {
        where_batch = &b;
        barrier("barrier after posting the short receives");
        post_sends_of(&b, &p, &mine, EXPECT_SUCCESS);
    }
    complete_all(&b, &mine);
    check_order(&b);
    check_all_received(&p);
    batch_free(&b);
    plan_free(&p);
}

/* waitany/waitall edge cases (MPI): no active request -> success and index NICMSG_UNDEFINED;
 * waitall on NULL requests -> success; then a ring exchange completed by waitany over an array
 * with NULL holes. */
static void phase_waitany(unsigned round) {
    rng_t mine = local_rng(PH_WAITANY, round);
    nicmsg_request *none[3] = {NULL, NULL, NULL};
    nicmsg_status st[3];
    size_t index = 12345;
    step("nicmsg_waitany with count 0", -1);
    int rc = nicmsg_waitany(0, NULL, &index, &st[0]);
    if (rc != NICMSG_SUCCESS || index != NICMSG_UNDEFINED)
        fail("nicmsg_waitany(count 0) returned %s with index %zu; expected success and "
             "NICMSG_UNDEFINED",
             nicmsg_error_string(rc), index);
    index = 12345;
    rc = nicmsg_waitany(0, none, &index, &st[0]);
    if (rc != NICMSG_SUCCESS || index != NICMSG_UNDEFINED)
        fail("nicmsg_waitany(count 0, an array) returned %s with index %zu; expected success and "
             "NICMSG_UNDEFINED",
             nicmsg_error_string(rc), index);
    index = 12345;
    step("nicmsg_waitany with only NULL requests", -1);
    rc = nicmsg_waitany(3, none, &index, &st[0]);
    if (rc != NICMSG_SUCCESS || index != NICMSG_UNDEFINED)
        fail("nicmsg_waitany on 3 NULL requests returned %s with index %zu; expected success and "
             "NICMSG_UNDEFINED",
             nicmsg_error_string(rc), index);
    step("nicmsg_waitall with only NULL requests", -1);
    rc = nicmsg_waitall(3, none, st);
    if (rc != NICMSG_SUCCESS)
        fail("nicmsg_waitall on 3 NULL requests returned %s", nicmsg_error_string(rc));
    rc = nicmsg_waitall(0, NULL, NULL);
    if (rc != NICMSG_SUCCESS) fail("nicmsg_waitall(count 0) returned %s", nicmsg_error_string(rc));

    /* A ring exchange in an array with holes: waitany reports only active requests. */
    rng_t r = plan_rng(PH_WAITANY, round);
    uint32_t to, from;
    ring_peers(round, &to, &from);
    plan_t p;
    plan_init(&p, (size_t)np * 3);
    for (uint32_t s = 0; s < np; s++)
        for (unsigned k = 0; k < 3; k++)
            plan_add(&p, s, (s + 1 + round % (np - 1)) % np, PH_WAITANY, round,
                     tag_of(PH_WAITANY, round, k), pick_size(&r, 0), EXACT);
    batch_t b;
    batch_init(&b, 2 * p.n);
    for (size_t i = 0; i < p.n; i++) {
        msg_t *m = &p.msgs[i];
        if (m->src != me && m->dst != me) continue;
        /* A hole (a NULL request) before some of the active ones. */
        if (below(&mine, 2)) batch_add(&b);
        if (m->src == me)
            post_send(&b, m, EXPECT_SUCCESS);
        else
            post_recv(&b, from, m->tag, (size_t)m->len, m, NULL, 0, EXPECT_SUCCESS);
    }
    complete_waitany(&b, SIZE_MAX);
    index = 12345;
    rc = nicmsg_waitany(b.n, b.reqs, &index, &st[0]);
    if (rc != NICMSG_SUCCESS || index != NICMSG_UNDEFINED)
        fail("nicmsg_waitany on %zu completed (NULL) requests returned %s with index %zu; "
             "expected success and NICMSG_UNDEFINED",
             b.n, nicmsg_error_string(rc), index);
    check_all_received(&p);
    batch_free(&b);
    plan_free(&p);
}

/* compute: one rank computes without calling the library while one peer is blocked in a
 * receive from it and another sends it messages; afterwards everything arrives and nobody
 * has been declared dead. */
static void phase_compute(unsigned round) {
    rng_t r = plan_rng(PH_COMPUTE, round), mine = local_rng(PH_COMPUTE, round);
    uint32_t worker = (1 + round) % np;
    uint32_t waiter = (worker + np - 1) % np, sender = (worker + 1) % np;
    uint32_t tag = tag_of(PH_COMPUTE, round, 1);
    plan_t p;
    plan_init(&p, 6);
    /* Short, eager and rendezvous, each way. */
    size_t lens[3] = {pick_between(&r, 0, SMALL_SEND),
                      pick_between(&r, SMALL_SEND + 1, EAGER_LIMIT),
                      pick_between(&r, EAGER_LIMIT + 1, opt.max_size)};
    for (unsigned k = 0; k < 3; k++)
        plan_add(&p, worker, waiter, PH_COMPUTE, round, tag, lens[k], EXACT);
    for (unsigned k = 0; k < 3; k++)
        plan_add(&p, sender, worker, PH_COMPUTE, round, tag, lens[k], EXACT);
    barrier("barrier before the computation");
    batch_t sends, recvs;
    batch_init(&sends, 6);
    batch_init(&recvs, 6);
    if (me == sender) post_sends_of(&sends, &p, &mine, EXPECT_SUCCESS);
    if (me == worker) {
        if (round == 0 || opt.verbose)
            printf("stress: rank %u computes for %.1f s without calling the library\n", me,
                   opt.compute_seconds);
        step("computing (no library calls)", -1);
        compute(opt.compute_seconds);
        post_sends_of(&sends, &p, &mine, EXPECT_SUCCESS);
        post_exact_receives(&recvs, &p, sender, tag, &mine, 0);
    }
    if (me == waiter) {
        /* Blocked in a receive from the computing rank all along. */
        for (size_t i = 0; i < p.n; i++) {
            if (p.msgs[i].dst != me) continue;
            size_t j = post_recv(&recvs, worker, tag, (size_t)p.msgs[i].len, &p.msgs[i], NULL, 0,
                                 EXPECT_SUCCESS);
            nicmsg_status st;
            waiting_on(&recvs, "blocking receive from the computing rank", worker);
            int rc = nicmsg_wait(&recvs.reqs[j], &st);
            finish(&recvs, j, rc, &st);
        }
    }
    complete_all(&recvs, &mine);
    complete_all(&sends, &mine);
    check_all_received(&p);
    batch_free(&recvs);
    batch_free(&sends);
    plan_free(&p);
}

/* ------------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    void (*round)(unsigned round);
    unsigned per_40_rounds; /* rounds at --rounds 40 (scaled, at least 1) */
    const char *what;
} phase_t;

static const phase_t PHASES[PH_COUNT] = {
    [PH_SIZES] = {"sizes", phase_sizes, 2, "every boundary size from 0 to --max-size, every pair"},
    [PH_MIXED] = {"mixed", phase_mixed, 40,
                  "random traffic: all receive patterns, waitall/waitany/test"},
    [PH_WILDCARD] = {"wildcard", phase_wildcard, 20,
                     "ANY_SOURCE/ANY_TAG receives posted before the messages (barrier between)"},
    [PH_BARRIER] = {"barrier", phase_barrier, 20,
                    "barriers while sends and wildcard receives are pending"},
    [PH_CREDITS] = {"credits", phase_credits, 10,
                    "more unmatched eager messages than credits; a later tag received first"},
    [PH_CREDITBARRIER] = {"creditbarrier", phase_creditbarrier, 10,
                          "more unmatched eager messages than credits, then barriers"},
    [PH_PROBE] = {"probe", phase_probe, 20,
                  "probe/iprobe with (source or ANY_SOURCE, tag), then receive the probed message"},
    [PH_PROBEANY] = {"probeany", phase_probeany, 20,
                     "probe/iprobe with ANY_TAG, then receive the probed message"},
    [PH_CANCEL_RECV] = {"cancel_recv", phase_cancel_recv, 20,
                        "cancel of unmatched and racing receives"},
    [PH_CANCEL_SEND] = {"cancel_send", phase_cancel_send, 20,
                        "cancel of short and eager sends to a rank without receives"},
    [PH_CANCEL_RNDV] = {"cancel_rndv", phase_cancel_rndv, 10,
                        "cancel of rendezvous sends (> 64 KiB) to a rank without receives"},
    [PH_TRUNCATE] = {"truncate", phase_truncate, 20, "receive buffers shorter than the message"},
    [PH_WAITANY] = {"waitany", phase_waitany, 10, "waitany/waitall with count 0 and NULL requests"},
    [PH_COMPUTE] = {"compute", phase_compute, 1,
                    "a rank computes --compute-seconds without library calls"},
};

static unsigned rounds_of(unsigned phase) {
    if (phase == PH_COMPUTE) return 1;
    unsigned n = (unsigned)((uint64_t)opt.rounds * PHASES[phase].per_40_rounds / 40);
    return n ? n : 1;
}

/* Every rank's `mine[0..n)`, added up at rank 0 (exact receives on a tag of the test's own):
 * rank 0 gets the sums in `total` and true; the others false. */
static int sum_at_rank_0(const uint64_t *mine, uint64_t *total, size_t n, uint32_t tag) {
    step("adding up the counters at rank 0", 0);
    if (me != 0) {
        MUST(nicmsg_send(comm, mine, n * sizeof *mine, 0, tag));
        return 0;
    }
    memcpy(total, mine, n * sizeof *mine);
    uint64_t theirs[16];
    for (uint32_t src = 1; src < np; src++) {
        nicmsg_status st;
        MUST(nicmsg_recv(comm, theirs, n * sizeof *theirs, src, tag, &st));
        for (size_t i = 0; i < n; i++) total[i] += theirs[i];
    }
    return 1;
}

static void run_phase(unsigned phase) {
    if (phase == PH_CANCEL_RNDV && opt.max_size <= EAGER_LIMIT) {
        if (me == 0)
            printf("stress: phase %s skipped: --max-size is not above 64 KiB\n",
                   PHASES[phase].name);
        return;
    }
    where_phase = PHASES[phase].name;
    where_round = 0;
    unsigned rounds = rounds_of(phase), failures_before = failures;
    arm_watchdog(opt.timeout + (phase == PH_COMPUTE ? (unsigned)opt.compute_seconds : 0));
    double start = now_s();
    for (unsigned round = 0; round < rounds; round++) {
        where_round = round;
        PHASES[phase].round(round);
        count.rounds++;
        if (me == 0 && opt.progress && (round + 1) % opt.progress == 0 && round + 1 < rounds)
            printf("stress: phase %s round %u/%u (%.1f s)\n", where_phase, round + 1, rounds,
                   now_s() - start);
    }
    barrier("barrier at the end of the phase");
    if (phase == PH_CANCEL_SEND || phase == PH_CANCEL_RNDV) {
        check_never_arrived();
        barrier("barrier after checking that no cancelled send arrived");
    }
    uint64_t failed = failures - failures_before, all_failed;
    if (sum_at_rank_0(&failed, &all_failed, 1, tag_of(PH_CONTROL, phase, 1))) {
        if (all_failed)
            printf("stress: phase %s FAILED: %llu failed checks (--keep-going), %u rounds in "
                   "%.2f s\n",
                   where_phase, (unsigned long long)all_failed, rounds, now_s() - start);
        else
            printf("stress: phase %s passed: %u rounds in %.2f s\n", where_phase, rounds,
                   now_s() - start);
    }
}

/* The final line (rank 0), from every rank's counters. */
static void print_summary(uint32_t phases_run, double seconds) {
    uint64_t mine[10] = {count.messages,
                         count.bytes,
                         count.rounds,
                         count.send_cancelled,
                         count.send_cancel_delivered,
                         count.recv_cancelled,
                         count.recv_cancel_delivered,
                         count.truncated,
                         count.probes,
                         failures},
             t[10];
    where_phase = "summary";
    if (!sum_at_rank_0(mine, t, 10, tag_of(PH_CONTROL, 0, 0))) return;
    printf("stress: %s: %u phases on %u ranks, seed %llu, %llu rounds (rank-rounds %llu), "
           "%llu messages, %llu bytes verified, %llu probes, sends cancelled %llu (delivered "
           "anyway %llu), receives cancelled %llu (received anyway %llu), truncations %llu, "
           "%llu failed checks, %.1f s\n",
           t[9] ? "FAILED" : "passed", phases_run, np, (unsigned long long)opt.seed,
           (unsigned long long)(t[2] / np), (unsigned long long)t[2], (unsigned long long)t[0],
           (unsigned long long)t[1], (unsigned long long)t[8], (unsigned long long)t[3],
           (unsigned long long)t[4], (unsigned long long)t[5], (unsigned long long)t[6],
           (unsigned long long)t[7], (unsigned long long)t[9], seconds);
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: nicmsg run -n N -- stress [options]\n"
            "  --seed S             plan seed (default 1); every rank must get the same\n"
            "  --rounds R           scale: rounds of the main phase (default 40; others scaled)\n"
            "  --max-size BYTES     largest message (default 4M; K/M suffixes)\n"
            "  --phases a,b,...     run only these phases (default: all, in the order below)\n"
            "  --skip a,b,...       leave these phases out\n"
            "  --timeout SECONDS    watchdog per phase (default 300): a hang is a failure\n"
            "  --compute-seconds S  the compute phase's computation (default 60)\n"
            "  --progress N         progress line every N rounds (rank 0; default 10, 0 off)\n"
            "  --keep-going         report every failed check, not just the first (exit 1)\n"
            "  --verbose            print every completion\n"
            "phases:\n");
    for (unsigned i = 0; i < PH_COUNT; i++)
        fprintf(out, "  %-14s %s\n", PHASES[i].name, PHASES[i].what);
}

static uint32_t parse_phases(const char *list) {
    uint32_t mask = 0;
    char *copy = strdup(list), *save = NULL;
    for (char *name = strtok_r(copy, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        unsigned i = 0;
        while (i < PH_COUNT && strcmp(PHASES[i].name, name) != 0) i++;
        if (i == PH_COUNT) {
            fprintf(stderr, "stress: unknown phase '%s'\n", name);
            usage(stderr);
            exit(2);
        }
        mask |= 1u << i;
    }
    free(copy);
    return mask;
}

static size_t parse_size(const char *text) {
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (*end == 'K' || *end == 'k')
        v *= KiB, end++;
    else if (*end == 'M' || *end == 'm')
        v *= MiB, end++;
    if (*end || v == 0) {
        fprintf(stderr, "stress: bad size '%s'\n", text);
        exit(2);
    }
    return (size_t)v;
}

static void parse_args(int argc, char **argv) {
    uint32_t skip = 0, only = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes_value = 1;
        if (!strcmp(a, "--verbose"))
            opt.verbose = 1, takes_value = 0;
        else if (!strcmp(a, "--keep-going"))
            opt.keep_going = 1, takes_value = 0;
        else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(stdout), exit(0);
        else if (!v) {
            fprintf(stderr, "stress: %s needs a value\n", a);
            exit(2);
        } else if (!strcmp(a, "--seed"))
            opt.seed = strtoull(v, NULL, 0);
        else if (!strcmp(a, "--rounds"))
            opt.rounds = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--max-size"))
            opt.max_size = parse_size(v);
        else if (!strcmp(a, "--timeout"))
            opt.timeout = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--compute-seconds"))
            opt.compute_seconds = strtod(v, NULL);
        else if (!strcmp(a, "--progress"))
            opt.progress = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(a, "--phases"))
            only = parse_phases(v);
        else if (!strcmp(a, "--skip"))
            skip = parse_phases(v);
        else {
            fprintf(stderr, "stress: unknown option '%s'\n", a);
            usage(stderr);
            exit(2);
        }
        i += takes_value;
    }
    opt.phases = (only ? only : (1u << PH_COUNT) - 1) & ~skip;
    if (opt.timeout == 0) opt.timeout = 300;
}

/* The boundary sizes up to --max-size, and --max-size itself. */
static void init_sizes(void) {
    static const size_t boundary[] = {0,       1,        255,          256, 257,    1472,
                                      8 * KiB, 64 * KiB, 64 * KiB + 1, MiB, 4 * MiB};
    for (size_t i = 0; i < sizeof boundary / sizeof boundary[0]; i++)
        if (boundary[i] <= opt.max_size) sizes[nsizes++] = boundary[i];
    if (sizes[nsizes - 1] != opt.max_size) sizes[nsizes++] = opt.max_size;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    parse_args(argc, argv);
    init_sizes();
    atexit(print_failure_counts);
    signal(SIGALRM, on_alarm);
    arm_watchdog(opt.timeout);
    step("nicmsg_init", -1);
    MUST(nicmsg_init(&comm));
    MUST(nicmsg_comm_rank(comm, &me));
    MUST(nicmsg_comm_size(comm, &np));
    if (np < 2) {
        fprintf(stderr, "stress: needs at least 2 ranks\n");
        return 2;
    }
    if (me == 0)
        printf("stress: %u ranks, seed %llu, rounds %u, max size %zu, phase timeout %u s\n", np,
               (unsigned long long)opt.seed, opt.rounds, opt.max_size, opt.timeout);
    double start = now_s();
    uint32_t run = 0;
    barrier("barrier at the start");
    for (unsigned phase = 0; phase < PH_COUNT; phase++) {
        if (!(opt.phases & (1u << phase))) continue;
        run_phase(phase);
        run++;
    }
    arm_watchdog(opt.timeout);
    print_summary(run, now_s() - start);
    barrier("barrier before finalize");
    step("nicmsg_finalize", -1);
    int rc = nicmsg_finalize(comm);
    if (rc != NICMSG_SUCCESS)
        fail("nicmsg_finalize returned %s%s", nicmsg_error_string(rc),
             rc == NICMSG_ERR_PENDING ? " (a request was leaked)" : "");
    alarm(0);
    return failures ? 1 : 0;
}
