// The echo comparison's load generator: see echo_load.h. One thread, one epoll descriptor,
// level-triggered EPOLLIN on every connection; a connection's next message leaves as soon as
// the whole echo of the previous one is in. Blocking connect() (a loopback connect completes
// once the kernel queued it for accept), then O_NONBLOCK for the exchange.

#define _GNU_SOURCE
#include "echo_load.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

struct connection {
    int fd;
    int received;
    int remaining;
    uint64_t sent_at;
};

struct phase {
    int epoll_fd;
    const uint8_t *message;
    int bytes;
    char *error;
    size_t error_length;
};

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t own_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int fail(char *error, size_t length, const char *format, ...) {
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(error, length, format, arguments);
    va_end(arguments);
    return -1;
}

/// The server's user + system time, all threads (dead ones included), from /proc/pid/stat.
static int server_cpu_ns(pid_t pid, uint64_t *cpu) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *file = fopen(path, "re");
    if (!file) return -1;
    size_t length = fread(text, 1, sizeof text - 1, file);
    fclose(file);
    text[length] = 0;
    char *after_name = strrchr(text, ')');
    if (!after_name) return -1;
    unsigned long long utime = 0, stime = 0;
    // state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
    if (sscanf(after_name + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    long ticks = sysconf(_SC_CLK_TCK);
    *cpu = (utime + stime) * (1000000000ull / (uint64_t)(ticks > 0 ? ticks : 100));
    return 0;
}

/// The server's resident set in KiB, from /proc/pid/statm.
static int server_rss_kib(pid_t pid, uint64_t *kib) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *file = fopen(path, "re");
    if (!file) return -1;
    unsigned long long size = 0, resident = 0;
    int fields = fscanf(file, "%llu %llu", &size, &resident);
    fclose(file);
    if (fields != 2) return -1;
    *kib = resident * (uint64_t)sysconf(_SC_PAGESIZE) / 1024;
    return 0;
}

static void sleep_ms(int milliseconds) {
    struct timespec request = {milliseconds / 1000, (long)(milliseconds % 1000) * 1000000L};
    while (nanosleep(&request, &request) != 0 && errno == EINTR) {}
}

static int open_connection(const struct phase *phase, uint16_t port, struct connection *connection) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return fail(phase->error, phase->error_length, "socket: %s", strerror(errno));
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons(port);
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int result;
    do {
        result = connect(fd, (struct sockaddr *)&address, sizeof address);
    } while (result < 0 && errno == EINTR);
    int one = 1;
    if (result == 0) result = setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (result == 0) result = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    if (result == 0) {
        struct epoll_event event = {.events = EPOLLIN, .data.ptr = connection};
        result = epoll_ctl(phase->epoll_fd, EPOLL_CTL_ADD, fd, &event);
    }
    if (result < 0) {
        int code = errno;
        close(fd);
        return fail(phase->error, phase->error_length, "connect to 127.0.0.1:%u: %s", port, strerror(code));
    }
    *connection = (struct connection){.fd = fd};
    return 0;
}

static int send_message(const struct phase *phase, struct connection *connection) {
    connection->sent_at = now_ns();
    ssize_t sent;
    do {
        sent = send(connection->fd, phase->message, (size_t)phase->bytes, MSG_NOSIGNAL);
    } while (sent < 0 && errno == EINTR);
    if (sent == phase->bytes) return 0;
    // A fresh message on a socket with one message in flight always fits its send buffer.
    return fail(phase->error, phase->error_length, "send: %s", sent < 0 ? strerror(errno) : "partial send");
}

