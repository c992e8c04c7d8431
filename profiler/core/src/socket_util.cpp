// POSIX socket helpers: see socket_util.hpp.
#include "socket_util.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace memcomm::prof::net {

namespace {
addrinfo* resolve(const Endpoint& ep, bool passive, std::string& err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(ep.port);
  const int rc = ::getaddrinfo(ep.host.c_str(), port.c_str(), &hints, &res);
  if (rc != 0) {
    err = fmt::format("cannot resolve '{}': {}", ep.host, gai_strerror(rc));
    return nullptr;
  }
  return res;
}
}  // namespace

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

void set_send_timeout(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

int connect_to(const Endpoint& ep, int timeout_ms, std::string& err) {
  addrinfo* res = resolve(ep, false, err);
  if (!res) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) continue;
    int rc = ::connect(fd, ai->ai_addr, ai->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = ::poll(&p, 1, timeout_ms);
      if (rc == 1) {
        int soerr = 0;
        socklen_t len = sizeof soerr;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
        rc = soerr == 0 ? 0 : -1;
        errno = soerr;
      } else {
        if (rc == 0) errno = ETIMEDOUT;
        rc = -1;
      }
    }
    if (rc == 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      break;
    }
    err = fmt::format("cannot connect to {}:{}: {}", ep.host, ep.port, std::strerror(errno));
    close_fd(fd);
  }
  ::freeaddrinfo(res);
  return fd;
}

int listen_on(const Endpoint& ep, std::string& err, uint16_t& bound_port) {
  addrinfo* res = resolve(ep, true, err);
  if (!res) return -1;
  int fd = -1;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                            : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      break;
    }
    err = fmt::format("cannot listen on {}:{}: {}", ep.host, ep.port, std::strerror(errno));
    close_fd(fd);
  }
  ::freeaddrinfo(res);
  return fd;
}

bool send_all(int fd, const void* data, size_t n, std::string& err) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      err = errno == EAGAIN || errno == EWOULDBLOCK ? std::string("send timed out (viewer too slow)")
                                                    : fmt::format("send failed: {}", std::strerror(errno));
      return false;
    }
    p += w;
    n -= size_t(w);
  }
  return true;
}

bool recv_exact(int fd, void* data, size_t n, int timeout_ms, std::string& err) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    pollfd pf{fd, POLLIN, 0};
    const int rc = ::poll(&pf, 1, timeout_ms);
    if (rc == 0) {
      err = "timed out waiting for the peer";
      return false;
    }
    if (rc < 0) {
      if (errno == EINTR) continue;
      err = fmt::format("poll failed: {}", std::strerror(errno));
      return false;
    }
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r == 0) {
      err = "connection closed by the peer";
      return false;
    }
    if (r < 0) {
      if (errno == EINTR) continue;
      err = fmt::format("recv failed: {}", std::strerror(errno));
      return false;
    }
    p += r;
    n -= size_t(r);
  }
  return true;
}

}  // namespace memcomm::prof::net
