// Plans (top-level `plans`, a route's identity, plan_map, plan_header, default_plan): what the
// loader builds, every error with its place (in the config or in the map file), the keys a
// client keeps across plans, and the admin look-up by identity.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support/limit_configs.hpp"
#include "config/loader.hpp"
#include "limit/decide_script.hpp"
#include "limit/limit_key.hpp"
#include "observe/metrics.hpp"
#include "server/limits_api.hpp"
#include "server/snapshot.hpp"

using namespace sluice;

namespace {

// A directory of its own with the config and its plan map.
struct Files {
    std::filesystem::path dir;
    Files() {
        char pattern[] = "/tmp/sluice-plans-XXXXXX";
        REQUIRE(::mkdtemp(pattern) != nullptr);
        dir = pattern;
    }
    ~Files() { std::filesystem::remove_all(dir); }
    std::string write(const std::string& name, const std::string& text) const {
        const auto path = dir / name;
        std::ofstream(path) << text;
        return path.string();
    }
};

const std::string plans_yaml = R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
client_ip: {trusted_proxies: [10.0.0.0/8]}
plans:
  free:
    - {name: quota, algorithm: fixed_window, limit: 100, window: day}
  pro:
    - {name: quota, algorithm: fixed_window, limit: 10000, window: day}
    - {name: burst, algorithm: token_bucket, rate: 50, burst: 100}
    - {name: per_ip, algorithm: token_bucket, rate: 5, burst: 5, key: [client_ip]}
  internal: []
routes:
  - name: api
    match: {path_prefix: /}
    upstream: app
    identity: "header:X-Api-Key"
    plan_map: map.yaml
    plan_header: X-Plan
    default_plan: free
)";

const std::string map_yaml = R"(key-a: pro
key-b: {plan: free}
"key c": {plan: pro, overrides: {quota: {limit: 20000}, burst: {rate: 500, burst: 1000}}}
)";

// What plans_of_route makes before it reads a map: one set per top-level plan.
config::RoutePlans plan_sets(const std::vector<config::PlanConfig>& top) {
    config::RoutePlans plans;
    plans.identity = config::KeyPart{config::KeyPart::Kind::header, "x-api-key"};
    for (const auto& p : top) {
        plans.by_plan[p.name] = plans.sets.size();
        plans.sets.push_back({p.name, "", p.limits});
    }
    return plans;
}

std::vector<std::string> messages(const std::vector<config::Diagnostic>& diagnostics) {
    std::vector<std::string> out;
    for (const auto& d : diagnostics) out.push_back(d.str());
    return out;
}

}  // namespace

TEST_CASE("plans: the loader builds one set per plan and one per client with overrides", "[config][plans]") {
    Files files;
    files.write("map.yaml", map_yaml);
    const auto result = config::load_file(files.write("sluice.yaml", plans_yaml));
    INFO(messages(result.diagnostics).size());
    REQUIRE(result.ok());
    // Only the warning that free, the default plan, is keyed on what a client sends alone.
    REQUIRE(result.diagnostics.size() == 1);
    CHECK(result.diagnostics[0].warning);
    CHECK(result.diagnostics[0].message.find("never limited") != std::string::npos);
    const auto& route = result.config->routes.at(0);
    CHECK(route.limits.empty());
    REQUIRE(route.plans);
    const auto& plans = *route.plans;
    CHECK(plans.identity.kind == config::KeyPart::Kind::header);
    CHECK(plans.identity.header_name == "x-api-key");
    CHECK(plans.header == "x-plan");
    CHECK(plans.map_file == (files.dir / "map.yaml").string());
    CHECK(plans.default_plan == "free");
    REQUIRE(plans.sets.size() == 4);  // free, pro, internal, "key c"
    CHECK(plans.by_plan.at("free") == 0);
    CHECK(plans.by_plan.at("pro") == 1);
    CHECK(plans.by_plan.at("internal") == 2);
    CHECK(plans.default_set == std::optional<std::size_t>(0));
    CHECK(plans.sets[2].limits.empty());
    // A limit without a key is keyed on the identity; one with a key keeps it.
    const auto& pro = plans.sets[1].limits;
    REQUIRE(pro.size() == 3);
    CHECK(pro[0].key == std::vector<config::KeyPart>{plans.identity});
    CHECK(pro[2].key.at(0).kind == config::KeyPart::Kind::client_ip);
    CHECK(plans.by_identity.at("key-a") == 1);
    CHECK(plans.by_identity.at("key-b") == 0);
    // "key c": pro with its own numbers; the plan's set is unchanged.
    const auto& own = plans.sets.at(plans.by_identity.at("key c"));
    CHECK(own.plan == "pro");
    CHECK(own.identity == "key c");
    CHECK(own.limits[0].limit == 20000);
    CHECK(own.limits[1].rate == 500);
    CHECK(own.limits[1].burst == 1000);
    CHECK(own.limits[2].burst == 5);
    CHECK(pro[0].limit == 10000);
    CHECK(pro[1].burst == 100);
    // Every limit of a route with plans keeps what a client used when the client's numbers
    // change (a bucket writes the interval it counts in: lua/token_bucket.lua), overrides too.
    for (const auto& set : plans.sets)
        for (const auto& limit : set.limits) CHECK(limit.keeps_used);
}

