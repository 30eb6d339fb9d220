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

// One command of a sentinel connection (not the subscription), carried as privdata.
struct Step {
    std::uint64_t generation;
    enum class Kind { auth, ask } kind;
};

}  // namespace

class SentinelWatcher::Impl : public std::enable_shared_from_this<Impl> {
public:
    Impl(asio::io_context& io, SentinelOptions options, MasterHandler on_master)
        : io_(io),
          options_(std::move(options)),
          on_master_(std::move(on_master)),
          resolver_(io),
          connect_timer_(io),
          requery_timer_(io),
          retry_timer_(io),
          random_(std::random_device{}()),
          up_(options_.sentinels.size(), false),
          tried_(options_.sentinels.size(), false) {}

    ~Impl() { stop(); }

    void start() {
        if (!stopped_ || options_.sentinels.empty()) return;
        stopped_ = false;
        connect();
    }

    void stop() {
        stopped_ = true;
        resolver_.cancel();
        connect_timer_.cancel();
        requery_timer_.cancel();
        retry_timer_.cancel();
        close();
    }

    void reask(const std::string& why) {
        if (stopped_) return;
        const auto now = std::chrono::steady_clock::now();
        // Every worker's trouble arrives at once; a sentinel answering takes a round trip.
        if (asking_ && now - asked_at_ < std::chrono::milliseconds(200)) return;
        spdlog::info("redis sentinel: asking again for master {} ({})", options_.master_name, why);
        next();
        connect();
    }

    std::vector<SentinelState> sentinels() const {
        std::vector<SentinelState> states;
        for (std::size_t i = 0; i < options_.sentinels.size(); ++i)
            if (tried_[i]) states.push_back({address_of(i), up_[i]});
        return states;
    }

private:
    std::string address_of(std::size_t i) const {
        const auto& s = options_.sentinels[i];
        return (s.host.find(':') != std::string::npos ? "[" + s.host + "]" : s.host) + ":" + std::to_string(s.port);
    }

    void next() { current_ = (current_ + 1) % options_.sentinels.size(); }

    void close() {
        if (auto* context = std::exchange(context_, nullptr)) {
            context->data = nullptr;
            redisAsyncFree(context);
        }
        asking_ = false;
    }

