#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "config/duration.hpp"
#include "config/loader.hpp"

using namespace sluice::config;
using namespace std::chrono_literals;

namespace {

std::vector<std::string> messages_of(const std::vector<Diagnostic>& diagnostics) {
    std::vector<std::string> messages;
    for (const Diagnostic& d : diagnostics) messages.push_back(d.str());
    return messages;
}

template <typename E>
std::vector<std::string> endpoints_of(const std::vector<E>& endpoints) {
    std::vector<std::string> texts;
    for (const Endpoint& e : endpoints) texts.push_back(e.str());
    return texts;
}

// Every key of INTERFACE.md, none at its default.
const char* const full_config = R"(server:
  listen: ["127.0.0.1:0", "[::1]:8443"]
  workers: 3
  max_connections: 500
  header_timeout: 5s
  idle_timeout: 2m
  max_header_bytes: 8192
  max_body_bytes: 0
  shutdown_timeout: 250ms
admin:
  listen: "[::1]:9902"
client_ip:
  trusted_proxies: ["10.1.2.3/8", "fd00::/8", "192.0.2.1"]
store:
  type: memory
  redis:
    address: "redis.internal:6380"
    username: sluice
    password: "s3cret: yes"
    database: 2
    timeout: 50ms
    key_prefix: rl
    shared_batches: true
  memory:
    max_keys: 5000
  on_error: deny
upstreams:
  web:
    servers: ["10.0.0.1:80", "[2001:db8::1]:8080"]
    connect_timeout: 1s
    timeout: 1h
    max_idle: 0
  auth:
    servers: ["auth:9000"]
routes:
  - name: login
    match:
      path: /login
      methods: [post, Get]
      host: "*.Example.COM"
    upstream: auth
    on_error: allow
    limits:
      - name: burst
        algorithm: token_bucket
        rate: 0.5
        per: 1m
        burst: 3
        key: [client_ip, method, path, "header:X-Api-Key"]
        shadow: true
      - name: day
        algorithm: sliding_window
        limit: 1000
        window: 1d
        key: []
  - name: rest
    match:
      path_prefix: /
    upstream: web
responses:
  limited_status: 503
  headers: both
logging:
  level: debug
  access_log: /var/log/sluice/access.log
  format: json
  summary_interval: 0
)";

}  // namespace

