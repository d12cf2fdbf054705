#ifndef ECHO_LOAD_H
#define ECHO_LOAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/// The load generator of the echo comparison (lull-bench echo-nio-*): one thread on raw
/// epoll, runtime-neutral, in a process of its own so that its CPU never counts as the
/// server's. Every connection keeps one message in flight: send, wait for the whole echo,
/// send the next.
struct echo_load_config {
    /// The server: 127.0.0.1:port, and its process (read in /proc for its CPU and RSS).
    uint16_t port;
    pid_t server_pid;
    /// The measured connections, and the messages each sends during the load.
    int connections;
    int messages_per_connection;
    int message_bytes;
    /// Before the baseline RSS: this many connections exchange this many messages each, then
    /// close (the server's threads and caches exist before anything is measured).
    int warm_connections;
    int warm_messages;
    /// How long the server is left alone before each RSS reading.
    int settle_milliseconds;
    /// Connections are opened this many at a time, each batch echoing one message before
    /// the next is opened (so the server's listen backlog never overflows).
    int connect_batch;
    /// Every phase gives up after this long without finishing.
    int timeout_milliseconds;
};

struct echo_load_result {
    /// Messages echoed during the load, and the time from the first send to the last echo.
    uint64_t messages;
    double seconds;
    /// Round-trip latency percentiles of those messages, in nanoseconds.
    uint64_t p50_ns, p99_ns, p999_ns;
    /// The server's CPU time (user + system, all its threads) during the load.
    uint64_t server_cpu_ns;
    /// The client's own CPU time during the load.
    uint64_t client_cpu_ns;
    /// The server's resident set after the warm-up (no connection open) and with every
    /// measured connection open and idle, in KiB.
    uint64_t rss_baseline_kib, rss_connected_kib;
};

/// Runs the warm-up, opens the connections, measures the idle RSS, runs the load. Returns 0,
/// or -1 with a message in `error`.
int echo_load_run(const struct echo_load_config *config, struct echo_load_result *result,
                  char *error, size_t error_length);

#endif
