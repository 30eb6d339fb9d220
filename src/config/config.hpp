// The configuration as plain structs. yaml-cpp types never leave src/config/.
// Every default here is the one documented in INTERFACE.md.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "config/access_format.hpp"
#include "config/diagnostic.hpp"
#include "net/cidr.hpp"
#include "time/calendar.hpp"

namespace sluice::config {

using Duration = std::chrono::milliseconds;
using namespace std::chrono_literals;

// host:port. host is kept as written, without IPv6 brackets ("::", "127.0.0.1", "redis").
struct Endpoint {
    std::string host;
    std::uint16_t port = 0;
    std::string str() const;  // "127.0.0.1:8080", "[::1]:8080"
};

enum class TlsVersion { tls1_2, tls1_3 };

// A certificate chain and its key, as PEM read from the files when the configuration was
// loaded (a reload reads them again).
struct TlsCertificate {
    std::string cert_file;  // as resolved (relative paths are relative to the config file)
    std::string key_file;
    std::string cert_pem;
    std::string key_pem;
    std::vector<std::string> names;  // DNS names of the certificate, lower-case (for SNI)
};

struct ListenerTls {
    std::vector<TlsCertificate> certificates;  // the first is the default; the others by SNI
    TlsVersion min_version = TlsVersion::tls1_2;
    Duration handshake_timeout = 10s;
};

// One `server.listen` entry: an address, and TLS when the entry has `tls`.
struct Listener : Endpoint {
    std::optional<ListenerTls> tls;
    // HTTP/2 to clients: a TLS entry offers ALPN h2 (then http/1.1) unless `http2: off`; a
    // plain one takes h2 with prior knowledge (the connection preface) with `http2:
    // prior_knowledge`, and HTTP/1.1 as before.
    bool http2 = false;
};

// server.http2: what one HTTP/2 connection may make sluice hold or do (http/h2_codec.hpp).
struct Http2Config {
    std::uint32_t max_concurrent_streams = 128;
    std::uint32_t max_header_list_bytes = 16384;
    std::uint32_t max_resets_per_second = 100;
    std::uint32_t max_control_frames_per_second = 1000;
    std::uint32_t stream_window_bytes = 65535;
};

struct ServerConfig {
    std::vector<Listener> listen{Listener{Endpoint{"0.0.0.0", 8080}, std::nullopt}};
    unsigned workers = 0;  // 0 = one per CPU core
    std::size_t max_connections = 10000;
    Duration header_timeout = 10s;
    Duration idle_timeout = 60s;
    std::size_t max_header_bytes = 16384;
    std::uint64_t max_body_bytes = 10485760;
    Duration shutdown_timeout = 30s;
    Duration tunnel_idle_timeout = 1h;  // a WebSocket tunnel with no byte either way is closed
    // Requests a leaky_bucket limit holds back at once in this instance; past it a request
    // that would have to wait is limited instead (it takes nothing).
    std::size_t max_waiting = 4096;
    Http2Config http2;
    // Where the running instance writes its pid (`sluice --reload` reads it); "" = none.
    // Relative paths are relative to the configuration file.
    std::string pid_file;
};

struct AdminConfig {
    std::optional<Endpoint> listen = Endpoint{"127.0.0.1", 9901};  // nullopt: disabled ("")
    // Bearer token /limits requires (Authorization: Bearer TOKEN). Without one, /limits is
    // served, and its resets only to loopback peers.
    std::string token;
};

struct ClientIpConfig {
    std::vector<net::Cidr> trusted_proxies;
};

enum class StoreType { redis, memory };
enum class OnError { allow, deny };
// standalone: one Redis at `address`; sentinel: the master `master_name` as `sentinels` say;
// cluster: a Redis Cluster found through the seed `nodes`.
enum class RedisMode { standalone, sentinel, cluster };

struct RedisConfig {
    RedisMode mode = RedisMode::standalone;
    std::optional<Endpoint> tcp = Endpoint{"127.0.0.1", 6379};  // standalone
    std::string unix_path;  // set (and tcp empty) for "unix:/path"
    std::string username;   // of the data nodes, in every mode
    std::string password;
    int database = 0;       // 0 only, in cluster mode
    std::vector<Endpoint> sentinels;  // sentinel mode
    std::string master_name;
    std::string sentinel_username;
    std::string sentinel_password;
    std::vector<Endpoint> nodes;      // cluster mode: seeds
    Duration timeout = 25ms;
    std::string key_prefix = "sluice";
    // A worker's batch due while its own call is in flight rides with the next call any
    // worker sends (limit/shared_batches.hpp). Not cluster.
    bool shared_batches = false;
};

// store.memory: the in-process store's bound (least recently used keys evicted past it).
struct MemoryStoreConfig {
    std::uint64_t max_keys = 400'000;  // and 256 bytes each of keys and state: ~100 MB (MemoryLimiter)
};
struct StoreConfig {
    StoreType type = StoreType::redis;
    RedisConfig redis;
    MemoryStoreConfig memory;
    OnError on_error = OnError::allow;
};

// HTTPS to an upstream's servers.
struct UpstreamTls {
    bool system_ca = true;       // ca: system (the distribution's bundle)
    std::string ca_file;         // else these certificates only
    std::string ca_pem;
    std::string server_name;     // SNI and the name checked; "" = each server's host
    bool verify = true;          // false: any certificate is accepted (logged at start)
    std::optional<TlsCertificate> client;  // mTLS: the certificate sluice presents
};

struct UpstreamConfig {
    std::string name;
    std::vector<Endpoint> servers;
    std::vector<Position> server_at;  // where each server is written (for --check's messages)
    std::optional<UpstreamTls> tls;
    Duration connect_timeout = 2s;
    Duration timeout = 30s;
    std::size_t max_idle = 64;
};

enum class Algorithm { token_bucket, sliding_window, fixed_window, concurrency, leaky_bucket };

// Every algorithm and the one name it has everywhere: the YAML, the decide script's plans, the
// admin look-up, /stats. In the order of Algorithm.
inline constexpr std::array<std::string_view, 5> algorithm_names{"token_bucket", "sliding_window", "fixed_window",
                                                                 "concurrency", "leaky_bucket"};
inline std::string_view algorithm_name(Algorithm algorithm) {
    return algorithm_names[static_cast<std::size_t>(algorithm)];
}

struct KeyPart {
    // client_net: the client's network (`client_ip/24`, `client_ip/64`, `client_ip/24/64`);
    // query, cookie: a query parameter's (decoded) or a cookie's value by name;
    // path_segment: the Nth (1-based) segment of the normalised path; jwt: a claim of the
    // verified bearer token (auth/jwt.hpp). New kinds go last:
    // the order is the canonical order of key parts, which the keys are written in.
    enum class Kind { client_ip, header, method, path, client_net, query, cookie, path_segment, jwt };
    Kind kind = Kind::client_ip;
    std::string header_name;  // header: lower-case; query, cookie, jwt (the claim): as written
    unsigned v4_prefix = 32;   // client_net: prefix lengths for IPv4 and IPv6 clients
    unsigned v6_prefix = 128;
    unsigned segment = 0;      // path_segment: 1-based
    bool operator==(const KeyPart&) const = default;
};

// An HTTP status, or a class of them ("4xx"): [first, last].
struct StatusRange {
    unsigned first = 0;
    unsigned last = 0;
    bool contains(unsigned status) const { return first <= status && status <= last; }
    bool operator==(const StatusRange&) const = default;
};

struct LimitConfig {
    std::string name;
    Algorithm algorithm = Algorithm::token_bucket;
    // token_bucket; leaky_bucket: `rate` per `per` is the outflow, `burst` the requests the
    // bucket holds (the one leaving now included)
    double rate = 0;         // tokens added per `per`
    Duration per = 1s;
    std::uint64_t burst = 0;  // capacity
    // leaky_bucket: how many requests of a burst past the first go at once, as nginx's
    // limit_req `delay` (`nodelay: true` sets it to burst - 1: no request waits); a request
    // whose wait would be longer than `max_wait` is limited at once.
    std::uint64_t delay = 0;
    bool nodelay = false;
    std::optional<Duration> max_wait;
    // sliding_window, fixed_window; concurrency: requests in flight at once
    std::uint64_t limit = 0;
    // concurrency: a slot whose instance died is taken back after this (a request running
    // longer renews it)
    Duration lease = 60s;
    Duration window = 0ms;  // fixed_window: unset (0) for a calendar window
    // fixed_window with `window: minute | hour | day | week | month`: calendar windows in
    // `time_zone` (UTC when not given).
    std::optional<time::CalendarUnit> calendar;
    std::shared_ptr<const time::TimeZone> time_zone;
    std::vector<KeyPart> key{KeyPart{}};  // default [client_ip]
    bool shadow = false;
    // What a request takes from the limit: `cost`, or with `cost: header:NAME` that header's
    // value (a whole number; missing or not one: `default_cost`).
    std::uint64_t cost = 1;
    std::string cost_header;  // lower-case; empty: the fixed `cost`
    std::uint64_t default_cost = 1;
    // `cost: {response_header: NAME | response_trailer: NAME, reserve: N}`: the response
    // reports what the request cost. `cost` is then the reservation (`reserve`, default 1),
    // taken when the request is admitted; the difference to what the response reports is
    // settled after it (server::LimitSet::settles): charged (perhaps past the capacity, a
    // debt the next requests wait out) or given back. A response that reports nothing (or
    // nothing readable) settles at the reservation.
    std::string response_cost_field;      // lower-case; empty: no response cost
    bool response_cost_trailer = false;  // the field is a trailer (the end of the body), not a header
    bool reports_cost() const { return !response_cost_field.empty(); }
    // Whether a request may take more than one unit: a cost from a header, from the response,
    // or a fixed one above 1 (a sliding window on Redis keeps such a request as one member
    // of that weight: lua/sliding_window.lua); and every limit of a route with plans
    // (`keeps_used`), whose plans share a limit's key: one plan's limit may take a header's
    // cost and another's one unit, and both must count the key alike.
    bool weighted() const { return !cost_header.empty() || reports_cost() || cost > 1 || keeps_used; }
    // A token bucket charged after the response (counted, a charge, a response cost) keeps
    // a debt below empty rather than reading it as merely empty (lua/token_bucket.lua).
    bool keeps_debt() const { return counted() || charges || reports_cost(); }
    // Not read from YAML: this copy of a limit with a response cost gives back `cost` units
    // its reservation took at this time (microseconds of the store's clock), as far as the
    // limit still holds them; 0: not a give-back.
    std::int64_t refund_at_us = 0;
    // Not read from YAML: a limit of a route with plans (the loader sets it). A token or
    // leaky bucket then keeps the interval its state is counted in with the state, so a
    // client moved to another plan keeps what it used (lua/token_bucket.lua).
    bool keeps_used = false;
    // `count: {statuses: [401, 403, "5xx"]}`: the limit is checked before forwarding (a
    // request it cannot admit is refused, taking nothing from any limit) and charged only
    // after the response, when its status is one of these. Empty: charged when admitted.
    std::vector<StatusRange> count_statuses;
    // Not read from YAML: this copy of a counted limit is the charge after the response
    // (server::LimitSet's charge sets, and settles with refund_at_us 0): the request's cost
    // is added whatever the limit holds.
    bool charges = false;
    bool counted() const { return !count_statuses.empty(); }
    // `ban: 15m`: a request this limit refuses bans its key for this long: every request of
    // the key on the route is refused at once meanwhile, without further counting.
    std::optional<Duration> ban;
    // Whether a response of `status` is charged to this counted limit.
    bool counts_status(unsigned status) const {
        for (const auto& range : count_statuses)
            if (range.contains(status)) return true;
        return false;
    }
};

// `exempt:` (top level and per route): a request that matches any entry skips every limit
// of its route, with no store call (decision `exempt`, no rate-limit headers).
struct ExemptHeader {
    std::string name;   // lower-case
    std::string value;  // compared exactly
};
struct Exempt {
    std::vector<net::Cidr> client_ips;  // the resolved client (client_ip)
    std::vector<ExemptHeader> headers;  // only from a peer in client_ip.trusted_proxies
    std::vector<std::string> methods;   // upper-case
    bool empty() const { return client_ips.empty() && headers.empty() && methods.empty(); }
};

struct RouteMatch {
    std::optional<std::string> path;         // exact
    std::optional<std::string> path_prefix;  // prefix
    std::vector<std::string> methods;        // upper-case; empty = any
    std::optional<std::string> host;         // lower-case; "*.example.com" matches subdomains
};

// Top-level `plans:`: named sets of limits. A limit that names no `key` is keyed on the
// identity of the route that uses the plan.
struct PlanConfig {
    std::string name;
    std::vector<LimitConfig> limits;
    std::vector<bool> keyed;  // per limit: it names its own `key`
};

// A route's plans (`identity` with `plan_map` and/or `plan_header`): a request is decided by
// one set of limits, its client's plan's, or a client's own overrides of them.
struct RoutePlans {
    KeyPart identity;
    std::string map_file;      // as resolved; "" without plan_map
    std::string header;        // plan_header, lower-case; "" without one (honoured from trusted peers)
    std::string default_plan;  // for identities the map does not name; "" = 401
    struct Set {
        std::string plan;
        std::string identity;  // the client whose overrides these are; "" for the plan's own
        std::vector<LimitConfig> limits;
    };
    // One set per top-level plan, in its order (keyed on `identity` where a limit names no
    // key), then one per client of the map with overrides.
    std::vector<Set> sets;
    std::unordered_map<std::string, std::size_t> by_plan;      // plan name -> set
    std::unordered_map<std::string, std::size_t> by_identity;  // from the map file -> set
    std::optional<std::size_t> default_set;
};

// forward: to the route's upstream. check: answered by sluice itself, 200 or limited, for
// another proxy asking whether to let a request through (nginx auth_request, Traefik
// ForwardAuth).
enum class RouteAction { forward, check };

struct RouteConfig {
    std::string name;
    RouteMatch match;
    RouteAction action = RouteAction::forward;
    std::optional<unsigned> limited_status;  // overrides responses.limited_status
    std::string upstream;                    // empty for action check
    std::size_t upstream_index = 0;  // index into Config::upstreams
    std::optional<OnError> on_error;
    std::vector<LimitConfig> limits;  // empty for a route with plans
    Exempt exempt;  // besides the top-level one
    std::shared_ptr<const RoutePlans> plans;  // null: every request is decided by `limits`
    bool has_limits() const { return plans != nullptr || !limits.empty(); }
};

// Top-level `jwt:` (keys that verify the tokens `jwt:CLAIM` key parts read).
enum class JwtAlg { hs256, rs256, es256 };
struct JwtKeyConfig {
    std::optional<JwtAlg> alg;  // unset for a JWKS file (each key names or implies its own)
    std::string secret;         // HS256
    std::string pem_file;       // RS256, ES256: a PEM public key (as resolved)
    std::string pem;
    std::string jwks_file;      // a JWKS file (RSA and EC P-256 keys)
    std::string jwks;
    std::string kid;            // optional: a token naming a kid uses only keys of that kid
};
struct JwtConfig {
    std::vector<JwtKeyConfig> keys;
    Duration leeway = 30s;  // for exp and nbf
};

enum class HeaderStyle { ietf, legacy, both, none };

struct ResponsesConfig {
    unsigned limited_status = 429;
    HeaderStyle headers = HeaderStyle::ietf;
};

enum class LogFormat { text, json };

struct LoggingConfig {
    std::string level = "info";  // trace | debug | info | warn | error
    std::string access_log = "stdout";  // stdout | off | path
    LogFormat format = LogFormat::text;
    AccessFormat access_format;       // classic: the standard line
    bool local_time = false;          // time_zone: the lines' times in UTC ("Z") or local time
    Duration summary_interval = 10s;  // 0 disables
};

struct Config {
    std::string source_path;
    ServerConfig server;
    AdminConfig admin;
    ClientIpConfig client_ip;
    StoreConfig store;
    std::vector<UpstreamConfig> upstreams;  // file order
    std::vector<RouteConfig> routes;        // file order
    Exempt exempt;                          // for every route
    std::vector<PlanConfig> plans;          // file order
    JwtConfig jwt;
    ResponsesConfig responses;
    LoggingConfig logging;
};

}  // namespace sluice::config
