#include "redis/sentinel_watcher.hpp"

#include <algorithm>
#include <random>
#include <utility>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <hiredis/async.h>
#include <spdlog/spdlog.h>

#include "redis/redis_adapter.hpp"
#include "redis/redis_reply.hpp"
#include "redis/topology_parse.hpp"

namespace sluice::redis {

namespace asio = boost::asio;

namespace {

// The failover as it happens (sentinel.c's events; payloads parsed in topology_parse).
constexpr const char* channels[] = {
    "+switch-master",
    "+failover-state-send-slaveof-noone",  // the leader picked the replica it promotes
    "+failover-state-wait-promotion",      // ... and sent it REPLICAOF NO ONE
    "+promoted-slave",                     // ... and it is a master now
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
};

std::string address_of(const SentinelOptions::Address& a) {
    return join_address(a.host, a.port);
}

// One connection to one sentinel: it asks for the master's address (Kind::ask), or it
// subscribes to the failover channels (Kind::listen). Its handlers run from the io_context,
// never inside hiredis, and none runs after close().
class Link : public std::enable_shared_from_this<Link> {
public:
    enum class Kind { ask, listen };
    struct Handlers {
        std::function<void(const RedisReply&)> answer;                                      // ask
        std::function<void()> subscribed;                                                   // listen
        std::function<void(const std::string& channel, const std::string& payload)> message;  // listen
        std::function<void(const std::string& reason)> failed;  // closed, refused, timed out, bad answer
    };

    Link(asio::io_context& io, const SentinelOptions& options, std::size_t index, Kind kind, Handlers handlers)
        : io_(io), options_(options), index_(index), kind_(kind), handlers_(std::move(handlers)), resolver_(io),
          timer_(io) {}

    ~Link() { close(); }

    void open() {
        timer_.expires_after(options_.connect_timeout);
        timer_.async_wait([weak = weak_from_this()](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->closed_ || self->settled_) return;
            self->fail("no answer within " + std::to_string(self->options_.connect_timeout.count()) + "ms");
        });
        const auto& sentinel = options_.sentinels[index_];
        boost::system::error_code ec;
        const auto address = asio::ip::make_address(sentinel.host, ec);
        if (!ec) return connect(address.to_string());
        resolver_.async_resolve(sentinel.host, std::to_string(sentinel.port),
                                [weak = weak_from_this()](const boost::system::error_code& ec,
                                                          const asio::ip::tcp::resolver::results_type& results) {
                                    auto self = weak.lock();
                                    if (!self || self->closed_) return;
                                    if (ec || results.empty())
                                        return self->fail("cannot resolve: " + (ec ? ec.message() : "no address"));
                                    self->connect(results.begin()->endpoint().address().to_string());
                                });
    }

    void close() {
        closed_ = true;
        resolver_.cancel();
        timer_.cancel();
        if (auto* context = std::exchange(context_, nullptr)) {
            context->data = nullptr;
            redisAsyncFree(context);  // inside one of its callbacks: freed when it returns
        }
    }

private:
    void connect(const std::string& ip) {
        auto* context = redisAsyncConnect(ip.c_str(), options_.sentinels[index_].port);
        if (context == nullptr) return fail("out of memory");
        if (context->err) {
            std::string reason = context->errstr;
            redisAsyncFree(context);
            return fail(reason);
        }
        context->data = this;
        build_bounded_hiredis_replies(*context->c.reader, context);
        if (!attach_asio_adapter(io_, context)) {
            redisAsyncFree(context);
            return fail("cannot watch the socket");
        }
        redisAsyncSetDisconnectCallback(context, &on_disconnect);
        redisAsyncSetConnectCallback(context, &on_connect);
        context_ = context;
    }

    static Link* owner(const ::redisAsyncContext* context) {
        auto* self = static_cast<Link*>(context->data);
        return self != nullptr && self->context_ == context && !self->closed_ ? self : nullptr;
    }

