// The socket of the connection a request handler is serving, and whether its client has gone
// away. cpp-httplib 0.11 gives a handler neither (later versions have
// Request::is_connection_closed): the socket is found by its two endpoints, which identify one
// TCP connection of this process. A non-streaming request polls it while it waits for the engine,
// so a client that hangs up cancels its request instead of leaving it to run to the end.
#pragma once

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <string>

namespace gemma4::server {

namespace detail {

/// Numeric host and port of a socket address, as cpp-httplib writes Request::remote_addr.
inline bool endpoint_of(const sockaddr_storage& address, socklen_t length, std::string& host, int& port) {
    char h[NI_MAXHOST], p[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&address), length, h, sizeof h, p, sizeof p, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    host = h;
    port = std::atoi(p);
    return true;
}

}  // namespace detail

/// The descriptor of this process's TCP connection from `remote_host`:`remote_port` to local port
/// `local_port`, or -1 (not found; nothing is then watched). Linux: lists /proc/self/fd.
inline int connection_socket(const std::string& remote_host, int remote_port, int local_port) {
    if (remote_port <= 0 || local_port <= 0) return -1;
    DIR* dir = opendir("/proc/self/fd");
    if (!dir) return -1;
    int found = -1;
    while (const dirent* entry = readdir(dir)) {
        char* end = nullptr;
        const long fd = std::strtol(entry->d_name, &end, 10);
        if (end == entry->d_name || *end != '\0' || fd == dirfd(dir)) continue;
        struct stat st {};
        if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage peer{}, local{};
        socklen_t peer_length = sizeof peer, local_length = sizeof local;
        if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&peer), &peer_length) != 0) continue;
        if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&local), &local_length) != 0) continue;
        std::string peer_host, local_host;
        int peer_port = 0, local_port_found = 0;
        if (!detail::endpoint_of(peer, peer_length, peer_host, peer_port) || !detail::endpoint_of(local, local_length, local_host, local_port_found))
            continue;
        if (peer_port == remote_port && local_port_found == local_port && peer_host == remote_host) {
            found = static_cast<int>(fd);
            break;
        }
    }
    closedir(dir);
    return found;
}

/// True once the client has closed or reset the connection: the socket reads end-of-stream or
/// fails. Bytes the client sent ahead (a pipelined request) are left where they are.
inline bool peer_closed(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    const int ready = ::poll(&p, 1, 0);
    if (ready <= 0) return false;  // nothing to read: still connected
    if (p.revents & (POLLERR | POLLNVAL)) return true;
    char byte;
    const auto n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return false;
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

}  // namespace gemma4::server
