#include "http/exchange.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <random>

#include <boost/container/small_vector.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <spdlog/spdlog.h>

#include "auth/jwt.hpp"
#include "config/value_syntax.hpp"
#include "http/field_text.hpp"
#include "http/header_rules.hpp"
#include "http/reported_cost.hpp"
#include "http/limit_verdict.hpp"
#include "http/request_target.hpp"
#include "http/route_match.hpp"
#include "limit/client_ip.hpp"
#include "limit/cost.hpp"
#include "limit/limit_params.hpp"
#include "net/cidr.hpp"
#include "observe/logging.hpp"
#include "server/worker.hpp"

namespace sluice::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using Request = ClientRequest;

double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// 32 hexadecimal digits of a per-thread generator.
std::string new_request_id() {
    thread_local std::mt19937_64 random = [] {
        std::random_device device;
        std::seed_seq seed{device(), device(), device(), device(), device(), device(), device(), device()};
        return std::mt19937_64(seed);
    }();
    // 32 hexadecimal digits, two a byte (fmt::format costs about 1,300 instructions a request
    // here, a digit at a time about 200).
    static constexpr auto pairs = [] {
        constexpr char digits[] = "0123456789abcdef";
        std::array<char, 512> t{};
        for (std::size_t b = 0; b < 256; ++b) {
            t[2 * b] = digits[b >> 4];
            t[2 * b + 1] = digits[b & 0xf];
        }
        return t;
    }();
    std::string id(32, '0');
    for (std::size_t half = 0; half < 2; ++half) {
        std::uint64_t value = random();
        for (std::size_t i = 8; i-- > 0; value >>= 8) std::memcpy(&id[half * 16 + 2 * i], &pairs[2 * (value & 0xff)], 2);
    }
    return id;
}

