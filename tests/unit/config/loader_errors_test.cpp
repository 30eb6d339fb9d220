// Every bad configuration gets exactly the message and position listed here (nginx-tests style:
// a table of inputs and what each must produce).
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "config/loader.hpp"

using sluice::config::Diagnostic;
using sluice::config::load_string;

namespace {

struct BadCase {
    std::string yaml;
    std::vector<std::string> errors;  // "LINE:COL: message", in file order
};

std::vector<std::string> errors_of(const std::vector<Diagnostic>& diagnostics) {
    std::vector<std::string> errors;
    for (const Diagnostic& d : diagnostics)
        if (!d.warning) errors.push_back(std::to_string(d.line) + ":" + std::to_string(d.column) + ": " + d.message);
    return errors;
}

void check_cases(const std::vector<BadCase>& cases) {
    for (const auto& c : cases) {
        CAPTURE(c.yaml);
        const auto result = load_string(c.yaml, "t.yaml");
        CHECK_FALSE(result.ok());
        CHECK_FALSE(result.io_error);
        CHECK(errors_of(result.diagnostics) == c.errors);
    }
}

// Lines 1-6 of the route cases below: one upstream and the start of one route.
const std::string route_head = R"(upstreams:
  app: {servers: ["127.0.0.1:8081"]}
routes:
  - name: r
    match: {path_prefix: /}
    upstream: app
)";

}  // namespace

TEST_CASE("loader errors: YAML syntax and document shape", "[config][loader]") {
    check_cases({
        {"server:\n  listen: [\"a:1\"\nadmin: {}\n", {"3:1: invalid YAML: end of sequence flow not found"}},
        {"server:\n\tworkers: 2\n",
         {"2:9: invalid YAML: illegal map value (a tab in the indentation: YAML allows only spaces)"}},
        {"logging: {level: info\n", {"2:1: invalid YAML: end of map flow not found"}},
        {"a: *nowhere\n", {"1:4: invalid YAML: the referenced anchor is not defined"}},
        {"server: {}\n---\nadmin: {}\n", {"3:1: only one YAML document is allowed"}},
        // yaml-cpp 0.7's LoadAll loops forever, allocating, on these (yaml-cpp #1040).
        {",", {"1:1: invalid YAML: unexpected character"}},
        {",,\n", {"1:1: invalid YAML: unexpected character"}},
        {"\n\n  ,", {"3:3: invalid YAML: unexpected character"}},
        {"- server\n",
         {"1:1: the top level must be a map of sections (server, admin, client_ip, store, upstreams, routes, "
          "exempt, jwt, plans, responses, logging), got a list"}},
        {"just text\n",
         {"1:1: the top level must be a map of sections (server, admin, client_ip, store, upstreams, routes, "
          "exempt, jwt, plans, responses, logging), got 'just text'"}},
        {"server: {}\nserver: {}\n", {"2:1: duplicate key 'server' (first at line 1)"}},
        {"? [a]\n: 1\n", {"1:3: keys must be plain names, got a list"}},
        // Nothing at all: a file caught while it is written, not every default (no routes).
        {"", {"1:1: the file is empty: no section is set (a file still being written? for no routes on purpose, "
              "write `routes: []`)"}},
        {"# nothing but a comment\n\n", {"1:1: the file is empty: no section is set (a file still being written? for "
                                         "no routes on purpose, write `routes: []`)"}},
        {"~\n", {"1:1: the file is empty: no section is set (a file still being written? for no routes on purpose, "
                 "write `routes: []`)"}},
    });
}

TEST_CASE("loader errors: unknown keys at every level, with suggestions", "[config][loader]") {
    check_cases({
        {"rotues: []\n", {"1:1: unknown key 'rotues' at the top level (did you mean 'routes'?)"}},
        {"frobnicate: 1\n",
         {"1:1: unknown key 'frobnicate' at the top level (known keys: server, admin, client_ip, store, "
          "upstreams, routes, exempt, jwt, plans, responses, logging)"}},
        {"server:\n  listne: [\"a:1\"]\n", {"2:3: unknown key 'listne' in server (did you mean 'listen'?)"}},
        {"admin:\n  address: \"\"\n", {"2:3: unknown key 'address' in admin (known keys: listen, token)"}},
        {"client_ip:\n  trusted_proxy: []\n",
         {"2:3: unknown key 'trusted_proxy' in client_ip (did you mean 'trusted_proxies'?)"}},
        {"store:\n  typ: memory\n", {"2:3: unknown key 'typ' in store (did you mean 'type'?)"}},
        {"store:\n  redis:\n    db: 1\n",
         {"3:5: unknown key 'db' in store.redis (known keys: mode, address, username, password, database, timeout, "
          "key_prefix, sentinels, master_name, sentinel_username, sentinel_password, nodes, shared_batches)"}},
        {"upstreams:\n  app:\n    servers: [\"h:1\"]\n    timout: 1s\n",
         {"4:5: unknown key 'timout' in upstream (did you mean 'timeout'?)"}},
        {"responses:\n  status: 429\n", {"2:3: unknown key 'status' in responses (known keys: limited_status, headers)"}},
        {"logging:\n  levle: info\n", {"2:3: unknown key 'levle' in logging (did you mean 'level'?)"}},
        {route_head + "    limit: []\n", {"7:5: unknown key 'limit' in route (did you mean 'limits'?)"}},
        {route_head.substr(0, route_head.find("    match")) + "    match: {path_prefix: /, method: [GET]}\n    upstream: app\n",
         {"5:29: unknown key 'method' in match (did you mean 'methods'?)"}},
        {route_head + "    limits:\n      - name: l\n        algorithm: token_bucket\n        rate: 1\n        burts: 10\n",
         {"8:9: token_bucket limit 'l' needs 'burst'",
          "11:9: unknown key 'burts' in limit (did you mean 'burst'?)"}},
    });
}