TEST_CASE("plans: a route without plans keeps its buckets' values plain", "[config][plans]") {
    const auto result = config::load_string(R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
routes:
  - name: api
    match: {path_prefix: /}
    upstream: app
    limits:
      - {name: burst, algorithm: token_bucket, rate: 50, burst: 100}
)", "sluice.yaml");
    REQUIRE(result.ok());
    CHECK_FALSE(result.config->routes.at(0).limits.at(0).keeps_used);
    std::vector<std::string> args;
    limit::append_decide_args(result.config->routes.at(0).limits.at(0), args);
    CHECK(args.back() == "100");
    auto kept = result.config->routes.at(0).limits.at(0);
    kept.keeps_used = true;
    args.clear();
    limit::append_decide_args(kept, args);
    CHECK(args.back() == "100,kept");
}

TEST_CASE("plans: a client keeps its keys across plans and overrides", "[config][plans]") {
    Files files;
    files.write("map.yaml", map_yaml);
    const auto result = config::load_file(files.write("sluice.yaml", plans_yaml));
    REQUIRE(result.ok());
    observe::Metrics metrics;
    const auto snapshot = server::make_snapshot(result.config, metrics);
    const auto& sets = snapshot->limit_sets.at(0);
    REQUIRE(sets.size() == 4);
    limit::OwnedKeyValues values;
    values.client_ip = "192.0.2.1";
    values.headers = {{"x-api-key", "key c"}};
    const auto free = limit::build_limit_keys("sluice", sets[0].route_limits("api"), values.view());
    const auto pro = limit::build_limit_keys("sluice", sets[1].route_limits("api"), values.view());
    const auto own = limit::build_limit_keys("sluice", sets[3].route_limits("api"), values.view());
    REQUIRE(free.size() == 1);
    REQUIRE(pro.size() == 3);
    REQUIRE(own.size() == 3);
    // `quota` is one counter whichever plan the client is on: the key names the identity and
    // the limit, never the plan, and the hash tag is the same for every plan of the route.
    CHECK(free[0] == pro[0]);
    CHECK(own == pro);
    CHECK(*pro[0] == "sluice:{api}:quota:key%20c");
    CHECK(*pro[2] == "sluice:{api}:per_ip:192.0.2.1");
    // Counted per plan; overrides with their plan.
    CHECK(sets[3].metrics == sets[1].metrics);
    CHECK(sets[0].metrics[0] != sets[1].metrics[0]);
    CHECK(sets[1].plan == "pro");
}