namespace {

// Whether a limit of the route reads a key part of this kind (server::route_key_kinds,
// worked out with the snapshot; a snapshot made without them works it out here).
std::uint32_t route_key_kinds(const Exchange& x) {
    const auto& read = x.snap.key_kinds_read;
    const std::size_t route = x.route_index();
    return route < read.size() ? read[route] : server::route_key_kinds(*x.route);
}

bool route_reads(const Exchange& x, config::KeyPart::Kind kind) {
    return (route_key_kinds(x) >> static_cast<unsigned>(kind) & 1) != 0;
}

// Key parts every request has (limit::has_key_value): a route whose limits read only these
// never skips a limit for a missing value.
constexpr std::uint32_t always_present = std::uint32_t{1} << static_cast<unsigned>(config::KeyPart::Kind::client_ip) |
                                         std::uint32_t{1} << static_cast<unsigned>(config::KeyPart::Kind::method) |
                                         std::uint32_t{1} << static_cast<unsigned>(config::KeyPart::Kind::path);

// x.limit_set: the route's limits; on a route with plans, the plan a trusted hop's
// plan_header names, else the map's entry for the client's identity, else default_plan. A
// request without its identity, or without a plan, is a 401.
std::optional<LocalReply> choose_limit_set(Exchange& x, const limit::RequestKeyValues& values) {
    const auto& sets = x.snap.limit_sets[x.route_index()];
    const auto& plans = x.route->plans;
    if (!plans) {
        x.limit_set = &sets.front();
        return std::nullopt;
    }
    const auto identity = limit::key_value(plans->identity, values);
    if (!identity || identity->empty()) {  // (an empty API key names nobody)
        const std::string detail = "route '" + x.route->name + "' limits by plan and the request does not name its " +
                                   "client (" + config::key_part_text(plans->identity) + ")";
        spdlog::info("client {}: {}", x.rec.client, detail);
        return local_problem(401, detail);
    }
    std::optional<std::size_t> chosen;
    const auto mapped = plans->by_identity.find(*identity);
    if (!plans->header.empty() && x.peer_trusted) {
        std::optional<std::string_view> named;
        const auto id = field_id(plans->header);
        for (const auto& f : x.request) {
            if (!field_named(f.name(), f.name_string(), id, plans->header)) continue;
            if (named && *named != f.value()) {
                const std::string detail = "header " + plans->header + " names more than one plan";
                spdlog::info("client {}: route {}: {}", x.rec.client, x.route->name, detail);
                return local_problem(400, detail);
            }
            named = f.value();
        }
        if (named) {
            const auto plan = plans->by_plan.find(std::string(*named));
            if (plan == plans->by_plan.end()) {
                // A hop that names a plan sluice does not have does so for every request: said
                // once a second per worker at most.
                thread_local Clock::time_point said{};
                if (const auto now = Clock::now(); now - said >= std::chrono::seconds(1)) {
                    said = now;
                    spdlog::warn("client {}: route {}: header {} names plan '{}', which is not defined", x.rec.client,
                                 x.route->name, plans->header, *named);
                }
            } else {
                chosen = plan->second;
                // The client's own overrides of that plan, where the map has them.
                if (mapped != plans->by_identity.end() && sets[mapped->second].plan == sets[plan->second].plan)
                    chosen = mapped->second;
            }
        }
    }
    if (!chosen && mapped != plans->by_identity.end()) chosen = mapped->second;
    if (!chosen) chosen = plans->default_set;
    if (!chosen) {
        const std::string detail = "route '" + x.route->name + "' limits by plan and this client (" +
                                   config::key_part_text(plans->identity) + ") has none";
        spdlog::info("client {}: {}", x.rec.client, detail);
        return local_problem(401, detail);
    }
    x.limit_set = &sets[*chosen];
    x.rec.plan = x.limit_set->plan;
    return std::nullopt;
}

// The request's id: the X-Request-Id a trusted peer (a proxy in front) sent, when it sent one
// that is 1 to 128 visible ASCII characters without '"' or '\\'; else a new one, 32 hex
// digits of a per-thread generator (an id names a request in logs, it is not a secret).
std::string request_id(const Request& req, bool peer_trusted) {
    if (peer_trusted) {
        std::optional<std::string_view> given;
        bool twice = false;
        for (const auto& f : req)
            if (beast::iequals(f.name_string(), "x-request-id")) {
                twice = twice || given.has_value();
                given = sv(f.value());
            }
        const auto plain = [](std::string_view id) {
            if (id.empty() || id.size() > 128) return false;
            for (const char c : id)
                if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
            return true;
        };
        if (given && !twice && plain(*given)) return std::string(*given);
    }
    return new_request_id();
}

// A line logged at most once a second per worker (store trouble: under load every request
// would otherwise log it; the access log and metrics count every request).
class OncePerSecond {
public:
    // True when a line may be logged now; `suppressed()` then says how many were not.
    bool due() {
        const auto now = Clock::now();
        if (now - last_ < std::chrono::seconds(1)) {
            ++suppressed_;
            return false;
        }
        last_ = now;
        return true;
    }
    std::uint64_t suppressed() { return std::exchange(suppressed_, 0); }

private:
    Clock::time_point last_{};
    std::uint64_t suppressed_ = 0;
};

void warn_store_error(std::string_view route, std::string_view error, config::OnError policy) {
    thread_local OncePerSecond gate;
    if (!gate.due()) return;
    spdlog::warn("route {}: rate-limit store error: {}; {} the request ({} similar errors not logged)", route, error,
                 policy == config::OnError::allow ? "allowing" : "denying", gate.suppressed());
}

// A charge after the response that the store could not take.
void warn_charge_failed(std::string_view route, unsigned status, std::string_view error) {
    thread_local OncePerSecond gate;
    if (!gate.due()) return;
    spdlog::warn("route {}: charging a {} response to the limits that count it failed: {} ({} similar errors not logged)",
                 route, status, error, gate.suppressed());
}

// Per-limit outcomes for sluice_ratelimit_decisions_total, and the route's counters.
void count_decision(const server::Snapshot& snap, std::size_t route_index, const server::LimitSet& set,
                    const limit::Decision& decision, config::OnError policy) {
    using observe::DecisionKind;
    auto& route = *snap.route_metrics[route_index];
    const auto& limits = set.metrics;
    auto bump = [](const std::shared_ptr<observe::LimitMetrics>& m, DecisionKind kind) { m->count(kind); };
    if (decision.outcome == limit::Decision::Outcome::store_error) {
        observe::add(snap.metrics->store_errors);
        observe::add(route.here().store_errors);
        auto kind = policy == config::OnError::allow ? DecisionKind::store_error_allowed : DecisionKind::store_error_denied;
        for (const auto& m : limits) bump(m, kind);
        return;
    }
    for (std::size_t i = 0; i < limits.size() && i < decision.limits.size(); ++i) {
        const auto& r = decision.limits[i];
        if (!r.applies) continue;
        const bool held_back = r.allowed && !r.shadow && r.wait.count() > 0 &&
                               decision.outcome == limit::Decision::Outcome::allowed;
        bump(limits[i], held_back    ? DecisionKind::delayed
                        : r.banned  ? DecisionKind::banned
                        : r.allowed ? DecisionKind::allowed
                        : r.shadow  ? DecisionKind::shadow_limited
                                    : DecisionKind::limited);
    }
    if (decision.outcome == limit::Decision::Outcome::limited) observe::add(route.here().limited);
    if (decision.shadow_limited()) observe::add(route.here().shadow_limited);
    // route.delayed is counted when the request ends (serve_one), with its request:
    // a request held back across a summary tick counts in one interval, not delayed in one
    // and requested in the next.
}

// The original request of a check: X-Original-Method / X-Original-URI (nginx
// auth_request, as its config sets them) or X-Forwarded-Method / X-Forwarded-Uri (Traefik
// ForwardAuth), from a trusted peer; else the check request's own method and path. A
// method that is not a token or a URI that is not a valid origin-form target is a 400.
bool original_request(bool peer_trusted, const Request& req, std::string& method, std::string& path,
                      std::string& query, std::string& uri, std::string_view& problem) {
    if (!peer_trusted) return true;
    auto field = [&req](std::string_view a, std::string_view b) -> std::optional<std::string_view> {
        std::optional<std::string_view> found;
        for (const auto& f : req)
            if (beast::iequals(f.name_string(), a) || beast::iequals(f.name_string(), b)) {
                if (found) return std::string_view("\n");  // given twice: ambiguous, refused below
                found = sv(f.value());
            }
        return found;
    };
    const auto original_method = field("x-original-method", "x-forwarded-method");
    const auto original_uri = field("x-original-uri", "x-forwarded-uri");
    if (original_method) {
        if (!is_request_method(*original_method)) {
            problem = "X-Original-Method (or X-Forwarded-Method) is not one method of upper-case letters, '-' and '_'";
            return false;
        }
        method = std::string(*original_method);
    }
    if (original_uri) {
        const RequestTarget target = parse_request_target(method, *original_uri);
        if (!target.ok() || !target.authority.empty() || original_uri->find('\n') != std::string_view::npos) {
            problem = "X-Original-URI (or X-Forwarded-Uri) is not one valid request target";
            return false;
        }
        path = target.path;
        query = target.query;
        uri = std::string(*original_uri);
    }
    return true;
}

}  // namespace

