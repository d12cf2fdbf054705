#define _GNU_SOURCE
#include "CLullShims.h"
#include "fault_check.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <linux/sockios.h>
#include <linux/capability.h>
#include <sched.h>

#define LULL_IOPRIO_CLASS_SHIFT 13
#define LULL_IOPRIO_CLASS_IDLE 3
#define LULL_IOPRIO_WHO_PROCESS 1

int32_t lull_gettid(void) { return (int32_t)syscall(SYS_gettid); }

static __thread const void *lull_cached_site_file;
static __thread uint32_t lull_cached_site_line;
static __thread uint32_t lull_cached_site_number;

uint32_t lull_site_cache_get(const void *file, uint32_t line) {
    return (file == lull_cached_site_file && line == lull_cached_site_line) ? lull_cached_site_number : 0;
}

void lull_site_cache_put(const void *file, uint32_t line, uint32_t number) {
    lull_cached_site_file = file;
    lull_cached_site_line = line;
    lull_cached_site_number = number;
}

const char *lull_errno_name(int code) { return strerrorname_np(code); }

int lull_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0, 0, 0) == 0 ? 0 : -errno;
}

int lull_set_thread_nice(int32_t tid, int nice) {
    return setpriority(PRIO_PROCESS, (id_t)tid, nice) == 0 ? 0 : -errno;
}

int lull_get_thread_nice(int32_t tid, int *nice) {
    // -1 is a valid nice value: only errno tells a failure from it.
    errno = 0;
    int value = getpriority(PRIO_PROCESS, (id_t)tid);
    if (value == -1 && errno != 0) return -errno;
    *nice = value;
    return 0;
}

int lull_get_rlimit_nice(uint64_t *limit) {
    struct rlimit value;
    if (getrlimit(RLIMIT_NICE, &value) != 0) return -errno;
    *limit = value.rlim_cur == RLIM_INFINITY ? UINT64_MAX : (uint64_t)value.rlim_cur;
    return 0;
}

int lull_set_thread_io_idle(int32_t tid) {
    int value = LULL_IOPRIO_CLASS_IDLE << LULL_IOPRIO_CLASS_SHIFT;
    return syscall(SYS_ioprio_set, LULL_IOPRIO_WHO_PROCESS, (int)tid, value) == 0 ? 0 : -errno;
}

int lull_set_thread_sched_idle(int32_t tid, int idle) {
    struct sched_param parameters = { .sched_priority = 0 };
    return sched_setscheduler((pid_t)tid, idle ? SCHED_IDLE : SCHED_OTHER, &parameters) == 0 ? 0 : -errno;
}

int lull_get_thread_policy(int32_t tid) {
    int policy = sched_getscheduler((pid_t)tid);
    return policy >= 0 ? (policy & ~SCHED_RESET_ON_FORK) : -errno;
}

/// struct sched_attr as of Linux 5.3 (SCHED_ATTR_SIZE_VER1, 56 bytes), under a name of its
/// own: newer C libraries declare the structure too.
struct lull_sched_attr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime;
    uint64_t sched_deadline;
    uint64_t sched_period;
    uint32_t sched_util_min;
    uint32_t sched_util_max;
};

#define LULL_SCHED_FLAG_KEEP_POLICY 0x08
#define LULL_SCHED_FLAG_KEEP_PARAMS 0x10
#define LULL_SCHED_FLAG_UTIL_CLAMP_MIN 0x20
#define LULL_SCHED_FLAG_UTIL_CLAMP_MAX 0x40

int lull_set_thread_util_clamp(int32_t tid, uint32_t util_min, uint32_t util_max) {
#ifdef SYS_sched_setattr
    struct lull_sched_attr attributes;
    memset(&attributes, 0, sizeof attributes);
    attributes.size = sizeof attributes;
    attributes.sched_flags = LULL_SCHED_FLAG_KEEP_POLICY | LULL_SCHED_FLAG_KEEP_PARAMS
        | LULL_SCHED_FLAG_UTIL_CLAMP_MIN | LULL_SCHED_FLAG_UTIL_CLAMP_MAX;
    attributes.sched_util_min = util_min;
    attributes.sched_util_max = util_max;
    return syscall(SYS_sched_setattr, (pid_t)tid, &attributes, 0u) == 0 ? 0 : -errno;
#else
    (void)tid; (void)util_min; (void)util_max;
    return -ENOSYS;
#endif
}