TEST_CASE("plans: errors in the configuration", "[config][plans]") {
    const std::string head = R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
plans:
  free: [{name: q, algorithm: fixed_window, limit: 1, window: day}]
routes:
  - name: api
    match: {path_prefix: /}
    upstream: app
)";
    struct Case {
        std::string yaml;
        std::vector<std::string> errors;
    };
    const std::vector<Case> cases{
        {head + "    identity: \"header:k\"\n",
         {"t.yaml:8:5: route 'api' names an 'identity' but no plan for it: add 'plan_map' (a file of identity: plan) "
          "or 'plan_header' (a plan named by a trusted hop)"}},
        {head + "    plan_header: x-plan\n    default_plan: free\n",
         {"t.yaml:8:5: route 'api': 'plan_header' needs 'identity' (what names the client: \"header:x-api-key\", "
          "\"jwt:sub\", \"client_ip\")",
          "t.yaml:9:5: route 'api': 'default_plan' needs 'identity' (what names the client: \"header:x-api-key\", "
          "\"jwt:sub\", \"client_ip\")"}},
        {head + "    identity: \"header:k\"\n    plan_header: x-plan\n    default_plan: fre\n",
         {"t.yaml:10:19: route 'api': 'default_plan' names plan 'fre', which is not defined (did you mean 'free'?)"}},
        {head + "    identity: \"header:k\"\n    plan_header: x-plan\n    limits: [{name: a, algorithm: "
                "concurrency, limit: 1}]\n",
         {"t.yaml:10:5: route 'api' uses its clients' plans' limits in place of 'limits': move these limits into "
          "the plans"}},
        {head + "    identity: method\n    plan_header: x-plan\n", {"t.yaml:8:15: identity 'method' does not name a client"}},
        {head + "    identity: \"jwt:sub\"\n    plan_header: x-plan\n",
         {"t.yaml:8:15: identity 'jwt:sub' reads a verified token: it needs a top-level 'jwt' with 'keys'"}},
        {head + "    identity: \"header:k\"\n    plan_header: \"x plan\"\n",
         {"t.yaml:9:18: 'plan_header' must be a header name, got 'x plan'"}},
        {head + "    identity: \"header:k\"\n    plan_map: /nonexistent/map.yaml\n",
         {"t.yaml:9:15: 'plan_map': cannot read /nonexistent/map.yaml: No such file or directory"}},
        {R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
routes:
  - {name: api, match: {path_prefix: /}, upstream: app, identity: "header:k", plan_header: x-plan}
)",
         {"t.yaml:3:57: route 'api' chooses a plan per client, but there is no top-level 'plans'"}},
        {R"(plans:
  free:
    - {name: q, algorithm: fixed_window, limit: 1, window: day}
    - {name: q, algorithm: fixed_window, limit: 2, window: day}
  pro:
    - {name: q, algorithm: token_bucket, rate: 1, burst: 1}
  "bad name": []
  other: {name: q}
)",
         {"t.yaml:4:14: duplicate limit name 'q' in plan 'free' (first used at line 3)",
          "t.yaml:6:14: limit 'q' is token_bucket in plan 'pro' but fixed_window in plan 'free': a client moved "
          "between plans keeps its count, which needs one algorithm per limit name (rename one of them)",
          "t.yaml:7:3: plan name must be 1 to 64 letters, digits, '_', '-' or '.', got 'bad name'",
          "t.yaml:8:10: plan 'other' must be a list of limits, got a map"}},
        {"plans: [free]\n", {"t.yaml:1:8: 'plans' must be a map of name: [limits], got a list"}},
    };
    for (const auto& c : cases) {
        CAPTURE(c.yaml);
        const auto result = config::load_string(c.yaml, "t.yaml");
        CHECK_FALSE(result.ok());
        std::vector<std::string> errors;
        for (const auto& d : result.diagnostics)
            if (!d.warning) errors.push_back(d.str());
        CHECK(errors == c.errors);
    }
}