namespace {

// The limits a response of `status` charges and the worker that charges them, once per
// request: nullptr when there are none, or the request was charged already.
std::pair<const server::ChargeSet*, server::Worker*> take_charge(Exchange& x, unsigned status) {
    server::Worker* worker = std::exchange(x.charge_worker, nullptr);
    if (!worker) return {nullptr, nullptr};
    return {x.limit_set->charge_for(status), worker};
}

void count_charge(const server::Snapshot& snap, std::size_t route_index, const server::LimitSet& set,
                  const server::ChargeSet& charge, unsigned status, const limit::Decision& outcome) {
    const bool failed = outcome.outcome == limit::Decision::Outcome::store_error;
    for (std::size_t i = 0; i < charge.index.size(); ++i) {
        // (A limit keyed on something the request lacks applies to it no more than before.)
        if (!failed && (i >= outcome.limits.size() || !outcome.limits[i].applies)) continue;
        set.metrics[charge.index[i]]->count_charge(!failed);
    }
    if (failed) warn_charge_failed(snap.config->routes[route_index].name, status, outcome.error);
}

}  // namespace

net::awaitable<void> charge_response(Exchange& x, unsigned status) {
    if (x.charge_worker) co_await settle_and_charge(x, nullptr, status);
}

namespace {

// A response's report that cannot be read (logged at most once a second).
void warn_report_unread(std::string_view route, std::string_view limit, std::string_view field, std::string_view problem) {
    thread_local OncePerSecond gate;
    if (!gate.due()) return;
    spdlog::warn("route {}: limit {}: the response's {} is {}: settled at the reservation ({} similar warnings not "
                 "logged)",
                 route, limit, field, problem, gate.suppressed());
}

// A settle after the response that the store could not take.
void warn_settle_failed(std::string_view route, std::string_view error) {
    thread_local OncePerSecond gate;
    if (!gate.due()) return;
    spdlog::warn("route {}: settling the cost a response reported failed: {} ({} similar errors not logged)", route,
                 error, gate.suppressed());
}

// What a settle asks of the store: the reserved limits whose cost comes in the head
// (`trailer` false) or the trailer, as `report` reads them, each one's difference to its
// reservation charged or given back (`limits` empty: nothing to settle), and which of them
// changed (indexes into limit_set->settles).
struct SettleCall {
    std::vector<config::LimitConfig> limits;
    std::vector<std::size_t> changed;
};

template <class Report>
SettleCall plan_settle(Exchange& x, bool trailer, Report report) {
    SettleCall call;
    const server::ChargeSet& settles = x.limit_set->settles;
    const auto& route = *x.route;
    for (std::size_t j = 0; j < settles.limits.size() && j < 64; ++j) {
        const std::uint64_t bit = std::uint64_t{1} << j;
        const auto& limit = settles.limits[j];
        if (!(x.unsettled & bit) || limit.response_cost_trailer != trailer) continue;
        x.unsettled &= ~bit;
        const ReportedCost reported = report(limit.response_cost_field);
        if (reported.kind == ReportedCost::Kind::invalid)
            warn_report_unread(route.name, limit.name, limit.response_cost_field, reported.problem);
        if (reported.kind != ReportedCost::Kind::units) continue;
        const std::uint64_t units = limit::settled_units(limit, reported.units);
        x.limit_set->metrics[settles.index[j]]->count_reported(units);
        // (A give-back needs its reservation's time; without one it would read as a charge.)
        if (units == limit.cost || (units < limit.cost && x.reserved_at_us <= 0)) continue;
        if (call.limits.empty()) {
            // Every settle limit, those with nothing to settle at cost 0 (they take nothing):
            // the set's key plan names them all.
            call.limits = settles.limits;
            for (auto& l : call.limits) l.cost = 0;
        }
        auto& settle = call.limits[j];
        if (units > limit.cost) {
            settle.cost = units - limit.cost;
        } else {
            settle.cost = limit.cost - units;
            settle.refund_at_us = x.reserved_at_us;
        }
        call.changed.push_back(j);
    }
    return call;
}

// Counts what the store answered to a settle (and logs a failure).
void count_settle(const Exchange& x, const SettleCall& call, const limit::Decision& outcome) {
    const bool failed = outcome.outcome == limit::Decision::Outcome::store_error;
    const server::ChargeSet& settles = x.limit_set->settles;
    for (const std::size_t j : call.changed) {
        if (!failed && (j >= outcome.limits.size() || !outcome.limits[j].applies)) continue;
        const auto& metrics = x.limit_set->metrics[settles.index[j]];
        if (failed) metrics->count_charge(false);
        else if (call.limits[j].refund_at_us > 0) metrics->count_refund();
        else metrics->count_charge(true);
    }
    if (failed) warn_settle_failed(x.route->name, outcome.error);
}

}  // namespace