int lull_get_thread_util_clamp(int32_t tid, uint32_t *util_min, uint32_t *util_max) {
#ifdef SYS_sched_getattr
    struct lull_sched_attr attributes;
    memset(&attributes, 0, sizeof attributes);
    if (syscall(SYS_sched_getattr, (pid_t)tid, &attributes, (unsigned)sizeof attributes, 0u) != 0) return -errno;
    // An older kernel fills fewer bytes and says so in size: no clamps to read.
    if (attributes.size < sizeof attributes) return -EINVAL;
    *util_min = attributes.sched_util_min;
    *util_max = attributes.sched_util_max;
    return 0;
#else
    (void)tid; (void)util_min; (void)util_max;
    return -ENOSYS;
#endif
}

int lull_has_cap_sys_nice(void) {
    struct __user_cap_header_struct header = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &header, data) != 0) return -errno;
    return (data[CAP_SYS_NICE / 32].effective >> (CAP_SYS_NICE % 32)) & 1;
}

// The Swift concurrency runtime's own entry point (exported by libswift_Concurrency, which
// every Swift program links), declared with the Swift calling convention it has.
extern void *swift_task_getCurrent(void) __attribute__((swiftcall));

int lull_in_swift_task(void) {
    return swift_task_getCurrent() != 0;
}

int64_t lull_thread_cpu_nanoseconds(int32_t tid) {
    // The per-thread CPU clock of `tid` (glibc's pthread_getcpuclockid computes the same
    // id: CPUCLOCK_SCHED with the per-thread bit).
    clockid_t clock = (clockid_t)((~(uint32_t)tid) << 3) | 6;
    struct timespec now;
    if (clock_gettime(clock, &now) != 0) return -1;
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

uintptr_t lull_current_swift_task(void) {
    return (uintptr_t)swift_task_getCurrent();
}

int lull_set_timer_slack(unsigned long nanoseconds) {
    return prctl(PR_SET_TIMERSLACK, nanoseconds, 0, 0, 0) == 0 ? 0 : -errno;
}

long lull_get_timer_slack(void) {
    int result = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    return result >= 0 ? result : -errno;
}

/// Waits while *address == expected, until woken or until the absolute CLOCK_MONOTONIC
/// deadline (NULL: no deadline): 0, -EAGAIN (the word had changed), -ETIMEDOUT or -EINTR.
/// EINTR is the caller's to handle: a futex wait is a step of a loop that re-reads the word.
static int lull_futex_wait(uint32_t *address, uint32_t expected, const struct timespec *deadline) {
    long result = syscall(SYS_futex, address, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, expected,
                          deadline, NULL, FUTEX_BITSET_MATCH_ANY);
    return result == 0 ? 0 : -errno;
}

/// Wakes up to `count` threads waiting on address: 0 or -errno.
static int lull_futex_wake(uint32_t *address, int count) {
    long result = syscall(SYS_futex, address, FUTEX_WAKE | FUTEX_PRIVATE_FLAG, count, NULL, NULL, 0);
    return result >= 0 ? 0 : -errno;
}


enum { PARK_EMPTY = 0, PARK_NOTIFIED = 1, PARK_PARKED = 2 };

static int lull_park_inner(uint32_t *word, const struct timespec *deadline);

int lull_park(uint32_t *word, const struct timespec *deadline) {
    int result = lull_park_inner(word, deadline);
    if (result == 0) lull_tsan_acquire(word);
    return result;
}

static int lull_park_inner(uint32_t *word, const struct timespec *deadline) {
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
        if (result == -ETIMEDOUT) {
            uint32_t previous = __atomic_exchange_n(word, PARK_EMPTY, __ATOMIC_ACQUIRE);
            return previous == PARK_NOTIFIED ? 0 : -ETIMEDOUT;
        }
        // -EINTR, -EAGAIN or a spurious wake-up: the word is still PARKED, sleep again.
    }
}

void lull_unpark(uint32_t *word) {
    lull_tsan_release(word);
    if (__atomic_exchange_n(word, PARK_NOTIFIED, __ATOMIC_RELEASE) == PARK_PARKED)
        lull_futex_wake(word, 1);
}