    static void on_connect(const ::redisAsyncContext* context, int status) {
        auto* self = owner(context);
        if (self == nullptr) return;
        if (status != REDIS_OK) {
            self->context_ = nullptr;  // hiredis frees it
            return self->fail(context->errstr);
        }
        auto* c = const_cast<::redisAsyncContext*>(context);
        if (!self->options_.password.empty()) {
            std::vector<std::string> auth{"AUTH"};
            if (!self->options_.username.empty()) auth.push_back(self->options_.username);
            auth.push_back(self->options_.password);
            self->issue(c, auth, &on_auth);
        }
        if (self->kind_ == Kind::ask) {
            self->issue(c, {"SENTINEL", "get-master-addr-by-name", self->options_.master_name}, &on_answer);
        } else {
            std::vector<std::string> subscribe{"SUBSCRIBE"};
            for (const char* channel : channels) subscribe.push_back(channel);
            self->issue(c, subscribe, &on_message);
        }
    }

    void issue(::redisAsyncContext* context, const std::vector<std::string>& args, redisCallbackFn* fn) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lengths;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lengths.push_back(a.size());
        }
        // privdata is unused: the owner is context->data (a subscription's callback runs many times).
        redisAsyncCommandArgv(context, fn, nullptr, static_cast<int>(argv.size()), argv.data(), lengths.data());
    }

    static RedisResult read(void* raw) { return copy_reply(*static_cast<::redisReply*>(raw)); }

    static void on_auth(::redisAsyncContext* context, void* raw, void*) {
        auto* self = owner(context);
        if (self == nullptr || raw == nullptr) return;
        auto result = read(raw);
        if (!result.ok()) self->drop("AUTH failed: " + result.error->message);
    }

    static void on_answer(::redisAsyncContext* context, void* raw, void*) {
        auto* self = owner(context);
        if (self == nullptr || raw == nullptr) return;
        auto result = read(raw);
        if (!result.ok()) return self->drop("SENTINEL get-master-addr-by-name failed: " + result.error->message);
        self->settled_ = true;
        self->post([reply = std::move(result.reply)](Link& link) { link.handlers_.answer(reply); });
    }

    static void on_message(::redisAsyncContext* context, void* raw, void*) {
        auto* self = owner(context);
        if (self == nullptr || raw == nullptr) return;
        auto result = read(raw);
        if (!result.ok()) return self->drop("SUBSCRIBE failed: " + result.error->message);
        const auto& reply = result.reply;
        if (reply.type != RedisReply::Type::array || reply.elements.size() != 3) return;
        const auto& type = reply.elements[0].text;
        if (type == "subscribe") {
            if (!self->settled_) {
                self->settled_ = true;
                self->timer_.cancel();
                self->post([](Link& link) { link.handlers_.subscribed(); });
            }
            return;
        }
        if (type != "message") return;
        self->post([channel = reply.elements[1].text, payload = reply.elements[2].text](Link& link) {
            link.handlers_.message(channel, payload);
        });
    }

    static void on_disconnect(const ::redisAsyncContext* context, int) {
        auto* self = owner(context);
        if (self == nullptr) return;
        self->context_ = nullptr;
        self->fail(context->err ? connection_error(context->err, context->errstr) : std::string("closed the connection"));
    }

    // From inside a callback of this connection: close it (hiredis frees it after), report.
    void drop(const std::string& reason) {
        if (auto* context = std::exchange(context_, nullptr)) {
            context->data = nullptr;
            redisAsyncFree(context);
        }
        fail(reason);
    }

    void fail(const std::string& reason) {
        if (failed_) return;
        failed_ = true;
        post([reason](Link& link) { link.handlers_.failed(reason); });
    }

    template <class F>
    void post(F f) {
        asio::post(io_, [weak = weak_from_this(), f = std::move(f)]() mutable {
            auto self = weak.lock();
            if (self && !self->closed_) f(*self);
        });
    }

    asio::io_context& io_;
    const SentinelOptions& options_;
    std::size_t index_;
    Kind kind_;
    Handlers handlers_;
    asio::ip::tcp::resolver resolver_;
    asio::steady_timer timer_;
    ::redisAsyncContext* context_ = nullptr;
    bool closed_ = false;
    bool settled_ = false;  // answered, or subscribed
    bool failed_ = false;
};

}  // namespace