net::awaitable<void> settle_and_charge(Exchange& x, const FieldList* head, unsigned status) {
    SettleCall settle;
    if (head && x.unsettled)
        settle = plan_settle(x, false, [head](std::string_view name) { return cost_in_fields(*head, name); });
    const auto [charge, worker] = take_charge(x, status);
    if (settle.limits.empty() && !charge) co_return;
    const limit::RequestKeyValues values = key_values(x);
    limit::Decision settled, charged;
    if (settle.limits.empty()) {
        charged = co_await worker->decide(charge->route_limits(x.route->name), values);
    } else {
        const limit::RouteLimits settle_limits{x.route->name, settle.limits, &x.limit_set->settles.key_plan};
        if (charge) {
            // Both at once: a stalled store holds the response up once, not once for each.
            co_await worker->decide_both(settle_limits, values, settled, charge->route_limits(x.route->name), values,
                                         charged);
        } else {
            settled = co_await x.settle_worker->decide(settle_limits, values);
        }
        count_settle(x, settle, settled);
    }
    if (charge) count_charge(x.snap, x.route_index(), *x.limit_set, *charge, status, charged);
}

bool settles_trailer(const Exchange& x) {
    if (x.unsettled == 0) return false;
    const auto& settles = x.limit_set->settles.limits;
    for (std::size_t j = 0; j < settles.size() && j < 64; ++j)
        if ((x.unsettled >> j & 1) && settles[j].response_cost_trailer) return true;
    return false;
}