// MARK: Signals

static uint64_t lull_signal_counts[NSIG];
static struct sigaction lull_signal_previous[NSIG];
/// 1 while the forwarder is (meant to be) the disposition of the signal: between a
/// lull_signal_watch that installed it and the lull_signal_unwatch that put the previous
/// disposition back. Written by the hub under its lock; read in a forked child.
///
/// It also publishes `lull_signal_previous[signo]` to the forwarder, which may run on any
/// thread: lull_signal_watch writes the previous disposition, stores 1 here with release,
/// and only then installs the forwarder; the forwarder loads this word with acquire before
/// it reads the previous disposition. Every access is a lock-free __atomic operation, so it
/// is async-signal-safe.
static sig_atomic_t lull_signal_forwarding[NSIG];
/// The hub's eventfd (one for the process), or -1: __atomic loads and stores only.
static int lull_signal_notify_fd = -1;

static int lull_signal_default_is_ignore(int signo) {
    return signo == SIGCHLD || signo == SIGURG || signo == SIGWINCH || signo == SIGCONT;
}

static void lull_signal_forwarder(int signo, siginfo_t *info, void *context) {
    int saved_errno = errno;
    __atomic_add_fetch(&lull_signal_counts[signo], 1, __ATOMIC_RELAXED);
    int fd = __atomic_load_n(&lull_signal_notify_fd, __ATOMIC_RELAXED);
    if (fd >= 0) {
        uint64_t one = 1;
        ssize_t ignored = write(fd, &one, sizeof one);
        (void)ignored;
    }
    (void)__atomic_load_n(&lull_signal_forwarding[signo], __ATOMIC_ACQUIRE);
    struct sigaction *previous = &lull_signal_previous[signo];
    if (previous->sa_flags & SA_SIGINFO) {
        if (previous->sa_sigaction) previous->sa_sigaction(signo, info, context);
    } else if (previous->sa_handler != SIG_IGN && previous->sa_handler != SIG_DFL && previous->sa_handler) {
        previous->sa_handler(signo);
    }
    errno = saved_errno;
}

static int lull_signal_is_forwarder(const struct sigaction *action) {
    return (action->sa_flags & SA_SIGINFO) && action->sa_sigaction == lull_signal_forwarder;
}

int lull_signal_watch(int signo, int notify_fd) {
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP) return -EINVAL;
    __atomic_store_n(&lull_signal_notify_fd, notify_fd, __ATOMIC_RELAXED);
    struct sigaction current;
    if (sigaction(signo, NULL, &current) != 0) return -errno;
    // Still ours: nothing to do. (The program may have replaced the forwarder since; then
    // what it set is the disposition to forward to now.)
    if (lull_signal_is_forwarder(&current)) {
        __atomic_store_n(&lull_signal_forwarding[signo], 1, __ATOMIC_RELEASE);
        return LULL_SIGNAL_FORWARDED;
    }
    int custom = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != NULL
                 : (current.sa_handler != SIG_IGN && current.sa_handler != SIG_DFL);
    int ignored = !custom && !(current.sa_flags & SA_SIGINFO) &&
                  (current.sa_handler == SIG_IGN || lull_signal_default_is_ignore(signo));
    if (!custom && !ignored) return LULL_SIGNAL_DEFAULT_ACTION;
    lull_signal_previous[signo] = current;
    __atomic_store_n(&lull_signal_forwarding[signo], 1, __ATOMIC_RELEASE);
    struct sigaction forward;
    memset(&forward, 0, sizeof forward);
    forward.sa_sigaction = lull_signal_forwarder;
    forward.sa_flags = SA_SIGINFO | SA_RESTART | (current.sa_flags & SA_NOCLDSTOP);
    sigemptyset(&forward.sa_mask);
    if (sigaction(signo, &forward, NULL) != 0) {
        int failure = errno;
        __atomic_store_n(&lull_signal_forwarding[signo], 0, __ATOMIC_RELAXED);
        return -failure;
    }
    return LULL_SIGNAL_FORWARDED;
}

