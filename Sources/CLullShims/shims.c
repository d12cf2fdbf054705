#define _GNU_SOURCE
#include "CLullShims.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LULL_IOPRIO_CLASS_SHIFT 13
#define LULL_IOPRIO_CLASS_IDLE 3
#define LULL_IOPRIO_WHO_PROCESS 1

int32_t lull_gettid(void) { return (int32_t)syscall(SYS_gettid); }

int lull_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0) == 0 ? 0 : errno;
}

int lull_set_thread_nice(int32_t tid, int nice) {
    return setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : errno;
}

int lull_get_thread_nice(int32_t tid, int *nice) {
    errno = 0;
    int value = getpriority(PRIO_PROCESS, (id_t)tid);
    if (value == -1 && errno != 0) return errno;
    *nice = value;
    return 0;
}

int lull_get_rlimit_nice(uint64_t *limit) {
    struct rlimit value;
    if (getrlimit(RLIMIT_NICE, &value) != 0) return errno;
    *limit = value.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)value.rlim_cur;
    return 0;
}

int lull_set_thread_io_idle(int32_t tid) {
    int value = LULL_IOPRIO_CLASS_IDLE << LULL_IOPRIO_CLASS_SHIFT;
    return syscall(SYS_ioprio_set, LULL_IOPRIO_WHO_PROCESS, (int)tid, value) == 0 ? 0 : errno;
}

int lull_get_thread_ioprio(int32_t tid, int *value) {
    long result = syscall(SYS_ioprio_get, LULL_IOPRIO_WHO_PROCESS, (int)tid);
    if (result < 0) return errno;
    *value = (int)result;
    return 0;
}

int lull_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0 ? 0 : errno;
}

int lull_futex_wait(uint32_t *address, uint32_t expected, const struct timespec *deadline) {
    long result = syscall(SYS_futex, address, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected,
                          deadline, NULL, FUTEX_BITSET_MATCH_ANY);
    return result == 0 ? 0 : errno;
}

int lull_futex_wake(uint32_t *address, int count) {
    long result = syscall(SYS_futex, address, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, count, NULL, NULL, 0);
    return result >= 0 ? 0 : errno;
}

uint32_t lull_atomic_load(uint32_t *address) { return __atomic_load_n(address, __ATOMIC_ACQUIRE); }
void lull_atomic_store(uint32_t *address, uint32_t value) { __atomic_store_n(address, value, __ATOMIC_RELEASE); }
uint32_t lull_atomic_exchange(uint32_t *address, uint32_t value) {
    return __atomic_exchange_n(address, value, __ATOMIC_ACQ_REL);
}

enum { PARK_EMPTY = 0, PARK_NOTIFIED = 1, PARK_PARKED = 2 };

int lull_park(uint32_t *word, const struct timespec *deadline) {
    uint32_t expected = PARK_NOTIFIED;
    if (__atomic_compare_exchange_n(word, &expected, PARK_EMPTY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return 0;
    expected = PARK_EMPTY;
    if (!__atomic_compare_exchange_n(word, &expected, PARK_PARKED, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        // It became NOTIFIED in between.
        __atomic_store_n(word, PARK_EMPTY, __ATOMIC_RELEASE);
        return 0;
    }
    for (;;) {
        int result = lull_futex_wait(word, PARK_PARKED, deadline);
        expected = PARK_NOTIFIED;
        if (__atomic_compare_exchange_n(word, &expected, PARK_EMPTY, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return 0;
        if (result == ETIMEDOUT) {
            uint32_t previous = __atomic_exchange_n(word, PARK_EMPTY, __ATOMIC_ACQUIRE);
            return previous == PARK_NOTIFIED ? 0 : ETIMEDOUT;
        }
        // EINTR, EAGAIN or a spurious wake-up: the word is still PARKED, sleep again.
    }
}

void lull_unpark(uint32_t *word) {
    if (__atomic_exchange_n(word, PARK_NOTIFIED, __ATOMIC_RELEASE) == PARK_PARKED)
        lull_futex_wake(word, 1);
}