net::awaitable<void> settle_trailer(Exchange& x, std::string_view trailers) {
    if (x.unsettled == 0) co_return;
    const SettleCall settle =
        plan_settle(x, true, [trailers](std::string_view name) { return cost_in_trailers(trailers, name); });
    if (settle.limits.empty()) co_return;
    const limit::RouteLimits settle_limits{x.route->name, settle.limits, &x.limit_set->settles.key_plan};
    const limit::Decision outcome = co_await x.settle_worker->decide(settle_limits, key_values(x));
    count_settle(x, settle, outcome);
}

void abandon(Exchange& x) {
    if (x.finished) return;
    if (x.rec.status == 0) x.rec.status = 503;
    finish(x, false);
}

bool finish(Exchange& x, bool keep) {
    if (x.finished) return keep;  // (abandoned: logged already)
    x.finished = true;
    // Any status not charged before its head was written (a 101 is, before the tunnel):
    // charged as the request ends, without waiting for the store. A request whose client
    // went away (499) got no response to count.
    if (x.charge_worker && x.rec.upstream_ms && x.rec.status != 499) {
        const unsigned status = x.rec.status;
        if (const auto [charge, worker] = take_charge(x, status); charge)
            worker->charge(charge->route_limits(x.route->name), key_values(x),
                           [snapshot = x.snapshot, route_index = x.route_index(), set = x.limit_set, charge,
                            status](limit::Decision outcome) {
                               count_charge(*snapshot, route_index, *set, *charge, status, outcome);
                           });
    }
    x.rec.total_ms = ms_since(x.started);
    observe::log_access(x.rec, x.cfg.logging);
    auto& counters = x.route ? *x.snap.route_metrics[x.route_index()] : x.snap.metrics->no_route();
    counters.count_status(x.rec.status);
    if (x.rec.forwarded) observe::add(counters.here().forwarded);
    if (x.rec.decision == observe::AccessDecision::delayed) observe::add(counters.here().delayed);
    if (x.rec.decision == observe::AccessDecision::exempt) observe::add(counters.here().exempt);
    return keep;
}

void identify_client(Exchange& x) {
    const auto& cfg = x.cfg;
    const auto& req = x.request;
    // Who sent it: the peer, or the client a trusted proxy in front names; the request id
    // such a proxy gave it, else a new one (sent upstream either way: forward()).
    if (!cfg.client_ip.trusted_proxies.empty()) {
        const auto peer = x.peer_address ? std::optional(*x.peer_address) : sluice::net::IpAddress::parse(x.peer_ip);
        x.peer_trusted = peer && limit::is_trusted(cfg.client_ip.trusted_proxies, *peer);
        if (x.peer_trusted) {
            boost::container::small_vector<std::string_view, 4> xff;  // (mostly one field)
            for (const auto& f : req)  // (Beast has no code for X-Forwarded-For: every field is compared)
                if (f.name() == bhttp::field::unknown && iequals_ascii(sv(f.name_string()), "X-Forwarded-For"))
                    xff.push_back(sv(f.value()));
            x.rec.client = limit::forwarded_client(*peer, xff, cfg.client_ip.trusted_proxies);
        }
    }
    x.rec.request_id = request_id(req, x.peer_trusted);
    if (const auto agent = req.find(bhttp::field::user_agent)) x.rec.user_agent = std::string(*agent);
}

std::optional<LocalReply> route_request(Exchange& x) {
    const auto& req = x.request;
    x.route = match_route(x.cfg.routes, req.method_string(), x.key_path, req.find(bhttp::field::host).value_or(std::string_view()));
    if (!x.route) return local_problem(404, "no route matches the request");
    x.rec.route = x.route->name;
    x.check = x.route->action == config::RouteAction::check;
    x.key_method = std::string(sv(req.method_string()));
    if (x.check) {
        // A check route decides for another proxy: the method and path its key parts see are
        // the original request's, as that proxy names them (from a trusted peer only).
        std::string_view problem;
        std::string key_target;
        if (!original_request(x.peer_trusted, req, x.key_method, x.key_path, x.key_query, key_target, problem))
            return local_problem(400, problem);
        // The line names the request that was decided, not the check itself.
        x.rec.method = x.key_method;
        if (!key_target.empty()) x.rec.target = std::move(key_target);
    }
    return std::nullopt;
}