int lull_signal_unwatch(int signo) {
    if (signo <= 0 || signo >= NSIG || !__atomic_load_n(&lull_signal_forwarding[signo], __ATOMIC_RELAXED)) return 0;
    struct sigaction current;
    if (sigaction(signo, NULL, &current) != 0) return -errno;
    // The program replaced the forwarder since: its disposition stays.
    if (lull_signal_is_forwarder(&current) && sigaction(signo, &lull_signal_previous[signo], NULL) != 0)
        return -errno;
    __atomic_store_n(&lull_signal_forwarding[signo], 0, __ATOMIC_RELAXED);
    return 1;
}

uint64_t lull_signal_take(int signo) {
    if (signo <= 0 || signo >= NSIG) return 0;
    return __atomic_exchange_n(&lull_signal_counts[signo], 0, __ATOMIC_ACQ_REL);
}

int lull_signal_realtime_min(void) { return SIGRTMIN; }
int lull_signal_realtime_max(void) { return SIGRTMAX; }

// MARK: fork

volatile sig_atomic_t lull_forked_child_flag = 0;

/// In the child of a fork (single-threaded, async-signal-safe calls only): marks the
/// process, and puts back the program's disposition of every signal Lull forwards — the
/// child's forwarder would count into the parent's eventfd, and a child that execs must
/// inherit SIG_IGN, not the default a handler becomes at exec.
static void lull_fork_child(void) {
    lull_forked_child_flag = 1;
    for (int signo = 1; signo < NSIG; signo++) {
        if (!__atomic_load_n(&lull_signal_forwarding[signo], __ATOMIC_RELAXED)) continue;
        __atomic_store_n(&lull_signal_forwarding[signo], 0, __ATOMIC_RELAXED);
        struct sigaction current;
        if (sigaction(signo, NULL, &current) == 0 && lull_signal_is_forwarder(&current))
            sigaction(signo, &lull_signal_previous[signo], NULL);
    }
}

static pthread_once_t lull_fork_guard_once = PTHREAD_ONCE_INIT;

static void lull_fork_guard_register(void) {
    (void)pthread_atfork(NULL, NULL, lull_fork_child);
}

void lull_fork_guard_install(void) { (void)pthread_once(&lull_fork_guard_once, lull_fork_guard_register); }


// MARK: Descriptors

int lull_pidfd_open(int32_t pid) {
    int injected = lull_fault_take(LULL_CALL_PIDFD_OPEN);
    if (injected != 0) return -injected;
    long fd = syscall(SYS_pidfd_open, (pid_t)pid, 0);
    return fd < 0 ? -errno : (int)fd;
}

