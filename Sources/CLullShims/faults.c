#define _GNU_SOURCE
#include "CLullShims.h"
#include "fault_check.h"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>

// The fault table's storage and the check the seam's shims make (see CLullShims.h, "Fault
// injection seam"). Arming and disarming live with the tests (Tests/CLullTestSupport): the
// library only reads and consumes entries.
//
// State model: one entry per lull_call: the errno to inject, the number of calls still to
// fail (0 disarmed, > 0 that many, -1 every call until disarmed) and the failures injected.
// `lull_faults_armed` is 1 from the first arm until the tests disarm everything: while it
// is 0 (always, in production) a shim pays one relaxed load and a predicted branch. An entry
// is consumed with a compare-and-swap, so concurrent calls of the same kind never inject
// more failures than were armed. Arming and disarming are for tests, from one thread at a
// time (the suite is serial); the table is process-wide, not per thread.

int lull_faults_armed;
lull_fault_entry lull_fault_table[LULL_CALL_COUNT];

int lull_fault_take_armed(lull_call call) {
    int remaining = __atomic_load_n(&lull_fault_table[call].remaining, __ATOMIC_ACQUIRE);
    for (;;) {
        if (remaining == 0) return 0;
        if (remaining < 0) break;
        if (__atomic_compare_exchange_n(&lull_fault_table[call].remaining, &remaining, remaining - 1, 0,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            break;
    }
    __atomic_add_fetch(&lull_fault_table[call].hits, 1, __ATOMIC_RELEASE);
    return __atomic_load_n(&lull_fault_table[call].errno_value, __ATOMIC_RELAXED);
}

// MARK: Calls Swift made directly, routed through the seam

// libevent's prototype, declared here so that this target needs no libevent headers: the
// Lull module links libevent, and every program that links these shims links Lull.
struct event;
int event_add(struct event *event, const struct timeval *timeout);

int lull_event_add(lull_call seam, struct event *event, const struct timeval *timeout) {
    int injected = lull_fault_take(seam);
    if (injected != 0) return -injected;
    // libevent returns -1; errno holds the cause when a system call (epoll_ctl) failed. Its
    // log callback (LibeventLog) keeps errno as it found it.
    errno = 0;
    if (event_add(event, timeout) == 0) return 0;
    return errno != 0 ? -errno : -EINVAL;
}

int lull_pthread_create(pthread_t *thread, const pthread_attr_t *attributes,
                        void *(*start)(void *), void *argument) {
    int injected = lull_fault_take(LULL_CALL_PTHREAD_CREATE);
    if (injected != 0) return -injected;
    return -pthread_create(thread, attributes, start, argument);
}

int lull_socket(int domain, int type, int protocol) {
    int injected = lull_fault_take(LULL_CALL_SOCKET);
    if (injected != 0) return -injected;
    int fd = socket(domain, type, protocol);
    return fd >= 0 ? fd : -errno;
}
