// Finding a request's socket and noticing a peer that went away (cpp-httplib 0.11 exposes
// neither to a handler; a non-streamed request polls this to cancel its generation), and widening
// the listening socket's backlog.
#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "server/server_core.h"

namespace dsv4::server {
namespace {

bool address_of(const sockaddr_storage& addr, socklen_t len, std::string& host, int& port) {
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
  char h[NI_MAXHOST], s[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, h, sizeof h, s, sizeof s,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  host = h;
  port = std::atoi(s);
  return true;
}

}  // namespace

int find_connection_fd(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = std::atoi(e->d_name);
    sockaddr_storage local{}, peer{};
    socklen_t llen = sizeof local, plen = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) != 0) continue;
    std::string lhost, phost;
    int lport = 0, pport = 0;
    if (!address_of(local, llen, lhost, lport) || !address_of(peer, plen, phost, pport)) continue;
    if (lport == req.local_port && pport == req.remote_port && phost == req.remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

bool peer_closed(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  int r = poll(&p, 1, 0);
  if (r <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0;
  }
  return false;
}

void widen_listen_backlog(int port) {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = std::atoi(e->d_name);
    int listening = 0;
    socklen_t olen = sizeof listening;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &olen) != 0 || !listening) continue;
    sockaddr_storage local{};
    socklen_t llen = sizeof local;
    std::string host;
    int lport = 0;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &llen) != 0) continue;
    if (address_of(local, llen, host, lport) && lport == port) listen(fd, SOMAXCONN);
  }
  closedir(dir);
}

void stop_reading(const httplib::Request& req) {
  int fd = find_connection_fd(req);
  if (fd >= 0) shutdown(fd, SHUT_RD);
}

}  // namespace dsv4::server