TEST_CASE("plans: errors in a plan map name the map file, line and column", "[config][plans]") {
    config::PlanConfig bucket_plan{"pro", {}, {}}, window_plan{"free", {}, {}};
    config::LimitConfig bucket;
    bucket.name = "burst";
    bucket.algorithm = config::Algorithm::token_bucket;
    bucket.rate = 10;
    bucket.burst = 10;
    bucket.cost = 4;
    config::LimitConfig leaky = bucket;
    leaky.name = "smooth";
    leaky.algorithm = config::Algorithm::leaky_bucket;
    leaky.cost = 1;
    leaky.delay = 5;
    config::LimitConfig window;
    window.name = "quota";
    window.algorithm = config::Algorithm::fixed_window;
    window.limit = 100;
    bucket_plan.limits = {bucket, leaky};
    window_plan.limits = {window};
    const std::vector<config::PlanConfig> top{window_plan, bucket_plan};
    auto fresh = [&] { return plan_sets(top); };
    struct Case {
        std::string yaml;
        std::vector<std::string> errors;
    };
    const std::vector<Case> cases{
        {"a: fre\n", {"m.yaml:1:4: identity 'a' names plan 'fre', which is not defined (did you mean 'free'?)"}},
        {"a: {plan: free, overrides: {quote: {limit: 5}}}\n",
         {"m.yaml:1:29: plan 'free' has no limit 'quote' (did you mean 'quota'?)"}},
        {"a: {plan: free, overrides: {quota: {rate: 5}}}\n",
         {"m.yaml:1:37: limit 'quota' of plan 'free' is fixed_window: it has 'limit', not 'rate'"}},
        {"a: {plan: pro, overrides: {burst: {limit: 5}}}\n",
         {"m.yaml:1:36: limit 'burst' of plan 'pro' is token_bucket: it has 'rate' and 'burst', not 'limit'"}},
        {"a: {plan: free, overrides: {quota: {limit: 0}}}\n",
         {"m.yaml:1:44: 'limit' must be between 1 and 1000000000, got 0"}},
        {"a: {plan: pro, overrides: {burst: {rate: -1}}}\n", {"m.yaml:1:42: 'rate' must be greater than 0, got -1"}},
        {"a: {plan: pro, overrides: {burst: {burst: 3}}}\n",
         {"m.yaml:1:43: limit 'burst' of plan 'pro' is token_bucket costing 4 a request: 'burst' 3 would refuse every "
          "request"}},
        {"a: {plan: pro, overrides: {smooth: {burst: 5}}}\n",
         {"m.yaml:1:44: limit 'smooth' of plan 'pro' is leaky_bucket with delay 5: its burst must be above that, got 5"}},
        {"a: {plan: free, overides: {}}\n", {"m.yaml:1:17: unknown key 'overides' in a plan map entry (did you mean 'overrides'?)"}},
        {"a: {overrides: {}}\n", {"m.yaml:1:4: identity 'a' needs a 'plan'"}},
        {"a: free\na: pro\n", {"m.yaml:2:1: duplicate key 'a' (first at line 1)"}},
        {"\"\": free\n", {"m.yaml:1:1: an identity must not be empty"}},
        {"a:\n", {"m.yaml:1:1: 'a' has no value"}},
        {"- a\n", {"m.yaml:1:1: a plan map must be a map of identity: plan, got a list"}},
        {"a: [\n", {"m.yaml:2:1: invalid YAML: end of sequence flow not found"}},
    };
    for (const auto& c : cases) {
        CAPTURE(c.yaml);
        auto plans = fresh();
        std::vector<std::string> errors;
        for (const auto& d : config::read_plan_map_file(c.yaml, "m.yaml", top, plans))
            if (!d.warning) errors.push_back(d.str());
        CHECK(errors == c.errors);
    }
    // An empty map is no client; a good one fills by_identity.
    auto plans = fresh();
    CHECK(config::read_plan_map_file("", "m.yaml", top, plans).empty());
    CHECK(config::read_plan_map_file("a: pro\n7: free\n", "m.yaml", top, plans).empty());
    CHECK(plans.by_identity.at("a") == 1);
    CHECK(plans.by_identity.at("7") == 0);
}