class SentinelWatcher::Impl : public std::enable_shared_from_this<Impl> {
public:
    Impl(asio::io_context& io, SentinelOptions options, NewsHandler on_news)
        : io_(io),
          options_(std::move(options)),
          on_news_(std::move(on_news)),
          ask_timer_(io),
          random_(std::random_device{}()) {
        for (std::size_t i = 0; i < options_.sentinels.size(); ++i) {
            listeners_.push_back(Listener{nullptr, std::make_unique<asio::steady_timer>(io), 0, false, {}});
        }
    }

    ~Impl() { stop(); }

    void start() {
        if (!stopped_ || options_.sentinels.empty()) return;
        stopped_ = false;
        ask();
        for (std::size_t i = 0; i < listeners_.size(); ++i) listen(i);
    }

    void stop() {
        stopped_ = true;
        ask_timer_.cancel();
        if (asker_) asker_->close();
        asker_.reset();
        for (auto& l : listeners_) {
            l.timer->cancel();
            if (l.link) l.link->close();
            l.link.reset();
        }
    }

    void reask(const std::string& why) {
        if (stopped_) return;
        // Every worker's trouble arrives at once; a sentinel answering takes a round trip.
        if (asker_ && std::chrono::steady_clock::now() - asked_at_ < std::chrono::milliseconds(200)) return;
        spdlog::info("redis sentinel: asking again for master {} ({})", options_.master_name, why);
        ask_index_ = (ask_index_ + 1) % options_.sentinels.size();
        ask();
    }

    std::vector<SentinelState> sentinels() const {
        std::vector<SentinelState> states;
        for (std::size_t i = 0; i < options_.sentinels.size(); ++i)
            states.push_back({address_of(options_.sentinels[i]), listeners_[i].up});
        return states;
    }

private:
    struct Listener {
        std::shared_ptr<Link> link;
        std::unique_ptr<asio::steady_timer> timer;
        unsigned attempt = 0;
        bool up = false;
        std::chrono::steady_clock::time_point up_since{};
    };

    std::chrono::milliseconds backoff(unsigned attempt) {
        const auto max = std::max<std::int64_t>(options_.backoff_max.count(), 1);
        auto delay = std::max<std::int64_t>(options_.backoff_min.count(), 1);
        for (unsigned i = 0; i < attempt && delay < max; ++i) delay *= 2;
        delay = std::min(delay, max);
        std::uniform_int_distribution<std::int64_t> jitter(delay / 2, delay);
        return std::chrono::milliseconds(jitter(random_));
    }