int lull_accept_nonblocking(int listener) {
    int fd;
    do {
        fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : fd;
}

int lull_eventfd(void) {
    int injected = lull_fault_take(LULL_CALL_EVENTFD);
    if (injected != 0) return -injected;
    int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

void lull_eventfd_drain(int fd) {
    uint64_t value;
    for (;;) {
        int injected = lull_fault_take(LULL_CALL_EVENTFD_READ);
        ssize_t result = injected != 0 ? (errno = injected, -1) : read(fd, &value, sizeof value);
        if (result < 0 && errno == EINTR) continue;
        if (result != sizeof value) return;
    }
}

long lull_bytes_readable(int fd) {
    int count = 0;
    if (ioctl(fd, FIONREAD, &count) != 0) return -errno;
    return count;
}

long lull_write_space(int fd) {
    struct stat info;
    if (fstat(fd, &info) != 0) return -errno;
    if (S_ISSOCK(info.st_mode)) {
        int buffer = 0, queued = 0;
        socklen_t length = sizeof buffer;
        if (getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, &length) != 0) return 1;
        if (ioctl(fd, SIOCOUTQ, &queued) != 0) queued = 0;
        long space = (long)buffer - queued;
        return space > 0 ? space : 1;
    }
    if (S_ISFIFO(info.st_mode)) {
        int size = fcntl(fd, F_GETPIPE_SZ);
        int queued = 0;
        if (size <= 0) return 1;
        if (ioctl(fd, FIONREAD, &queued) != 0) queued = 0;
        long space = (long)size - queued;
        return space > 0 ? space : 1;
    }
    return 1;
}

int lull_poll_now(int fd, short events) {
    struct pollfd entry = { .fd = fd, .events = events, .revents = 0 };
    int result;
    do {
        result = poll(&entry, 1, 0);
    } while (result < 0 && errno == EINTR);
    if (result < 0) return -errno;
    return entry.revents;
}

int lull_fd_identity(int fd, uint64_t *device, uint64_t *inode, int *is_regular) {
    struct stat info;
    if (fstat(fd, &info) != 0) return -errno;
    *device = (uint64_t)info.st_dev;
    *inode = (uint64_t)info.st_ino;
    *is_regular = S_ISREG(info.st_mode) ? 1 : 0;
    return 0;
}

long long lull_file_bytes_after_offset(int fd) {
    struct stat info;
    if (fstat(fd, &info) != 0) return -errno;
    off_t offset = lseek(fd, 0, SEEK_CUR);
    if (offset < 0) return -errno;
    return info.st_size > offset ? (long long)(info.st_size - offset) : 0;
}

// MARK: Locks

#if defined(__has_feature)
#  if __has_feature(thread_sanitizer)
#    define LULL_TSAN 1
#  endif
#endif
#if defined(__SANITIZE_THREAD__)
#  define LULL_TSAN 1
#endif

#ifdef LULL_TSAN
void __tsan_acquire(void *address);
void __tsan_release(void *address);
void lull_tsan_acquire(const void *address) { __tsan_acquire((void *)address); }
void lull_tsan_release(const void *address) { __tsan_release((void *)address); }
#else
void lull_tsan_acquire(const void *address) { (void)address; }
void lull_tsan_release(const void *address) { (void)address; }
#endif

static void lull_lock_slow(uint32_t *word);

void lull_lock(uint32_t *word) {
    uint32_t expected = 0;
    if (!__builtin_expect(__atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED), 1))
        lull_lock_slow(word);
    lull_tsan_acquire(word);
}

void lull_unlock(uint32_t *word) {
    lull_tsan_release(word);
    if (__atomic_exchange_n(word, 0, __ATOMIC_RELEASE) != 1)
        lull_futex_wake(word, 1);
}

static void lull_lock_slow(uint32_t *word) {
    for (int spin = 0; spin < 200; spin++) {
        uint32_t expected = 0;
        if (__atomic_load_n(word, __ATOMIC_RELAXED) == 0 &&
            __atomic_compare_exchange_n(word, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
    // Mark the lock contended (2) and sleep until the holder hands it over.
    while (__atomic_exchange_n(word, 2, __ATOMIC_ACQUIRE) != 0) {
        lull_futex_wait(word, 2, NULL);
    }
}


// MARK: Clock changes

static int lull_clock_watch_arm(int fd) {
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now) != 0) return -errno;
    struct itimerspec spec = { .it_interval = {0, 0}, .it_value = { .tv_sec = now.tv_sec + 10L * 365 * 86400, .tv_nsec = 0 } };
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME | TFD_TIMER_CANCEL_ON_SET, &spec, NULL) != 0) return -errno;
    return 0;
}

int lull_clock_watch_create(void) {
    int injected = lull_fault_take(LULL_CALL_TIMERFD_CREATE);
    if (injected != 0) return -injected;
    int fd = timerfd_create(CLOCK_REALTIME, TFD_NONBLOCK | TFD_CLOEXEC);
    if (fd < 0) return -errno;
    int armed = lull_clock_watch_arm(fd);
    if (armed != 0) { close(fd); return armed; }
    return fd;
}

int lull_clock_watch_check(int fd) {
    uint64_t expirations;
    ssize_t result;
    do {
        result = read(fd, &expirations, sizeof expirations);
    } while (result < 0 && errno == EINTR);
    if (result < 0 && errno == ECANCELED) {
        int armed = lull_clock_watch_arm(fd);
        return armed != 0 ? armed : 1;
    }
    if (result < 0 && errno != EAGAIN) return -errno;
    return 0;
}

// MARK: The reactor's precise timer

int lull_timerfd_create(void) {
    int injected = lull_fault_take(LULL_CALL_TIMERFD_CREATE);
    if (injected != 0) return -injected;
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int lull_timerfd_arm(int fd, uint64_t deadline) {
    int injected = lull_fault_take(LULL_CALL_TIMERFD_SETTIME);
    if (injected != 0) return -injected;
    if (deadline == 0) deadline = 1;
    struct itimerspec value = {
        .it_interval = {0, 0},
        .it_value = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)},
    };
    return timerfd_settime(fd, TFD_TIMER_ABSTIME, &value, NULL) == 0 ? 0 : -errno;
}

