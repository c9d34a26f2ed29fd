/*
 * Round trips through weft's C ABI between ranks 0 and 1 of a job: rank 0 sends `size`
 * bytes, rank 1 sends them back when its callback sees them, rank 0 times send to echo.
 * Every send is routed and acknowledged, as the endpoint's are. Rank 0 prints one JSON line
 * per size: {"api":"c","wait":...,"size":...,"iters":...,"p50_us":...,"p99_us":...}.
 *
 * WEFT_PING_SIZES (default 32), WEFT_PING_ITERS (default 5000), and WEFT_PING_WAIT:
 * "busy" calls weft_progress in a loop; "fd" drains it to 0, arms, and sleeps in poll(2) on
 * weft_get_fd for every message (the wake-up path an event loop pays).
 */
#include <weft.h>

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static weft_worker *w;
static int fd_wait;
/* Rank 0: echoes received; the tag of its closing message, and whether that settled. */
static unsigned long echoes;
static uint64_t end_tag = UINT64_MAX;
static int end_settled;
/* Rank 1: the closing message came. */
static int done;

static void on_event(const weft_event *ev, void *arg) {
    (void)arg;
    if ((ev->kind == WEFT_EV_DELIVERED || ev->kind == WEFT_EV_FAILED) && ev->tag == end_tag)
        end_settled = 1;
    if (ev->kind != WEFT_EV_RECEIVED) return;
    if (ev->len == 0) {
        done = 1; /* rank 0's end of the run */
        return;
    }
    if (weft_rank(w) == 1) {
        /* Sent from inside the callback: the call the header allows there. */
        weft_send(w, ev->rank, ev->data, ev->len, NULL);
    } else {
        echoes++;
    }
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* One step of the loop: progress, or (fd mode, nothing to do) sleep on the descriptor. */
static void step(void) {
    int n = weft_progress(w);
    if (n < 0) {
        fprintf(stderr, "progress: %s (%s)\n", weft_strerror(n), weft_last_error());
        exit(2);
    }
    if (n == 0 && fd_wait && weft_arm(w) == WEFT_OK) {
        struct pollfd p = {.fd = weft_get_fd(w), .events = POLLIN};
        poll(&p, 1, 1000);
    }
}

static int cmp(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int main(void) {
    const char *wait = getenv("WEFT_PING_WAIT");
    fd_wait = wait && strcmp(wait, "fd") == 0;
    const char *it = getenv("WEFT_PING_ITERS");
    unsigned long iters = it && *it ? strtoul(it, NULL, 10) : 5000;
    const char *sizes_env = getenv("WEFT_PING_SIZES");
    char sizes[256];
    snprintf(sizes, sizeof sizes, "%s", sizes_env && *sizes_env ? sizes_env : "32");

    weft_config cfg;
    weft_config_init(&cfg);
    cfg.callback = on_event;
    weft_status st = weft_init(&cfg, &w);
    if (st != WEFT_OK) {
        fprintf(stderr, "weft_init: %s: %s\n", weft_strerror(st), weft_last_error());
        return 2;
    }
    if (weft_rank(w) == 1) {
        while (!done) step();
        /* Rank 0 goes once it hears the closing message arrived: drain and go. */
        while (weft_progress(w) > 0) {
        }
        weft_finalize(w);
        return 0;
    }
    unsigned long warmup = iters / 10 < 10 ? 10 : iters / 10 > 1000 ? 1000 : iters / 10;
    uint64_t *rtt = malloc(sizeof(uint64_t) * iters);
    for (char *tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
        size_t size = strtoul(tok, NULL, 10);
        unsigned char *buf = calloc(size ? size : 1, 1);
        memset(buf, 0x5a, size);
        for (unsigned long i = 0; i < warmup + iters; i++) {
            unsigned long want = echoes + 1;
            uint64_t t0 = now_ns();
            weft_send(w, 1, buf, size, NULL);
            while (echoes < want) step();
            if (i >= warmup) rtt[i - warmup] = now_ns() - t0;
        }
        qsort(rtt, iters, sizeof *rtt, cmp);
        printf("{\"api\":\"c\",\"wait\":\"%s\",\"size\":%zu,\"iters\":%lu,\"p50_us\":%.3f,"
               "\"p99_us\":%.3f}\n",
               fd_wait ? "fd" : "busy", size, iters, (double)rtt[iters / 2] / 1e3,
               (double)rtt[iters * 99 / 100] / 1e3);
        fflush(stdout);
        free(buf);
    }
    /* The end: an empty message, delivered before this rank goes. */
    weft_send(w, 1, NULL, 0, &end_tag);
    while (!end_settled) step();
    free(rtt);
    weft_finalize(w);
    return 0;
}