TEST_CASE("loader: a config with every key maps onto the structs", "[config][loader]") {
    const auto result = load_string(full_config, "full.yaml");
    INFO(messages_of(result.diagnostics).size());
    REQUIRE(result.diagnostics.empty());
    REQUIRE(result.ok());
    const Config& config = *result.config;
    CHECK(config.source_path == "full.yaml");

    CHECK(endpoints_of(config.server.listen) == std::vector<std::string>{"127.0.0.1:0", "[::1]:8443"});
    CHECK(config.server.workers == 3);
    CHECK(config.server.max_connections == 500);
    CHECK(config.server.header_timeout == 5s);
    CHECK(config.server.idle_timeout == 2min);
    CHECK(config.server.max_header_bytes == 8192);
    CHECK(config.server.max_body_bytes == 0);
    CHECK(config.server.shutdown_timeout == 250ms);

    REQUIRE(config.admin.listen);
    CHECK(config.admin.listen->host == "::1");
    CHECK(config.admin.listen->port == 9902);

    REQUIRE(config.client_ip.trusted_proxies.size() == 3);
    CHECK(config.client_ip.trusted_proxies[0].str() == "10.0.0.0/8");
    CHECK(config.client_ip.trusted_proxies[1].str() == "fd00::/8");
    CHECK(config.client_ip.trusted_proxies[2].str() == "192.0.2.1/32");

    CHECK(config.store.type == StoreType::memory);
    CHECK(config.store.memory.max_keys == 5000);
    REQUIRE(config.store.redis.tcp);
    CHECK(config.store.redis.tcp->str() == "redis.internal:6380");
    CHECK(config.store.redis.unix_path.empty());
    CHECK(config.store.redis.username == "sluice");
    CHECK(config.store.redis.password == "s3cret: yes");
    CHECK(config.store.redis.database == 2);
    CHECK(config.store.redis.timeout == 50ms);
    CHECK(config.store.redis.key_prefix == "rl");
    CHECK(config.store.redis.shared_batches);
    CHECK(config.store.on_error == OnError::deny);

    REQUIRE(config.upstreams.size() == 2);
    const UpstreamConfig& web = config.upstreams[0];  // file order, not alphabetical
    CHECK(web.name == "web");
    CHECK(endpoints_of(web.servers) == std::vector<std::string>{"10.0.0.1:80", "[2001:db8::1]:8080"});
    CHECK(web.connect_timeout == 1s);
    CHECK(web.timeout == 1h);
    CHECK(web.max_idle == 0);
    const UpstreamConfig& auth = config.upstreams[1];
    CHECK(auth.name == "auth");
    CHECK(endpoints_of(auth.servers) == std::vector<std::string>{"auth:9000"});
    CHECK(auth.connect_timeout == 2s);
    CHECK(auth.timeout == 30s);
    CHECK(auth.max_idle == 64);

    REQUIRE(config.routes.size() == 2);
    const RouteConfig& login = config.routes[0];
    CHECK(login.name == "login");
    CHECK(login.match.path == std::optional<std::string>("/login"));
    CHECK_FALSE(login.match.path_prefix);
    CHECK(login.match.methods == std::vector<std::string>{"POST", "GET"});
    CHECK(login.match.host == std::optional<std::string>("*.example.com"));
    CHECK(login.upstream == "auth");
    CHECK(login.upstream_index == 1);
    CHECK(login.on_error == std::optional<OnError>(OnError::allow));
    REQUIRE(login.limits.size() == 2);

    const LimitConfig& burst = login.limits[0];
    CHECK(burst.name == "burst");
    CHECK(burst.algorithm == Algorithm::token_bucket);
    CHECK(burst.rate == 0.5);
    CHECK(burst.per == 1min);
    CHECK(burst.burst == 3);
    CHECK(burst.shadow);
    REQUIRE(burst.key.size() == 4);
    CHECK(burst.key[0].kind == KeyPart::Kind::client_ip);
    CHECK(burst.key[1].kind == KeyPart::Kind::method);
    CHECK(burst.key[2].kind == KeyPart::Kind::path);
    CHECK(burst.key[3].kind == KeyPart::Kind::header);
    CHECK(burst.key[3].header_name == "x-api-key");

    const LimitConfig& day = login.limits[1];
    CHECK(day.name == "day");
    CHECK(day.algorithm == Algorithm::sliding_window);
    CHECK(day.limit == 1000);
    CHECK(day.window == 24h);
    CHECK(day.key.empty());  // [] = one counter for every client
    CHECK_FALSE(day.shadow);

    const RouteConfig& rest = config.routes[1];
    CHECK(rest.match.path_prefix == std::optional<std::string>("/"));
    CHECK_FALSE(rest.match.path);
    CHECK(rest.match.methods.empty());
    CHECK_FALSE(rest.match.host);
    CHECK(rest.upstream_index == 0);
    CHECK_FALSE(rest.on_error);
    CHECK(rest.limits.empty());

    CHECK(config.responses.limited_status == 503);
    CHECK(config.responses.headers == HeaderStyle::both);
    CHECK(config.logging.level == "debug");
    CHECK(config.logging.access_log == "/var/log/sluice/access.log");
    CHECK(config.logging.format == LogFormat::json);
    CHECK(config.logging.summary_interval == 0ms);
}

