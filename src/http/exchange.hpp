// One request, from its head to its access line, whatever protocol brought it: the state
// its phases share (Pingora's per-request context) and the phases that do not touch a
// socket. The HTTP/1.1 session (client_session.cpp) and each HTTP/2 stream
// (h2_session.cpp) run the same list: identify_client, route_request, the limits
// (prepare_limits, the worker's decide, read_decision), the hold, then forward or a check
// route's 200; finish() logs and counts the request once.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "http/problem.hpp"
#include "http/request_head.hpp"
#include "limit/decision.hpp"
#include "limit/limit_key.hpp"
#include "limit/rate_limit_headers.hpp"
#include "observe/access_log.hpp"
#include "server/slow_waits.hpp"
#include "server/snapshot.hpp"

namespace sluice::net {
struct IpAddress;
}

namespace sluice::server {
class Worker;
struct ChargeSet;
}

namespace sluice::http {

class FieldList;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t);

// A request's concurrency slots while it runs: renewed every third of the shortest lease,
// given back when the hold goes (the response is done, or the request ended otherwise).
// Most requests end long before a third of a lease (at least 1 s): the renewals' timer is
// only started when the request lasts, at the worker's tick 50 to 100 ms into it
// (server::SlowWaits), its first renewal due a third of the lease less 100 ms later (so at
// most 50 ms early, which only renews a little sooner; on a stopping worker, which ticks no
// more, at once). Linking and unlinking allocate nothing.
class SlotHold : private server::SlowWait {
public:
    SlotHold(server::Worker& worker, limit::Slots slots);
    SlotHold(const SlotHold&) = delete;
    SlotHold& operator=(const SlotHold&) = delete;
    ~SlotHold();
    // The worker abandons the request (shutdown_timeout): its slots go back now, while the
    // store can still write the release; the destructor then has nothing left to give back.
    void give_back_now();
    // The next of the worker's holds (Worker::slot_holds is the first), linked in place.
    SlotHold* next_held() const { return next_held_; }

private:
    void fire() override;  // the request lasted: the renewals start
    struct State;
    static void schedule(const std::shared_ptr<State>& state, std::chrono::microseconds after);
    server::Worker& worker_;
    limit::Slots slots_;            // the state's once the renewals start
    std::shared_ptr<State> state_;  // the renewals' timer, while they run
    SlotHold* prev_held_ = nullptr;
    SlotHold* next_held_ = nullptr;
};

// A place among the requests this instance may hold back at once (server.max_waiting),
// taken before a decision that may tell the request to wait and kept while it waits. Without
// one the decision is asked with may_wait false: a leaky bucket then limits a request it
// would hold back, taking nothing. So at most max_waiting requests ever wait, and none is
// turned away after its place in a bucket was taken.
class WaitingPlace {
public:
    WaitingPlace(std::atomic<std::int64_t>& places, std::size_t max) : places_(&places) {
        if (places.fetch_add(1, std::memory_order_relaxed) >= static_cast<std::int64_t>(max)) give_back();
    }
    WaitingPlace(const WaitingPlace&) = delete;
    WaitingPlace& operator=(const WaitingPlace&) = delete;
    ~WaitingPlace() { give_back(); }
    bool held() const { return places_ != nullptr; }
    void give_back() {
        if (places_) places_->fetch_sub(1, std::memory_order_relaxed);
        places_ = nullptr;
    }

private:
    std::atomic<std::int64_t>* places_;
};

struct Exchange {
    Exchange(std::shared_ptr<const server::Snapshot> current, std::string_view peer,
             const net::IpAddress* peer_parsed = nullptr)
        : snapshot(std::move(current)), snap(*snapshot), cfg(*snap.config), started(Clock::now()), peer_ip(peer),
          peer_address(peer_parsed) {}
    const std::shared_ptr<const server::Snapshot> snapshot;  // the settings it is served under
    const server::Snapshot& snap;
    const config::Config& cfg;
    const Clock::time_point started;
    const std::string_view peer_ip;  // the TCP peer (the connection's, which outlives it)
    // The same, parsed once for the connection (null: parsed per request where needed).
    const net::IpAddress* const peer_address;
    bool finished = false;           // finish() ran: logged and counted
    bool peer_trusted = false;       // the peer is in client_ip.trusted_proxies (identify_client)
    observe::AccessRecord rec;
    ClientRequest request;  // its head, once read_request_head accepted it
    const config::RouteConfig* route = nullptr;
    // The limits that decide it: its route's, or its client's plan's (prepare_limits).
    const server::LimitSet* limit_set = nullptr;
    bool keep_alive = false;
    bool check = false;  // the route's action is check: answer 200 instead of forwarding
    // What the limits' key parts see as method and path: the request's own, or for a
    // check route the original request's, as the proxy in front names it.
    std::string key_method;
    std::string key_path;
    std::string key_query;    // without '?'
    std::string key_cookies;  // the Cookie fields, joined (key_values, when a limit reads one)
    bool key_cookies_read = false;
    // The claims of the request's bearer token, verified (prepare_limits, when a limit of the
    // route reads one); unset without a token.
    std::optional<std::vector<std::pair<std::string, std::string>>> jwt_claims;
    limit::HeaderList rate_headers;  // for the response: the limits' headers
    std::optional<SlotHold> slots;   // concurrency slots held until the request is done
    // A leaky bucket's wait before forwarding, and the waiting place it holds meanwhile.
    std::chrono::microseconds wait{0};
    std::optional<WaitingPlace> waiting_place;
    // Admitted with limits that count statuses (`count`): the worker that charges them once
    // the response's status is known (charge_response, or finish); null once charged.
    server::Worker* charge_worker = nullptr;
    // Admitted with limits whose response reports their cost: which of them took a
    // reservation and are not settled yet (bit j: limit_set->settles.limits[j]; 0: nothing
    // to settle), the worker that settles them, and when the reservations were taken (the
    // decision's time, on the store's clock).
    std::uint64_t unsettled = 0;
    server::Worker* settle_worker = nullptr;
    std::int64_t reserved_at_us = 0;

