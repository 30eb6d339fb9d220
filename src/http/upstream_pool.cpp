#include "http/upstream_pool.hpp"

#include <sys/socket.h>

namespace sluice::http {

namespace {

// Connections idle longer than this are dropped rather than reused (as nginx's upstream
// keepalive_timeout). A connection the server closed meanwhile is caught by still_open();
// one it closes while our request is in flight is retried by the session when safe.
constexpr auto max_idle_time = std::chrono::seconds(30);

// Idle at least this long, a connection is checked with a peek even for a retryable request.
constexpr auto unchecked_idle_time = std::chrono::seconds(1);

// True when the peer has not closed the connection and sent nothing unexpected.
bool still_open(UpstreamConnection& conn) {
    auto& socket = conn.stream.socket();
    if (!socket.is_open()) return false;
    char byte;
    ssize_t n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n >= 0) return false;  // closed by the peer (0) or unsolicited bytes
    return errno == EAGAIN || errno == EWOULDBLOCK;
}

}  // namespace

std::unique_ptr<UpstreamConnection> UpstreamPool::take(const std::string& key, bool retryable) {
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    auto& list = it->second;
    auto now = std::chrono::steady_clock::now();
    while (!list.empty()) {
        auto conn = std::move(list.back());  // most recently used first: warmest, least likely closed
        list.pop_back();
        const auto idle = now - conn->idle_since;
        if (idle < max_idle_time && ((retryable && idle < unchecked_idle_time) || still_open(*conn))) return conn;
        boost::system::error_code ec;
        conn->stream.socket().close(ec);
    }
    return nullptr;
}

void UpstreamPool::put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle) {
    if (max_idle == 0) return;
    auto& list = idle_[conn->key];
    // Replace the oldest: it is the most likely to have been closed by the server.
    if (list.size() >= max_idle) list.erase(list.begin());
    conn->idle_since = std::chrono::steady_clock::now();
    list.push_back(std::move(conn));
}

std::size_t UpstreamPool::idle_count() const {
    std::size_t n = 0;
    for (const auto& [key, list] : idle_) n += list.size();
    return n;
}

}  // namespace sluice::http