namespace {

// The bearer token's claims, verified, into x.jwt_claims when a limit of the route (or its
// identity) reads one; a refusal for a token that does not verify (401) or two
// Authorization fields (400).
std::optional<LocalReply> read_bearer_token(Exchange& x) {
    if (!route_reads(x, config::KeyPart::Kind::jwt) || !x.snap.jwt) return std::nullopt;
    std::optional<std::string_view> authorization;
    for (const auto& f : x.request) {
        if (f.name() != bhttp::field::authorization) continue;
        if (authorization) return local_problem(400, "more than one Authorization field");
        authorization = sv(f.value());
    }
    // No bearer token: the limits keyed on its claims do not apply (as a missing header).
    // The scheme is followed by a space (RFC 9110); a tab is read as one too, as backends that
    // split the field on any whitespace read it: else a token they accept would count nowhere.
    const auto blank = [](char c) { return c == ' ' || c == '\t'; };
    if (!authorization || authorization->size() < 7 || !beast::iequals(authorization->substr(0, 6), "bearer") ||
        !blank((*authorization)[6]))
        return std::nullopt;
    const std::string_view token = trim_ows(authorization->substr(7));
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
    auto result = x.snap.jwt->verify(token, now.count());
    if (!result.claims) {
        spdlog::info("client {}: route {}: bearer token refused: {}", x.rec.client, x.route->name, result.problem);
        LocalReply refusal = local_problem(401, "the bearer token is not valid: " + result.problem);
        refusal.headers.emplace_back("WWW-Authenticate", "Bearer error=\"invalid_token\"");
        return refusal;
    }
    x.jwt_claims = std::move(result.claims);
    return std::nullopt;
}

}  // namespace

namespace {

// Whether the request has field `name` (lower-case) more than once with different values.
bool field_ambiguous(const ClientRequest& req, const std::string& name) {
    const auto id = field_id(name);
    std::optional<std::string_view> first;
    for (const auto& f : req) {
        if (!field_named(f.name(), f.name_string(), id, name)) continue;
        if (first && *first != sv(f.value())) return true;
        first = sv(f.value());
    }
    return false;
}

// A request that gives a header its limits (or its plan) are keyed on, or take their cost
// from, twice with different values: counting the first would let a client charge someone
// else (`X-Api-Key: victim`, then its own) or take another's plan while the upstream reads
// the other (as a query parameter or cookie given twice: limit::ambiguous_key_value).
LocalReply ambiguous_refusal(const Exchange& x, const std::string& name, std::string_view what) {
    const std::string detail = "header " + name + " is given more than once with different values; " +
                               std::string(what) + " of route '" + x.route->name +
                               "' reads it, so which one counts would be a guess";
    spdlog::info("client {}: {}", x.rec.client, detail);
    return local_problem(400, detail);
}

std::optional<LocalReply> ambiguous_plan_identity(const Exchange& x) {
    const auto& plans = x.route->plans;
    if (plans && plans->identity.kind == config::KeyPart::Kind::header &&
        field_ambiguous(x.request, plans->identity.header_name))
        return ambiguous_refusal(x, plans->identity.header_name, "the plan choice");
    return std::nullopt;
}

std::optional<LocalReply> ambiguous_header(const Exchange& x, std::span<const config::LimitConfig> limits) {
    if (route_reads(x, config::KeyPart::Kind::header))
        for (const auto& limit : limits)
            for (const auto& part : limit.key)
                if (part.kind == config::KeyPart::Kind::header && field_ambiguous(x.request, part.header_name))
                    return ambiguous_refusal(x, part.header_name, "limit '" + limit.name + "'");
    for (const auto& limit : limits)
        if (!limit.cost_header.empty() && field_ambiguous(x.request, limit.cost_header))
            return ambiguous_refusal(x, limit.cost_header, "the cost of limit '" + limit.name + "'");
    return std::nullopt;
}

}  // namespace