    std::size_t route_index() const { return static_cast<std::size_t>(route - cfg.routes.data()); }
};

// The peer's trust, the client a trusted proxy names, the request id and User-Agent.
void identify_client(Exchange& x);
// A request id of sluice's own: 32 hexadecimal digits of a per-thread generator.
std::string new_request_id();
// The route, and for a check route the original request's method and path; a refusal
// (404, or 400 for an original request that cannot be read).
std::optional<LocalReply> route_request(Exchange& x);
// True (and the request logged and counted as exempt) when the top-level `exempt` or the
// route's names the request: its limits are skipped, no store call is made.
bool exempt_from_limits(Exchange& x);
// What the limits' key parts read of the request (its fields).
limit::RequestKeyValues key_values(Exchange& x);
// The limits' phase, around the limiter's decide() (awaited by the session: the phases are
// plain functions, not coroutines of their own). Before: the limits that decide the request
// (x.limit_set: the route's, or on a route with plans its client's plan's; a client without
// one is a 401); a cost the limits can never grant is a 400; a route with a leaky bucket takes a waiting place. After: the answer
// is counted and logged and read (limit_verdict): a refusal, or the rate-limit headers
// and any wait in `x`.
std::optional<LocalReply> prepare_limits(Exchange& x, limit::RequestKeyValues& values);
std::optional<LocalReply> read_decision(Exchange& x, limit::Decision& decision, server::Worker& worker);
// Before a response with `status` goes to the client (the upstream's head, or sluice's own
// 502 or 504 for an upstream that failed): the limits of x.limit_set that count `status`
// (`count: {statuses}`) are charged, once per request, and the charge awaited (at most
// store.redis.timeout), so a client that has its response finds it counted on every
// instance. Nothing for a request without such limits, or charged already.
boost::asio::awaitable<void> charge_response(Exchange& x, unsigned status);
// Before the response head goes to the client: the limits whose cost the head reports
// (`cost: {response_header}`) are settled against their reservations, once per request,
// and the settle awaited (as a charge), in one store round trip with the charge of the
// limits that count `status` (charge_response): a store that stalls holds the response up
// once. `head`: the upstream's head (null: only the charge). (Callers skip it, and its
// coroutine frame, when x.unsettled is 0 and x.charge_worker null.)
boost::asio::awaitable<void> settle_and_charge(Exchange& x, const FieldList* head, unsigned status);
// Whether a limit the request reserved waits for a trailer (`cost: {response_trailer}`):
// the response body's trailer section is then kept (BodyReader::keep_trailers).
bool settles_trailer(const Exchange& x);
// Before the end of the body goes to the client: the limits whose cost the trailer reports,
// from `trailers` (BodyReader::trailers()). A response that ends otherwise (cut short, the
// client gone) leaves their reservations as they are.
boost::asio::awaitable<void> settle_trailer(Exchange& x, std::string_view trailers);
// Logs the request and counts it on its route; returns `keep`. A response not charged yet
// (a 101 that opened a tunnel) is charged here, without waiting for the store.
bool finish(Exchange& x, bool keep);
// The worker gives up on the request (server.shutdown_timeout passed): its access line and
// counts now, as 503 when nothing was answered yet (the connection closes without one), or
// with the status already sent. Nothing is logged for it later.
void abandon(Exchange& x);
// Points `current` at `x` while the request is served (abandon's way to it).
struct ServingExchange {
    ServingExchange(Exchange*& current, Exchange& x) : current_(current) { current_ = &x; }
    ~ServingExchange() { current_ = nullptr; }
    ServingExchange(const ServingExchange&) = delete;
    ServingExchange& operator=(const ServingExchange&) = delete;

private:
    Exchange*& current_;
};

}  // namespace sluice::http
