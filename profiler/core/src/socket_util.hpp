// Small POSIX socket helpers for the live stream (private to the profiler core).
#pragma once

#include <string>

#include "memcomm/profiler/stream_protocol.hpp"

namespace memcomm::prof::net {

// Connects with a timeout; returns the fd or -1 with `err` set.
int connect_to(const Endpoint& ep, int timeout_ms, std::string& err);
// Binds and listens; returns the fd or -1 with `err` set. `bound_port` receives the real port.
int listen_on(const Endpoint& ep, std::string& err, uint16_t& bound_port);
// Sends everything (MSG_NOSIGNAL). False on error or when the send timeout expires.
bool send_all(int fd, const void* data, size_t n, std::string& err);
// Receives exactly n bytes, waiting at most timeout_ms overall. False on error/EOF/timeout.
bool recv_exact(int fd, void* data, size_t n, int timeout_ms, std::string& err);
void set_send_timeout(int fd, int ms);
void close_fd(int& fd);

}  // namespace memcomm::prof::net