    void connect() {
        close();
        ++generation_;
        asking_ = true;
        asked_at_ = std::chrono::steady_clock::now();
        retry_timer_.cancel();
        connect_timer_.expires_after(options_.connect_timeout);
        connect_timer_.async_wait([weak = weak_from_this(), generation = generation_](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->stopped_ || generation != self->generation_ || !self->asking_) return;
            self->failed("no answer within " + std::to_string(self->options_.connect_timeout.count()) + "ms");
        });
        const auto& sentinel = options_.sentinels[current_];
        boost::system::error_code ec;
        const auto address = asio::ip::make_address(sentinel.host, ec);
        if (!ec) return open(redisAsyncConnect(address.to_string().c_str(), sentinel.port));
        resolver_.async_resolve(
            sentinel.host, std::to_string(sentinel.port),
            [weak = weak_from_this(), generation = generation_](const boost::system::error_code& ec,
                                                                const asio::ip::tcp::resolver::results_type& results) {
                auto self = weak.lock();
                if (!self || self->stopped_ || generation != self->generation_) return;
                if (ec || results.empty()) return self->failed("cannot resolve: " + (ec ? ec.message() : "no address"));
                self->open(redisAsyncConnect(results.begin()->endpoint().address().to_string().c_str(),
                                             self->options_.sentinels[self->current_].port));
            });
    }

    void open(::redisAsyncContext* context) {
        if (context == nullptr) return failed("out of memory");
        if (context->err) {
            std::string reason = context->errstr;
            redisAsyncFree(context);
            return failed(reason);
        }
        context->data = this;
        build_bounded_hiredis_replies(*context->c.reader);
        if (!attach_asio_adapter(io_, context)) {
            redisAsyncFree(context);
            return failed("cannot watch the socket");
        }
        redisAsyncSetDisconnectCallback(context, &on_disconnect);
        redisAsyncSetConnectCallback(context, &on_connect);
        context_ = context;
    }

    static void on_connect(const ::redisAsyncContext* const_context, int status) {
        auto* context = const_cast<::redisAsyncContext*>(const_context);
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context) return;
        if (status != REDIS_OK) {
            self->context_ = nullptr;  // hiredis frees it
            return self->failed_later(context->errstr);
        }
        // AUTH, the question, then the subscription (after which only the subscription's
        // messages come on this connection).
        if (!self->options_.password.empty()) {
            std::vector<std::string> auth{"AUTH"};
            if (!self->options_.username.empty()) auth.push_back(self->options_.username);
            auth.push_back(self->options_.password);
            self->issue(context, Step::Kind::auth, auth);
        }
        self->issue(context, Step::Kind::ask, {"SENTINEL", "get-master-addr-by-name", self->options_.master_name});
        const char* argv[] = {"SUBSCRIBE", "+switch-master"};
        redisAsyncCommandArgv(context, &on_message, nullptr, 2, argv, nullptr);
    }

    void issue(::redisAsyncContext* context, Step::Kind kind, const std::vector<std::string>& args) {
        std::vector<const char*> argv;
        std::vector<std::size_t> lengths;
        for (const auto& a : args) {
            argv.push_back(a.data());
            lengths.push_back(a.size());
        }
        auto step = std::make_unique<Step>(Step{generation_, kind});
        if (redisAsyncCommandArgv(context, &on_step, step.get(), static_cast<int>(argv.size()), argv.data(),
                                  lengths.data()) == REDIS_OK)
            step.release();
    }

    static void on_step(::redisAsyncContext* context, void* raw_reply, void* privdata) {
        std::unique_ptr<Step> step(static_cast<Step*>(privdata));
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context || step->generation != self->generation_) return;
        if (raw_reply == nullptr) return;  // on_disconnect handles it
        auto result = copy_reply(*static_cast<::redisReply*>(raw_reply));
        if (step->kind == Step::Kind::auth) {
            if (!result.ok()) self->drop("AUTH failed: " + result.error->message);
            return;
        }
        if (!result.ok()) return self->drop("SENTINEL get-master-addr-by-name failed: " + result.error->message);
        const auto& reply = result.reply;
        if (reply.type == RedisReply::Type::nil)
            return self->drop("it does not know a master named " + self->options_.master_name);
        std::uint16_t port = 0;
        if (reply.type != RedisReply::Type::array || reply.elements.size() != 2 ||
            reply.elements[0].type != RedisReply::Type::string || !acceptable_host(reply.elements[0].text) ||
            !parse_port(reply.elements[1].text, port))
            return self->drop("its answer to get-master-addr-by-name is not host and port");
        self->answered(reply.elements[0].text, port, "sentinel " + self->address_of(self->current_));
    }

    static void on_message(::redisAsyncContext* context, void* raw_reply, void*) {
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context || raw_reply == nullptr) return;
        auto result = copy_reply(*static_cast<::redisReply*>(raw_reply));
        if (!result.ok()) return self->drop("SUBSCRIBE failed: " + result.error->message);
        const auto& reply = result.reply;
        if (reply.type != RedisReply::Type::array || reply.elements.size() != 3 || reply.elements[0].text != "message")
            return;  // the subscription's confirmation
        SwitchMaster to;
        if (!parse_switch_master(reply.elements[2].text, self->options_.master_name, to)) return;
        spdlog::warn("redis sentinel: {} says +switch-master {}: the master is now {}:{}",
                     self->address_of(self->current_), self->options_.master_name, to.host, to.port);
        self->tell(to.host, to.port, "+switch-master from sentinel " + self->address_of(self->current_));
    }

    void answered(const std::string& host, std::uint16_t port, const std::string& source) {
        asking_ = false;
        attempt_ = 0;
        failure_logged_ = false;
        up_[current_] = true;
        tried_[current_] = true;
        connect_timer_.cancel();
        tell(host, port, source);
        // Ask again later through the next sentinel, whatever happens meanwhile.
        requery_timer_.expires_after(options_.requery_interval);
        requery_timer_.async_wait([weak = weak_from_this(), generation = generation_](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->stopped_ || generation != self->generation_) return;
            self->next();
            self->connect();
        });
    }

    void tell(const std::string& host, std::uint16_t port, const std::string& source) {
        asio::post(io_, [weak = weak_from_this(), host, port, source] {
            auto self = weak.lock();
            if (self && !self->stopped_) self->on_master_(host, port, source);
        });
    }

    static void on_disconnect(const ::redisAsyncContext* const_context, int) {
        auto* context = const_cast<::redisAsyncContext*>(const_context);
        auto* self = static_cast<Impl*>(context->data);
        if (self == nullptr || self->context_ != context) return;
        self->context_ = nullptr;
        self->failed_later(context->err ? context->errstr : "closed the connection");
    }

    // Closes the connection from inside one of its callbacks (hiredis frees it after).
    void drop(const std::string& reason) {
        if (auto* context = std::exchange(context_, nullptr)) {
            context->data = nullptr;
            redisAsyncFree(context);
        }
        failed_later(reason);
    }

    void failed_later(const std::string& reason) {
        asio::post(io_, [weak = weak_from_this(), generation = generation_, reason] {
            auto self = weak.lock();
            if (self && !self->stopped_ && generation == self->generation_) self->failed(reason);
        });
    }

    // This sentinel did not answer: the next one, after a backoff once all were tried.
    void failed(const std::string& reason) {
        close();
        up_[current_] = false;
        tried_[current_] = true;
        if (!failure_logged_)
            spdlog::warn("redis sentinel {}: {}", address_of(current_), reason);
        else
            spdlog::debug("redis sentinel {}: {}", address_of(current_), reason);
        next();
        if (current_ == 0) failure_logged_ = true;  // every sentinel was tried: quieter now
        const auto max = std::max<std::int64_t>(options_.backoff_max.count(), 1);
        auto delay = std::max<std::int64_t>(options_.backoff_min.count(), 1);
        for (unsigned i = 0; i < attempt_ / options_.sentinels.size() && delay < max; ++i) delay *= 2;
        delay = std::min(delay, max);
        ++attempt_;
        std::uniform_int_distribution<std::int64_t> jitter(delay / 2, delay);
        ++generation_;
        retry_timer_.expires_after(std::chrono::milliseconds(jitter(random_)));
        retry_timer_.async_wait([weak = weak_from_this(), generation = generation_](boost::system::error_code ec) {
            auto self = weak.lock();
            if (ec || !self || self->stopped_ || generation != self->generation_) return;
            self->connect();
        });
    }

    asio::io_context& io_;
    SentinelOptions options_;
    MasterHandler on_master_;
    asio::ip::tcp::resolver resolver_;
    asio::steady_timer connect_timer_;
    asio::steady_timer requery_timer_;
    asio::steady_timer retry_timer_;
    std::minstd_rand random_;
    std::vector<bool> up_;
    std::vector<bool> tried_;  // asked at least once (a sentinel never asked is not listed)
    ::redisAsyncContext* context_ = nullptr;
    std::size_t current_ = 0;
    std::uint64_t generation_ = 0;
    unsigned attempt_ = 0;
    bool stopped_ = true;
    bool asking_ = false;
    bool failure_logged_ = false;
    std::chrono::steady_clock::time_point asked_at_{};
};

SentinelWatcher::SentinelWatcher(asio::io_context& io, SentinelOptions options, MasterHandler on_master)
    : impl_(std::make_shared<Impl>(io, std::move(options), std::move(on_master))) {}
SentinelWatcher::~SentinelWatcher() { impl_->stop(); }
void SentinelWatcher::start() { impl_->start(); }
void SentinelWatcher::stop() { impl_->stop(); }
void SentinelWatcher::reask(const std::string& why) { impl_->reask(why); }
std::vector<SentinelWatcher::SentinelState> SentinelWatcher::sentinels() const { return impl_->sentinels(); }

}  // namespace sluice::redis