/// Every connection of `connections` sends `messages` messages, one in flight; the latency of
/// each lands in `latencies` (when given) at `*recorded`.
static int exchange(const struct phase *phase, struct connection *connections, int count, int messages,
                    uint64_t *latencies, size_t *recorded, int timeout_milliseconds) {
    uint8_t buffer[65536];
    int active = 0;
    for (int index = 0; index < count; index++) {
        connections[index].received = 0;
        connections[index].remaining = messages;
        if (messages == 0) continue;
        if (send_message(phase, &connections[index]) < 0) return -1;
        active++;
    }
    // A stall, not a slow run, is a failure: the deadline moves with every echo.
    uint64_t timeout = (uint64_t)timeout_milliseconds * 1000000u;
    uint64_t deadline = now_ns() + timeout;
    uint64_t echoed = 0;
    struct epoll_event events[1024];
    while (active > 0) {
        if (now_ns() > deadline) {
            int waiting = 0, first = -1;
            for (int index = 0; index < count; index++) {
                if (connections[index].remaining == 0) continue;
                if (first < 0) first = index;
                waiting++;
            }
            struct sockaddr_in local = {0};
            socklen_t length = sizeof local;
            if (first >= 0) getsockname(connections[first].fd, (struct sockaddr *)&local, &length);
            return fail(phase->error, phase->error_length,
                        "TIMEOUT: no echo for %d ms after %llu of %llu; %d of %d connections waiting for one (the "
                        "first from local port %u, %d of %d bytes of its echo in)",
                        timeout_milliseconds, (unsigned long long)echoed,
                        (unsigned long long)count * (unsigned long long)messages, waiting, count,
                        ntohs(local.sin_port), first >= 0 ? connections[first].received : 0, phase->bytes);
        }
        int ready = epoll_wait(phase->epoll_fd, events, 1024, 100);
        if (ready < 0) {
            if (errno == EINTR) continue;
            return fail(phase->error, phase->error_length, "epoll_wait: %s", strerror(errno));
        }
        for (int event = 0; event < ready; event++) {
            struct connection *connection = events[event].data.ptr;
            if (connection->remaining == 0) continue;
            ssize_t count_read = recv(connection->fd, buffer, (size_t)(phase->bytes - connection->received), 0);
            if (count_read < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) continue;
                return fail(phase->error, phase->error_length, "recv: %s", strerror(errno));
            }
            if (count_read == 0) return fail(phase->error, phase->error_length, "the server closed a connection");
            connection->received += (int)count_read;
            if (connection->received < phase->bytes) continue;
            uint64_t now = now_ns();
            if (latencies) latencies[(*recorded)++] = now - connection->sent_at;
            echoed++;
            deadline = now + timeout;
            connection->received = 0;
            if (--connection->remaining == 0) {
                active--;
            } else if (send_message(phase, connection) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/// Opens `count` connections, `batch` at a time, each batch echoing one message before the
/// next opens. On failure the connections opened so far are closed.
static int open_all(const struct phase *phase, uint16_t port, struct connection *connections, int count, int batch,
                    int timeout_milliseconds) {
    for (int first = 0; first < count; first += batch) {
        int end = first + batch < count ? first + batch : count;
        for (int index = first; index < end; index++) {
            if (open_connection(phase, port, &connections[index]) < 0) {
                for (int other = 0; other < index; other++) close(connections[other].fd);
                return -1;
            }
        }
        if (exchange(phase, connections + first, end - first, 1, NULL, NULL, timeout_milliseconds) < 0) {
            for (int other = 0; other < end; other++) close(connections[other].fd);
            return -1;
        }
    }
    return 0;
}

static void close_all(struct connection *connections, int count) {
    for (int index = 0; index < count; index++) close(connections[index].fd);
}

static int compare_u64(const void *left, const void *right) {
    uint64_t a = *(const uint64_t *)left, b = *(const uint64_t *)right;
    return a < b ? -1 : a > b;
}

int echo_load_run(const struct echo_load_config *config, struct echo_load_result *result, char *error,
                  size_t error_length) {
    memset(result, 0, sizeof *result);
    if (config->connections <= 0 || config->messages_per_connection <= 0 || config->message_bytes <= 0 ||
        config->message_bytes > 65536 || config->connect_batch <= 0)
        return fail(error, error_length, "bad configuration");
    uint8_t message[65536];
    memset(message, 0x6C, (size_t)config->message_bytes);
    struct phase phase = {
        .epoll_fd = epoll_create1(EPOLL_CLOEXEC),
        .message = message,
        .bytes = config->message_bytes,
        .error = error,
        .error_length = error_length,
    };
    if (phase.epoll_fd < 0) return fail(error, error_length, "epoll_create1: %s", strerror(errno));
    int connection_count = config->connections > config->warm_connections ? config->connections
                                                                          : config->warm_connections;
    size_t total = (size_t)config->connections * (size_t)config->messages_per_connection;
    struct connection *connections = calloc((size_t)connection_count, sizeof *connections);
    uint64_t *latencies = malloc(total * sizeof *latencies);
    int status = -1;
    if (!connections || !latencies) {
        fail(error, error_length, "out of memory");
        goto done;
    }

    // Warm-up: the server's threads, caches and first allocations exist before the baseline.
    if (config->warm_connections > 0) {
        if (open_all(&phase, config->port, connections, config->warm_connections, config->connect_batch,
                     config->timeout_milliseconds) < 0)
            goto done;
        int warmed = exchange(&phase, connections, config->warm_connections, config->warm_messages, NULL, NULL,
                              config->timeout_milliseconds);
        close_all(connections, config->warm_connections);
        if (warmed < 0) goto done;
    }
    sleep_ms(config->settle_milliseconds);
    if (server_rss_kib(config->server_pid, &result->rss_baseline_kib) < 0) {
        fail(error, error_length, "cannot read the server's /proc/%d/statm", (int)config->server_pid);
        goto done;
    }

    // The measured connections, idle.
    if (open_all(&phase, config->port, connections, config->connections, config->connect_batch,
                 config->timeout_milliseconds) < 0)
        goto done;
    sleep_ms(config->settle_milliseconds);
    uint64_t cpu_before = 0, cpu_after = 0;
    if (server_rss_kib(config->server_pid, &result->rss_connected_kib) < 0 ||
        server_cpu_ns(config->server_pid, &cpu_before) < 0) {
        fail(error, error_length, "cannot read the server's /proc/%d", (int)config->server_pid);
        close_all(connections, config->connections);
        goto done;
    }

    // The load.
    size_t recorded = 0;
    uint64_t client_before = own_cpu_ns();
    uint64_t start = now_ns();
    int loaded = exchange(&phase, connections, config->connections, config->messages_per_connection, latencies,
                          &recorded, config->timeout_milliseconds);
    uint64_t end = now_ns();
    result->client_cpu_ns = own_cpu_ns() - client_before;
    int cpu_read = server_cpu_ns(config->server_pid, &cpu_after);
    close_all(connections, config->connections);
    if (loaded < 0) goto done;
    if (cpu_read < 0) {
        fail(error, error_length, "cannot read the server's /proc/%d/stat", (int)config->server_pid);
        goto done;
    }
    result->server_cpu_ns = cpu_after - cpu_before;
    result->messages = recorded;
    result->seconds = (double)(end - start) / 1e9;
    qsort(latencies, recorded, sizeof *latencies, compare_u64);
    result->p50_ns = latencies[recorded / 2];
    result->p99_ns = latencies[(size_t)((double)recorded * 0.99) < recorded ? (size_t)((double)recorded * 0.99) : recorded - 1];
    result->p999_ns = latencies[(size_t)((double)recorded * 0.999) < recorded ? (size_t)((double)recorded * 0.999) : recorded - 1];
    status = 0;

done:
    free(latencies);
    free(connections);
    close(phase.epoll_fd);
    return status;
}