TEST_CASE("loader errors: server, admin, client_ip", "[config][loader]") {
    check_cases({
        {"server:\n  listen: {a: 1}\n", {"2:11: 'listen' must be a list, got a map"}},
        {"server:\n  listen: \"0.0.0.0:8080\"\n", {"2:11: 'listen' must be a list, got '0.0.0.0:8080'"}},
        {"server:\n  listen: []\n", {"2:11: 'listen' needs at least one address"}},
        {"server:\n  listen:\n", {"2:3: 'listen' needs at least one address"}},
        {"server:\n  listen: [\"0.0.0.0\", [a]]\n",
         {"2:12: 'listen' entry: missing port in '0.0.0.0' (expected host:port)",
          "2:23: 'listen' entry must be a single value, got a list"}},
        {"server:\n  workers: many\n", {"2:12: 'workers' must be an integer, got 'many'"}},
        {"server:\n  workers: 2000\n", {"2:12: 'workers' must be between 0 and 1024, got 2000"}},
        {"server:\n  workers:\n", {"2:3: 'workers' has no value"}},
        {"server:\n  max_connections: 0\n", {"2:20: 'max_connections' must be at least 1, got 0"}},
        {"server:\n  max_connections: 99999999999999999999\n",
         {"2:20: 'max_connections' must be at least 1, got 99999999999999999999"}},
        {"server:\n  max_connections: 1.5\n", {"2:20: 'max_connections' must be an integer, got '1.5'"}},
        {"server:\n  header_timeout: 10\n",
         {"2:19: 'header_timeout' must be a duration such as 250ms, 10s, 5m, 1h or 1d, got '10'"}},
        {"server:\n  idle_timeout: 0s\n", {"2:17: 'idle_timeout' must be greater than 0, got 0s"}},
        {"server:\n  shutdown_timeout: [1s]\n", {"2:21: 'shutdown_timeout' must be a single value, got a list"}},
        {"server:\n  max_header_bytes: 100\n", {"2:21: 'max_header_bytes' must be between 1024 and 1048576, got 100"}},
        {"server:\n  max_body_bytes: -1\n", {"2:19: 'max_body_bytes' must be at least 0, got -1"}},
        {"server: [listen]\n", {"1:9: 'server' must be a map, got a list"}},
        {"admin:\n  listen: \"127.0.0.1:0\"\n",
         {"2:11: 'listen': invalid port '0' in '127.0.0.1:0' (expected 1..65535)"}},
        {"admin:\n  listen: [\"127.0.0.1:9901\"]\n", {"2:11: 'listen' must be a single value, got a list"}},
        {"client_ip:\n  trusted_proxies: [\"10.0.0.0/33\", \"10.0.0.0/8\", \"proxy\"]\n",
         {"2:21: 'trusted_proxies' entry: invalid CIDR '10.0.0.0/33' (the prefix length must be 0..32 for IPv4)",
          "2:50: 'trusted_proxies' entry: invalid CIDR 'proxy' (expected an address or address/prefix, e.g. "
          "10.0.0.0/8)"}},
        {"client_ip:\n  trusted_proxies: \"10.0.0.0/8\"\n",
         {"2:20: 'trusted_proxies' must be a list, got '10.0.0.0/8'"}},
    });
}

TEST_CASE("loader errors: store", "[config][loader]") {
    check_cases({
        {"server:\n  tunnel_idle_timeout: 0\n", {"2:24: 'tunnel_idle_timeout' must be greater than 0, got 0"}},
        {"store:\n  type: redsi\n", {"2:9: 'type' must be redis or memory, got 'redsi'"}},
        {"store:\n  on_error: maybe\n", {"2:13: 'on_error' must be allow or deny, got 'maybe'"}},
        {"store:\n  redis:\n    address: \"unix:redis.sock\"\n",
         {"3:14: 'address': the unix socket path must be absolute, got 'unix:redis.sock'"}},
        {"store:\n  redis:\n    address: \"localhost\"\n",
         {"3:14: 'address': missing port in 'localhost' (expected host:port) (or unix:/path/to/socket)"}},
        {"store:\n  redis:\n    database: -1\n", {"3:15: 'database' must be between 0 and 2147483647, got -1"}},
        {"store:\n  redis:\n    timeout: 0\n", {"3:14: 'timeout' must be greater than 0, got 0"}},
        {"store:\n  redis:\n    password:\n", {"3:5: 'password' has no value"}},
        {"store:\n  redis: \"127.0.0.1:6379\"\n", {"2:10: 'redis' must be a map, got '127.0.0.1:6379'"}},
        {"store:\n  memory:\n    max_keys: 100\n", {"3:15: 'max_keys' must be between 4096 and 1000000000, got 100"}},
        {"store:\n  memory:\n    max_key: 5000\n", {"3:5: unknown key 'max_key' in store.memory (did you mean 'max_keys'?)"}},
    });
}

TEST_CASE("loader errors: store.redis modes", "[config][loader]") {
    check_cases({
        {"store:\n  redis:\n    mode: replicated\n",
         {"3:11: 'mode' must be standalone, sentinel or cluster, got 'replicated'"}},
        {"store:\n  redis:\n    mode: sentinel\n",
         {"3:11: mode: sentinel needs store.redis.sentinels (the sentinels to ask for the master, host:port each)",
          "3:11: mode: sentinel needs store.redis.master_name (the name the sentinels monitor the master under)"}},
        {"store:\n  redis:\n    mode: sentinel\n    address: \"10.0.0.1:6379\"\n    sentinels: [\"a:26379\"]\n"
         "    master_name: m\n",
         {"4:5: store.redis.address is only used with mode: standalone (mode is sentinel)"}},
        {"store:\n  redis:\n    mode: sentinel\n    sentinels: []\n    master_name: m\n",
         {"4:16: 'sentinels' must list at least one host:port"}},
        {"store:\n  redis:\n    mode: sentinel\n    sentinels: [\"a:26379\", \"b\", \"a:26379\"]\n    master_name: m\n",
         {"4:28: 'sentinels' entry: missing port in 'b' (expected host:port)",
          "4:33: 'sentinels' entry: 'a:26379' is listed twice"}},
        {"store:\n  redis:\n    mode: sentinel\n    sentinels: [\"a:26379\"]\n    master_name: \"my master\"\n",
         {"5:18: 'master_name' must be 1 to 128 printable characters without spaces, got 'my master'"}},
        {"store:\n  redis:\n    mode: sentinel\n    sentinels: [\"a:26379\"]\n    master_name: m\n"
         "    sentinel_username: u\n",
         {"6:5: store.redis.sentinel_username needs store.redis.sentinel_password"}},
        {"store:\n  redis:\n    sentinels: [\"a:26379\"]\n    master_name: m\n",
         {"3:5: store.redis.sentinels is only used with mode: sentinel (mode is standalone)",
          "4:5: store.redis.master_name is only used with mode: sentinel (mode is standalone)"}},
        {"store:\n  redis:\n    mode: cluster\n",
         {"3:11: mode: cluster needs store.redis.nodes (seed nodes of the cluster, host:port each)"}},
        {"store:\n  redis:\n    mode: cluster\n    nodes: [\"10.0.0.1:7000\"]\n    database: 2\n",
         {"5:15: store.redis.database must be 0 with mode: cluster (Redis Cluster has database 0 only), got 2"}},
        {"store:\n  redis:\n    mode: cluster\n    nodes: [\"10.0.0.1:7000\"]\n    master_name: m\n",
         {"5:5: store.redis.master_name is only used with mode: sentinel (mode is cluster)"}},
        {"store:\n  redis:\n    nodes: [\"10.0.0.1:7000\"]\n",
         {"3:5: store.redis.nodes is only used with mode: cluster (mode is standalone)"}},
        {"store:\n  redis:\n    mode: cluster\n    nodes: [\"10.0.0.1:7000\"]\n    shared_batches: true\n",
         {"5:21: store.redis.shared_batches is only used with mode: standalone or sentinel (mode is cluster)"}},
        {"store:\n  redis:\n    shared_batches: sometimes\n",
         {"3:21: 'shared_batches' must be true or false, got 'sometimes'"}},
        {"store:\n  redis:\n    username: u\n", {"3:5: store.redis.username needs store.redis.password"}},
    });
}