    void after(asio::steady_timer& timer, std::chrono::milliseconds delay, std::function<void(Impl&)> then) {
        timer.expires_after(delay);
        timer.async_wait([weak = weak_from_this(), then = std::move(then)](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->stopped_) return;
            then(*self);
        });
    }

    // ---- asking ---------------------------------------------------------------------------

    void ask() {
        if (asker_) asker_->close();
        ask_timer_.cancel();
        asked_at_ = std::chrono::steady_clock::now();
        const std::size_t index = ask_index_;
        Link::Handlers handlers;
        handlers.answer = [this, index](const RedisReply& reply) { answered(index, reply); };
        handlers.failed = [this, index](const std::string& reason) { ask_failed(index, reason); };
        asker_ = std::make_shared<Link>(io_, options_, index, Link::Kind::ask, std::move(handlers));
        asker_->open();
    }

    void answered(std::size_t index, const RedisReply& reply) {
        asker_->close();
        asker_.reset();
        const std::string source = "sentinel " + address_of(options_.sentinels[index]);
        std::uint16_t port = 0;
        if (reply.type == RedisReply::Type::nil)
            return ask_failed(index, "it does not know a master named " + options_.master_name);
        if (reply.type != RedisReply::Type::array || reply.elements.size() != 2 ||
            reply.elements[0].type != RedisReply::Type::string || !acceptable_host(reply.elements[0].text) ||
            !parse_port(reply.elements[1].text, port))
            return ask_failed(index, "its answer to get-master-addr-by-name is not a host and a port");
        ask_attempt_ = 0;
        ask_failure_logged_ = false;
        news({SentinelNews::Kind::master, reply.elements[0].text, port, source});
        // Ask again later through the next sentinel, whatever happens meanwhile.
        after(ask_timer_, options_.requery_interval, [](Impl& self) {
            self.ask_index_ = (self.ask_index_ + 1) % self.options_.sentinels.size();
            self.ask();
        });
    }

    void ask_failed(std::size_t index, const std::string& reason) {
        if (asker_) asker_->close();
        asker_.reset();
        const auto where = address_of(options_.sentinels[index]);
        if (!ask_failure_logged_)
            spdlog::warn("redis sentinel {}: {}", where, reason);
        else
            spdlog::debug("redis sentinel {}: {}", where, reason);
        ask_index_ = (index + 1) % options_.sentinels.size();
        if (ask_index_ == 0) ask_failure_logged_ = true;  // every sentinel was tried: quieter now
        // The next sentinel at once; a whole round that failed backs off.
        const auto delay = backoff(ask_attempt_++ / static_cast<unsigned>(options_.sentinels.size()));
        after(ask_timer_, delay, [](Impl& self) { self.ask(); });
    }

    // ---- listening ------------------------------------------------------------------------

    void listen(std::size_t i) {
        auto& listener = listeners_[i];
        if (listener.link) listener.link->close();
        Link::Handlers handlers;
        handlers.subscribed = [this, i] {
            listeners_[i].up = true;
            listeners_[i].up_since = std::chrono::steady_clock::now();
        };
        handlers.message = [this, i](const std::string& channel, const std::string& payload) {
            message(i, channel, payload);
        };
        handlers.failed = [this, i](const std::string& reason) {
            auto& l = listeners_[i];
            // A subscription that held a while starts the backoff afresh; one that fails at
            // once (a sentinel sending junk) backs off like a refused connection, quietly.
            if (l.up && std::chrono::steady_clock::now() - l.up_since > std::chrono::seconds(5)) l.attempt = 0;
            if (l.attempt == 0)
                spdlog::warn("redis sentinel {}: subscription lost: {}", address_of(options_.sentinels[i]), reason);
            else
                spdlog::debug("redis sentinel {}: subscription lost: {}", address_of(options_.sentinels[i]), reason);
            l.up = false;
            l.link.reset();
            after(*l.timer, backoff(l.attempt++), [i](Impl& self) { self.listen(i); });
        };
        listener.link = std::make_shared<Link>(io_, options_, i, Link::Kind::listen, std::move(handlers));
        listener.link->open();
    }

    void message(std::size_t i, const std::string& channel, const std::string& payload) {
        const std::string source = channel + " from sentinel " + address_of(options_.sentinels[i]);
        SwitchMaster to;
        if (channel == "+switch-master") {
            if (parse_switch_master(payload, options_.master_name, to))
                news({SentinelNews::Kind::switched, to.host, to.port, source});
        } else if (channel.starts_with("-failover-abort-")) {
            if (is_about_master(payload, options_.master_name))
                news({SentinelNews::Kind::aborted, {}, 0, source});
        } else if (parse_promoted_replica(payload, options_.master_name, to)) {
            news({SentinelNews::Kind::promoting, to.host, to.port, source});
        }
    }

    void news(const SentinelNews& n) { on_news_(n); }

    asio::io_context& io_;
    SentinelOptions options_;
    NewsHandler on_news_;
    std::shared_ptr<Link> asker_;
    asio::steady_timer ask_timer_;
    std::size_t ask_index_ = 0;
    unsigned ask_attempt_ = 0;
    bool ask_failure_logged_ = false;
    std::chrono::steady_clock::time_point asked_at_{};
    std::vector<Listener> listeners_;
    std::minstd_rand random_;
    bool stopped_ = true;
};

SentinelWatcher::SentinelWatcher(asio::io_context& io, SentinelOptions options, NewsHandler on_news)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(on_news))) {}
SentinelWatcher::~SentinelWatcher() { impl_->stop(); }
void SentinelWatcher::start() { impl_->start(); }
void SentinelWatcher::stop() { impl_->stop(); }
void SentinelWatcher::reask(const std::string& why) { impl_->reask(why); }
std::vector<SentinelWatcher::SentinelState> SentinelWatcher::sentinels() const { return impl_->sentinels(); }

}  // namespace sluice::redis