TEST_CASE("plans: a CSV map reads as the YAML one, and its errors have their places", "[config][plans]") {
    const auto top = [] {
        config::LimitConfig quota;
        quota.name = "quota";
        quota.algorithm = config::Algorithm::fixed_window;
        quota.limit = 100;
        config::LimitConfig burst;
        burst.name = "burst";
        burst.algorithm = config::Algorithm::token_bucket;
        burst.rate = 10;
        burst.burst = 10;
        return std::vector<config::PlanConfig>{{"free", {quota}, {false}}, {"pro", {quota, burst}, {false, false}}};
    }();
    auto fresh = [&] { return plan_sets(top); };
    auto plans = fresh();
    const std::string good = "# clients\r\nidentity, plan, quota.limit,burst.rate,burst.burst\r\n"
                             "key-a,pro,,,\r\n"
                             "\r\n"
                             "\"key, \"\"b\"\"\",free,500,,\n"
                             "key-c,pro,20000,500,1000\n"
                             "key-d,free,  ,,";
    CHECK(messages(config::read_plan_map_file(good, "m.csv", top, plans)).empty());
    REQUIRE(plans.sets.size() == 4);
    CHECK(plans.by_identity.at("key-a") == 1);
    CHECK(plans.by_identity.at("key-d") == 0);
    const auto& b = plans.sets.at(plans.by_identity.at("key, \"b\""));
    CHECK(b.plan == "free");
    CHECK(b.limits.at(0).limit == 500);
    const auto& c = plans.sets.at(plans.by_identity.at("key-c"));
    CHECK((c.limits.at(0).limit == 20000 && c.limits.at(1).rate == 500 && c.limits.at(1).burst == 1000));
    CHECK(config::read_plan_map_file("", "m.CSV", top, plans).empty());

    struct Case {
        std::string csv;
        std::vector<std::string> errors;
    };
    const std::vector<Case> cases{
        {"id,plan\n", {"m.csv:1:1: a CSV plan map starts with its columns: identity,plan then any of LIMIT.rate, "
                       "LIMIT.burst, LIMIT.limit"}},
        {"identity,plan,quota\n", {"m.csv:1:15: column 'quota' must be LIMIT.rate, LIMIT.burst or LIMIT.limit"}},
        {"identity,plan,quota.limit\na,free\n", {"m.csv:2:1: this record has 2 fields, the columns 3"}},
        {"identity,plan,quota.limit\na,fre,\n",
         {"m.csv:2:3: identity 'a' names plan 'fre', which is not defined (did you mean 'free'?)"}},
        {"identity,plan,burst.rate\na,free,5\n", {"m.csv:2:8: plan 'free' has no limit 'burst'"}},
        {"identity,plan,quota.rate\na,free,5\n",
         {"m.csv:2:8: limit 'quota' of plan 'free' is fixed_window: it has 'limit', not 'rate'"}},
        {"identity,plan,quota.limit\na,free,lots\n", {"m.csv:2:8: 'quota.limit' must be an integer, got 'lots'"}},
        {"identity,plan\na,free\nb,pro\na,pro\n", {"m.csv:4:1: duplicate identity 'a' (first at line 2)"}},
        {"identity,plan\n,free\n", {"m.csv:2:1: an identity must not be empty"}},
        {"identity,plan\n\"a,free\n", {"m.csv:2:1: a quoted field without its closing '\"'"}},
        {"identity,plan\n\"a\"x,free\n", {"m.csv:2:4: after a quoted field: ',' or the end of the line"}},
        {"identity,plan\na\"b,free\n", {"m.csv:2:2: a '\"' inside a field that is not quoted"}},
    };
    for (const auto& k : cases) {
        CAPTURE(k.csv);
        auto fresh_plans = fresh();
        CHECK(messages(config::read_plan_map_file(k.csv, "m.csv", top, fresh_plans)) == k.errors);
    }
}

TEST_CASE("plans: a map error fails the load, named FILE:LINE:COL", "[config][plans]") {
    Files files;
    files.write("map.yaml", "key-a: pro\nkey-b: gold\n");
    const auto result = config::load_file(files.write("sluice.yaml", plans_yaml));
    CHECK_FALSE(result.ok());
    REQUIRE(result.diagnostics.size() == 2);  // (and the warning about free)
    CHECK(result.diagnostics[1].str() == (files.dir / "map.yaml").string() +
                                             ":2:8: identity 'key-b' names plan 'gold', which is not defined");
}