TEST_CASE("loader: missing sections take the documented defaults", "[config][loader]") {
    const auto result = load_string("routes: []\n", "empty.yaml");
    REQUIRE(result.ok());
    const Config& config = *result.config;
    CHECK(config.source_path == "empty.yaml");
    CHECK(endpoints_of(config.server.listen) == std::vector<std::string>{"0.0.0.0:8080"});
    CHECK(config.server.workers == 0);
    CHECK(config.server.max_connections == 10000);
    CHECK(config.server.header_timeout == 10s);
    CHECK(config.server.idle_timeout == 60s);
    CHECK(config.server.max_header_bytes == 16384);
    CHECK(config.server.max_body_bytes == 10485760);
    CHECK(config.server.shutdown_timeout == 30s);
    CHECK(config.server.tunnel_idle_timeout == 1h);
    REQUIRE(config.admin.listen);
    CHECK(config.admin.listen->str() == "127.0.0.1:9901");
    CHECK(config.client_ip.trusted_proxies.empty());
    CHECK(config.store.type == StoreType::redis);
    CHECK(config.store.memory.max_keys == 400000);
    REQUIRE(config.store.redis.tcp);
    CHECK(config.store.redis.tcp->str() == "127.0.0.1:6379");
    CHECK(config.store.redis.username.empty());
    CHECK(config.store.redis.password.empty());
    CHECK(config.store.redis.database == 0);
    CHECK(config.store.redis.timeout == 25ms);
    CHECK(config.store.redis.key_prefix == "sluice");
    CHECK(config.store.on_error == OnError::allow);
    CHECK(config.upstreams.empty());
    CHECK(config.routes.empty());
    CHECK(config.responses.limited_status == 429);
    CHECK(config.responses.headers == HeaderStyle::ietf);
    CHECK(config.logging.level == "info");
    CHECK(config.logging.access_log == "stdout");
    CHECK(config.logging.format == LogFormat::text);
    CHECK(config.logging.summary_interval == 10s);
}

TEST_CASE("loader: store.redis in sentinel and cluster mode", "[config][loader]") {
    const auto sentinel = load_string("store:\n  redis:\n    mode: sentinel\n    sentinels: [\"10.0.0.1:26379\", "
                                      "\"sentinel-b:26380\"]\n    master_name: sluice-master\n    sentinel_username: s\n"
                                      "    sentinel_password: sp\n    password: dp\n    database: 2\n",
                                      "s.yaml");
    REQUIRE(sentinel.ok());
    const auto& s = sentinel.config->store.redis;
    CHECK(s.mode == sluice::config::RedisMode::sentinel);
    CHECK(endpoints_of(s.sentinels) == std::vector<std::string>{"10.0.0.1:26379", "sentinel-b:26380"});
    CHECK(s.master_name == "sluice-master");
    CHECK(s.sentinel_username == "s");
    CHECK(s.sentinel_password == "sp");
    CHECK(s.password == "dp");
    CHECK(s.database == 2);

    const auto cluster = load_string("store:\n  redis:\n    mode: cluster\n    nodes: [\"127.0.0.1:7000\", "
                                     "\"127.0.0.1:7001\"]\n    database: 0\n",
                                     "c.yaml");
    REQUIRE(cluster.ok());
    CHECK(cluster.config->store.redis.mode == sluice::config::RedisMode::cluster);
    CHECK(endpoints_of(cluster.config->store.redis.nodes) == std::vector<std::string>{"127.0.0.1:7000", "127.0.0.1:7001"});

    const auto standalone = load_string("store:\n  redis:\n    mode: standalone\n", "d.yaml");
    REQUIRE(standalone.ok());
    CHECK(standalone.config->store.redis.mode == sluice::config::RedisMode::standalone);
}

TEST_CASE("loader: a partial section keeps the defaults of the keys it omits", "[config][loader]") {
    const auto result = load_string("server:\n  workers: 4\nstore:\n  redis: {database: 3}\nadmin:\nlogging: {}\n", "p.yaml");
    REQUIRE(result.ok());
    CHECK(result.config->server.workers == 4);
    CHECK(result.config->server.max_connections == 10000);
    CHECK(endpoints_of(result.config->server.listen) == std::vector<std::string>{"0.0.0.0:8080"});
    CHECK(result.config->store.redis.database == 3);
    CHECK(result.config->store.redis.timeout == 25ms);
    CHECK(result.config->admin.listen->str() == "127.0.0.1:9901");
    CHECK(result.config->logging.summary_interval == 10s);
}

