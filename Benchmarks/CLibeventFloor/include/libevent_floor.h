#ifndef LULL_BENCH_LIBEVENT_FLOOR_H
#define LULL_BENCH_LIBEVENT_FLOOR_H

/// The floor of `lull-bench ping-pong-floor`: the read-source ping-pong of `ping-pong` as raw
/// libevent on one thread (one event_base, two persistent read events, the handlers' read and
/// write in the callbacks). Returns the seconds from the first byte written to the `trips`-th
/// round trip, or -errno when a pipe, the base or an event could not be made or a write
/// failed.
double lull_bench_libevent_ping_pong(long trips);

#endif