TEST_CASE("plans: the admin look-up finds the client's plan by its identity", "[config][plans]") {
    Files files;
    files.write("map.yaml", map_yaml);
    const auto result = config::load_file(files.write("sluice.yaml", plans_yaml));
    REQUIRE(result.ok());
    const auto& config = *result.config;
    auto read = [&](const std::string& query, server::LimitsProblem& problem) {
        std::string error;
        auto params = observe::parse_query(query, error);
        REQUIRE(params);
        return server::read_limits_query(config, *params, problem);
    };
    server::LimitsProblem problem;
    auto q = read("route=api&header.x-api-key=key%20c&client=192.0.2.1", problem);
    REQUIRE(q);
    CHECK(server::limits_of(config, *q)[0].limit == 20000);
    q = read("route=api&header.x-api-key=unknown", problem);
    REQUIRE(q);
    CHECK(q->set == 0);  // default_plan free
    q = read("route=api&header.x-api-key=key-b&plan=internal", problem);
    REQUIRE(q);
    CHECK(q->set == 2);
    // The plan a trusted hop names keeps the client's own overrides of that plan.
    q = read("route=api&header.x-api-key=key%20c&plan=pro&client=192.0.2.1", problem);
    REQUIRE(q);
    CHECK(server::limits_of(config, *q)[0].limit == 20000);
    q = read("route=api&header.x-api-key=key-a&limit=per_ip", problem);
    CHECK_FALSE(q);
    CHECK(problem.message == "'client' is needed: limit 'per_ip' is keyed on client_ip");
    CHECK_FALSE(read("route=api", problem));
    CHECK(problem.status == 400);
    CHECK(problem.message == "route 'api' limits by plan: give the client's identity (header:x-api-key)");
    CHECK_FALSE(read("route=api&header.x-api-key=key-a&plan=gold", problem));
    CHECK(problem.status == 404);
    CHECK_FALSE(read("route=api&header.x-api-key=key-b&limit=burst", problem));
    CHECK(problem.message == "plan 'free' has no limit named 'burst'");
}

TEST_CASE("plans: a plan header without trusted proxies is warned about", "[config][plans]") {
    const auto result = config::load_string(R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
plans:
  free: [{name: q, algorithm: fixed_window, limit: 1, window: day}]
routes:
  - {name: api, match: {path_prefix: /}, upstream: app, identity: client_ip, plan_header: x-plan, default_plan: free}
)",
                                            "t.yaml");
    REQUIRE(result.ok());
    CHECK(messages(result.diagnostics) ==
          std::vector<std::string>{"t.yaml:5:91: warning: 'plan_header' counts only from a peer in "
                                   "client_ip.trusted_proxies, and there is none: no request's plan comes from it"});
}

TEST_CASE("plans: overrides are held to what a plan's own bucket is held to", "[config][plans]") {
    const auto daily = test::leaky_bucket("d", 1, std::chrono::hours(24), 10);
    const auto fast = test::token_bucket("f", 1, std::chrono::milliseconds(1), 1);
    const std::vector<config::PlanConfig> top{{"p", {daily, fast}, {false, false}}};
    struct Case {
        std::string yaml;
        std::vector<std::string> errors;
    };
    const std::vector<Case> cases{
        // 86,400 s a request, a billion of them: 2.7 million years to drain (and an overflow).
        {"k: {plan: p, overrides: {d: {burst: 1000000000}}}\n",
         {"m.yaml:1:14: identity 'k': limit 'd' of plan 'p' with its overrides takes more than 10 years to refill "
          "(burst * per / rate)"}},
        {"k: {plan: p, overrides: {d: {rate: 1e-300}}}\n",
         {"m.yaml:1:14: identity 'k': limit 'd' of plan 'p' with its overrides takes more than 10 years to refill "
          "(burst * per / rate)"}},
        {"k: {plan: p, overrides: {f: {rate: 10000}}}\n",
         {"m.yaml:1:14: identity 'k': limit 'f' of plan 'p' with its overrides adds more than one token per "
          "microsecond (rate / per)"}},
    };
    for (const auto& c : cases) {
        CAPTURE(c.yaml);
        auto plans = plan_sets(top);
        CHECK(messages(config::read_plan_map_file(c.yaml, "m.yaml", top, plans)) == c.errors);
        CHECK(plans.by_identity.empty());
    }
    auto plans = plan_sets(top);
    CHECK(messages(config::read_plan_map_file("identity,plan,d.burst\nk,p,1000000000\n", "m.csv", top, plans)) ==
          std::vector<std::string>{"m.csv:2:1: identity 'k': limit 'd' of plan 'p' with its overrides takes more than "
                                   "10 years to refill (burst * per / rate)"});
}