TEST_CASE("loader: limit defaults and value normalisation", "[config][loader]") {
    const auto result = load_string(R"(upstreams: {app: {servers: ["h:1"]}}
admin: {listen: ""}
store: {redis: {address: "unix:/run/redis/redis.sock"}}
routes:
  - name: r
    match: {path_prefix: /}
    upstream: app
    limits:
      - {name: tb, algorithm: token_bucket, rate: 10, burst: 20}
      - {name: sw, algorithm: sliding_window, limit: 5, window: "30s", shadow: FALSE}
)", "n.yaml");
    REQUIRE(result.ok());
    CHECK_FALSE(result.config->admin.listen);  // "" disables the admin port
    CHECK_FALSE(result.config->store.redis.tcp);
    CHECK(result.config->store.redis.unix_path == "/run/redis/redis.sock");
    const auto& limits = result.config->routes.at(0).limits;
    REQUIRE(limits.size() == 2);
    CHECK(limits[0].per == 1s);  // per defaults to 1s
    CHECK(limits[0].rate == 10);
    CHECK(limits[0].burst == 20);
    REQUIRE(limits[0].key.size() == 1);  // key defaults to [client_ip]
    CHECK(limits[0].key[0].kind == KeyPart::Kind::client_ip);
    CHECK(limits[1].window == 30s);
    CHECK(limits[1].limit == 5);
    CHECK_FALSE(limits[1].shadow);
}

TEST_CASE("loader: route paths are read as requests' paths are normalised", "[config][loader]") {
    const auto result = load_string("upstreams: {app: {servers: [\"h:1\"]}}\n"
                                    "routes:\n"
                                    "  - {name: a, match: {path_prefix: \"/caf\xc3\xa9/\"}, upstream: app}\n"
                                    "  - {name: b, match: {path: \"/x//%6cogin/./%c3%a9\"}, upstream: app}\n"
                                    "  - {name: c, match: {path_prefix: \"/.\"}, upstream: app}\n"
                                    "  - {name: d, match: {path_prefix: \"/api/..\"}, upstream: app}\n",
                                    "p.yaml");
    REQUIRE(result.ok());
    CHECK(result.config->routes.at(0).match.path_prefix == std::optional<std::string>("/caf%C3%A9/"));
    CHECK(result.config->routes.at(1).match.path == std::optional<std::string>("/x/login/%C3%A9"));
    // A prefix's last segment may be cut short: `/.` starts `/.git`, it is not `/`.
    CHECK(result.config->routes.at(2).match.path_prefix == std::optional<std::string>("/."));
    CHECK(result.config->routes.at(3).match.path_prefix == std::optional<std::string>("/api/.."));
}

TEST_CASE("loader: count statuses and classes", "[config][loader][count]") {
    const auto result = load_string(R"(upstreams: {app: {servers: ["h:1"]}}
routes:
  - name: login
    match: {path: /login}
    upstream: app
    limits:
      - {name: failures, algorithm: sliding_window, limit: 5, window: 15m, count: {statuses: [401, 403, "5xx", 4XX]}}
      - {name: all, algorithm: token_bucket, rate: 10, burst: 20}
)", "c.yaml");
    REQUIRE(result.ok());
    const auto& limits = result.config->routes.at(0).limits;
    REQUIRE(limits[0].count_statuses.size() == 4);
    CHECK(limits[0].count_statuses[0] == sluice::config::StatusRange{401, 401});
    CHECK(limits[0].count_statuses[2] == sluice::config::StatusRange{500, 599});
    CHECK(limits[0].count_statuses[3] == sluice::config::StatusRange{400, 499});
    CHECK(limits[0].counted());
    CHECK(limits[0].counts_status(401));
    CHECK(limits[0].counts_status(404));
    CHECK(limits[0].counts_status(599));
    CHECK_FALSE(limits[0].counts_status(200));
    CHECK_FALSE(limits[0].counts_status(399));
    CHECK_FALSE(limits[1].counted());
    CHECK_FALSE(limits[0].charges);
}

