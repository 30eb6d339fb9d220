#include "http/upstream_pool.hpp"

#include "http/upstream_connection.hpp"

namespace sluice::http {

namespace {

// Connections idle longer than this are dropped rather than reused (as nginx's upstream
// keepalive_timeout). A connection the server closed meanwhile is caught by Stream::quiet();
// one it closes while our request is in flight is retried by the session when safe.
constexpr auto max_idle_time = std::chrono::seconds(30);

// A connection's read buffer larger than this is given back when it goes idle.
constexpr std::size_t max_kept_buffer = 16 * 1024;

}  // namespace

std::unique_ptr<UpstreamConnection> UpstreamPool::take(const std::string& key) {
    auto it = idle_.find(key);
    if (it == idle_.end()) return nullptr;
    auto& list = it->second.list;
    auto now = std::chrono::steady_clock::now();
    while (!list.empty()) {
        auto conn = std::move(list.back());  // most recently used first: warmest, least likely closed
        list.pop_back();
        const auto idle = now - conn->idle_since;
        if (idle < max_idle_time && conn->stream.quiet()) return conn;
        boost::system::error_code ec;
        conn->stream.socket().close(ec);
    }
    return nullptr;
}

UpstreamPool::UpstreamPool(const boost::asio::any_io_executor& ex,
                           std::chrono::milliseconds surplus_idle_time)
    : surplus_idle_time_(surplus_idle_time), trim_timer_(ex) {}

UpstreamPool::~UpstreamPool() = default;

void UpstreamPool::put(std::unique_ptr<UpstreamConnection> conn, std::size_t max_idle) {
    if (max_idle == 0 || shut_ || conn->buffer.size() != 0) return;
    // Over TLS, bytes past the response may wait inside OpenSSL or Asio's layer instead.
    if (conn->stream.holds_unread_tls()) return;
    ++conn->uses;
    // A small buffer is kept for the next response; one a large head made grow is not.
    if (conn->buffer.capacity() > max_kept_buffer) conn->buffer.shrink_to_fit();
    auto& idle = idle_[conn->key];
    idle.max_idle = max_idle;
    conn->idle_since = std::chrono::steady_clock::now();
    idle.list.push_back(std::move(conn));
    if (idle.list.size() > max_idle) arm_trim(idle.list.front()->idle_since + surplus_idle_time_);
}

void UpstreamPool::arm_trim(std::chrono::steady_clock::time_point at) {
    if (trim_at_ != std::chrono::steady_clock::time_point{} && trim_at_ <= at) return;  // sooner already
    trim_at_ = at;
    trim_timer_.expires_at(at);
    trim_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;  // cancelled (re-armed sooner, cleared) or the pool is gone
        trim_at_ = {};
        trim_surplus();
    });
}

void UpstreamPool::trim_surplus() {
    const auto now = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point next{};
    for (auto& [key, idle] : idle_) {
        auto& list = idle.list;
        std::size_t stale = 0;  // the oldest surplus connections, idle long enough to go
        while (list.size() - stale > idle.max_idle && now - list[stale]->idle_since >= surplus_idle_time_) ++stale;
        for (std::size_t i = 0; i < stale; ++i) {
            boost::system::error_code ec;
            list[i]->stream.socket().close(ec);
        }
        list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(stale));
        if (list.size() > idle.max_idle) {
            const auto at = list.front()->idle_since + surplus_idle_time_;
            if (next == std::chrono::steady_clock::time_point{} || at < next) next = at;
        }
    }
    if (next != std::chrono::steady_clock::time_point{}) arm_trim(next);
}

void UpstreamPool::clear() {
    idle_.clear();
    trim_timer_.cancel();
    trim_at_ = {};
}

void UpstreamPool::shut() {
    shut_ = true;
    clear();
}

std::size_t UpstreamPool::idle_count() const {
    std::size_t n = 0;
    for (const auto& [key, idle] : idle_) n += idle.list.size();
    return n;
}

}  // namespace sluice::http