int lull_timerfd_disarm(int fd) {
    int injected = lull_fault_take(LULL_CALL_TIMERFD_SETTIME);
    if (injected != 0) return -injected;
    struct itimerspec value = {{0, 0}, {0, 0}};
    return timerfd_settime(fd, 0, &value, NULL) == 0 ? 0 : -errno;
}

int lull_watch_alarm_create(void) {
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int lull_watch_alarm_set(int fd, uint64_t delay) {
    struct itimerspec value = {
        .it_interval = {0, 0},
        .it_value = {(time_t)(delay / 1000000000u), (long)(delay % 1000000000u)},
    };
    return timerfd_settime(fd, 0, &value, NULL) == 0 ? 0 : -errno;
}

int lull_watch_alarm_wait(int fd) {
    uint64_t expirations = 0;
    return read(fd, &expirations, sizeof expirations) == (ssize_t)sizeof expirations ? 0 : -errno;
}

// MARK: File-system objects (inotify)

#include <dirent.h>
#include <stdlib.h>
#include <sys/inotify.h>

int lull_inotify_init(void) {
    int injected = lull_fault_take(LULL_CALL_INOTIFY_INIT);
    if (injected != 0) return -injected;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    return fd >= 0 ? fd : -errno;
}

int lull_inotify_add_watch(int fd, const char *path, uint32_t mask) {
    int injected = lull_fault_take(LULL_CALL_INOTIFY_ADD_WATCH);
    if (injected != 0) return -injected;
    int wd = inotify_add_watch(fd, path, mask);
    return wd >= 0 ? wd : -errno;
}

int lull_inotify_rm_watch(int fd, int wd) {
    return inotify_rm_watch(fd, wd) == 0 ? 0 : -errno;
}

long lull_inotify_read(int fd, void *buffer, unsigned long size) {
    for (;;) {
        int injected = lull_fault_take(LULL_CALL_INOTIFY_READ);
        ssize_t count = injected != 0 ? (errno = injected, -1) : read(fd, buffer, size);
        if (count >= 0) return (long)count;
        if (errno != EINTR) return -errno;
    }
}

int lull_open_object(const char *path, int follow) {
    int fd;
    do {
        fd = open(path, O_PATH | O_CLOEXEC | (follow ? 0 : O_NOFOLLOW));
    } while (fd < 0 && errno == EINTR);
    return fd >= 0 ? fd : -errno;
}

int lull_open_parent_directory(int fd) {
    int parent;
    do {
        parent = openat(fd, "..", O_PATH | O_CLOEXEC | O_DIRECTORY);
    } while (parent < 0 && errno == EINTR);
    return parent >= 0 ? parent : -errno;
}

int lull_open_read_only(const char *path, int nonblocking) {
    int fd;
    do {
        fd = open(path, O_RDONLY | O_CLOEXEC | (nonblocking ? O_NONBLOCK : 0));
    } while (fd < 0 && errno == EINTR);
    return fd >= 0 ? fd : -errno;
}

static int lull_fill_status(int dirfd, const char *path, int flags, lull_object_status *status) {
    struct statx info;
    memset(&info, 0, sizeof info);
    if (statx(dirfd, path, flags, STATX_BASIC_STATS | STATX_MNT_ID, &info) != 0) {
        if (errno != ENOSYS) return -errno;
        // Kernels before statx: fstatat, without the mount id.
        struct stat plain;
        if (fstatat(dirfd, path, &plain, flags) != 0) return -errno;
        status->device = (uint64_t)plain.st_dev;
        status->inode = (uint64_t)plain.st_ino;
        status->link_count = (uint64_t)plain.st_nlink;
        status->size = (int64_t)plain.st_size;
        status->mount_id = 0;
        status->mode = (uint32_t)plain.st_mode;
        status->owner = (uint32_t)plain.st_uid;
        status->group = (uint32_t)plain.st_gid;
        status->is_directory = S_ISDIR(plain.st_mode) ? 1 : 0;
        status->is_symbolic_link = S_ISLNK(plain.st_mode) ? 1 : 0;
        return 0;
    }
    status->device = ((uint64_t)info.stx_dev_major << 32) | info.stx_dev_minor;
    status->inode = info.stx_ino;
    status->link_count = info.stx_nlink;
    status->size = (int64_t)info.stx_size;
    status->mount_id = (info.stx_mask & STATX_MNT_ID) ? info.stx_mnt_id : 0;
    status->mode = info.stx_mode;
    status->owner = info.stx_uid;
    status->group = info.stx_gid;
    status->is_directory = S_ISDIR(info.stx_mode) ? 1 : 0;
    status->is_symbolic_link = S_ISLNK(info.stx_mode) ? 1 : 0;
    return 0;
}

int lull_object_status_of(int fd, lull_object_status *status) {
    return lull_fill_status(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, status);
}

int lull_object_status_at(int dirfd, const char *path, lull_object_status *status) {
    return lull_fill_status(dirfd, path, AT_SYMLINK_NOFOLLOW, status);
}

int lull_fd_check(int fd) {
    return fcntl(fd, F_GETFD) >= 0 ? 0 : -errno;
}

long long lull_read_proc_integer(const char *path) {
    int fd = lull_open_read_only(path, 0);
    if (fd < 0) return fd;
    char text[64];
    ssize_t count;
    do {
        count = read(fd, text, sizeof text - 1);
    } while (count < 0 && errno == EINTR);
    int failure = count < 0 ? errno : EINVAL;
    close(fd);
    if (count <= 0) return -failure;
    text[count] = 0;
    char *end = NULL;
    long long value = strtoll(text, &end, 10);
    return end == text || value < 0 ? -EINVAL : value;
}

int lull_read_small_file(const char *path, char **contents, unsigned long *length) {
    *contents = NULL;
    int fd = lull_open_read_only(path, 0);
    if (fd < 0) return fd;
    size_t capacity = 8192, used = 0;
    char *buffer = malloc(capacity);
    if (buffer == NULL) { close(fd); return -ENOMEM; }
    for (;;) {
        if (used == capacity) {
            char *larger = realloc(buffer, capacity * 2);
            if (larger == NULL) { free(buffer); close(fd); return -ENOMEM; }
            buffer = larger;
            capacity *= 2;
        }
        ssize_t count = read(fd, buffer + used, capacity - used);
        if (count < 0) {
            if (errno == EINTR) continue;
            int failure = errno;
            free(buffer);
            close(fd);
            return -failure;
        }
        if (count == 0) break;
        used += (size_t)count;
    }
    close(fd);
    *contents = buffer;
    *length = used;
    return 0;
}

void lull_free(void *pointer) { free(pointer); }

int lull_open_directory(int dirfd, const char *path) {
    int fd;
    do {
        fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    } while (fd < 0 && errno == EINTR);
    return fd >= 0 ? fd : -errno;
}

long lull_read_directory_entries(int fd, void *buffer, unsigned long size) {
    for (;;) {
        ssize_t count = getdents64(fd, buffer, size);
        if (count >= 0) return (long)count;
        if (errno != EINTR) return -errno;
    }
}

const char *lull_next_directory_entry(const void *buffer, long length, long *offset, int *is_directory) {
    while (*offset < length) {
        const struct dirent64 *entry = (const struct dirent64 *)((const char *)buffer + *offset);
        *offset += entry->d_reclen;
        const char *name = entry->d_name;
        if (name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) continue;
        *is_directory = entry->d_type == DT_DIR ? 1 : (entry->d_type == DT_UNKNOWN ? -1 : 0);
        return name;
    }
    return NULL;
}

// MARK: Diagnostics control socket (accepting: lull_accept_nonblocking, above)

int lull_peer_uid(int fd, uint32_t *uid) {
    struct ucred credentials;
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) return -errno;
    *uid = credentials.uid;
    return 0;
}