std::optional<LocalReply> prepare_limits(Exchange& x, limit::RequestKeyValues& values) {
    const auto& route = *x.route;
    if (auto refusal = read_bearer_token(x)) return refusal;
    if (auto refusal = ambiguous_plan_identity(x)) return refusal;
    if (auto refusal = choose_limit_set(x, values)) return refusal;
    const auto limits = x.limit_set->limits;
    if (auto refusal = ambiguous_header(x, limits)) return refusal;
    if (auto ambiguous = limit::ambiguous_key_value(limits, values)) {
        spdlog::info("client {}: route {}: {}", x.rec.client, route.name, *ambiguous);
        return local_problem(400, *ambiguous);
    }
    // A cost header asking for more than a limit can ever hold would be refused forever:
    // the request is malformed for this route, not limited.
    if (const auto over = limit::cost_over_capacity(limits, values)) {
        const auto& expensive = limits[*over];
        std::string detail = fmt::format("header {} asks for more than limit '{}' of route '{}' can grant ({})",
                                         expensive.cost_header, expensive.name, route.name,
                                         limit::capacity_of(expensive));
        spdlog::info("client {}: {}", x.rec.client, detail);
        return local_problem(400, detail);
    }
    if (std::any_of(limits.begin(), limits.end(), limit::holds_back)) {
        x.waiting_place.emplace(x.snap.metrics->waiting_places, x.cfg.server.max_waiting);
        values.may_wait = x.waiting_place->held();
    }
    return std::nullopt;
}

std::optional<LocalReply> read_decision(Exchange& x, limit::Decision& decision, server::Worker& worker) {
    const auto& cfg = x.cfg;
    const auto& route = *x.route;
    const auto limits = x.limit_set->limits;
    if (!decision.slots.empty()) x.slots.emplace(worker, std::move(decision.slots));
    const auto on_error = route.on_error.value_or(cfg.store.on_error);
    count_decision(x.snap, x.route_index(), *x.limit_set, decision, on_error);
    if (decision.outcome == limit::Decision::Outcome::limited) worker.limited_clients().add(route.name, x.rec.client);

    LimitVerdict verdict = limit_verdict(cfg, route, limits, decision, x.limit_set->policies,
                                         x.waiting_place && x.waiting_place->held());
    x.rec.decision = verdict.decision;
    x.rec.limit = verdict.limit;
    x.rec.remaining = verdict.remaining;
    // Only a request a leaky bucket holds back keeps its waiting place, and a refused one
    // gives it back before its reply is written (draining a body, a slow client).
    x.wait = verdict.wait;
    if (x.wait.count() == 0) x.waiting_place.reset();
    if (decision.outcome == limit::Decision::Outcome::store_error) {
        warn_store_error(route.name, decision.error, on_error);
    } else if ((route_key_kinds(x) & ~always_present) != 0) {
        // A limit keyed on a header the request lacks does not count it: the line says so.
        // (From the request, not from `applies`, which a remembered refusal also clears.)
        const auto values = key_values(x);
        for (const auto& limit : limits)
            for (const auto& part : limit.key)
                if (!limit::has_key_value(part, values)) {
                    if (!x.rec.skipped.empty()) x.rec.skipped += ',';
                    x.rec.skipped += limit.name;
                    break;
                }
    }
    if (verdict.refusal) return std::move(verdict.refusal);
    x.rate_headers = std::move(verdict.headers);
    if (x.limit_set->counted()) x.charge_worker = &worker;
    if (x.limit_set->settled() && decision.outcome == limit::Decision::Outcome::allowed) {
        // The limits that took their reservation: it applied, and it admitted the request
        // (a shadow limit that would have refused took nothing).
        const auto& index = x.limit_set->settles.index;
        for (std::size_t j = 0; j < index.size() && j < 64; ++j) {
            const std::size_t i = index[j];
            if (i < decision.limits.size() && decision.limits[i].applies && decision.limits[i].allowed)
                x.unsettled |= std::uint64_t{1} << j;
        }
        x.settle_worker = &worker;
        x.reserved_at_us = decision.time_us;
    }
    return std::nullopt;
}

struct SlotHold::State {
    State(server::Worker& w, limit::Slots s) : worker(w), timer(w.io()), slots(std::move(s)) {}
    server::Worker& worker;
    net::steady_timer timer;
    limit::Slots slots;
    std::chrono::microseconds every{1000};
    bool held = true;
};