TEST_CASE("loader errors: upstreams", "[config][loader]") {
    check_cases({
        {"upstreams:\n  - app\n", {"2:3: 'upstreams' must be a map of name: settings, got a list"}},
        {"upstreams:\n  app:\n", {"2:3: upstream 'app' has no servers"}},
        {"upstreams:\n  app:\n    timeout: 1s\n", {"2:3: upstream 'app' has no servers"}},
        {"upstreams:\n  app:\n    servers: []\n", {"3:14: upstream 'app' has no servers"}},
        {"upstreams:\n  app:\n    servers: [\"127.0.0.1:0\"]\n",
         {"3:15: 'servers' entry: invalid port '0' in '127.0.0.1:0' (expected 1..65535)"}},
        {"upstreams:\n  app:\n    servers: \"127.0.0.1:8081\"\n",
         {"3:14: 'servers' must be a list, got '127.0.0.1:8081'"}},
        {"upstreams:\n  \"my app\": {servers: [\"h:1\"]}\n",
         {"2:3: upstream name must be 1 to 64 letters, digits, '_', '-' or '.', got 'my app'"}},
        {"upstreams:\n  app: {servers: [\"h:1\"]}\n  app: {servers: [\"h:2\"]}\n",
         {"3:3: duplicate key 'app' (first at line 2)"}},
        {"upstreams:\n  app: {servers: [\"h:1\"], connect_timeout: 0s, max_idle: -1}\n",
         {"2:44: 'connect_timeout' must be greater than 0, got 0s", "2:58: 'max_idle' must be at least 0, got -1"}},
    });
}

TEST_CASE("loader errors: routes and matches", "[config][loader]") {
    check_cases({
        {"routes:\n  name: r\n", {"2:3: 'routes' must be a list, got a map"}},
        {"routes:\n  - login\n", {"2:5: 'routes' entry must be a map, got 'login'"}},
        {"routes:\n  -\n", {"2:3: empty route (a route needs name, match and upstream)"}},
        {route_head + "  - match: {path_prefix: /x}\n    upstream: app\n", {"7:5: route needs a 'name'"}},
        {route_head + "  - name: \"a b\"\n    match: {path_prefix: /x}\n    upstream: app\n",
         {"7:11: 'name' must be 1 to 64 letters, digits, '_', '-' or '.', got 'a b'"}},
        {route_head + "  - name: r\n    match: {path_prefix: /x}\n    upstream: app\n",
         {"7:11: duplicate route name 'r' (first used at line 4)"}},
        {"upstreams:\n  app: {servers: [\"h:1\"]}\nroutes:\n  - name: r\n    match: {path: /}\n    upstream: ap\n",
         {"6:15: route 'r' names upstream 'ap', which is not defined (did you mean 'app'?)"}},
        {"upstreams:\n  app: {servers: [\"h:1\"]}\nroutes:\n  - name: r\n    match: {path: /}\n    upstream: backend\n",
         {"6:15: route 'r' names upstream 'backend', which is not defined"}},
        {"routes:\n  - name: r\n    match: {path: /}\n    upstream: app\n",
         {"4:15: route 'r' names upstream 'app', which is not defined (the upstreams section defines none)"}},
        {"routes:\n  - name: r\n    match: {path: /}\n", {"2:5: route 'r' needs an 'upstream' (or 'action: check')"}},
        {route_head + "  - name: s\n    match: {path: /x}\n    upstream: \"\"\n", {"9:15: route 's' needs an 'upstream'"}},
        {route_head + "  - name: s\n    upstream: app\n", {"7:5: route 's' needs a 'match' with 'path' or 'path_prefix'"}},
        {route_head + "  - name: s\n    match: {methods: [GET]}\n    upstream: app\n",
         {"8:12: route 's' needs 'path' or 'path_prefix' in its match"}},
        {route_head + "  - name: s\n    match: {path: /a, path_prefix: /b}\n    upstream: app\n",
         {"8:23: 'path' and 'path_prefix' cannot both be set; use one"}},
        {route_head + "  - name: s\n    match: {path_prefix: api}\n    upstream: app\n",
         {"8:26: 'path_prefix' must start with '/', got 'api'"}},
        {route_head + "  - name: s\n    match: {path: \"/a b\"}\n    upstream: app\n",
         {"8:19: 'path' must not contain spaces or control characters"}},
        {route_head + "  - name: s\n    match: {path: \"/100%\"}\n    upstream: app\n",
         {"8:19: 'path' '/100%': invalid percent-encoding in request target"}},
        {route_head + "  - name: s\n    match: {path_prefix: /a/../..}\n    upstream: app\n",
         {"8:26: 'path_prefix' '/a/../..' has an empty, '.' or '..' segment, which no request's path has once "
          "normalised; write '/..'"}},
        {route_head + "  - name: s\n    match: {path_prefix: /api/./v1}\n    upstream: app\n",
         {"8:26: 'path_prefix' '/api/./v1' has an empty, '.' or '..' segment, which no request's path has once "
          "normalised; write '/api/v1'"}},
        {route_head + "  - name: s\n    match: {path_prefix: //x}\n    upstream: app\n",
         {"8:26: 'path_prefix' '//x' has an empty, '.' or '..' segment, which no request's path has once "
          "normalised; write '/x'"}},
        {route_head + "  - name: s\n    match: {path: /a/../..}\n    upstream: app\n",
         {"8:19: 'path' '/a/../..': request target path goes above the root"}},
        {route_head + "  - name: s\n    match: {path: /x, methods: []}\n    upstream: app\n",
         {"8:32: 'methods' must not be empty (leave it out to match every method)"}},
        {route_head + "  - name: s\n    match: {path: /x, methods: GET}\n    upstream: app\n",
         {"8:32: 'methods' must be a list, got 'GET'"}},
        {route_head + "  - name: s\n    match: {path: /x, methods: [GET, \"P T\"]}\n    upstream: app\n",
         {"8:38: invalid method 'P T'"}},
        {route_head + "  - name: s\n    match: {path: /x, methods: [GET, GET2, get]}\n    upstream: app\n",
         {"8:38: invalid method 'GET2': letters, '-' and '_' only, at most 32"}},
        {route_head + "  - name: s\n    match: {path: /x, host: \"exa mple.com\"}\n    upstream: app\n",
         {"8:29: 'host' must be a host name such as example.com or *.example.com, got 'exa mple.com'"}},
        {route_head + "  - name: s\n    match: [/x]\n    upstream: app\n", {"8:12: 'match' must be a map, got a list"}},
        {route_head + "    on_error: block\n", {"7:15: 'on_error' must be allow or deny, got 'block'"}},
    });
}

