/*
 * A ring of ranks that survives a SIGKILL, on weft's C ABI: the way a runtime written in C
 * embeds weft. Every rank sends its successor a message and waits for its predecessor's; the
 * rank named by WEFT_RING_KILL (default: none) then SIGKILLs itself; the survivors report
 * the view without it, go round the ring of the survivors, and agree (weft_agree) on the OR
 * of their bits and on who failed. Exit 0 only when the agreement is what this rank saw.
 *
 * The worker is driven by this thread in its own event loop: weft_progress until 0, weft_arm,
 * then poll(2) on weft_get_fd. Run by examples/c/run.sh under mpirun or mpiexec.hydra.
 */
#include <weft.h>

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_RANKS 64

/* What the callback saw. */
struct state {
    uint32_t rank, size;
    /* Messages received per phase, and the sender of the last. */
    unsigned received[3];
    /* The live ranks of the last view, and its epoch. */
    uint32_t view[MAX_RANKS];
    size_t n_view;
    uint64_t epoch;
    int agreed;
    uint64_t agreed_value;
    uint32_t failed[MAX_RANKS];
    size_t n_failed;
    unsigned undelivered;
    /* Of those, sends to the killed rank that failed because it died (WEFT_FAILED_DEAD). */
    unsigned lost_to_killed;
    /* Sends that reached their destination's application. */
    unsigned delivered;
};

static uint32_t killed = UINT32_MAX;