TEST_CASE("loader: a cost the response reports, with its reservation", "[config][loader][settle]") {
    const auto result = load_string(R"(upstreams: {app: {servers: ["h:1"]}}
routes:
  - name: llm
    match: {path_prefix: /v1}
    upstream: app
    limits:
      - {name: tokens, algorithm: token_bucket, rate: 1000, per: 1m, burst: 100000,
         cost: {response_header: X-Tokens-Used, reserve: 500}}
      - {name: daily, algorithm: fixed_window, limit: 1000000, window: day, cost: {response_trailer: X-Usage}}
      - {name: calls, algorithm: sliding_window, limit: 60, window: 1m}
)", "c.yaml");
    REQUIRE(result.ok());
    const auto& limits = result.config->routes.at(0).limits;
    CHECK(limits[0].reports_cost());
    CHECK(limits[0].response_cost_field == "x-tokens-used");
    CHECK_FALSE(limits[0].response_cost_trailer);
    CHECK(limits[0].cost == 500);  // the reservation, taken when admitted
    CHECK(limits[0].cost_header.empty());
    CHECK(limits[1].response_cost_field == "x-usage");
    CHECK(limits[1].response_cost_trailer);
    CHECK(limits[1].cost == 1);  // reserve defaults to 1: a used-up limit refuses
    CHECK_FALSE(limits[2].reports_cost());
    CHECK(limits[0].refund_at_us == 0);
}

TEST_CASE("loader: warnings do not fail the load", "[config][loader]") {
    struct WarningCase {
        std::string yaml;
        std::vector<std::string> diagnostics;
    };
    const std::string upstream = "upstreams: {app: {servers: [\"h:1\"]}}\n";
    const std::vector<WarningCase> cases{
        {"routes: []\n", {"w.yaml:1:9: warning: no routes: every request answers 404"}},
        {"routes:\n", {"w.yaml:1:1: warning: no routes: every request answers 404"}},
        {upstream + "routes:\n  - {name: all, match: {path_prefix: /}, upstream: app}\n"
                    "  - {name: api, match: {path_prefix: /api}, upstream: app}\n",
         {"w.yaml:4:5: warning: route 'api' is unreachable: earlier route 'all' (line 3) matches every request it would match"}},
        {upstream + "routes:\n  - {name: a, match: {path: /x}, upstream: app}\n"
                    "  - {name: b, match: {path: /x, methods: [GET]}, upstream: app}\n",
         {"w.yaml:4:5: warning: route 'b' is unreachable: earlier route 'a' (line 3) matches every request it would match"}},
        {upstream + "routes:\n  - {name: a, match: {path_prefix: /, methods: [GET, POST]}, upstream: app}\n"
                    "  - {name: b, match: {path_prefix: /b, methods: [post]}, upstream: app}\n"
                    "  - {name: c, match: {path_prefix: /c, methods: [PUT]}, upstream: app}\n"
                    "  - {name: d, match: {path_prefix: /d, host: Example.com}, upstream: app}\n",
         {"w.yaml:4:5: warning: route 'b' is unreachable: earlier route 'a' (line 3) matches every request it would match"}},
        {upstream + "routes:\n  - {name: h, match: {path_prefix: /, host: a.com}, upstream: app}\n"
                    "  - {name: g, match: {path_prefix: /g, host: A.COM}, upstream: app}\n"
                    "  - {name: other, match: {path_prefix: /g, host: b.com}, upstream: app}\n",
         {"w.yaml:4:5: warning: route 'g' is unreachable: earlier route 'h' (line 3) matches every request it would match"}},
        // Every limit keyed on a header: leaving the header out escapes them all.
        {upstream + "routes:\n  - name: api\n    match: {path_prefix: /}\n    upstream: app\n    limits:\n"
                    "      - {name: a, algorithm: token_bucket, rate: 1, burst: 1, key: [client_ip, \"header:X-Api-Key\"]}\n"
                    "      - {name: b, limit: 5, window: 1m, algorithm: sliding_window, key: [\"header:x-tenant\"]}\n",
         {"w.yaml:7:7: warning: every limit of route 'api' is keyed on a header (x-api-key, x-tenant): a request without "
          "it is not limited at all; add a limit keyed on client_ip alone to cover such requests"}},
        // Exempt headers count only from trusted proxies: none configured, none counts.
        {upstream + "routes:\n  - {name: a, match: {path_prefix: /}, upstream: app}\n"
                    "exempt:\n  headers: [{name: X-Internal, value: yes}]\n",
         {"w.yaml:5:12: warning: exempt headers count only from a peer in client_ip.trusted_proxies, and there is none: "
          "no request is exempt by a header"}},
        {upstream + "client_ip: {trusted_proxies: [10.0.0.0/8]}\nroutes:\n  - {name: a, match: {path_prefix: /}, upstream: app}\n"
                    "exempt:\n  headers: [{name: X-Internal, value: yes}]\n",
         {}},
        {upstream + "routes:\n  - name: api\n    match: {path_prefix: /}\n    upstream: app\n    limits:\n"
                    "      - {name: a, algorithm: token_bucket, rate: 1, burst: 1, key: [\"query:key\"]}\n"
                    "      - {name: b, algorithm: token_bucket, rate: 1, burst: 1, key: [path_segment:2, client_ip]}\n"
                    "      - {name: c, algorithm: token_bucket, rate: 1, burst: 1, key: [\"header:X-A\", \"cookie:s\"]}\n",
         {"w.yaml:7:7: warning: every limit of route 'api' is keyed on something a request may leave out (query:key, "
          "path_segment:2, x-a): a request without it is not limited at all; add a limit keyed on client_ip alone to "
          "cover such requests"}},
        // One limit that every request meets: no warning.
        {upstream + "routes:\n  - name: api\n    match: {path_prefix: /}\n    upstream: app\n    limits:\n"
                    "      - {name: a, algorithm: token_bucket, rate: 1, burst: 1, key: [\"header:x-api-key\"]}\n"
                    "      - {name: b, algorithm: token_bucket, rate: 1, burst: 1}\n",
         {}},
    };
    for (const auto& c : cases) {
        CAPTURE(c.yaml);
        const auto result = load_string(c.yaml, "w.yaml");
        CHECK(result.ok());
        CHECK(messages_of(result.diagnostics) == c.diagnostics);
    }
}