TEST_CASE("plans: a map of addresses names clients as sluice writes them", "[config][plans]") {
    const std::vector<config::PlanConfig> top{{"p", {}, {}}, {"q", {}, {}}};
    auto plans = plan_sets(top);
    plans.identity.kind = config::KeyPart::Kind::client_ip;
    CHECK(messages(config::read_plan_map_file("2001:DB8::1: p\n\"::ffff:192.0.2.7\": q\n", "m.yaml", top, plans))
              .empty());
    CHECK(plans.by_identity.at("2001:db8::1") == 0);
    CHECK(plans.by_identity.at("192.0.2.7") == 1);
    plans = plan_sets(top);
    plans.identity.kind = config::KeyPart::Kind::client_ip;
    CHECK(messages(config::read_plan_map_file("2001:db8::1: p\n2001:DB8:0::1: q\nnope: p\n", "m.yaml", top, plans)) ==
          std::vector<std::string>{
              "m.yaml:2:1: duplicate identity '2001:db8::1' (first at line 1)",
              "m.yaml:3:1: identity 'nope' is not an IP address (the route's identity is client_ip)"});
    // A CSV from a spreadsheet starts with a byte order mark.
    plans = plan_sets(top);
    CHECK(messages(config::read_plan_map_file("\xEF\xBB\xBFidentity,plan\n10.0.0.1,q\n", "m.csv", top, plans)).empty());
    CHECK(plans.by_identity.at("10.0.0.1") == 1);
}

TEST_CASE("plans: a default plan that a client escapes by sending new identities is warned about", "[config][plans]") {
    const std::string head = R"(upstreams: {app: {servers: ["127.0.0.1:8081"]}}
client_ip: {trusted_proxies: [10.0.0.0/8]}
plans:
  free: [{name: q, algorithm: fixed_window, limit: 1, window: day}]
  guarded:
    - {name: q, algorithm: fixed_window, limit: 1, window: day}
    - {name: ip, algorithm: token_bucket, rate: 1, burst: 5, key: [client_ip]}
routes:
)";
    auto route = [](const std::string& identity, const std::string& plan) {
        return "  - {name: api, match: {path_prefix: /}, upstream: app, identity: \"" + identity +
               "\", plan_header: x-plan, default_plan: " + plan + "}\n";
    };
    auto warnings = [](const config::LoadResult& result) {
        std::vector<std::string> out;
        for (const auto& d : result.diagnostics)
            if (d.warning) out.push_back(d.str());
        return out;
    };
    const auto escapable = config::load_string(head + route("header:x-api-key", "free"), "t.yaml");
    REQUIRE(escapable.ok());
    CHECK(warnings(escapable) ==
          std::vector<std::string>{"t.yaml:9:122: warning: route 'api': clients the map does not name get plan "
                                   "'free', whose every limit is keyed on what the client sends (header:x-api-key): "
                                   "one that sends a new value each time is never limited; add a limit keyed on "
                                   "client_ip to that plan"});
    CHECK(warnings(config::load_string(head + route("header:x-api-key", "guarded"), "t.yaml")).empty());
    CHECK(warnings(config::load_string(head + route("client_ip", "free"), "t.yaml")).empty());
}