static void on_event(const weft_event *ev, void *arg) {
    struct state *s = arg;
    switch (ev->kind) {
    case WEFT_EV_RECEIVED:
        if (ev->len == 1 && ev->data[0] < 3) s->received[ev->data[0]]++;
        break;
    case WEFT_EV_DELIVERED:
        s->delivered++;
        break;
    case WEFT_EV_FAILED:
        s->undelivered++;
        if (ev->rank == killed && ev->reason == WEFT_FAILED_DEAD) s->lost_to_killed++;
        break;
    case WEFT_EV_SUSPECTED:
        printf("rank %u: rank %u suspects rank %u (reason %u)\n", s->rank, ev->by, ev->rank,
               ev->reason);
        break;
    case WEFT_EV_VIEW:
        s->epoch = ev->tag;
        s->n_view = ev->n_ranks < MAX_RANKS ? ev->n_ranks : MAX_RANKS;
        memcpy(s->view, ev->ranks, s->n_view * sizeof(uint32_t));
        break;
    case WEFT_EV_AGREED:
        s->agreed = 1;
        s->agreed_value = ev->value;
        s->n_failed = ev->n_ranks < MAX_RANKS ? ev->n_ranks : MAX_RANKS;
        memcpy(s->failed, ev->ranks, s->n_failed * sizeof(uint32_t));
        break;
    default:
        break;
    }
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static weft_worker *w;
static struct state s;

/* Drive the worker until done(), or die after 60 s. */
static void drive_until(int (*done)(void), const char *what) {
    double deadline = now_s() + 60.0;
    while (!done()) {
        int n = weft_progress(w);
        if (n < 0) {
            fprintf(stderr, "rank %u: progress: %s (%s)\n", s.rank, weft_strerror(n),
                    weft_last_error());
            exit(2);
        }
        if (n > 0) continue;
        if (now_s() > deadline) {
            fprintf(stderr, "rank %u: no %s within 60 s\n", s.rank, what);
            exit(3);
        }
        /* Nothing to do: arm, and sleep on the descriptor only if weft says so. */
        weft_status a = weft_arm(w);
        if (a == WEFT_OK) {
            struct pollfd p = {.fd = weft_get_fd(w), .events = POLLIN};
            poll(&p, 1, 1000);
        } else if (a != WEFT_BUSY) {
            fprintf(stderr, "rank %u: arm: %s\n", s.rank, weft_strerror(a));
            exit(2);
        }
    }
}

/* The first lap: the predecessor's message came, and this rank's send settled. It settles
 * as delivered, except where the successor is the rank that kills itself: that rank may die
 * after its application took the message and before its acknowledgement left, and then the
 * send fails (WEFT_FAILED_DEAD), as the ABI promises of a destination that dies. */
static int got_first(void) { return s.received[0] >= 1 && s.delivered + s.undelivered >= 1; }
static int view_without_killed(void) {
    if (s.n_view == 0) return 0;
    for (size_t i = 0; i < s.n_view; i++)
        if (s.view[i] == killed) return 0;
    return 1;
}
static int got_second(void) { return s.received[1] >= 1; }
static int has_agreed(void) { return s.agreed; }
static size_t survivors;
/* The closing round: every survivor's last message came, and each of this rank's sends
 * has settled (delivered, or failed because its destination left first). */
static int all_done(void) {
    return s.received[2] >= survivors - 1 && s.delivered + s.undelivered >= 2 + (survivors - 1);
}

static void send_byte(uint32_t to, uint8_t phase) {
    weft_status st = weft_send(w, to, &phase, 1, NULL);
    if (st != WEFT_OK) {
        fprintf(stderr, "rank %u: send: %s (%s)\n", s.rank, weft_strerror(st), weft_last_error());
        exit(2);
    }
}

int main(void) {
    const char *k = getenv("WEFT_RING_KILL");
    if (k && *k) killed = (uint32_t)strtoul(k, NULL, 10);

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.callback = on_event;
    cfg.callback_arg = &s;
    /* A slower heartbeat where ranks run slowly (under valgrind). */
    const char *hb = getenv("WEFT_RING_HEARTBEAT_MS");
    if (hb && *hb) cfg.heartbeat_ms = (uint32_t)strtoul(hb, NULL, 10);
    weft_status st = weft_init(&cfg, &w);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft_init: %s: %s\n", weft_strerror(st), weft_last_error());
        return 2;
    }
    s.rank = weft_rank(w);
    s.size = weft_size(w);
    setvbuf(stdout, NULL, _IOLBF, 0);

    /* The ring of every rank. */
    send_byte((s.rank + 1) % s.size, 0);
    drive_until(got_first, "message from the predecessor");
    printf("rank %u: first lap done\n", s.rank);
    if (s.rank == killed) {
        raise(SIGKILL);
    }

    /* The view without the killed rank (every rank's, when none is). */
    if (killed < s.size) drive_until(view_without_killed, "view without the killed rank");
    uint32_t live[MAX_RANKS];
    size_t n = 0, me = 0;
    for (uint32_t r = 0; r < s.size && n < MAX_RANKS; r++)
        if (r != killed) {
            if (r == s.rank) me = n;
            live[n++] = r;
        }
    survivors = n;
    printf("rank %u: view epoch %llu of %zu ranks\n", s.rank, (unsigned long long)s.epoch,
           s.n_view);

    /* The ring of the survivors. */
    send_byte(live[(me + 1) % n], 1);
    drive_until(got_second, "message in the survivors' ring");

    /* Agree on the OR of the survivors' bits, and on who failed. */
    uint64_t instance;
    weft_agree(w, 1ull << s.rank, WEFT_AGREE_OR, &instance);
    drive_until(has_agreed, "agreement");
    uint64_t expect = 0;
    for (size_t i = 0; i < n; i++) expect |= 1ull << live[i];
    int failed_ok = killed < s.size ? (s.n_failed == 1 && s.failed[0] == killed) : s.n_failed == 0;
    /* The only send that may fail is the first lap's to the killed rank. */
    int ok = s.agreed_value == expect && failed_ok && s.undelivered == s.lost_to_killed &&
             s.lost_to_killed <= 1;
    char failed[16 * MAX_RANKS] = "";
    for (size_t i = 0, at = 0; i < s.n_failed && at < sizeof failed - 16; i++)
        at += (size_t)snprintf(failed + at, sizeof failed - at, i ? ", %u" : "%u", s.failed[i]);
    printf("rank %u: agreed 0x%llx (expected 0x%llx), failed [%s], %u send(s) lost with the "
           "killed rank -> %s\n",
           s.rank, (unsigned long long)s.agreed_value, (unsigned long long)expect, failed,
           s.lost_to_killed, ok ? "ok" : "WRONG");

    /* A closing round, so that no survivor leaves while another still needs its frames. */
    for (size_t i = 0; i < n; i++)
        if (live[i] != s.rank) send_byte(live[i], 2);
    drive_until(all_done, "closing round");
    while (weft_progress(w) > 0) {
    }
    weft_finalize(w);
    return ok ? 0 : 1;
}