SlotHold::SlotHold(server::Worker& worker, limit::Slots slots) : worker_(worker), slots_(std::move(slots)) {
    next_held_ = worker.slot_holds();
    if (next_held_) next_held_->prev_held_ = this;
    worker.slot_holds() = this;
    if (worker.stopping())
        fire();  // no more ticks: renewed from now on
    else
        worker.slow_waits().add(*this);
}

SlotHold::~SlotHold() {
    (prev_held_ ? prev_held_->next_held_ : worker_.slot_holds()) = next_held_;
    if (next_held_) next_held_->prev_held_ = prev_held_;
    give_back_now();
}

void SlotHold::give_back_now() {
    unlink();
    if (!state_) {
        worker_.release_slots(std::move(slots_));
        slots_ = {};
        return;
    }
    state_->held = false;
    state_->timer.cancel();
    worker_.release_slots(std::move(state_->slots));  // (the timer, cancelled, no longer reads them)
    state_->slots = {};
}

void SlotHold::fire() {
    std::int64_t shortest = 0;
    for (const auto& [key, lease] : slots_.keys) shortest = shortest == 0 ? lease : std::min(shortest, lease);
    state_ = std::make_shared<State>(worker_, std::move(slots_));
    state_->every = std::chrono::microseconds(std::max<std::int64_t>(shortest / 3, 1000));
    // (Linked 50 to 100 ms ago: the first renewal is due a third of a lease after that.)
    constexpr std::chrono::microseconds lasted = std::chrono::milliseconds(100);
    schedule(state_, state_->every > 2 * lasted ? state_->every - lasted : state_->every / 2);
}

void SlotHold::schedule(const std::shared_ptr<State>& state, std::chrono::microseconds after) {
    state->timer.expires_after(after);
    state->timer.async_wait([state](boost::system::error_code ec) {
        if (ec || !state->held) return;
        state->worker.renew_slots(state->slots);
        schedule(state, state->every);
    });
}

namespace {

// Equal strings, in a time that does not depend on where they differ (the value may be a
// shared secret).
bool same_secret(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
    return diff == 0;
}

bool matches(const config::Exempt& exempt, const Exchange& x, const std::optional<sluice::net::IpAddress>& client) {
    if (exempt.empty()) return false;
    if (std::find(exempt.methods.begin(), exempt.methods.end(), x.key_method) != exempt.methods.end()) return true;
    if (client && std::any_of(exempt.client_ips.begin(), exempt.client_ips.end(),
                              [&](const sluice::net::Cidr& cidr) { return cidr.contains(*client); }))
        return true;
    if (!x.peer_trusted || exempt.headers.empty()) return false;
    for (const auto& field : x.request)
        for (const auto& header : exempt.headers)
            if (beast::iequals(field.name_string(), header.name) && same_secret(sv(field.value()), header.value))
                return true;
    return false;
}

}  // namespace

bool exempt_from_limits(Exchange& x) {
    const auto& route_exempt = x.route->exempt;
    if (x.cfg.exempt.empty() && route_exempt.empty()) return false;
    std::optional<sluice::net::IpAddress> client;
    if (!x.cfg.exempt.client_ips.empty() || !route_exempt.client_ips.empty()) client = sluice::net::IpAddress::parse(x.rec.client);
    if (!matches(x.cfg.exempt, x, client) && !matches(route_exempt, x, client)) return false;
    x.rec.decision = observe::AccessDecision::exempt;
    return true;
}

limit::RequestKeyValues key_values(Exchange& x) {
    // The Cookie fields, joined, when a limit of the route reads a cookie.
    if (!x.key_cookies_read && route_reads(x, config::KeyPart::Kind::cookie)) {
        x.key_cookies_read = true;
        for (const auto& f : x.request)
            if (f.name() == bhttp::field::cookie) {
                if (!x.key_cookies.empty()) x.key_cookies += "; ";
                x.key_cookies += sv(f.value());
            }
    }
    return limit::RequestKeyValues{x.rec.client, x.key_method, x.key_path,
                                   [&x](std::string_view name) -> std::optional<std::string_view> {
                                       return x.request.find(name);
                                   },
                                   true, x.key_query, x.key_cookies,
                                   [&x](std::string_view claim) -> std::optional<std::string_view> {
                                       if (!x.jwt_claims) return std::nullopt;
                                       return auth::claim_value(*x.jwt_claims, claim);
                                   }};
}

}  // namespace sluice::http