// MARK: Open-file witness

#include <sys/epoll.h>

int lull_witness_create(void) {
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

int lull_witness_enroll(int witness, int fd) {
    struct epoll_event event = { .events = 0, .data = { .fd = fd } };
    return epoll_ctl(witness, EPOLL_CTL_ADD, fd, &event) == 0 ? 0 : -errno;
}

int lull_witness_withdraw(int witness, int fd) {
    struct epoll_event event = { 0 };
    return epoll_ctl(witness, EPOLL_CTL_DEL, fd, &event) == 0 ? 0 : -errno;
}

/* Dispatch's main queue, reached through the libdispatch that the Swift concurrency runtime
 * loads on Linux (its platform main executor is Dispatch's main queue): looked up at run
 * time, so that Lull neither links libdispatch nor needs its headers. */
#include <dlfcn.h>

typedef void (*lull_dispatch_async_f_t)(void *queue, void *context, void (*work)(void *));
typedef const char *(*lull_dispatch_queue_get_label_t)(void *queue);
typedef int (*lull_dispatch_main_queue_handle_t)(void);
typedef void (*lull_dispatch_main_queue_callback_t)(void *message);

static pthread_once_t lull_dispatch_once = PTHREAD_ONCE_INIT;
static void *lull_dispatch_main_q;
static lull_dispatch_async_f_t lull_dispatch_async_f;
static lull_dispatch_queue_get_label_t lull_dispatch_queue_get_label;
static lull_dispatch_main_queue_handle_t lull_dispatch_main_queue_handle_4cf;
static lull_dispatch_main_queue_callback_t lull_dispatch_main_queue_callback_4cf;

static void lull_dispatch_resolve(void) {
    void *queue = dlsym(RTLD_DEFAULT, "_dispatch_main_q");
    void *async = dlsym(RTLD_DEFAULT, "dispatch_async_f");
    void *label = dlsym(RTLD_DEFAULT, "dispatch_queue_get_label");
    if (queue == NULL || async == NULL || label == NULL) return;
    lull_dispatch_main_q = queue;
    lull_dispatch_async_f = (lull_dispatch_async_f_t)async;
    lull_dispatch_queue_get_label = (lull_dispatch_queue_get_label_t)label;
    /* The run-loop hooks CoreFoundation's RunLoop drains Dispatch's main queue with. */
    void *handle = dlsym(RTLD_DEFAULT, "_dispatch_get_main_queue_handle_4CF");
    void *callback = dlsym(RTLD_DEFAULT, "_dispatch_main_queue_callback_4CF");
    if (handle == NULL || callback == NULL) return;
    lull_dispatch_main_queue_handle_4cf = (lull_dispatch_main_queue_handle_t)handle;
    lull_dispatch_main_queue_callback_4cf = (lull_dispatch_main_queue_callback_t)callback;
}

int lull_dispatch_main_queue_is_current(void) {
    pthread_once(&lull_dispatch_once, lull_dispatch_resolve);
    if (lull_dispatch_main_q == NULL) return 0;
    /* dispatch_queue_get_label(DISPATCH_CURRENT_QUEUE_LABEL) names the queue whose callout
     * runs; the main queue's label is a constant of libdispatch, so the pointers compare. */
    const char *current = lull_dispatch_queue_get_label(NULL);
    const char *main = lull_dispatch_queue_get_label(lull_dispatch_main_q);
    return current != NULL && current == main;
}

int lull_dispatch_main_async(void *context, void (*work)(void *)) {
    pthread_once(&lull_dispatch_once, lull_dispatch_resolve);
    if (lull_dispatch_main_q == NULL) return -ENOSYS;
    lull_dispatch_async_f(lull_dispatch_main_q, context, work);
    return 0;
}

int lull_dispatch_main_queue_handle(void) {
    pthread_once(&lull_dispatch_once, lull_dispatch_resolve);
    if (lull_dispatch_main_queue_handle_4cf == NULL) return -ENOSYS;
    int descriptor = lull_dispatch_main_queue_handle_4cf();
    return descriptor >= 0 ? descriptor : -EBADF;
}

void lull_dispatch_main_queue_drain(int descriptor) {
    /* Clear the eventfd before draining: a block submitted during the drain writes it again,
     * so the next readiness covers it. The eventfd is readable when this runs, and nothing
     * else reads it (no RunLoop runs on the main thread). */
    uint64_t count;
    ssize_t ignored = read(descriptor, &count, sizeof count);
    (void)ignored;
    lull_dispatch_main_queue_callback_4cf(NULL);
}