TEST_CASE("loader errors: fixed windows and costs", "[config][loader]") {
    const std::string limits = route_head + "    limits:\n";  // the first limit starts on line 8
    const std::string fixed = limits + "      - name: q\n        algorithm: fixed_window\n";  // next: line 10
    check_cases({
        {fixed, {"8:9: fixed_window limit 'q' needs 'limit'",
                 "8:9: fixed_window limit 'q' needs 'window' (a duration, or minute, hour, day, week or month)"}},
        {fixed + "        limit: 0\n        window: fortnight\n",
         {"10:16: 'limit' must be between 1 and 1000000000, got 0",
          "11:17: 'window' must be a duration (like 10s or 1h) or minute, hour, day, week or month, got 'fortnight'"}},
        {fixed + "        limit: 5\n        window: 0s\n", {"11:17: 'window' must be greater than 0, got 0s"}},
        {fixed + "        limit: 5\n        window: day\n        time_zone: Mars/Olympus_Mons\n",
         {"12:20: unknown time zone Mars/Olympus_Mons (no such time zone file /usr/share/zoneinfo/Mars/Olympus_Mons)"}},
        {fixed + "        limit: 5\n        window: day\n        time_zone: ../../etc/passwd\n",
         {"12:20: \"../../etc/passwd\" is not a time zone name (like Europe/Berlin or UTC)"}},
        {fixed + "        limit: 5\n        window: 1h\n        time_zone: Europe/Berlin\n",
         {"12:9: fixed_window limit 'q': 'time_zone' applies to calendar windows (minute, hour, day, week, month), "
          "not to a window of 1h"}},
        {fixed + "        limit: 5\n        window: day\n        rate: 1\n",
         {"12:9: 'rate' is a token_bucket and leaky_bucket parameter, but limit 'q' is fixed_window"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n"
                  "        time_zone: UTC\n",
         {"12:9: 'time_zone' is a fixed_window parameter, but limit 'l' is sliding_window"}},
        {fixed + "        limit: 5\n        window: day\n        cost: 6\n",
         {"12:15: limit 'q': 'cost' 6 is more than its limit (5): no request could pass"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: 1\n        burst: 3\n        cost: 4\n",
         {"12:15: limit 'l': 'cost' 4 is more than its burst (3): no request could pass"}},
        {fixed + "        limit: 5\n        window: day\n        cost: -1\n",
         {"12:15: 'cost' must be between 0 and 1000000000, got -1"}},
        {fixed + "        limit: 5\n        window: day\n        cost: \"header:\"\n",
         {"12:15: invalid header name '' in key part 'header:'"}},
        {fixed + "        limit: 5\n        window: day\n        default_cost: 2\n",
         {"12:9: limit 'q': 'default_cost' applies with 'cost: header:NAME' only"}},
        {fixed + "        limit: 5\n        window: day\n        cost: header:x-cost\n        default_cost: 9\n",
         {"13:23: limit 'q': 'default_cost' 9 is more than its limit (5): no request could pass"}},
        {fixed + "        limit: 5\n        window: day\n        lease: 10s\n",
         {"12:9: 'lease' is a concurrency parameter, but limit 'q' is fixed_window"}},
        {limits + "      - name: c\n        algorithm: concurrency\n",
         {"8:9: concurrency limit 'c' needs 'limit' (requests in flight at once)"}},
        {limits + "      - name: c\n        algorithm: concurrency\n        limit: 2\n        lease: 500ms\n"
                  "        window: 1m\n        cost: 2\n",
         {"11:16: 'lease' must be at least 1s, got 500ms",
          "12:9: 'window' is a sliding_window and fixed_window parameter, but limit 'c' is concurrency",
          "13:9: 'cost' does not apply to concurrency limit 'c' (a request takes one slot)"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: 1\n        burst: 1\n        limit: 3\n",
         {"12:9: 'limit' is a sliding_window, fixed_window and concurrency parameter, but limit 'l' is token_bucket"}},
    });
}

TEST_CASE("loader errors: count (charged after the response)", "[config][loader][count]") {
    const std::string limits = route_head + "    limits:\n";  // the first limit starts on line 8
    const std::string window = limits + "      - name: w\n        algorithm: sliding_window\n        limit: 5\n"
                                        "        window: 15m\n";  // count on line 12
    check_cases({
        {window + "        count: {statuses: []}\n",
         {"12:27: 'statuses' must be a list of statuses (100 to 599) or classes (\"4xx\", \"5xx\"), got a list"}},
        {window + "        count: {statuses: 401}\n",
         {"12:27: 'statuses' must be a list of statuses (100 to 599) or classes (\"4xx\", \"5xx\"), got '401'"}},
        {window + "        count: {statuses: [401, 99, 600, 6xx, \"4x\", [1]]}\n",
         {"12:33: 'statuses' entry must be between 100 and 599, got 99",
          "12:37: 'statuses' entry must be between 100 and 599, got 600",
          "12:42: 'statuses' entry must be a status (100 to 599) or a class such as \"4xx\", got '6xx'",
          "12:47: 'statuses' entry must be a status (100 to 599) or a class such as \"4xx\", got '4x'",
          "12:53: 'statuses' entry must be a single value, got a list"}},
        {window + "        count: {statuses: [401, \"4xx\", 401]}\n",
         {"12:40: limit 'w': status 401 is listed twice in 'statuses'"}},
        {window + "        count: {status: [401]}\n",
         {"12:16: limit 'w': 'count' needs 'statuses' (the response statuses that are charged, such as [401, 403] or "
          "[\"5xx\"])",
          "12:17: unknown key 'status' in count (did you mean 'statuses'?)"}},
        {window + "        count: 401\n",
         {"12:16: 'count' must be a map such as {statuses: [401, 403]}, got '401'"}},
        {limits + "      - name: c\n        algorithm: concurrency\n        limit: 2\n        count: {statuses: [500]}\n",
         {"11:9: limit 'c': 'count' does not apply to concurrency (a request holds its slot while it runs, whatever its "
          "response); use token_bucket, sliding_window or fixed_window"}},
        {limits + "      - name: s\n        algorithm: leaky_bucket\n        rate: 1\n        burst: 2\n"
                  "        count: {statuses: [500]}\n",
         {"12:9: limit 's': 'count' does not apply to leaky_bucket (a request waits for its turn before any response "
          "exists); use token_bucket, sliding_window or fixed_window"}},
        {window + "        ban: 0s\n", {"12:14: 'ban' must be greater than 0, got 0s"}},
        {window + "        ban: soon\n", {"12:14: 'ban' must be a duration such as 250ms, 10s, 5m, 1h or 1d, got 'soon'"}},
        {window + "        shadow: true\n        ban: 1h\n",
         {"13:9: limit 'w': 'ban' has no effect on a shadow limit, which refuses nothing"}},
        {limits + "      - name: c\n        algorithm: concurrency\n        limit: 2\n        ban: 1m\n",
         {"11:9: limit 'c': 'ban' does not apply to concurrency (a slot comes back as soon as a request ends); use "
          "token_bucket, sliding_window or fixed_window"}},
        {"routes:\n  - name: r\n    match: {path_prefix: /}\n    action: check\n    limits:\n"
         "      - name: w\n        algorithm: fixed_window\n        limit: 5\n        window: 1h\n"
         "        count: {statuses: [\"4xx\"]}\n",
         {"4:13: route 'r' has action: check, but its limit 'w' has 'count': a check route never sees the response, "
          "so it could not be charged"}},
        {"routes:\n  - name: r\n    match: {path_prefix: /}\n    action: check\n    limits:\n"
         "      - {name: slots, algorithm: concurrency, limit: 1}\n",
         {"4:13: route 'r' has action: check, but its limit 'slots' is a concurrency limit: a check ends with "
          "sluice's answer, long before the request it checks, so its slot would be free again at once (limit the "
          "requests in flight on a route sluice forwards)"}},
    });
}

TEST_CASE("loader errors: a cost the response reports", "[config][loader][settle]") {
    const std::string limits = route_head + "    limits:\n";  // the first limit starts on line 8
    const std::string bucket = limits + "      - name: t\n        algorithm: token_bucket\n        rate: 10\n"
                                        "        burst: 100\n";  // the cost on line 12
    check_cases({
        {bucket + "        cost: {response_header: X-Tokens, response_trailer: X-Tokens}\n",
         {"12:43: limit 't': 'cost' names both 'response_header' and 'response_trailer'; give the one field the "
          "response reports its cost in"}},
        {bucket + "        cost: {reserve: 5}\n",
         {"12:15: limit 't': 'cost' as a map needs 'response_header' or 'response_trailer' (the field the upstream's "
          "response reports the request's cost in), such as {response_header: X-Tokens-Used, reserve: 100}"}},
        {bucket + "        cost: {response_header: \"X Tokens\"}\n",
         {"12:33: 'response_header' must be a header field name, got 'X Tokens'"}},
        {bucket + "        cost: {response_header: [a]}\n",
         {"12:33: 'response_header' must be a single value, got a list"}},
        {bucket + "        cost: {response_header: x-tokens, reserve: 0}\n",
         {"12:52: 'reserve' must be between 1 and 1000000000, got 0"}},
        {bucket + "        cost: {response_header: x-tokens, reserve: 101}\n",
         {"12:15: limit 't': 'cost' 101 is more than its burst (100): no request could pass"}},
        {bucket + "        cost: {response_header: x-tokens, reservation: 10}\n",
         {"12:43: unknown key 'reservation' in cost (known keys: response_header, response_trailer, reserve)"}},
        {bucket + "        cost: {response_header: x-tokens}\n        default_cost: 3\n",
         {"13:9: limit 't': 'default_cost' applies with 'cost: header:NAME' only"}},
        {bucket + "        cost: {response_header: x-tokens}\n        count: {statuses: [401]}\n",
         {"13:9: limit 't': 'count' and a 'cost' the response reports cannot go together on one limit (the response "
          "settles the cost whatever its status); use two limits"}},
        {limits + "      - name: s\n        algorithm: leaky_bucket\n        rate: 1\n        burst: 2\n"
                  "        cost: {response_header: x-tokens}\n",
         {"12:9: limit 's': a response 'cost' does not apply to leaky_bucket (a request waits for its turn before any "
          "response exists); use token_bucket, sliding_window or fixed_window"}},
        {limits + "      - name: c\n        algorithm: concurrency\n        limit: 2\n"
                  "        cost: {response_header: x-tokens}\n",
         {"11:9: 'cost' does not apply to concurrency limit 'c' (a request takes one slot)"}},
        {"routes:\n  - name: r\n    match: {path_prefix: /}\n    action: check\n    limits:\n"
         "      - name: w\n        algorithm: fixed_window\n        limit: 5\n        window: 1h\n"
         "        cost: {response_trailer: x-tokens}\n",
         {"4:13: route 'r' has action: check, but its limit 'w' takes its 'cost' from the response: a check route "
          "never sees the response, so it could not be charged"}},
    });
}

TEST_CASE("loader errors: leaky buckets", "[config][loader][leaky]") {
    const std::string limits = route_head + "    limits:\n";  // the first limit starts on line 8
    const std::string leaky = limits + "      - name: s\n        algorithm: leaky_bucket\n";  // parameters from line 10
    check_cases({
        {leaky, {"8:9: leaky_bucket limit 's' needs 'rate'", "8:9: leaky_bucket limit 's' needs 'burst'"}},
        {leaky + "        rate: 10\n        burst: 40\n        delay: 40\n",
         {"12:16: leaky_bucket limit 's': 'delay' 40 must be below its burst (40); the first request and 'delay' "
          "more pass at once, so burst - 1 (or nodelay: true) lets a whole burst through"}},
        {leaky + "        rate: 10\n        burst: 40\n        delay: -1\n",
         {"12:16: 'delay' must be between 0 and 1000000000, got -1"}},
        {leaky + "        rate: 10\n        burst: 40\n        delay: 5\n        nodelay: true\n",
         {"13:9: leaky_bucket limit 's': 'delay' and 'nodelay' exclude each other (nodelay is delay: burst - 1)"}},
        {leaky + "        rate: 10\n        burst: 40\n        nodelay: yes please\n",
         {"12:18: 'nodelay' must be true or false, got 'yes please'"}},
        {leaky + "        rate: 10\n        burst: 40\n        nodelay: true\n        max_wait: 1s\n",
         {"13:9: leaky_bucket limit 's': 'max_wait' has no effect with nodelay: true (no request waits)"}},
        {leaky + "        rate: 10\n        burst: 40\n        max_wait: soon\n",
         {"12:19: 'max_wait' must be a duration such as 250ms, 10s, 5m, 1h or 1d, got 'soon'"}},
        {leaky + "        rate: 2000000\n        burst: 4\n",
         {"10:15: leaky_bucket limit 's' lets out more than one request per microsecond (rate / per)"}},
        {leaky + "        rate: 1\n        per: 365d\n        burst: 11\n",
         {"10:15: leaky_bucket limit 's': draining the whole bucket (burst * per / rate) takes more than 10 years"}},
        {leaky + "        rate: 10\n        burst: 4\n        cost: 5\n",
         {"12:15: limit 's': 'cost' 5 is more than its burst (4): no request could pass"}},
        {leaky + "        rate: 10\n        burst: 4\n        window: 1s\n        lease: 5s\n",
         {"12:9: 'window' is a sliding_window and fixed_window parameter, but limit 's' is leaky_bucket",
          "13:9: 'lease' is a concurrency parameter, but limit 's' is leaky_bucket"}},
        {limits + "      - name: t\n        algorithm: token_bucket\n        rate: 1\n        burst: 1\n        delay: 1\n"
                  "        nodelay: false\n        max_wait: 1s\n",
         {"12:9: 'delay' is a leaky_bucket parameter, but limit 't' is token_bucket",
          "13:9: 'nodelay' is a leaky_bucket parameter, but limit 't' is token_bucket",
          "14:9: 'max_wait' is a leaky_bucket parameter, but limit 't' is token_bucket"}},
        {"server:\n  max_waiting: -5\n", {"2:16: 'max_waiting' must be between 0 and 1000000000, got -5"}},
    });
}

TEST_CASE("loader errors: exempt", "[config][loader]") {
    check_cases({
        {"exempt:\n  client_ip: [10.0.0.0/8]\n",
         {"2:3: unknown key 'client_ip' in exempt (did you mean 'client_ips'?)"}},
        {"exempt:\n  client_ips: [10.0.0.0/33, nope]\n",
         {"2:16: 'client_ips' entry: invalid CIDR '10.0.0.0/33' (the prefix length must be 0..32 for IPv4)",
          "2:29: 'client_ips' entry: invalid CIDR 'nope' (expected an address or address/prefix, e.g. 10.0.0.0/8)"}},
        {"exempt:\n  headers: [{name: X-Internal}]\n",
         {"2:13: an exempt header needs 'name' and 'value' (a request is exempt when it carries that header with "
          "exactly that value)"}},
        {"exempt:\n  headers: [{name: \"X Internal\", value: a}, {name: x, value: \"\"}, {name: y, value: z, v: 1}]\n",
         {"2:20: invalid header name 'X Internal'",
          "2:62: an exempt header's 'value' must be a non-empty header value (no control characters, no spaces at "
          "either end), got ''",
          "2:87: unknown key 'v' in an exempt header (known keys: name, value)"}},
        {"exempt:\n  methods: []\n", {"2:12: 'methods' must not be empty (leave it out to match every method)"}},
        {"exempt:\n  methods: [\"GE T\"]\n", {"2:13: invalid method 'GE T'"}},
        {"exempt: [10.0.0.0/8]\n", {"1:9: 'exempt' must be a map, got a list"}},
        {route_head + "    exempt: {client_ips: [300.0.0.1]}\n",
         {"7:27: 'client_ips' entry: invalid CIDR '300.0.0.1' (expected an address or address/prefix, e.g. "
          "10.0.0.0/8)"}},
        {route_head + "    exempt: {ips: [10.0.0.0/8]}\n",
         {"7:14: unknown key 'ips' in the exempt of route 'r' (known keys: client_ips, headers, methods)"}},
    });
}

TEST_CASE("loader errors: check routes", "[config][loader]") {
    check_cases({
        {route_head + "    action: check\n", {"6:5: route 'r' answers requests itself (action: check): it has no 'upstream'"}},
        {"routes:\n  - name: r\n    match: {path: /}\n    action: forward\n",
         {"2:5: route 'r' needs an 'upstream' (or 'action: check')"}},
        {"routes:\n  - name: r\n    match: {path: /}\n    action: ask\n",
         {"4:13: 'action' must be forward or check, got 'ask'"}},
        {"routes:\n  - name: r\n    match: {path: /}\n    action: check\n    limited_status: 200\n",
         {"5:21: 'limited_status' must be between 400 and 599, got 200"}},
    });
    auto result = load_string("routes:\n  - name: r\n    match: {path: /check}\n    action: check\n    limited_status: 403\n",
                              "t.yaml");
    REQUIRE(result.ok());
    CHECK(result.config->routes[0].action == sluice::config::RouteAction::check);
    CHECK(result.config->routes[0].limited_status == 403u);
    CHECK(result.config->routes[0].upstream.empty());
}

TEST_CASE("loader errors: admin token", "[config][loader]") {
    check_cases({
        {"admin: {token: \"\"}\n", {"1:16: 'token' must be letters, digits and - . _ ~ + / = only (a bearer token), and not empty"}},
        {"admin: {token: \"has space\"}\n",
         {"1:16: 'token' must be letters, digits and - . _ ~ + / = only (a bearer token), and not empty"}},
        {"admin: {token: [a]}\n", {"1:16: 'token' must be a single value, got a list"}},
    });
    auto result = load_string("admin: {token: short}\n", "t.yaml");
    REQUIRE(result.ok());
    CHECK(result.config->admin.token == "short");
    REQUIRE(result.diagnostics.size() == 2);  // and "no routes"
    const bool warned = std::any_of(result.diagnostics.begin(), result.diagnostics.end(), [](const Diagnostic& d) {
        return d.warning && d.line == 1 && d.message.find("shorter than 16 characters") != std::string::npos;
    });
    CHECK(warned);
}

TEST_CASE("loader: fixed windows, time zones and costs as written", "[config][loader]") {
    const auto result = load_string(route_head + R"(    limits:
      - name: daily
        algorithm: fixed_window
        limit: 1000
        window: day
        time_zone: Europe/Berlin
        cost: header:X-Cost
        default_cost: 2
      - name: tenner
        algorithm: fixed_window
        limit: 10
        window: 10s
      - name: big
        algorithm: sliding_window
        limit: 20000
        window: 1h
        cost: 0
)",
                                    "t.yaml");
    INFO(errors_of(result.diagnostics).size());
    REQUIRE(result.ok());
    const auto& limits = result.config->routes[0].limits;
    REQUIRE(limits.size() == 3);
    CHECK(limits[0].algorithm == sluice::config::Algorithm::fixed_window);
    REQUIRE(limits[0].calendar);
    CHECK(*limits[0].calendar == sluice::time::CalendarUnit::day);
    REQUIRE(limits[0].time_zone);
    CHECK(limits[0].time_zone->name() == "Europe/Berlin");
    CHECK(limits[0].cost_header == "x-cost");
    CHECK(limits[0].default_cost == 2);
    CHECK_FALSE(limits[1].calendar);
    CHECK(limits[1].window == std::chrono::seconds(10));
    CHECK(limits[1].cost == 1);
    CHECK(limits[2].cost == 0);
    // A sliding window that large keeps an entry per request: a warning, not an error.
    bool warned = false;
    for (const Diagnostic& d : result.diagnostics)
        warned |= d.warning && d.line == 21 && d.message.find("fixed_window or token_bucket") != std::string::npos;
    CHECK(warned);
}

TEST_CASE("loader errors: limits", "[config][loader]") {
    const std::string limits = route_head + "    limits:\n";  // the first limit starts on line 8
    check_cases({
        {route_head + "    limits: {name: l}\n", {"7:13: 'limits' must be a list, got a map"}},
        {limits + "      - algorithm: token_bucket\n        rate: 1\n        burst: 1\n", {"8:9: limit needs a 'name'"}},
        {limits + "      - name: l\n        rate: 1\n        burst: 1\n",
         {"8:9: limit 'l' needs an 'algorithm' (token_bucket, sliding_window, fixed_window, concurrency or leaky_bucket)"}},
        {limits + "      - name: l\n        algorithm: leaking_bucket\n",
         {"9:20: 'algorithm' must be token_bucket, sliding_window, fixed_window, concurrency or leaky_bucket, got "
          "'leaking_bucket'"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        burst: 1\n",
         {"8:9: token_bucket limit 'l' needs 'rate'"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: 0\n        burst: 0\n        per: 0s\n",
         {"10:15: 'rate' must be greater than 0, got 0", "11:16: 'burst' must be between 1 and 1000000000, got 0",
          "12:14: 'per' must be greater than 0, got 0s"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: 5/s\n        burst: 1\n",
         {"10:15: 'rate' must be a number, got '5/s'"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: -2.5\n        burst: 1\n",
         {"10:15: 'rate' must be greater than 0, got -2.5"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: .inf\n        burst: 1\n",
         {"10:15: 'rate' must be a number, got '.inf'"}},
        {limits + "      - name: l\n        algorithm: token_bucket\n        rate: 1\n        burst: 1\n        window: 1m\n",
         {"12:9: 'window' is a sliding_window and fixed_window parameter, but limit 'l' is token_bucket"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n",
         {"8:9: sliding_window limit 'l' needs 'limit'", "8:9: sliding_window limit 'l' needs 'window'"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 0\n        window: 0\n",
         {"10:16: 'limit' must be between 1 and 1000000000, got 0", "11:17: 'window' must be greater than 0, got 0"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n        rate: 1\n        per: 1s\n",
         {"12:9: 'rate' is a token_bucket and leaky_bucket parameter, but limit 'l' is sliding_window",
          "13:9: 'per' is a token_bucket and leaky_bucket parameter, but limit 'l' is sliding_window"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n"
                  "        key: [client_ip, ip, \"header:x y\", \"header:\", client_ip]\n",
         {"12:26: unknown key part 'ip' (allowed: client_ip, client_ip/N, method, path, path_segment:N, header:NAME, query:NAME, cookie:NAME, jwt:CLAIM)",
          "12:30: invalid header name 'x y' in key part 'header:x y'",
          "12:44: invalid header name '' in key part 'header:'", "12:55: 'key' lists 'client_ip' twice"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n"
                  "        key: [\"header:X-Key\", \"header:x-key\"]\n",
         {"12:31: 'key' lists 'header:x-key' twice"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n        key: client_ip\n",
         {"12:14: 'key' must be a list, got 'client_ip'"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n        shadow: yes\n",
         {"12:17: 'shadow' must be true or false, got 'yes'"}},
        {limits + "      - name: l\n        algorithm: sliding_window\n        limit: 1\n        window: 1m\n"
                  "      - name: l\n        algorithm: sliding_window\n        limit: 2\n        window: 1m\n",
         {"12:15: duplicate limit name 'l' in route 'r' (first used at line 8)"}},
    });
}

TEST_CASE("loader errors: limit parameters stay in ranges whose arithmetic cannot overflow", "[config][loader]") {
    const std::string head =
        "upstreams:\n  app: {servers: [\"127.0.0.1:1\"]}\nroutes:\n  - name: a\n    match: {path: /}\n"
        "    upstream: app\n    limits:\n      - ";
    check_cases({
        {head + "{name: w, algorithm: sliding_window, limit: 10, window: 200000000d}\n",
         {"8:65: 'window' must be at most 365d, got 200000000d"}},
        {head + "{name: w, algorithm: sliding_window, limit: 10, window: 366d}\n",
         {"8:65: 'window' must be at most 365d, got 366d"}},
        {head + "{name: w, algorithm: sliding_window, limit: 1000000001, window: 1s}\n",
         {"8:53: 'limit' must be between 1 and 1000000000, got 1000000001"}},
        {head + "{name: b, algorithm: token_bucket, rate: 1, per: 1d, burst: 200000000}\n",
         {"8:50: token_bucket limit 'b': refilling the whole bucket (burst * per / rate) takes more than 10 years"}},
        {head + "{name: b, algorithm: token_bucket, rate: 1, per: 1d, burst: 3651}\n",
         {"8:50: token_bucket limit 'b': refilling the whole bucket (burst * per / rate) takes more than 10 years"}},
        {head + "{name: b, algorithm: token_bucket, rate: 0.000000001, per: 1s, burst: 1}\n",
         {"8:50: token_bucket limit 'b': refilling the whole bucket (burst * per / rate) takes more than 10 years"}},
        {head + "{name: b, algorithm: token_bucket, rate: 10000000000, per: 1s, burst: 1}\n",
         {"8:50: 'rate' must be at most 1000000000, got 10000000000"}},
        {head + "{name: b, algorithm: token_bucket, rate: 1001, per: 1ms, burst: 1}\n",
         {"8:50: token_bucket limit 'b' adds more than one token per microsecond (rate / per)"}},
        {head + "{name: b, algorithm: token_bucket, rate: 5, per: 1s, burst: 1000000001}\n",
         {"8:69: 'burst' must be between 1 and 1000000000, got 1000000001"}},
        {"server: {idle_timeout: 200000000d}\n", {"1:24: 'idle_timeout' must be at most 365d, got 200000000d"}},
    });
    // The largest accepted values load.
    for (const std::string limit : {"{name: w, algorithm: sliding_window, limit: 1000000000, window: 365d}",
                                    "{name: b, algorithm: token_bucket, rate: 1, per: 1d, burst: 3650}",
                                    "{name: b, algorithm: token_bucket, rate: 1000, per: 1ms, burst: 1000000000}",
                                    "{name: b, algorithm: token_bucket, rate: 1000000000, per: 365d, burst: 1}"}) {
        INFO(limit);
        CHECK(sluice::config::load_string(head + limit + "\n", "t.yaml").ok());
    }
}

TEST_CASE("loader errors: responses and logging", "[config][loader]") {
    check_cases({
        {"responses:\n  limited_status: 200\n", {"2:19: 'limited_status' must be between 400 and 599, got 200"}},
        {"responses:\n  limited_status: 600\n", {"2:19: 'limited_status' must be between 400 and 599, got 600"}},
        {"responses:\n  headers: draft\n", {"2:12: 'headers' must be ietf, legacy, both or none, got 'draft'"}},
        {"logging:\n  level: warning\n", {"2:10: 'level' must be trace, debug, info, warn or error, got 'warning'"}},
        {"logging:\n  access_log: \"\"\n", {"2:15: 'access_log' must be stdout, off or a file path, got ''"}},
        {"logging:\n  format: xml\n", {"2:11: 'format' must be text or json, got 'xml'"}},
        {"logging:\n  summary_interval: 10\n",
         {"2:21: 'summary_interval' must be a duration such as 250ms, 10s, 5m, 1h or 1d, got '10'"}},
        {"logging:\n  time_zone: Europe/Paris\n", {"2:14: 'time_zone' must be utc or local, got 'Europe/Paris'"}},
        {"logging:\n  access_format: [client, stauts]\n",
         {"2:27: 'access_format' entry names no field 'stauts' (did you mean 'status'?)"}},
        {"logging:\n  access_format: []\n",
         {"2:18: 'access_format' lists no field (leave it out for the standard line)"}},
        {"logging:\n  access_format: '$client \"$reqest\"'\n",
         {"2:18: 'access_format' names no field '$reqest' (did you mean 'request'?) (at character 10)"}},
        {"logging:\n  access_format: 'rt=$'\n",
         {"2:18: 'access_format': '$' without a field name (write '$$' for a '$') (at character 4)"}},
        {"logging:\n  access_format: 'x ${client'\n",
         {"2:18: 'access_format': '${' without its '}' (at character 3)"}},
    });
}

TEST_CASE("logging: access_format as a list or a pattern, time_zone", "[config][loader]") {
    using sluice::config::AccessField;
    using sluice::config::AccessFormat;
    auto logging_of = [](const std::string& yaml) {
        const auto result = load_string(yaml, "t.yaml");
        INFO(yaml);
        REQUIRE(result.ok());
        return result.config->logging;
    };
    const auto standard = logging_of("logging: {format: json}\n");
    CHECK(standard.access_format.kind == AccessFormat::Kind::classic);
    CHECK_FALSE(standard.local_time);
    const auto list = logging_of("logging:\n  time_zone: local\n  access_format: [client, status, user_agent]\n");
    CHECK(list.local_time);
    CHECK(list.access_format.kind == AccessFormat::Kind::fields);
    CHECK(list.access_format.fields ==
          std::vector<AccessField>{AccessField::client, AccessField::status, AccessField::user_agent});
    const auto pattern = logging_of("logging:\n  access_format: '$client \"$request\" ${status}ms'\n");
    CHECK(pattern.access_format.kind == AccessFormat::Kind::pattern);
    CHECK(pattern.access_format.fields ==
          std::vector<AccessField>{AccessField::client, AccessField::request, AccessField::status});
    REQUIRE(pattern.access_format.pieces.size() == 4);
    CHECK(pattern.access_format.pieces[1].literal == " \"");
    CHECK(pattern.access_format.pieces[3].literal == "ms");
}

TEST_CASE("loader errors: every problem is reported, not only the first", "[config][loader]") {
    const auto result = load_string("server:\n  workers: -1\n  listne: []\nlogging:\n  level: loud\n", "t.yaml");
    CHECK_FALSE(result.ok());
    CHECK(errors_of(result.diagnostics) ==
          std::vector<std::string>{"2:12: 'workers' must be between 0 and 1024, got -1",
                                   "3:3: unknown key 'listne' in server (did you mean 'listen'?)",
                                   "5:10: 'level' must be trace, debug, info, warn or error, got 'loud'"});
}