TEST_CASE("loader: exempt at the top level and per route", "[config][loader]") {
    const auto result = load_string(R"(upstreams: {app: {servers: ["h:1"]}}
client_ip: {trusted_proxies: [10.0.0.0/8]}
exempt:
  client_ips: [192.0.2.0/24, "2001:db8::/32", 198.51.100.7]
  headers: [{name: X-Internal, value: "s3cret token"}]
  methods: [options]
routes:
  - name: api
    match: {path_prefix: /}
    upstream: app
    exempt: {methods: [HEAD, head, GET]}
)", "e.yaml");
    REQUIRE(result.ok());
    const auto& top = result.config->exempt;
    REQUIRE(top.client_ips.size() == 3);
    CHECK(top.client_ips[1].contains(*sluice::net::IpAddress::parse("2001:db8::1")));
    CHECK(top.client_ips[2].contains(*sluice::net::IpAddress::parse("198.51.100.7")));
    CHECK_FALSE(top.client_ips[2].contains(*sluice::net::IpAddress::parse("198.51.100.8")));
    REQUIRE(top.headers.size() == 1);
    CHECK(top.headers[0].name == "x-internal");
    CHECK(top.headers[0].value == "s3cret token");
    CHECK(top.methods == std::vector<std::string>{"OPTIONS"});
    const auto& route = result.config->routes[0].exempt;
    CHECK(route.methods == std::vector<std::string>{"HEAD", "GET"});
    CHECK(route.client_ips.empty());
    CHECK(result.config->routes[0].exempt.headers.empty());
}

TEST_CASE("loader: diagnostics print as FILE:LINE:COL", "[config][loader]") {
    CHECK(Diagnostic{"a.yaml", 3, 7, "bad", false}.str() == "a.yaml:3:7: bad");
    CHECK(Diagnostic{"a.yaml", 3, 7, "odd", true}.str() == "a.yaml:3:7: warning: odd");
    CHECK(Diagnostic{"a.yaml", 0, 0, "cannot read: Permission denied", false}.str() ==
          "a.yaml: cannot read: Permission denied");
}

