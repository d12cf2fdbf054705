#define _GNU_SOURCE
#include "CLullShims.h"
#include "fault_check.h"

#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/time.h>

// The fault table behind lull_fault_arm (see CLullShims.h, "Fault injection").
//
// State model: one entry per lull_call, each two words: the errno to inject and the number
// of calls still to fail (0 disarmed, > 0 that many, -1 every call until disarmed).
// `lull_faults_armed` is 1 from the first arm until lull_fault_disarm_all: while it is 0
// (always, in production) a shim pays one relaxed load and a predicted branch. An entry is
// consumed with a compare-and-swap, so concurrent calls of the same kind never inject more
// failures than were armed. Arming and disarming are for tests, from one thread at a time
// (the suite is serial); the table is process-wide, not per thread.

int lull_faults_armed;

static struct {
    int errno_value;
    int remaining;
    int hits;
} lull_fault_table[LULL_CALL_COUNT];

void lull_fault_arm(lull_call call, int errno_value, int count) {
    if ((unsigned)call >= LULL_CALL_COUNT) return;
    __atomic_store_n(&lull_fault_table[call].errno_value, errno_value, __ATOMIC_RELAXED);
    __atomic_store_n(&lull_fault_table[call].remaining, count, __ATOMIC_RELEASE);
    __atomic_store_n(&lull_faults_armed, 1, __ATOMIC_RELEASE);
}

void lull_fault_disarm_all(void) {
    __atomic_store_n(&lull_faults_armed, 0, __ATOMIC_RELEASE);
    for (int call = 0; call < LULL_CALL_COUNT; call++) {
        __atomic_store_n(&lull_fault_table[call].remaining, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&lull_fault_table[call].hits, 0, __ATOMIC_RELAXED);
    }
}

int lull_fault_hits(lull_call call) {
    if ((unsigned)call >= LULL_CALL_COUNT) return 0;
    return __atomic_load_n(&lull_fault_table[call].hits, __ATOMIC_ACQUIRE);
}

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

int lull_event_add(struct event *event, const struct timeval *timeout) {
    int injected = lull_fault_take(LULL_CALL_EVENT_ADD);
    if (injected != 0) { errno = injected; return -1; }
    return event_add(event, timeout);
}

int lull_pthread_create(pthread_t *thread, const pthread_attr_t *attributes,
                        void *(*start)(void *), void *argument) {
    int injected = lull_fault_take(LULL_CALL_PTHREAD_CREATE);
    if (injected != 0) return injected;
    return pthread_create(thread, attributes, start, argument);
}

int lull_socket(int domain, int type, int protocol) {
    int injected = lull_fault_take(LULL_CALL_SOCKET);
    if (injected != 0) { errno = injected; return -1; }
    return socket(domain, type, protocol);
}
