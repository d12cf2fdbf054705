#define _GNU_SOURCE
#include "libevent_floor.h"

#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

struct ping_pong {
    int one[2];
    int two[2];
    long trips;
    long wanted;
    int error;
    struct event_base *base;
};

static double now_seconds(void) {
    struct timespec spec;
    clock_gettime(CLOCK_MONOTONIC, &spec);
    return (double)spec.tv_sec + (double)spec.tv_nsec / 1e9;
}

/// A: pipe one -> pipe two.
static void on_a(evutil_socket_t descriptor, short what, void *argument) {
    (void)what;
    struct ping_pong *game = argument;
    unsigned char byte;
    if (read(descriptor, &byte, 1) != 1) return;
    if (write(game->two[1], &byte, 1) != 1) {
        game->error = errno;
        event_base_loopbreak(game->base);
    }
}

/// B: pipe two -> pipe one, counting a round trip.
static void on_b(evutil_socket_t descriptor, short what, void *argument) {
    (void)what;
    struct ping_pong *game = argument;
    unsigned char byte;
    if (read(descriptor, &byte, 1) != 1) return;
    game->trips += 1;
    if (game->trips == game->wanted || write(game->one[1], &byte, 1) != 1) {
        if (game->trips != game->wanted) game->error = errno;
        event_base_loopbreak(game->base);
    }
}

double lull_bench_libevent_ping_pong(long trips) {
    struct ping_pong game = { .one = { -1, -1 }, .two = { -1, -1 }, .wanted = trips };
    double result = -EINVAL;
    struct event *a = NULL;
    struct event *b = NULL;
    if (pipe2(game.one, O_NONBLOCK | O_CLOEXEC) != 0 || pipe2(game.two, O_NONBLOCK | O_CLOEXEC) != 0) {
        result = -errno;
        goto done;
    }
    game.base = event_base_new();
    if (game.base == NULL) { result = -ENOMEM; goto done; }
    a = event_new(game.base, game.one[0], EV_READ | EV_PERSIST, on_a, &game);
    b = event_new(game.base, game.two[0], EV_READ | EV_PERSIST, on_b, &game);
    if (a == NULL || b == NULL || event_add(a, NULL) != 0 || event_add(b, NULL) != 0) {
        result = -ENOMEM;
        goto done;
    }
    unsigned char first = 1;
    double start = now_seconds();
    if (write(game.one[1], &first, 1) != 1) { result = -errno; goto done; }
    if (event_base_dispatch(game.base) < 0) { result = -EIO; goto done; }
    result = game.error != 0 ? -game.error : now_seconds() - start;
done:
    if (a != NULL) event_free(a);
    if (b != NULL) event_free(b);
    if (game.base != NULL) event_base_free(game.base);
    for (int index = 0; index < 2; index++) {
        if (game.one[index] >= 0) close(game.one[index]);
        if (game.two[index] >= 0) close(game.two[index]);
    }
    return result;
}