TEST_CASE("loader: files", "[config][loader]") {
    SECTION("a missing file is an I/O error") {
        const auto result = load_file("/nonexistent/sluice.yaml");
        CHECK_FALSE(result.ok());
        CHECK(result.io_error);
        CHECK(messages_of(result.diagnostics) ==
              std::vector<std::string>{"/nonexistent/sluice.yaml: cannot read: No such file or directory"});
    }
    SECTION("a directory is an I/O error") {
        const auto result = load_file(SLUICE_SOURCE_DIR "/conf");
        CHECK_FALSE(result.ok());
        CHECK(result.io_error);
        CHECK(messages_of(result.diagnostics) ==
              std::vector<std::string>{SLUICE_SOURCE_DIR "/conf: cannot read: Is a directory"});
    }
    SECTION("the example config loads without errors or warnings") {
        const std::string path = SLUICE_SOURCE_DIR "/conf/sluice.yaml";
        const auto result = load_file(path);
        CHECK(messages_of(result.diagnostics).empty());
        REQUIRE(result.ok());
        const Config& config = *result.config;
        CHECK(config.source_path == path);
        CHECK(endpoints_of(config.server.listen) == std::vector<std::string>{"127.0.0.1:8080", "127.0.0.1:8443"});
        CHECK_FALSE(config.server.listen[0].tls);
        REQUIRE(config.server.listen[1].tls);  // conf/dev-tls/, made by scripts/dev_tls.sh
        REQUIRE(config.server.listen[1].tls->certificates.size() == 1);
        CHECK(config.server.listen[1].tls->certificates[0].cert_file == SLUICE_SOURCE_DIR "/conf/dev-tls/localhost.pem");
        CHECK(config.server.listen[1].tls->certificates[0].names == std::vector<std::string>{"localhost"});
        CHECK(config.admin.listen->str() == "127.0.0.1:9901");
        CHECK(config.store.type == StoreType::redis);
        CHECK(config.store.redis.tcp->str() == "127.0.0.1:6379");
        REQUIRE(config.upstreams.size() == 1);
        CHECK(endpoints_of(config.upstreams[0].servers) == std::vector<std::string>{"127.0.0.1:8081"});
        REQUIRE(config.routes.size() == 5);
        CHECK(config.server.max_waiting == 4096);
        CHECK(config.routes[0].name == "login");
        CHECK(config.routes[0].match.methods == std::vector<std::string>{"POST", "GET"});
        REQUIRE(config.routes[0].limits.size() == 3);
        CHECK(config.routes[0].limits[0].rate == 5);
        CHECK(config.routes[0].limits[0].burst == 10);
        CHECK(config.routes[0].limits[1].limit == 30);
        CHECK(config.routes[0].limits[1].window == 1min);
        CHECK(config.routes[0].limits[2].counts_status(401));
        CHECK_FALSE(config.routes[0].limits[2].counts_status(200));
        CHECK(config.routes[1].name == "api");
        REQUIRE(config.routes[1].limits.size() == 3);
        // minute is per client: with every limit keyed on the API key, a request without one
        // would not be limited (--check warns about such routes).
        REQUIRE(config.routes[1].limits[0].key.size() == 1);
        CHECK(config.routes[1].limits[0].key[0].kind == sluice::config::KeyPart::Kind::client_ip);
        CHECK(config.routes[1].limits[1].key[0].header_name == "x-api-key");
        const LimitConfig& daily = config.routes[1].limits[1];
        CHECK(daily.algorithm == Algorithm::fixed_window);
        REQUIRE(daily.calendar);
        CHECK(*daily.calendar == sluice::time::CalendarUnit::day);
        REQUIRE(daily.time_zone);
        CHECK(daily.time_zone->name() == "UTC");
        CHECK(daily.limit == 10000);
        CHECK(daily.cost == 1);
        const LimitConfig& in_flight = config.routes[1].limits[2];
        CHECK(in_flight.algorithm == Algorithm::concurrency);
        CHECK(in_flight.limit == 20);
        CHECK(in_flight.lease == 60s);
        const LimitConfig& shape = config.routes[2].limits.at(0);
        CHECK(shape.algorithm == Algorithm::leaky_bucket);
        CHECK(shape.rate == 10);
        CHECK(shape.burst == 40);
        CHECK(shape.delay == 0);
        CHECK_FALSE(shape.nodelay);
        CHECK(shape.max_wait == std::optional<std::chrono::milliseconds>(3s));
        CHECK(shape.key.empty());
        CHECK(config.routes[3].name == "static");
        CHECK(config.routes[3].limits.empty());
        CHECK(config.routes[4].name == "default");
        CHECK(config.routes[4].match.path_prefix == std::optional<std::string>("/"));
        CHECK(config.routes[4].limits.at(0).burst == 100);
    }
}
