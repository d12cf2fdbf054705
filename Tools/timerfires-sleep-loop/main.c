// timerfires-sleep-loop: a plain C program with known timers, for testing `timerfires` on a
// process that is not a Lull program.
//
//   timerfires-sleep-loop [--wait-signal] COUNT MILLISECONDS [nanosleep|poll|epoll|timerfd]
//
// Sleeps COUNT times for MILLISECONDS each, through the named call (nanosleep by default:
// glibc's nanosleep is clock_nanosleep), then exits. With --wait-signal it first waits for
// SIGUSR1 (no timer involved), so that a tracer can start before the first sleep; a starter
// sees it is ready to take the signal when SIGUSR1 is in SigCgt of /proc/PID/status.
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t started = 0;

static void on_start(int signal) {
    (void)signal;
    started = 1;
}

static int fail(const char *what) {
    fprintf(stderr, "timerfires-sleep-loop: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--wait-signal") == 0) {
        // Blocked first, caught next: a SIGUSR1 sent once SigCgt shows it is never lost
        // and never kills the program; sigsuspend takes it.
        sigset_t start, previous;
        sigemptyset(&start);
        sigaddset(&start, SIGUSR1);
        if (sigprocmask(SIG_BLOCK, &start, &previous) != 0) return fail("sigprocmask");
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = on_start;
        sigemptyset(&action.sa_mask);
        if (sigaction(SIGUSR1, &action, NULL) != 0) return fail("sigaction");
        sigset_t waiting = previous;
        sigdelset(&waiting, SIGUSR1);
        while (!started) sigsuspend(&waiting);
        if (sigprocmask(SIG_SETMASK, &previous, NULL) != 0) return fail("sigprocmask");
        first = 2;
    }
    if (argc - first < 2 || argc - first > 3) {
        fprintf(stderr, "usage: timerfires-sleep-loop [--wait-signal] COUNT MILLISECONDS [nanosleep|poll|epoll|timerfd]\n");
        return 2;
    }
    long count = strtol(argv[first], NULL, 10);
    long milliseconds = strtol(argv[first + 1], NULL, 10);
    const char *kind = argc - first == 3 ? argv[first + 2] : "nanosleep";
    if (count < 0 || milliseconds < 0) {
        fprintf(stderr, "timerfires-sleep-loop: COUNT and MILLISECONDS must not be negative\n");
        return 2;
    }
    struct timespec interval = { milliseconds / 1000, (milliseconds % 1000) * 1000000L };
    if (strcmp(kind, "nanosleep") == 0) {
        for (long i = 0; i < count; i++) {
            struct timespec left = interval;
            while (nanosleep(&left, &left) != 0) {
                if (errno != EINTR) return fail("nanosleep");
            }
        }
    } else if (strcmp(kind, "poll") == 0) {
        for (long i = 0; i < count; i++) {
            if (poll(NULL, 0, (int)milliseconds) < 0 && errno != EINTR) return fail("poll");
        }
    } else if (strcmp(kind, "epoll") == 0) {
        int epoll = epoll_create1(EPOLL_CLOEXEC);
        if (epoll < 0) return fail("epoll_create1");
        struct epoll_event event;
        for (long i = 0; i < count; i++) {
            if (epoll_wait(epoll, &event, 1, (int)milliseconds) < 0 && errno != EINTR) return fail("epoll_wait");
        }
        close(epoll);
    } else if (strcmp(kind, "timerfd") == 0) {
        int timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
        if (timer < 0) return fail("timerfd_create");
        struct itimerspec period = { interval, interval };
        if (timerfd_settime(timer, 0, &period, NULL) != 0) return fail("timerfd_settime");
        for (long fired = 0; fired < count;) {
            unsigned long long expirations;
            ssize_t got = read(timer, &expirations, sizeof expirations);
            if (got < 0 && errno == EINTR) continue;
            if (got != sizeof expirations) return fail("read timerfd");
            fired += (long)expirations;
        }
        close(timer);
    } else {
        fprintf(stderr, "timerfires-sleep-loop: unknown call %s (nanosleep, poll, epoll or timerfd)\n", kind);
        return 2;
    }
    return 0;
}
