// YAML to Config. The walk mirrors the schema in INTERFACE.md: one reader per section, each
// checking the shape (map, list, single value) before the values. Problems are collected, never
// thrown, so every one of them is reported in a single run.
#include "config/loader.hpp"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <sstream>

#include "config/access_format.hpp"
#include "config/duration.hpp"
#include "config/endpoint.hpp"
#include "config/message_text.hpp"
#include "config/route_checks.hpp"
#include "config/spelling_suggestion.hpp"
#include "config/value_syntax.hpp"
#include "auth/jwt.hpp"
#include "http/request_target.hpp"
#include "tls/pem.hpp"

namespace sluice::config {
namespace {

using Keys = std::vector<std::string_view>;

const Keys top_level_keys{"server", "admin", "client_ip", "store",     "upstreams", "routes",
                          "exempt", "jwt",   "plans",     "responses", "logging"};
const Keys listener_keys{"address", "tls", "http2"};
const Keys listener_tls_keys{"cert", "key", "certificates", "min_version", "handshake_timeout"};
const Keys certificate_keys{"cert", "key"};
const Keys upstream_tls_keys{"ca", "server_name", "verify", "cert", "key"};
const Keys redis_keys{"mode",       "address",     "username",          "password",          "database",
                      "timeout",    "key_prefix",  "sentinels",         "master_name",       "sentinel_username",
                      "sentinel_password", "nodes",       "shared_batches"};
const Keys route_keys{"name",   "match",    "action",   "upstream",    "on_error",    "limited_status",
                      "limits", "exempt",   "identity", "plan_map",    "plan_header", "default_plan"};
const Keys plan_entry_keys{"plan", "overrides"};
const Keys plan_override_keys{"rate", "burst", "limit"};
const Keys exempt_keys{"client_ips", "headers", "methods"};
const Keys jwt_keys{"keys", "leeway"};
const Keys jwt_key_keys{"alg", "secret", "pem", "jwks", "kid"};
const Keys exempt_header_keys{"name", "value"};
const Keys match_keys{"path", "path_prefix", "methods", "host"};
const Keys limit_keys{"name",      "algorithm", "rate",   "per",    "burst", "limit",        "window",
                      "time_zone", "lease",     "key",    "shadow", "cost",  "default_cost", "delay",
                      "nodelay",   "max_wait",  "count",  "ban"};
const Keys count_keys{"statuses"};
const Keys response_cost_keys{"response_header", "response_trailer", "reserve"};

constexpr std::int64_t no_maximum = std::numeric_limits<std::int64_t>::max();
// Ranges that keep every figure derived from a limit exact and far from overflow: the Redis
// scripts compute in Lua doubles (exact to 2^53, about 9.0e15) on microsecond timestamps
// (about 1.8e15 today), and deadlines are steady_clock nanoseconds (int64: 292 years).
constexpr std::int64_t max_count = 1'000'000'000;            // burst, limit, cost
// A sliding window keeps one entry per admitted request (about 120 bytes each in Redis):
// above this many, --check suggests fixed_window or token_bucket.
constexpr std::uint64_t large_sliding_window = 10'000;
constexpr double max_rate = 1e9;                              // tokens per `per`
constexpr Duration max_duration{365LL * 86'400'000};          // any duration: 365d
constexpr double max_refill_us = 10.0 * 365 * 86'400 * 1e6;   // burst * per / rate: 10 years
constexpr std::int64_t max_workers = 1024;
constexpr std::int64_t min_header_bytes = 1024;
constexpr std::int64_t max_header_bytes = 1024 * 1024;
constexpr std::size_t max_pem_bytes = 1024 * 1024;  // a certificate, key or CA file

template <class T>
using Choices = std::vector<std::pair<std::string_view, T>>;

// A key part a request may leave out (a header, parameter, cookie, segment, token claim): a
// limit keyed on one does not apply to a request without it.
bool may_be_left_out(const KeyPart& part) {
    return part.kind == KeyPart::Kind::header || part.kind == KeyPart::Kind::query ||
           part.kind == KeyPart::Kind::cookie || part.kind == KeyPart::Kind::path_segment ||
           part.kind == KeyPart::Kind::jwt;
}

bool contains(const Keys& keys, std::string_view key) { return std::find(keys.begin(), keys.end(), key) != keys.end(); }

Position position_of(const YAML::Mark& mark) {
    if (mark.is_null()) return {};
    return {mark.line + 1, mark.column + 1};
}

// What a node is, for "got ..." in messages: the text of a single value, else its kind.
std::string description_of(const YAML::Node& node) {
    switch (node.Type()) {
        case YAML::NodeType::Scalar: return quoted(node.Scalar());
        case YAML::NodeType::Sequence: return "a list";
        case YAML::NodeType::Map: return "a map";
        default: return "nothing";
    }
}

// A value and the name it goes by in messages: a map entry ('listen'), or an item of a list
// ('listen' entry).
struct Field {
    std::string key;
    YAML::Node value;
    Position key_at;
    Position at;  // the value itself, or the key when the value is empty
    bool list_item = false;

    std::string label() const { return quoted(key) + (list_item ? " entry" : ""); }
    bool empty() const { return !value.IsDefined() || value.IsNull(); }
};

Field entry_field(const YAML::Node& key, const YAML::Node& value) {
    const Position key_at = position_of(key.Mark());
    const bool empty = !value.IsDefined() || value.IsNull();
    return Field{key.Scalar(), value, key_at, empty ? key_at : position_of(value.Mark()), false};
}

std::vector<Field> items_of(const Field& list) {
    std::vector<Field> items;
    for (const YAML::Node& item : list.value) {
        const Position at = item.IsNull() ? list.at : position_of(item.Mark());
        items.push_back(Field{list.key, item, at, at, true});
    }
    return items;
}

template <class T>
std::string choice_list(const Choices<T>& choices) {
    std::string text;
    for (std::size_t i = 0; i < choices.size(); ++i) {
        if (i > 0) text += i + 1 == choices.size() ? " or " : ", ";
        text += choices[i].first;
    }
    return text;
}

std::string keys_list(const Keys& keys) {
    std::string text;
    for (std::string_view key : keys) text += (text.empty() ? "" : ", ") + std::string(key);
    return text;
}

template <class Target, class Value>
void assign(Target& target, const std::optional<Value>& value) {
    if (value) target = static_cast<Target>(*value);
}

// The entries of one map, in file order, checked against the keys the schema knows.
class Section {
public:
    Section(const Field& field, std::string context, const Keys& known, DiagnosticList& diagnostics)
        : at_(field.at) {
        for (const Field& entry : entries(field, diagnostics)) {
            if (!contains(known, entry.key)) {
                diagnostics.error(entry.key_at, unknown_key_message(entry.key, context, known));
                continue;
            }
            fields_.push_back(entry);
        }
    }

    // The entries of any map; keys that are not single values or that repeat are reported.
    static std::vector<Field> entries(const Field& field, DiagnosticList& diagnostics) {
        std::vector<Field> result;
        std::map<std::string, Position, std::less<>> seen;
        if (!field.value.IsMap()) return result;
        for (const auto& entry : field.value) {
            if (!entry.first.IsScalar()) {
                diagnostics.error(position_of(entry.first.Mark()), "keys must be plain names, got " +
                                                                       description_of(entry.first));
                continue;
            }
            Field item = entry_field(entry.first, entry.second);
            const auto [first, inserted] = seen.try_emplace(item.key, item.key_at);
            if (!inserted) {
                diagnostics.error(item.key_at, "duplicate key " + quoted(item.key) + " (first at line " +
                                                   std::to_string(first->second.line) + ")");
                continue;
            }
            result.push_back(std::move(item));
        }
        return result;
    }

    const Field* find(std::string_view key) const {
        for (const Field& field : fields_)
            if (field.key == key) return &field;
        return nullptr;
    }

    Position at() const { return at_; }

private:
    static std::string unknown_key_message(std::string_view key, const std::string& context, const Keys& known) {
        std::string message = "unknown key " + quoted(key) + " " + context;
        if (auto suggestion = closest_spelling(key, known)) return message + " (did you mean " + quoted(*suggestion) + "?)";
        return message + " (known keys: " + keys_list(known) + ")";
    }

    Position at_;
    std::vector<Field> fields_;
};

class ConfigReader {
public:
    explicit ConfigReader(const std::string& name) : diagnostics_(name) { config_.source_path = name; }

    void read_document(const YAML::Node& root);
    // A plan map's entries into `plans` (read by a reader named for the map file), YAML or CSV.
    void read_plan_map(const YAML::Node& root, const std::vector<PlanConfig>& top, RoutePlans& plans);
    void read_plan_map_csv(std::string_view text, const std::vector<PlanConfig>& top, RoutePlans& plans);
    DiagnosticList& diagnostics() { return diagnostics_; }
    const Config& config() const { return config_; }
    // Problems of other files the configuration names (plan maps), and how many are errors.
    const std::vector<Diagnostic>& other_files() const { return other_files_; }
    std::size_t other_file_errors() const { return other_file_errors_; }

    // A section read from a table (nginx's model: each directive one row): one row per key,
    // its name and how its value is read into the section's settings. The key is written
    // once, in its row: the section's known keys (unknown-key errors, "did you mean") and
    // known_keys() (the reference test of docs/configuration.md) come from the rows, and
    // the keys are read in the rows' order.
    template <class Settings>
    struct Table {
        struct Row {
            std::string_view key;
            void (*read)(ConfigReader& reader, const Field& value, Settings& settings);
        };
        explicit Table(std::vector<Row> rows_) : rows(std::move(rows_)) {
            for (const Row& row : rows) keys.push_back(row.key);
        }
        std::vector<Row> rows;
        Keys keys;
    };
    static const Table<ServerConfig>& server_table();
    static const Table<Http2Config>& http2_table();
    static const Table<AdminConfig>& admin_table();
    static const Table<ClientIpConfig>& client_ip_table();
    static const Table<StoreConfig>& store_table();
    static const Table<MemoryStoreConfig>& memory_store_table();
    static const Table<ResponsesConfig>& responses_table();
    static const Table<LoggingConfig>& logging_table();
    static const Table<UpstreamConfig>& upstream_table();

private:
    // Reads the map `field` by `table` into `settings` ("in server": where, for messages).
    template <class Settings>
    void read_table(const Field& field, std::string context, const Table<Settings>& table, Settings& settings) {
        if (!expect_map(field)) return;
        read_rows(Section(field, std::move(context), table.keys, diagnostics_), table, settings);
    }
    // The same for a section already checked against table.keys.
    template <class Settings>
    void read_rows(const Section& section, const Table<Settings>& table, Settings& settings) {
        for (const auto& row : table.rows)
            if (const Field* f = section.find(row.key)) row.read(*this, *f, settings);
    }

    // Shapes. An empty value counts as an empty map or list.
    bool expect_map(const Field& field);
    bool expect_list(const Field& field);
    bool expect_single_value(const Field& field);

    // Single values; nullopt (and an error) when the value is not acceptable.
    std::optional<std::string> text(const Field& field);
    std::optional<std::int64_t> integer(const Field& field, std::int64_t min, std::int64_t max);
    std::optional<double> positive_number(const Field& field);
    std::optional<Duration> duration(const Field& field, bool zero_allowed);
    std::optional<bool> boolean(const Field& field);
    std::optional<Endpoint> endpoint(const Field& field, bool allow_port_zero);
    std::optional<std::string> name(const Field& field);
    template <class T>
    std::optional<T> choice(const Field& field, const Choices<T>& choices);

    void read_server(const Field& field);
    void read_listen(const Field& field);
    std::optional<Listener> read_listener(const Field& item);
    std::optional<ListenerTls> read_listener_tls(const Field& field);
    // `cert` and `key` of `section` (both required unless `optional` and both absent).
    std::optional<TlsCertificate> read_certificate(const Section& section, const Field& owner, bool optional);
    std::optional<UpstreamTls> read_upstream_tls(const Field& field);
    std::string file_path(const std::string& written) const;
    void read_admin(const Field& field);
    void read_admin_token(const Field& field);
    void read_client_ip(const Field& field);
    void read_store(const Field& field);
    void read_redis(const Field& field);
    std::vector<Endpoint> read_redis_endpoints(const Field& field);
    void read_upstreams(const Field& field);
    void read_upstream(const Field& field);
    void read_servers(const Field& field, UpstreamConfig& upstream);
    void read_routes(const Field& field);
    void read_route(const Field& field);
    void read_route_name(const Section& section, RouteConfig& route, RouteSite& site);
    void read_route_upstream(const Section& section, RouteConfig& route, RouteSite& site);
    bool read_match(const Section& route_section, RouteConfig& route);
    void read_path(const Section& section, RouteMatch& match);
    void read_methods(const Field& field, std::vector<std::string>& methods);
    void read_exempt(const Field& field, Exempt& exempt, const std::string& where);
    void warn_when_exempt_headers_cannot_apply();
    void read_jwt(const Field& field);
    std::optional<JwtKeyConfig> read_jwt_key(const Field& item);
    bool jwt_read_ = false;  // a jwt section with keys was read (jwt:CLAIM key parts need one)
    void read_plans(const Field& field);
    void read_route_plans(const Section& section, RouteConfig& route);
    std::shared_ptr<RoutePlans> plans_of_route(const Section& section, RouteConfig& route);
    // Problems of other files (plan maps), and how many of them are errors.
    std::vector<Diagnostic> other_files_;
    std::size_t other_file_errors_ = 0;
    std::optional<std::size_t> plan_of_client(const std::string& identity, const Field& plan_field,
                                              const std::vector<PlanConfig>& top, const RoutePlans& plans);
    LimitConfig* override_target(RoutePlans::Set& set, const std::string& name, Position at);
    void apply_override(LimitConfig& limit, const std::string& plan, std::string_view field, const Field& f);
    void check_overridden_buckets(const RoutePlans::Set& set, Position at);
    std::optional<std::string> map_identity(const std::string& written, Position at, const RoutePlans& plans);
    void read_limits(const Field& field, RouteConfig& route, RouteSite& site);
    void read_limit(const Field& field, RouteConfig& route, RouteSite& site);
    void read_count(const Field& field, LimitConfig& limit);
    void read_ban(const Field& field, LimitConfig& limit);
    void refuse_counted_limits(const Section& section, const RouteConfig& route);
    std::optional<StatusRange> status_range(const Field& field);
    void read_token_bucket(const Section& section, LimitConfig& limit);
    void read_sliding_window(const Section& section, LimitConfig& limit);
    void read_fixed_window(const Section& section, LimitConfig& limit);
    void read_concurrency(const Section& section, LimitConfig& limit);
    void read_leaky_bucket(const Section& section, LimitConfig& limit);
    void read_cost(const Section& section, LimitConfig& limit);
    void read_response_cost(const Field& field, LimitConfig& limit);
    void refuse_parameters(const Section& section, const LimitConfig& limit);
    void read_key(const Field& field, LimitConfig& limit);
    void read_responses(const Field& field);
    void read_logging(const Field& field);
    void read_access_format(const Field& field);
    void warn_when_no_routes(const Field* routes);

    DiagnosticList diagnostics_;
    Config config_;
    std::vector<RouteSite> route_sites_;
    std::optional<Position> exempt_headers_at_;  // the first exempt `headers` list
};

// ---- shapes ----------------------------------------------------------------------------------

bool ConfigReader::expect_map(const Field& field) {
    if (field.empty() || field.value.IsMap()) return true;
    diagnostics_.error(field.at, field.label() + " must be a map, got " + description_of(field.value));
    return false;
}

bool ConfigReader::expect_list(const Field& field) {
    if (field.empty() || field.value.IsSequence()) return true;
    diagnostics_.error(field.at, field.label() + " must be a list, got " + description_of(field.value));
    return false;
}

bool ConfigReader::expect_single_value(const Field& field) {
    if (field.value.IsScalar()) return true;
    if (field.empty()) {
        diagnostics_.error(field.at, field.label() + " has no value");
    } else {
        diagnostics_.error(field.at, field.label() + " must be a single value, got " + description_of(field.value));
    }
    return false;
}

// ---- single values ---------------------------------------------------------------------------

std::optional<std::string> ConfigReader::text(const Field& field) {
    if (!expect_single_value(field)) return std::nullopt;
    return field.value.Scalar();
}

std::optional<std::int64_t> ConfigReader::integer(const Field& field, std::int64_t min, std::int64_t max) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    std::int64_t value = 0;
    const char* end = written->data() + written->size();
    const auto [stop, error] = std::from_chars(written->data(), end, value);
    if (stop != end || (error != std::errc{} && error != std::errc::result_out_of_range)) {
        diagnostics_.error(field.at, field.label() + " must be an integer, got " + quoted(*written));
        return std::nullopt;
    }
    if (error == std::errc::result_out_of_range || value < min || value > max) {
        const std::string range = max == no_maximum ? "at least " + std::to_string(min)
                                                    : "between " + std::to_string(min) + " and " + std::to_string(max);
        diagnostics_.error(field.at, field.label() + " must be " + range + ", got " + *written);
        return std::nullopt;
    }
    return value;
}

std::optional<double> ConfigReader::positive_number(const Field& field) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    double value = 0;
    const char* end = written->data() + written->size();
    const auto [stop, error] = std::from_chars(written->data(), end, value);
    if (stop != end || error != std::errc{} || !std::isfinite(value)) {
        diagnostics_.error(field.at, field.label() + " must be a number, got " + quoted(*written));
        return std::nullopt;
    }
    if (value <= 0) {
        diagnostics_.error(field.at, field.label() + " must be greater than 0, got " + *written);
        return std::nullopt;
    }
    return value;
}

std::optional<Duration> ConfigReader::duration(const Field& field, bool zero_allowed) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    const auto value = parse_duration(*written);
    if (!value) {
        diagnostics_.error(field.at, field.label() + " must be a duration such as 250ms, 10s, 5m, 1h or 1d, got " +
                                         quoted(*written));
        return std::nullopt;
    }
    if (!zero_allowed && value->count() == 0) {
        diagnostics_.error(field.at, field.label() + " must be greater than 0, got " + *written);
        return std::nullopt;
    }
    if (*value > max_duration) {
        diagnostics_.error(field.at, field.label() + " must be at most 365d, got " + *written);
        return std::nullopt;
    }
    return value;
}

std::optional<bool> ConfigReader::boolean(const Field& field) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    if (*written == "true" || *written == "True" || *written == "TRUE") return true;
    if (*written == "false" || *written == "False" || *written == "FALSE") return false;
    diagnostics_.error(field.at, field.label() + " must be true or false, got " + quoted(*written));
    return std::nullopt;
}

std::optional<Endpoint> ConfigReader::endpoint(const Field& field, bool allow_port_zero) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    EndpointParse parsed = parse_endpoint(*written, allow_port_zero);
    if (!parsed.endpoint) diagnostics_.error(field.at, field.label() + ": " + parsed.error);
    return parsed.endpoint;
}

std::optional<std::string> ConfigReader::name(const Field& field) {
    auto written = text(field);
    if (written && !is_valid_name(*written)) {
        diagnostics_.error(field.at, field.label() + " must be 1 to 64 letters, digits, '_', '-' or '.', got " +
                                         quoted(*written));
        return std::nullopt;
    }
    return written;
}

template <class T>
std::optional<T> ConfigReader::choice(const Field& field, const Choices<T>& choices) {
    const auto written = text(field);
    if (!written) return std::nullopt;
    for (const auto& [spelling, value] : choices)
        if (spelling == *written) return value;
    diagnostics_.error(field.at, field.label() + " must be " + choice_list(choices) + ", got " + quoted(*written));
    return std::nullopt;
}

// ---- document and sections -------------------------------------------------------------------

void ConfigReader::read_document(const YAML::Node& root) {
    const Field document{"", root, position_of(root.Mark()), position_of(root.Mark()), false};
    if (document.empty()) {
        // Every section may be left out, but not all of them: a file with nothing in it is most
        // often one caught while it was being written (a reload during `cp`), and read as every
        // default it would take every route away.
        diagnostics_.error(Position{1, 1}, "the file is empty: no section is set (a file still being written? for "
                                           "no routes on purpose, write `routes: []`)");
        return;
    }
    if (!root.IsMap()) {
        diagnostics_.error(document.at, "the top level must be a map of sections (" + keys_list(top_level_keys) +
                                            "), got " + description_of(root));
        return;
    }
    const Section top(document, "at the top level", top_level_keys, diagnostics_);
    if (const Field* f = top.find("server")) read_server(*f);
    if (const Field* f = top.find("admin")) read_admin(*f);
    if (const Field* f = top.find("client_ip")) read_client_ip(*f);
    if (const Field* f = top.find("store")) read_store(*f);
    if (const Field* f = top.find("upstreams")) read_upstreams(*f);
    if (const Field* f = top.find("jwt")) read_jwt(*f);
    if (const Field* f = top.find("plans")) read_plans(*f);
    if (const Field* f = top.find("routes")) read_routes(*f);
    if (const Field* f = top.find("exempt")) read_exempt(*f, config_.exempt, "exempt");
    if (const Field* f = top.find("responses")) read_responses(*f);
    if (const Field* f = top.find("logging")) read_logging(*f);
    check_routes(config_.routes, route_sites_, config_.upstreams, diagnostics_);
    warn_when_no_routes(top.find("routes"));
    warn_when_exempt_headers_cannot_apply();
}

void ConfigReader::read_server(const Field& field) { read_table(field, "in server", server_table(), config_.server); }

const ConfigReader::Table<ServerConfig>& ConfigReader::server_table() {
    using R = ConfigReader;
    using S = ServerConfig;
    static const Table<S> table({
        {"listen", [](R& r, const Field& f, S&) { r.read_listen(f); }},
        {"workers", [](R& r, const Field& f, S& s) { assign(s.workers, r.integer(f, 0, max_workers)); }},
        {"max_connections", [](R& r, const Field& f, S& s) { assign(s.max_connections, r.integer(f, 1, no_maximum)); }},
        {"header_timeout", [](R& r, const Field& f, S& s) { assign(s.header_timeout, r.duration(f, false)); }},
        {"idle_timeout", [](R& r, const Field& f, S& s) { assign(s.idle_timeout, r.duration(f, false)); }},
        {"max_header_bytes",
         [](R& r, const Field& f, S& s) { assign(s.max_header_bytes, r.integer(f, min_header_bytes, max_header_bytes)); }},
        {"max_body_bytes", [](R& r, const Field& f, S& s) { assign(s.max_body_bytes, r.integer(f, 0, no_maximum)); }},
        {"shutdown_timeout", [](R& r, const Field& f, S& s) { assign(s.shutdown_timeout, r.duration(f, false)); }},
        {"tunnel_idle_timeout", [](R& r, const Field& f, S& s) { assign(s.tunnel_idle_timeout, r.duration(f, false)); }},
        {"max_waiting", [](R& r, const Field& f, S& s) { assign(s.max_waiting, r.integer(f, 0, max_count)); }},
        {"http2", [](R& r, const Field& f, S& s) { r.read_table(f, "in server.http2", http2_table(), s.http2); }},
        {"pid_file",
         [](R& r, const Field& f, S& s) {
             const auto written = r.text(f);
             if (written && written->empty())
                 r.diagnostics_.error(f.at, f.label() + " must be a file path (leave it out for none), got ''");
             else if (written)
                 s.pid_file = r.file_path(*written);
         }},
    });
    return table;
}

const ConfigReader::Table<Http2Config>& ConfigReader::http2_table() {
    using R = ConfigReader;
    using S = Http2Config;
    static const Table<S> table({
        {"max_concurrent_streams", [](R& r, const Field& f, S& s) { assign(s.max_concurrent_streams, r.integer(f, 1, 10000)); }},
        {"max_header_list_bytes",
         [](R& r, const Field& f, S& s) { assign(s.max_header_list_bytes, r.integer(f, min_header_bytes, 1048576)); }},
        {"max_resets_per_second", [](R& r, const Field& f, S& s) { assign(s.max_resets_per_second, r.integer(f, 1, 1000000)); }},
        {"max_control_frames_per_second",
         [](R& r, const Field& f, S& s) { assign(s.max_control_frames_per_second, r.integer(f, 10, 1000000)); }},
        {"stream_window_bytes", [](R& r, const Field& f, S& s) { assign(s.stream_window_bytes, r.integer(f, 16384, 16777215)); }},
    });
    return table;
}

void ConfigReader::read_listen(const Field& field) {
    if (!expect_list(field)) return;
    std::vector<Listener> listen;
    for (const Field& item : items_of(field))
        if (auto listener = read_listener(item)) listen.push_back(std::move(*listener));
    if (field.empty() || field.value.size() == 0)
        diagnostics_.error(field.at, field.label() + " needs at least one address");
    config_.server.listen = std::move(listen);
}

// "host:port", or {address: "host:port", tls: {...}}.
std::optional<Listener> ConfigReader::read_listener(const Field& item) {
    if (!item.value.IsMap()) {
        auto address = endpoint(item, true);
        if (!address) return std::nullopt;
        return Listener{*address, std::nullopt};
    }
    const Section section(item, "in a 'listen' entry", listener_keys, diagnostics_);
    Listener listener;
    bool ok = true;
    if (const Field* f = section.find("address")) {
        auto address = endpoint(*f, true);
        ok = address.has_value();
        if (address) static_cast<Endpoint&>(listener) = *address;
    } else {
        diagnostics_.error(item.at, "a 'listen' entry written as a map needs an 'address'");
        ok = false;
    }
    if (const Field* f = section.find("tls")) {
        listener.tls = read_listener_tls(*f);
        ok = ok && listener.tls.has_value();
        listener.http2 = true;
    }
    if (const Field* f = section.find("http2")) {
        const auto written = text(*f);
        if (written && *written == "off") {
            listener.http2 = false;
        } else if (written && *written == "prior_knowledge" && !section.find("tls")) {
            listener.http2 = true;
        } else if (written && *written == "prior_knowledge") {
            diagnostics_.error(f->at, f->label() + ": prior_knowledge is for plain listeners; a TLS listener offers h2 "
                                                   "by ALPN (write 'off' to offer only http/1.1)");
            ok = false;
        } else if (written) {
            diagnostics_.error(f->at, f->label() + " must be prior_knowledge or off, got '" + *written + "'");
            ok = false;
        } else {
            ok = false;
        }
    }
    if (!ok) return std::nullopt;
    return listener;
}

std::string ConfigReader::file_path(const std::string& written) const {
    if (written.empty() || written.front() == '/') return written;
    const auto slash = config_.source_path.rfind('/');
    if (slash == std::string::npos) return written;
    return config_.source_path.substr(0, slash + 1) + written;
}

std::optional<TlsCertificate> ConfigReader::read_certificate(const Section& section, const Field& owner,
                                                             bool optional) {
    const Field* cert_field = section.find("cert");
    const Field* key_field = section.find("key");
    if (!cert_field && !key_field && optional) return std::nullopt;
    if (!cert_field || !key_field) {
        diagnostics_.error(owner.at, owner.label() + " needs both 'cert' (PEM certificate chain) and 'key' (PEM "
                                                     "private key)");
        return std::nullopt;
    }
    const auto cert_path = text(*cert_field);
    const auto key_path = text(*key_field);
    if (!cert_path || !key_path) return std::nullopt;
    TlsCertificate certificate;
    certificate.cert_file = file_path(*cert_path);
    certificate.key_file = file_path(*key_path);
    bool ok = true;
    std::string error;
    certificate.cert_pem = tls::read_small_file(certificate.cert_file, max_pem_bytes, error);
    if (!error.empty()) {
        diagnostics_.error(cert_field->at, "'cert': " + error);
        ok = false;
    }
    error.clear();
    certificate.key_pem = tls::read_small_file(certificate.key_file, max_pem_bytes, error);
    if (!error.empty()) {
        diagnostics_.error(key_field->at, "'key': " + error);
        ok = false;
    }
    if (!ok) return std::nullopt;
    tls::CertificateInfo info;
    error = tls::check_certificate_pair(certificate.cert_pem, certificate.key_pem, info);
    if (!error.empty()) {
        diagnostics_.error(cert_field->at, "'cert' " + quoted(*cert_path) + " with 'key' " + quoted(*key_path) +
                                               ": " + error);
        return std::nullopt;
    }
    const auto now = std::time(nullptr);
    auto date = [](std::time_t t) {
        char text[32];
        std::tm tm{};
        gmtime_r(&t, &tm);
        std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S UTC", &tm);
        return std::string(text);
    };
    if (info.not_after != 0 && info.not_after < now)
        diagnostics_.warning(cert_field->at, "certificate " + quoted(*cert_path) + " expired on " + date(info.not_after));
    else if (info.not_before > now)
        diagnostics_.warning(cert_field->at, "certificate " + quoted(*cert_path) + " is not valid before " +
                                                 date(info.not_before));
    certificate.names = std::move(info.names);
    return certificate;
}

std::optional<ListenerTls> ConfigReader::read_listener_tls(const Field& field) {
    if (field.empty() || !field.value.IsMap()) {
        diagnostics_.error(field.at, field.label() + " must be a map with 'cert' and 'key', got " +
                                         description_of(field.value));
        return std::nullopt;
    }
    const Section section(field, "in 'tls'", listener_tls_keys, diagnostics_);
    ListenerTls tls;
    bool ok = true;
    const Field* list = section.find("certificates");
    if (list && (section.find("cert") || section.find("key"))) {
        diagnostics_.error(list->key_at, "'tls' takes either 'cert' and 'key' or 'certificates', not both");
        ok = false;
    } else if (list) {
        if (!expect_list(*list)) return std::nullopt;
        if (list->empty() || list->value.size() == 0) {
            diagnostics_.error(list->at, "'certificates' needs at least one entry");
            ok = false;
        }
        for (const Field& item : items_of(*list)) {
            if (!item.value.IsMap()) {
                diagnostics_.error(item.at, "a 'certificates' entry must be a map with 'cert' and 'key', got " +
                                                description_of(item.value));
                ok = false;
                continue;
            }
            const Section entry(item, "in a 'certificates' entry", certificate_keys, diagnostics_);
            auto certificate = read_certificate(entry, item, false);
            if (certificate)
                tls.certificates.push_back(std::move(*certificate));
            else
                ok = false;
        }
    } else if (auto certificate = read_certificate(section, field, false)) {
        tls.certificates.push_back(std::move(*certificate));
    } else {
        ok = false;
    }
    if (const Field* f = section.find("min_version"))
        assign(tls.min_version, choice(*f, Choices<TlsVersion>{{"1.2", TlsVersion::tls1_2}, {"1.3", TlsVersion::tls1_3}}));
    if (const Field* f = section.find("handshake_timeout")) assign(tls.handshake_timeout, duration(*f, false));
    if (!ok) return std::nullopt;
    return tls;
}

std::optional<UpstreamTls> ConfigReader::read_upstream_tls(const Field& field) {
    if (!field.empty() && !field.value.IsMap()) {
        diagnostics_.error(field.at, field.label() + " must be a map, got " + description_of(field.value));
        return std::nullopt;
    }
    const Section section(field, "in an upstream's 'tls'", upstream_tls_keys, diagnostics_);
    UpstreamTls tls;
    bool ok = true;
    if (const Field* f = section.find("ca")) {
        const auto written = text(*f);
        if (!written || written->empty()) {
            if (written) diagnostics_.error(f->at, "'ca' must be system or a PEM file of certificates to trust");
            ok = false;
        } else if (*written != "system") {
            tls.system_ca = false;
            tls.ca_file = file_path(*written);
            std::string error;
            tls.ca_pem = tls::read_small_file(tls.ca_file, max_pem_bytes, error);
            std::size_t count = 0;
            if (error.empty()) error = tls::check_ca_bundle(tls.ca_pem, count);
            if (!error.empty()) {
                diagnostics_.error(f->at, "'ca' " + quoted(*written) + ": " + error);
                ok = false;
            }
        }
    }
    if (const Field* f = section.find("server_name")) {
        const auto written = text(*f);
        const bool valid = written && !written->empty() && written->size() <= 253 &&
                           std::all_of(written->begin(), written->end(), [](unsigned char c) {
                               return std::isalnum(c) || c == '-' || c == '.' || c == '_';
                           });
        if (written && !valid)
            diagnostics_.error(f->at, "'server_name' must be a host name (letters, digits, '-', '.', '_'), got " +
                                          quoted(*written));
        if (valid) {
            tls.server_name = *written;
            std::transform(tls.server_name.begin(), tls.server_name.end(), tls.server_name.begin(),
                           [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        } else {
            ok = false;
        }
    }
    if (const Field* f = section.find("verify")) assign(tls.verify, boolean(*f));
    const bool wants_client = section.find("cert") || section.find("key");
    if (wants_client) {
        tls.client = read_certificate(section, field, true);
        ok = ok && tls.client.has_value();
    }
    if (!ok) return std::nullopt;
    return tls;
}

void ConfigReader::read_admin(const Field& field) { read_table(field, "in admin", admin_table(), config_.admin); }

const ConfigReader::Table<AdminConfig>& ConfigReader::admin_table() {
    using R = ConfigReader;
    using S = AdminConfig;
    static const Table<S> table({
        {"listen",
         [](R& r, const Field& f, S& s) {
             const auto written = r.text(f);
             if (!written) return;
             if (written->empty()) {
                 s.listen.reset();  // no admin port at all
                 return;
             }
             if (auto address = r.endpoint(f, false)) s.listen = *address;
         }},
        {"token", [](R& r, const Field& f, S&) { r.read_admin_token(f); }},
    });
    return table;
}

// A bearer token (RFC 6750 b64token characters), long enough not to be guessed.
void ConfigReader::read_admin_token(const Field& field) {
    const auto written = text(field);
    if (!written) return;
    const bool valid = !written->empty() && std::all_of(written->begin(), written->end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' || c == '~' ||
               c == '+' || c == '/' || c == '=';
    });
    if (!valid) {
        diagnostics_.error(field.at, "'token' must be letters, digits and - . _ ~ + / = only (a bearer token), "
                                     "and not empty");
        return;
    }
    if (written->size() < 16)
        diagnostics_.warning(field.at, "'token' is shorter than 16 characters: easy to guess (openssl rand -hex 32 "
                                       "makes a good one)");
    config_.admin.token = *written;
}

void ConfigReader::read_client_ip(const Field& field) {
    read_table(field, "in client_ip", client_ip_table(), config_.client_ip);
}

const ConfigReader::Table<ClientIpConfig>& ConfigReader::client_ip_table() {
    using R = ConfigReader;
    using S = ClientIpConfig;
    static const Table<S> table({
        {"trusted_proxies",
         [](R& r, const Field& f, S& s) {
             if (!r.expect_list(f)) return;
             for (const Field& item : items_of(f)) {
                 const auto written = r.text(item);
                 if (!written) continue;
                 if (auto cidr = net::Cidr::parse(*written)) {
                     s.trusted_proxies.push_back(*cidr);
                 } else {
                     r.diagnostics_.error(item.at, item.label() + ": " + cidr_error(*written));
                 }
             }
         }},
    });
    return table;
}

void ConfigReader::read_store(const Field& field) { read_table(field, "in store", store_table(), config_.store); }

const ConfigReader::Table<StoreConfig>& ConfigReader::store_table() {
    using R = ConfigReader;
    using S = StoreConfig;
    static const Table<S> table({
        {"type",
         [](R& r, const Field& f, S& s) {
             assign(s.type, r.choice<StoreType>(f, {{"redis", StoreType::redis}, {"memory", StoreType::memory}}));
         }},
        {"redis", [](R& r, const Field& f, S&) { r.read_redis(f); }},
        {"memory", [](R& r, const Field& f, S& s) { r.read_table(f, "in store.memory", memory_store_table(), s.memory); }},
        {"on_error",
         [](R& r, const Field& f, S& s) {
             assign(s.on_error, r.choice<OnError>(f, {{"allow", OnError::allow}, {"deny", OnError::deny}}));
         }},
    });
    return table;
}

const ConfigReader::Table<MemoryStoreConfig>& ConfigReader::memory_store_table() {
    using R = ConfigReader;
    using S = MemoryStoreConfig;
    static const Table<S> table({
        {"max_keys", [](R& r, const Field& f, S& s) { assign(s.max_keys, r.integer(f, 4096, 1'000'000'000)); }},
    });
    return table;
}

void ConfigReader::read_redis(const Field& field) {
    if (!expect_map(field)) return;
    const Section section(field, "in store.redis", redis_keys, diagnostics_);
    RedisConfig& redis = config_.store.redis;
    const Field* mode = section.find("mode");
    if (mode)
        assign(redis.mode, choice<RedisMode>(*mode, {{"standalone", RedisMode::standalone},
                                                     {"sentinel", RedisMode::sentinel},
                                                     {"cluster", RedisMode::cluster}}));
    if (const Field* f = section.find("address")) {
        const auto written = text(*f);
        if (written) {
            if (auto error = apply_redis_address(*written, redis); !error.empty())
                diagnostics_.error(f->at, f->label() + ": " + error);
        }
    }
    if (const Field* f = section.find("username")) assign(redis.username, text(*f));
    if (const Field* f = section.find("password")) assign(redis.password, text(*f));
    if (const Field* f = section.find("database"))
        assign(redis.database, integer(*f, 0, std::numeric_limits<int>::max()));
    if (const Field* f = section.find("timeout")) assign(redis.timeout, duration(*f, false));
    if (const Field* f = section.find("key_prefix")) assign(redis.key_prefix, text(*f));
    if (const Field* f = section.find("sentinels")) redis.sentinels = read_redis_endpoints(*f);
    if (const Field* f = section.find("master_name")) {
        if (auto written = text(*f)) {
            // Sentinel names a master with one word of printable characters.
            const bool valid = !written->empty() && written->size() <= 128 &&
                               std::all_of(written->begin(), written->end(),
                                           [](unsigned char c) { return c > ' ' && c < 0x7f; });
            if (valid) {
                redis.master_name = *written;
            } else {
                diagnostics_.error(f->at, f->label() + " must be 1 to 128 printable characters without spaces, got " +
                                              quoted(*written));
            }
        }
    }
    if (const Field* f = section.find("sentinel_username")) assign(redis.sentinel_username, text(*f));
    if (const Field* f = section.find("sentinel_password")) assign(redis.sentinel_password, text(*f));
    if (const Field* f = section.find("nodes")) redis.nodes = read_redis_endpoints(*f);
    if (const Field* f = section.find("shared_batches")) assign(redis.shared_batches, boolean(*f));

    // Which keys go with which mode.
    const char* mode_name = redis.mode == RedisMode::sentinel  ? "sentinel"
                            : redis.mode == RedisMode::cluster ? "cluster"
                                                               : "standalone";
    auto only_with = [&](const char* key, const char* wanted) {
        if (const Field* f = section.find(key))
            diagnostics_.error(f->key_at, std::string("store.redis.") + key + " is only used with mode: " + wanted +
                                              " (mode is " + mode_name + ")");
    };
    auto required = [&](const char* key, const char* what) {
        if (section.find(key)) return;
        diagnostics_.error(mode ? mode->at : field.at,
                           std::string("mode: ") + mode_name + " needs store.redis." + key + " (" + what + ")");
    };
    if (redis.mode != RedisMode::standalone) only_with("address", "standalone");
    if (redis.mode != RedisMode::sentinel) {
        for (const char* key : {"sentinels", "master_name", "sentinel_username", "sentinel_password"})
            only_with(key, "sentinel");
    }
    if (redis.mode != RedisMode::cluster) only_with("nodes", "cluster");
    // A cluster master's calls are its own: a batch for one master cannot ride another's call.
    if (redis.mode == RedisMode::cluster)
        if (const Field* f = section.find("shared_batches"); f && redis.shared_batches)
            diagnostics_.error(f->at, "store.redis.shared_batches is only used with mode: standalone or sentinel "
                                      "(mode is cluster)");
    if (redis.mode == RedisMode::sentinel) {
        required("sentinels", "the sentinels to ask for the master, host:port each");
        required("master_name", "the name the sentinels monitor the master under");
        if (const Field* f = section.find("sentinel_username"); f && redis.sentinel_password.empty())
            diagnostics_.error(f->key_at, "store.redis.sentinel_username needs store.redis.sentinel_password");
    }
    if (redis.mode == RedisMode::cluster) {
        required("nodes", "seed nodes of the cluster, host:port each");
        if (const Field* f = section.find("database"); f && redis.database != 0)
            diagnostics_.error(f->at, "store.redis.database must be 0 with mode: cluster (Redis Cluster has "
                                      "database 0 only), got " + std::to_string(redis.database));
    }
    if (const Field* f = section.find("username"); f && redis.password.empty() && !redis.username.empty())
        diagnostics_.error(f->key_at, "store.redis.username needs store.redis.password");
}

// A list of host:port, each once.
std::vector<Endpoint> ConfigReader::read_redis_endpoints(const Field& field) {
    std::vector<Endpoint> endpoints;
    if (!expect_list(field)) return endpoints;
    if (field.empty() || field.value.size() == 0) {
        diagnostics_.error(field.at, field.label() + " must list at least one host:port");
        return endpoints;
    }
    if (field.value.size() > 64) {
        diagnostics_.error(field.at, field.label() + " may list at most 64 addresses, got " +
                                         std::to_string(field.value.size()));
        return endpoints;
    }
    for (const Field& item : items_of(field)) {
        auto address = endpoint(item, false);
        if (!address) continue;
        const bool repeated = std::any_of(endpoints.begin(), endpoints.end(),
                                          [&](const Endpoint& e) { return e.str() == address->str(); });
        if (repeated) {
            diagnostics_.error(item.at, item.label() + ": " + quoted(address->str()) + " is listed twice");
            continue;
        }
        endpoints.push_back(*address);
    }
    return endpoints;
}

void ConfigReader::read_upstreams(const Field& field) {
    if (!field.empty() && !field.value.IsMap()) {
        diagnostics_.error(field.at, field.label() + " must be a map of name: settings, got " +
                                         description_of(field.value));
        return;
    }
    for (const Field& entry : Section::entries(field, diagnostics_)) read_upstream(entry);
}

void ConfigReader::read_upstream(const Field& field) {
    UpstreamConfig upstream;
    upstream.name = field.key;
    if (!is_valid_name(field.key))
        diagnostics_.error(field.key_at, "upstream name must be 1 to 64 letters, digits, '_', '-' or '.', got " +
                                             quoted(field.key));
    if (expect_map(field)) {
        const Section section(field, "in upstream", upstream_table().keys, diagnostics_);
        read_rows(section, upstream_table(), upstream);
        if (!section.find("servers")) diagnostics_.error(field.key_at, "upstream " + quoted(field.key) + " has no servers");
    }
    config_.upstreams.push_back(std::move(upstream));
}

const ConfigReader::Table<UpstreamConfig>& ConfigReader::upstream_table() {
    using R = ConfigReader;
    using S = UpstreamConfig;
    static const Table<S> table({
        {"servers", [](R& r, const Field& f, S& s) { r.read_servers(f, s); }},
        {"connect_timeout", [](R& r, const Field& f, S& s) { assign(s.connect_timeout, r.duration(f, false)); }},
        {"timeout", [](R& r, const Field& f, S& s) { assign(s.timeout, r.duration(f, false)); }},
        {"max_idle", [](R& r, const Field& f, S& s) { assign(s.max_idle, r.integer(f, 0, no_maximum)); }},
        {"tls", [](R& r, const Field& f, S& s) { s.tls = r.read_upstream_tls(f); }},
    });
    return table;
}

void ConfigReader::read_servers(const Field& field, UpstreamConfig& upstream) {
    if (!expect_list(field)) return;
    for (const Field& item : items_of(field))
        if (auto address = endpoint(item, false)) {
            upstream.servers.push_back(*address);
            upstream.server_at.push_back(item.at);
        }
    if (field.empty() || field.value.size() == 0)
        diagnostics_.error(field.at, "upstream " + quoted(upstream.name) + " has no servers");
}

void ConfigReader::read_responses(const Field& field) {
    read_table(field, "in responses", responses_table(), config_.responses);
}

const ConfigReader::Table<ResponsesConfig>& ConfigReader::responses_table() {
    using R = ConfigReader;
    using S = ResponsesConfig;
    static const Table<S> table({
        {"limited_status", [](R& r, const Field& f, S& s) { assign(s.limited_status, r.integer(f, 400, 599)); }},
        {"headers",
         [](R& r, const Field& f, S& s) {
             assign(s.headers, r.choice<HeaderStyle>(f, {{"ietf", HeaderStyle::ietf},
                                                         {"legacy", HeaderStyle::legacy},
                                                         {"both", HeaderStyle::both},
                                                         {"none", HeaderStyle::none}}));
         }},
    });
    return table;
}

void ConfigReader::read_logging(const Field& field) { read_table(field, "in logging", logging_table(), config_.logging); }

const ConfigReader::Table<LoggingConfig>& ConfigReader::logging_table() {
    using R = ConfigReader;
    using S = LoggingConfig;
    static const Table<S> table({
        {"level",
         [](R& r, const Field& f, S& s) {
             assign(s.level, r.choice<std::string_view>(f, {{"trace", "trace"},
                                                            {"debug", "debug"},
                                                            {"info", "info"},
                                                            {"warn", "warn"},
                                                            {"error", "error"}}));
         }},
        {"access_log",
         [](R& r, const Field& f, S& s) {
             const auto written = r.text(f);
             if (written && written->empty())
                 r.diagnostics_.error(f.at, f.label() + " must be stdout, off or a file path, got ''");
             else
                 assign(s.access_log, written);
         }},
        {"format",
         [](R& r, const Field& f, S& s) {
             assign(s.format, r.choice<LogFormat>(f, {{"text", LogFormat::text}, {"json", LogFormat::json}}));
         }},
        {"access_format", [](R& r, const Field& f, S&) { r.read_access_format(f); }},
        {"time_zone",
         [](R& r, const Field& f, S& s) { assign(s.local_time, r.choice<bool>(f, {{"utc", false}, {"local", true}})); }},
        {"summary_interval", [](R& r, const Field& f, S& s) { assign(s.summary_interval, r.duration(f, true)); }},
    });
    return table;
}

// logging.access_format: a list of field names, or a string with $variables.
void ConfigReader::read_access_format(const Field& field) {
    const std::vector<std::string_view> known(access_field_names().begin(), access_field_names().end());
    auto unknown = [&](const Field& at, std::string_view name, std::string_view as_written) {
        std::string message = at.label() + " names no field " + quoted(as_written);
        if (auto suggestion = closest_spelling(name, known)) return message + " (did you mean " + quoted(*suggestion) + "?)";
        return message + " (fields: " + keys_list(known) + ")";
    };
    if (!field.empty() && field.value.IsSequence()) {
        AccessFormat format;
        format.kind = AccessFormat::Kind::fields;
        bool ok = true;
        for (const Field& item : items_of(field)) {
            const auto name = text(item);
            if (!name) {
                ok = false;
                continue;
            }
            const auto named = access_field_named(*name);
            if (!named) {
                diagnostics_.error(item.at, unknown(item, *name, *name));
                ok = false;
                continue;
            }
            format.fields.push_back(*named);
        }
        if (ok && format.fields.empty())
            diagnostics_.error(field.at, field.label() + " lists no field (leave it out for the standard line)");
        else if (ok)
            config_.logging.access_format = std::move(format);
        return;
    }
    const auto pattern = text(field);
    if (!pattern) return;
    auto parsed = parse_access_pattern(*pattern);
    if (auto* error = std::get_if<AccessPatternError>(&parsed)) {
        const std::string message = error->unknown.empty() ? field.label() + ": " + error->message
                                                           : unknown(field, error->unknown, "$" + error->unknown);
        diagnostics_.error(field.at, message + " (at character " + std::to_string(error->offset + 1) + ")");
        return;
    }
    config_.logging.access_format = std::get<AccessFormat>(std::move(parsed));
}

// ---- routes ----------------------------------------------------------------------------------

void ConfigReader::read_routes(const Field& field) {
    if (!expect_list(field)) return;
    for (const Field& item : items_of(field)) read_route(item);
}

void ConfigReader::read_route(const Field& field) {
    if (!expect_map(field)) return;
    if (field.empty()) {
        diagnostics_.error(field.at, "empty route (a route needs name, match and upstream)");
        return;
    }
    const Section section(field, "in route", route_keys, diagnostics_);
    RouteConfig route;
    RouteSite site;
    site.at = field.at;
    read_route_name(section, route, site);
    site.match_valid = read_match(section, route);
    bool action_known = true;
    if (const Field* f = section.find("action")) {
        const auto action = choice<RouteAction>(*f, {{"forward", RouteAction::forward}, {"check", RouteAction::check}});
        action_known = action.has_value();
        assign(route.action, action);
    }
    if (action_known) read_route_upstream(section, route, site);  // (else whether one is needed is unknown)
    if (const Field* f = section.find("limited_status")) {
        const auto status = integer(*f, 400, 599);
        if (status) route.limited_status = static_cast<unsigned>(*status);
    }
    if (const Field* f = section.find("on_error"))
        route.on_error = choice<OnError>(*f, {{"allow", OnError::allow}, {"deny", OnError::deny}});
    if (const Field* f = section.find("limits")) read_limits(*f, route, site);
    if (const Field* f = section.find("exempt")) read_exempt(*f, route.exempt, "the exempt of " + named("route", route.name));
    read_route_plans(section, route);
    if (route.action == RouteAction::check) refuse_counted_limits(section, route);
    config_.routes.push_back(std::move(route));
    route_sites_.push_back(std::move(site));
}

void ConfigReader::read_route_name(const Section& section, RouteConfig& route, RouteSite& site) {
    const Field* field = section.find("name");
    site.name_at = field ? field->at : section.at();
    if (!field) {
        diagnostics_.error(section.at(), "route needs a 'name'");
        return;
    }
    assign(route.name, name(*field));
}

void ConfigReader::read_route_upstream(const Section& section, RouteConfig& route, RouteSite& site) {
    const Field* field = section.find("upstream");
    site.upstream_at = field ? field->at : section.at();
    if (route.action == RouteAction::check) {
        if (field)
            diagnostics_.error(field->key_at, named("route", route.name) +
                                                  " answers requests itself (action: check): it has no 'upstream'");
        return;
    }
    if (!field) {
        diagnostics_.error(section.at(), named("route", route.name) + " needs an 'upstream' (or 'action: check')");
        return;
    }
    assign(route.upstream, text(*field));
    if (field->value.IsScalar() && route.upstream.empty())
        diagnostics_.error(field->at, named("route", route.name) + " needs an 'upstream'");
}

// True when the match is complete and valid.
bool ConfigReader::read_match(const Section& route_section, RouteConfig& route) {
    const std::size_t errors_before = diagnostics_.error_count();
    const Field* field = route_section.find("match");
    if (!field) {
        diagnostics_.error(route_section.at(), named("route", route.name) + " needs a 'match' with 'path' or 'path_prefix'");
        return false;
    }
    if (!expect_map(*field)) return false;
    const Section section(*field, "in match", match_keys, diagnostics_);
    read_path(section, route.match);
    if (!section.find("path") && !section.find("path_prefix"))
        diagnostics_.error(field->at, named("route", route.name) + " needs 'path' or 'path_prefix' in its match");
    if (const Field* f = section.find("methods")) read_methods(*f, route.match.methods);
    if (const Field* f = section.find("host")) {
        const auto written = text(*f);
        if (!written) return false;
        route.match.host = normalized_route_host(*written);
        if (!route.match.host)
            diagnostics_.error(f->at, f->label() + " must be a host name such as example.com or *.example.com, got " +
                                          quoted(*written));
    }
    return diagnostics_.error_count() == errors_before;
}

void ConfigReader::read_path(const Section& section, RouteMatch& match) {
    const Field* path = section.find("path");
    const Field* prefix = section.find("path_prefix");
    if (path && prefix) {
        diagnostics_.error(prefix->key_at, "'path' and 'path_prefix' cannot both be set; use one");
        return;
    }
    const Field* field = path ? path : prefix;
    if (!field) return;
    const auto written = text(*field);
    if (!written) return;
    if (auto error = route_path_error(field->key, *written); !error.empty()) {
        diagnostics_.error(field->at, error);
        return;
    }
    // Requests are matched by their normalised path: so is the route's (`/caf%c3%a9`, `/café`
    // and `/caf%C3%A9` are one path; a path written one way must not miss requests spelling it
    // another). A prefix's last segment may be cut short (`/.` starts `/.git`): only its bytes
    // are normalised, and its whole segments must be as requests' are (else it would match
    // what its author did not mean: `/api/./` read as `/api/`, or nothing at all).
    std::string_view problem;
    auto normalised = path ? http::normalize_path(*written, problem) : http::canonical_path_bytes(*written, problem);
    if (!problem.empty()) {
        diagnostics_.error(field->at, quoted(field->key) + " " + quoted(*written) + ": " + std::string(problem));
        return;
    }
    if (prefix) {
        const std::string whole = normalised.substr(0, normalised.rfind('/') + 1);
        const std::string read = http::normalize_path(whole, problem);
        if (!problem.empty() || read != whole) {
            diagnostics_.error(field->at, quoted(field->key) + " " + quoted(*written) +
                                              " has an empty, '.' or '..' segment, which no request's path has "
                                              "once normalised" +
                                              (problem.empty() ? "; write " + quoted(read + normalised.substr(whole.size()))
                                                               : std::string(": ") + std::string(problem)));
            return;
        }
    }
    (path ? match.path : match.path_prefix) = std::move(normalised);
}

void ConfigReader::read_methods(const Field& field, std::vector<std::string>& methods) {
    if (!expect_list(field)) return;
    if (field.empty() || field.value.size() == 0) {
        diagnostics_.error(field.at, "'methods' must not be empty (leave it out to match every method)");
        return;
    }
    for (const Field& item : items_of(field)) {
        const auto written = text(item);
        if (!written) continue;
        if (!is_http_token(*written)) {
            diagnostics_.error(item.at, "invalid method " + quoted(*written));
            continue;
        }
        std::string method = to_upper(*written);
        if (!http::is_request_method(method)) {
            // (sluice answers 400 to any other: such a method would never match)
            diagnostics_.error(item.at, "invalid method " + quoted(*written) + ": letters, '-' and '_' only, at most 32");
            continue;
        }
        if (std::find(methods.begin(), methods.end(), method) == methods.end()) methods.push_back(std::move(method));
    }
}

// `exempt:` at the top level or in a route ("exempt", "the exempt of route 'api'": where, for
// messages).
void ConfigReader::read_exempt(const Field& field, Exempt& exempt, const std::string& where) {
    if (!expect_map(field)) return;
    const Section section(field, "in " + where, exempt_keys, diagnostics_);
    if (const Field* f = section.find("client_ips"); f && expect_list(*f)) {
        for (const Field& item : items_of(*f)) {
            const auto written = text(item);
            if (!written) continue;
            if (auto cidr = net::Cidr::parse(*written))
                exempt.client_ips.push_back(*cidr);
            else
                diagnostics_.error(item.at, item.label() + ": " + cidr_error(*written));
        }
    }
    if (const Field* f = section.find("headers"); f && expect_list(*f)) {
        if (!exempt_headers_at_) exempt_headers_at_ = f->at;
        for (const Field& item : items_of(*f)) {
            if (!expect_map(item)) continue;
            const Section entry(item, "in an exempt header", exempt_header_keys, diagnostics_);
            const Field* name_field = entry.find("name");
            const Field* value_field = entry.find("value");
            if (!name_field || !value_field) {
                diagnostics_.error(item.at, "an exempt header needs 'name' and 'value' (a request is exempt when it "
                                            "carries that header with exactly that value)");
                continue;
            }
            const auto header = text(*name_field);
            const auto value = text(*value_field);
            if (!header || !value) continue;
            if (!is_http_token(*header)) {
                diagnostics_.error(name_field->at, "invalid header name " + quoted(*header));
                continue;
            }
            const bool printable = std::all_of(value->begin(), value->end(), [](char c) {
                const auto byte = static_cast<unsigned char>(c);
                return byte >= 0x20 && byte != 0x7f;
            });
            if (value->empty() || !printable || value->front() == ' ' || value->back() == ' ') {
                diagnostics_.error(value_field->at, "an exempt header's 'value' must be a non-empty header value (no "
                                                    "control characters, no spaces at either end), got " +
                                                        quoted(*value));
                continue;
            }
            exempt.headers.push_back(ExemptHeader{to_lower(*header), *value});
        }
    }
    if (const Field* f = section.find("methods")) read_methods(*f, exempt.methods);
}

// ---- jwt -------------------------------------------------------------------------------------

void ConfigReader::read_jwt(const Field& field) {
    if (!expect_map(field)) return;
    const Section section(field, "in jwt", jwt_keys, diagnostics_);
    if (const Field* f = section.find("leeway")) assign(config_.jwt.leeway, duration(*f, true));
    const Field* keys = section.find("keys");
    if (!keys) {
        diagnostics_.error(field.at, "jwt needs 'keys' (HS256 secrets, RS256/ES256 PEM public keys or JWKS files)");
        return;
    }
    if (!expect_list(*keys)) return;
    const std::size_t errors_before = diagnostics_.error_count();
    for (const Field& item : items_of(*keys))
        if (auto key = read_jwt_key(item)) config_.jwt.keys.push_back(std::move(*key));
    if (diagnostics_.error_count() != errors_before) return;
    if (config_.jwt.keys.empty()) {
        diagnostics_.error(keys->at, "'keys' must not be empty");
        return;
    }
    std::string error;
    if (!auth::JwtVerifier::build(config_.jwt, error)) {
        diagnostics_.error(keys->at, error);
        return;
    }
    jwt_read_ = true;
}

std::optional<JwtKeyConfig> ConfigReader::read_jwt_key(const Field& item) {
    if (!expect_map(item)) return std::nullopt;
    const Section section(item, "in a jwt key", jwt_key_keys, diagnostics_);
    JwtKeyConfig key;
    const Field* alg = section.find("alg");
    const Field* secret = section.find("secret");
    const Field* pem = section.find("pem");
    const Field* jwks = section.find("jwks");
    if (jwks) {
        if (alg || secret || pem || section.find("kid")) {
            diagnostics_.error(item.at, "a jwt key with 'jwks' takes nothing else (each key of the file names its kid "
                                        "and its kty)");
            return std::nullopt;
        }
        const auto path = text(*jwks);
        if (!path) return std::nullopt;
        key.jwks_file = file_path(*path);
        std::string error;
        key.jwks = tls::read_small_file(key.jwks_file, 1 << 20, error);
        if (!error.empty()) {
            diagnostics_.error(jwks->at, "'jwks': " + error);
            return std::nullopt;
        }
        return key;
    }
    if (!alg) {
        diagnostics_.error(item.at, "a jwt key needs 'alg' (HS256 with 'secret', RS256 or ES256 with 'pem') or 'jwks'");
        return std::nullopt;
    }
    key.alg = choice<JwtAlg>(*alg, {{"HS256", JwtAlg::hs256}, {"RS256", JwtAlg::rs256}, {"ES256", JwtAlg::es256}});
    if (!key.alg) return std::nullopt;
    if (const Field* kid = section.find("kid")) assign(key.kid, text(*kid));
    if (*key.alg == JwtAlg::hs256) {
        if (!secret || pem) {
            diagnostics_.error(item.at, "an HS256 key takes 'secret' (and no 'pem')");
            return std::nullopt;
        }
        assign(key.secret, text(*secret));
        if (key.secret.size() < 32) {
            diagnostics_.error(secret->at, "an HS256 secret must be at least 32 bytes (RFC 7518 3.2), got " +
                                               std::to_string(key.secret.size()));
            return std::nullopt;
        }
        return key;
    }
    if (!pem || secret) {
        diagnostics_.error(item.at, "an RS256 or ES256 key takes 'pem' (a PEM public key file; no 'secret')");
        return std::nullopt;
    }
    const auto path = text(*pem);
    if (!path) return std::nullopt;
    key.pem_file = file_path(*path);
    std::string error;
    key.pem = tls::read_small_file(key.pem_file, max_pem_bytes, error);
    if (!error.empty()) {
        diagnostics_.error(pem->at, "'pem': " + error);
        return std::nullopt;
    }
    return key;
}

void ConfigReader::warn_when_exempt_headers_cannot_apply() {
    if (!exempt_headers_at_ || !config_.client_ip.trusted_proxies.empty()) return;
    diagnostics_.warning(*exempt_headers_at_, "exempt headers count only from a peer in client_ip.trusted_proxies, "
                                              "and there is none: no request is exempt by a header");
}

void ConfigReader::read_limits(const Field& field, RouteConfig& route, RouteSite& site) {
    if (!expect_list(field)) return;
    for (const Field& item : items_of(field)) read_limit(item, route, site);
    // A limit keyed on a header (or a query parameter, cookie, path segment or token claim) does not apply
    // to a request without it. When every limit of the route is such a limit, a client only
    // has to leave it out to be unlimited.
    if (route.limits.empty()) return;
    std::vector<std::string> named;
    bool headers_only = true;
    for (const auto& limit : route.limits) {
        const auto optional = std::find_if(limit.key.begin(), limit.key.end(), may_be_left_out);
        if (optional == limit.key.end()) return;  // this one applies to every request
        headers_only &= optional->kind == KeyPart::Kind::header;
        const std::string name =
            optional->kind == KeyPart::Kind::header ? optional->header_name : key_part_text(*optional);
        if (std::find(named.begin(), named.end(), name) == named.end()) named.push_back(name);
    }
    std::string list;
    for (const auto& name : named) list += (list.empty() ? "" : ", ") + name;
    diagnostics_.warning(field.at, "every limit of route " + quoted(route.name) + " is keyed on " +
                                       (headers_only ? "a header" : "something a request may leave out") + " (" + list +
                                       "): a request without it is not limited at all; add a limit keyed on "
                                       "client_ip alone to cover such requests");
}

void ConfigReader::read_limit(const Field& field, RouteConfig& route, RouteSite& site) {
    if (!expect_map(field)) return;
    const Section section(field, "in limit", limit_keys, diagnostics_);
    LimitConfig limit;
    const Field* name_field = section.find("name");
    if (name_field) {
        assign(limit.name, name(*name_field));
    } else {
        diagnostics_.error(field.at, "limit needs a 'name'");
    }
    const Field* algorithm_field = section.find("algorithm");
    std::optional<Algorithm> algorithm;
    if (algorithm_field) {
        Choices<Algorithm> algorithms;
        for (std::size_t i = 0; i < algorithm_names.size(); ++i)
            algorithms.emplace_back(algorithm_names[i], static_cast<Algorithm>(i));
        algorithm = choice<Algorithm>(*algorithm_field, algorithms);
    } else {
        std::string names;
        for (std::size_t i = 0; i < algorithm_names.size(); ++i)
            names += (i == 0 ? "" : i + 1 == algorithm_names.size() ? " or " : ", ") + std::string(algorithm_names[i]);
        diagnostics_.error(field.at, named("limit", limit.name) + " needs an 'algorithm' (" + names + ")");
    }
    if (algorithm) {
        limit.algorithm = *algorithm;
        refuse_parameters(section, limit);
        if (*algorithm == Algorithm::token_bucket || *algorithm == Algorithm::leaky_bucket)
            read_token_bucket(section, limit);
        if (*algorithm == Algorithm::leaky_bucket) read_leaky_bucket(section, limit);
        if (*algorithm == Algorithm::sliding_window) read_sliding_window(section, limit);
        if (*algorithm == Algorithm::fixed_window) read_fixed_window(section, limit);
        if (*algorithm == Algorithm::concurrency) read_concurrency(section, limit);
        read_cost(section, limit);
        if (const Field* f = section.find("count")) {
            if (limit.reports_cost())
                diagnostics_.error(f->key_at, named("limit", limit.name) +
                                                  ": 'count' and a 'cost' the response reports cannot go together on "
                                                  "one limit (the response settles the cost whatever its status); use "
                                                  "two limits");
            else
                read_count(*f, limit);
        }
    }
    if (const Field* f = section.find("key")) read_key(*f, limit);
    if (const Field* f = section.find("shadow")) assign(limit.shadow, boolean(*f));
    if (const Field* f = section.find("ban"); f && algorithm) read_ban(*f, limit);
    site.limit_name_at.push_back(name_field ? name_field->at : field.at);
    route.limits.push_back(std::move(limit));
}

// token_bucket, and the rate and size of a leaky_bucket (the same arithmetic).
void ConfigReader::read_token_bucket(const Section& section, LimitConfig& limit) {
    const std::string which =
        named(limit.algorithm == Algorithm::leaky_bucket ? "leaky_bucket limit" : "token_bucket limit", limit.name);
    const Field* rate = section.find("rate");
    bool rate_ok = false;
    if (rate) {
        const auto value = positive_number(*rate);
        if (value && *value > max_rate) {
            diagnostics_.error(rate->at, rate->label() + " must be at most 1000000000, got " + rate->value.Scalar());
        } else if (value) {
            limit.rate = *value;
            rate_ok = true;
        }
    } else {
        diagnostics_.error(section.at(), which + " needs 'rate'");
    }
    bool per_ok = true;
    if (const Field* f = section.find("per")) {
        const auto value = duration(*f, false);
        per_ok = value.has_value();
        if (value) limit.per = *value;
    }
    bool burst_ok = false;
    if (const Field* f = section.find("burst")) {
        const auto value = integer(*f, 1, max_count);
        burst_ok = value.has_value();
        assign(limit.burst, value);
    } else {
        diagnostics_.error(section.at(), which + " needs 'burst'");
    }
    // One token per microsecond at most, and a bucket that refills within 10 years: the
    // figures the limiters derive from these stay exact (see max_refill_us).
    if (rate_ok && per_ok && burst_ok) {
        const double interval_us = static_cast<double>(limit.per.count()) * 1000.0 / limit.rate;
        if (interval_us < 1.0)
            diagnostics_.error(rate->at, which + (limit.algorithm == Algorithm::leaky_bucket
                                                      ? " lets out more than one request per microsecond (rate / per)"
                                                      : " adds more than one token per microsecond (rate / per)"));
        else if (interval_us * static_cast<double>(limit.burst) > max_refill_us)
            diagnostics_.error(rate->at, which + (limit.algorithm == Algorithm::leaky_bucket
                                                      ? ": draining the whole bucket (burst * per / rate) takes more than 10 years"
                                                      : ": refilling the whole bucket (burst * per / rate) takes more than 10 years"));
    }
}

// leaky_bucket's own parameters, after read_token_bucket: delay | nodelay, max_wait.
void ConfigReader::read_leaky_bucket(const Section& section, LimitConfig& limit) {
    const std::string which = named("leaky_bucket limit", limit.name);
    const Field* delay = section.find("delay");
    const Field* nodelay = section.find("nodelay");
    if (delay && nodelay) {
        diagnostics_.error(nodelay->key_at, which + ": 'delay' and 'nodelay' exclude each other (nodelay is delay: burst - 1)");
        return;
    }
    if (delay) {
        if (const auto value = integer(*delay, 0, max_count)) {
            limit.delay = static_cast<std::uint64_t>(*value);
            if (limit.burst > 0 && limit.delay >= limit.burst)
                diagnostics_.error(delay->at, which + ": " + delay->label() + " " + std::to_string(limit.delay) +
                                                  " must be below its burst (" + std::to_string(limit.burst) +
                                                  "); the first request and 'delay' more pass at once, so "
                                                  "burst - 1 (or nodelay: true) lets a whole burst through");
        }
    }
    if (nodelay) {
        if (const auto value = boolean(*nodelay)) limit.nodelay = *value;
    }
    if (const Field* f = section.find("max_wait")) {
        if (limit.nodelay)
            diagnostics_.error(f->key_at, which + ": 'max_wait' has no effect with nodelay: true (no request waits)");
        else
            assign(limit.max_wait, duration(*f, true));
    }
}

void ConfigReader::read_sliding_window(const Section& section, LimitConfig& limit) {
    const std::string which = named("sliding_window limit", limit.name);
    if (const Field* f = section.find("limit")) {
        assign(limit.limit, integer(*f, 1, max_count));
        if (limit.limit > large_sliding_window)
            diagnostics_.warning(f->at, which + " keeps an entry per admitted request, up to " +
                                            std::to_string(limit.limit) + " per key (about 120 bytes each in Redis); "
                                            "fixed_window or token_bucket keep one number per key");
    } else {
        diagnostics_.error(section.at(), which + " needs 'limit'");
    }
    if (const Field* f = section.find("window")) {
        assign(limit.window, duration(*f, false));
    } else {
        diagnostics_.error(section.at(), which + " needs 'window'");
    }
}

void ConfigReader::read_fixed_window(const Section& section, LimitConfig& limit) {
    const std::string which = named("fixed_window limit", limit.name);
    if (const Field* f = section.find("limit")) {
        assign(limit.limit, integer(*f, 1, max_count));
    } else {
        diagnostics_.error(section.at(), which + " needs 'limit'");
    }
    const Field* window = section.find("window");
    if (window) {
        const Choices<time::CalendarUnit> units{{"minute", time::CalendarUnit::minute},
                                                {"hour", time::CalendarUnit::hour},
                                                {"day", time::CalendarUnit::day},
                                                {"week", time::CalendarUnit::week},
                                                {"month", time::CalendarUnit::month}};
        const auto written = window->value.IsScalar() ? std::optional<std::string>(window->value.Scalar()) : std::nullopt;
        const auto unit = written ? std::find_if(units.begin(), units.end(), [&](const auto& u) { return u.first == *written; })
                                  : units.end();
        if (unit != units.end()) {
            limit.calendar = unit->second;
        } else if (written && !written->empty() && std::isalpha(static_cast<unsigned char>(written->front()))) {
            diagnostics_.error(window->at, window->label() + " must be a duration (like 10s or 1h) or " +
                                               choice_list(units) + ", got " + quoted(*written));
        } else {
            assign(limit.window, duration(*window, false));
        }
    } else {
        diagnostics_.error(section.at(), which + " needs 'window' (a duration, or minute, hour, day, week or month)");
    }
    if (const Field* f = section.find("time_zone")) {
        const auto written = text(*f);
        if (written && window && !limit.calendar && limit.window.count() > 0) {
            diagnostics_.error(f->key_at, which + ": 'time_zone' applies to calendar windows (minute, hour, day, "
                                                  "week, month), not to a window of " + window->value.Scalar());
        } else if (written) {
            std::string error;
            auto zone = time::TimeZone::load(*written, error);
            if (zone) limit.time_zone = std::make_shared<const time::TimeZone>(std::move(*zone));
            else diagnostics_.error(f->at, error);
        }
    }
    if (limit.calendar && !limit.time_zone) limit.time_zone = std::make_shared<const time::TimeZone>();
}

void ConfigReader::read_concurrency(const Section& section, LimitConfig& limit) {
    const std::string which = named("concurrency limit", limit.name);
    if (const Field* f = section.find("limit")) {
        assign(limit.limit, integer(*f, 1, max_count));
    } else {
        diagnostics_.error(section.at(), which + " needs 'limit' (requests in flight at once)");
    }
    if (const Field* f = section.find("lease")) {
        const auto value = duration(*f, false);
        if (value && *value < 1s)
            diagnostics_.error(f->at, f->label() + " must be at least 1s, got " + f->value.Scalar());
        else
            assign(limit.lease, value);
    }
}

// `cost`, `default_cost`: what a request takes from the limit.
void ConfigReader::read_cost(const Section& section, LimitConfig& limit) {
    const bool bucket = limit.algorithm == Algorithm::token_bucket || limit.algorithm == Algorithm::leaky_bucket;
    const std::uint64_t capacity = bucket ? limit.burst : limit.limit;
    const char* capacity_name = bucket ? "burst" : "limit";
    auto check_capacity = [&](const Field& f, std::uint64_t cost) {
        if (capacity > 0 && cost > capacity)
            diagnostics_.error(f.at, named("limit", limit.name) + ": " + f.label() + " " + std::to_string(cost) +
                                         " is more than its " + capacity_name + " (" + std::to_string(capacity) +
                                         "): no request could pass");
    };
    const Field* cost = section.find("cost");
    if (limit.algorithm == Algorithm::concurrency) {
        // A request holds one slot while it runs: there is nothing to weigh.
        for (const Field* f : {cost, section.find("default_cost")})
            if (f)
                diagnostics_.error(f->key_at, quoted(f->key) + " does not apply to " +
                                                  named("concurrency limit", limit.name) + " (a request takes one slot)");
        return;
    }
    bool header_cost = false;
    if (cost && cost->value.IsMap()) {
        read_response_cost(*cost, limit);
        if (limit.reports_cost()) check_capacity(*cost, limit.cost);
    } else if (cost) {
        const auto written = cost->value.IsScalar() ? cost->value.Scalar() : std::string();
        header_cost = written.starts_with("header:");
        if (header_cost) {
            KeyPartParse parsed = parse_key_part(written);
            if (parsed.part) limit.cost_header = parsed.part->header_name;
            else diagnostics_.error(cost->at, parsed.error);
        } else if (const auto value = integer(*cost, 0, max_count)) {
            limit.cost = static_cast<std::uint64_t>(*value);
            check_capacity(*cost, limit.cost);
        }
    }
    if (const Field* f = section.find("default_cost")) {
        if (!header_cost) {
            diagnostics_.error(f->key_at, named("limit", limit.name) +
                                              ": 'default_cost' applies with 'cost: header:NAME' only");
        } else if (const auto value = integer(*f, 0, max_count)) {
            limit.default_cost = static_cast<std::uint64_t>(*value);
            check_capacity(*f, limit.default_cost);
        }
    }
}

// `cost: {response_header: NAME | response_trailer: NAME, reserve: N}`: the cost the
// response reports, `reserve` taken before forwarding (read after the algorithm).
void ConfigReader::read_response_cost(const Field& field, LimitConfig& limit) {
    const std::string which = named("limit", limit.name);
    if (limit.algorithm == Algorithm::leaky_bucket) {
        diagnostics_.error(field.key_at, which + ": a response 'cost' does not apply to leaky_bucket (a request waits "
                                             "for its turn before any response exists); use token_bucket, "
                                             "sliding_window or fixed_window");
        return;
    }
    const Section section(field, "in cost", response_cost_keys, diagnostics_);
    const Field* header = section.find("response_header");
    const Field* trailer = section.find("response_trailer");
    if (header && trailer) {
        diagnostics_.error(trailer->key_at, which + ": 'cost' names both 'response_header' and 'response_trailer'; "
                                                "give the one field the response reports its cost in");
        return;
    }
    const Field* named_field = header ? header : trailer;
    if (!named_field) {
        diagnostics_.error(field.at, which + ": 'cost' as a map needs 'response_header' or 'response_trailer' (the "
                                             "field the upstream's response reports the request's cost in), such as "
                                             "{response_header: X-Tokens-Used, reserve: 100}");
        return;
    }
    if (!expect_single_value(*named_field)) return;
    const std::string& name = named_field->value.Scalar();
    if (!is_http_token(name)) {
        diagnostics_.error(named_field->at, named_field->label() + " must be a header field name, got " + quoted(name));
        return;
    }
    std::uint64_t reserve = 1;
    if (const Field* f = section.find("reserve")) {
        const auto value = integer(*f, 1, max_count);
        if (!value) return;
        reserve = static_cast<std::uint64_t>(*value);
    }
    limit.response_cost_field = to_lower(name);
    limit.response_cost_trailer = trailer != nullptr;
    limit.cost = reserve;
}

// `ban: DURATION`: a refusal by the limit bans the key (read after the algorithm and shadow).
void ConfigReader::read_ban(const Field& field, LimitConfig& limit) {
    const std::string which = named("limit", limit.name);
    if (limit.algorithm != Algorithm::token_bucket && limit.algorithm != Algorithm::sliding_window &&
        limit.algorithm != Algorithm::fixed_window) {
        diagnostics_.error(field.key_at, which + ": 'ban' does not apply to " + std::string(algorithm_name(limit.algorithm)) +
                                             (limit.algorithm == Algorithm::concurrency
                                                  ? " (a slot comes back as soon as a request ends)"
                                                  : " (a full bucket refuses only until its next place)") +
                                             "; use token_bucket, sliding_window or fixed_window");
        return;
    }
    if (limit.shadow) {
        diagnostics_.error(field.key_at, which + ": 'ban' has no effect on a shadow limit, which refuses nothing");
        return;
    }
    assign(limit.ban, duration(field, false));
}

// A check route answers for another proxy, which never tells sluice what the response was:
// a limit it decides cannot be charged after the response.
void ConfigReader::refuse_counted_limits(const Section& section, const RouteConfig& route) {
    std::vector<const LimitConfig*> limits;
    for (const auto& limit : route.limits) limits.push_back(&limit);
    if (route.plans)
        for (const auto& set : route.plans->sets)
            for (const auto& limit : set.limits) limits.push_back(&limit);
    for (const LimitConfig* limit : limits) {
        if (limit->algorithm == Algorithm::concurrency) {
            const Field* action = section.find("action");
            diagnostics_.error(action ? action->at : section.at(),
                               named("route", route.name) + " has action: check, but its " +
                                   named("limit", limit->name) +
                                   " is a concurrency limit: a check ends with sluice's answer, long before the "
                                   "request it checks, so its slot would be free again at once (limit the requests "
                                   "in flight on a route sluice forwards)");
            return;
        }
        if (!limit->counted() && !limit->reports_cost()) continue;
        const Field* action = section.find("action");
        diagnostics_.error(action ? action->at : section.at(),
                           named("route", route.name) + " has action: check, but its " + named("limit", limit->name) +
                               (limit->counted() ? " has 'count'" : " takes its 'cost' from the response") +
                               ": a check route never sees the response, so it could not be charged");
        return;
    }
}

// `count: {statuses: [...]}`: which responses charge the limit (read after the algorithm).
void ConfigReader::read_count(const Field& field, LimitConfig& limit) {
    const std::string which = named("limit", limit.name);
    if (limit.algorithm == Algorithm::concurrency || limit.algorithm == Algorithm::leaky_bucket) {
        diagnostics_.error(field.key_at, which + ": 'count' does not apply to " +
                                             std::string(algorithm_name(limit.algorithm)) +
                                             (limit.algorithm == Algorithm::concurrency
                                                  ? " (a request holds its slot while it runs, whatever its response)"
                                                  : " (a request waits for its turn before any response exists)") +
                                             "; use token_bucket, sliding_window or fixed_window");
        return;
    }
    if (field.empty() || !field.value.IsMap()) {
        diagnostics_.error(field.at, field.label() + " must be a map such as {statuses: [401, 403]}, got " +
                                         description_of(field.value));
        return;
    }
    const Section section(field, "in count", count_keys, diagnostics_);
    const Field* statuses = section.find("statuses");
    if (!statuses) {
        diagnostics_.error(field.at, which + ": 'count' needs 'statuses' (the response statuses that are charged, "
                                             "such as [401, 403] or [\"5xx\"])");
        return;
    }
    if (statuses->empty() || !statuses->value.IsSequence() || statuses->value.size() == 0) {
        diagnostics_.error(statuses->at, statuses->label() + " must be a list of statuses (100 to 599) or classes "
                                             "(\"4xx\", \"5xx\"), got " + description_of(statuses->value));
        return;
    }
    std::vector<StatusRange> ranges;
    for (const Field& item : items_of(*statuses)) {
        const auto range = status_range(item);
        if (!range) continue;
        if (std::find(ranges.begin(), ranges.end(), *range) != ranges.end()) {
            diagnostics_.error(item.at, which + ": status " + item.value.Scalar() + " is listed twice in 'statuses'");
            continue;
        }
        ranges.push_back(*range);
    }
    if (ranges.size() == statuses->value.size()) limit.count_statuses = std::move(ranges);
}

// One entry of count.statuses: a status (100 to 599) or a class ("4xx").
std::optional<StatusRange> ConfigReader::status_range(const Field& field) {
    if (!expect_single_value(field)) return std::nullopt;
    const std::string& written = field.value.Scalar();
    if (written.size() == 3 && written[0] >= '1' && written[0] <= '5' && (written[1] == 'x' || written[1] == 'X') &&
        (written[2] == 'x' || written[2] == 'X')) {
        const unsigned hundreds = static_cast<unsigned>(written[0] - '0') * 100;
        return StatusRange{hundreds, hundreds + 99};
    }
    if (!written.empty() && std::isdigit(static_cast<unsigned char>(written[0])) &&
        written.find_first_of("xX") == std::string::npos) {
        const auto value = integer(field, 100, 599);
        if (!value) return std::nullopt;
        return StatusRange{static_cast<unsigned>(*value), static_cast<unsigned>(*value)};
    }
    diagnostics_.error(field.at, field.label() + " must be a status (100 to 599) or a class such as \"4xx\", got " +
                                     quoted(written));
    return std::nullopt;
}

// Parameters of another algorithm are errors: they would be silently ignored otherwise.
void ConfigReader::refuse_parameters(const Section& section, const LimitConfig& limit) {
    struct Owner {
        std::string_view key;
        std::vector<Algorithm> algorithms;
    };
    static const std::vector<Owner> owners{
        {"rate", {Algorithm::token_bucket, Algorithm::leaky_bucket}},
        {"per", {Algorithm::token_bucket, Algorithm::leaky_bucket}},
        {"burst", {Algorithm::token_bucket, Algorithm::leaky_bucket}},
        {"limit", {Algorithm::sliding_window, Algorithm::fixed_window, Algorithm::concurrency}},
        {"window", {Algorithm::sliding_window, Algorithm::fixed_window}},
        {"time_zone", {Algorithm::fixed_window}},
        {"lease", {Algorithm::concurrency}},
        {"delay", {Algorithm::leaky_bucket}},
        {"nodelay", {Algorithm::leaky_bucket}},
        {"max_wait", {Algorithm::leaky_bucket}},
    };
    for (const auto& owner : owners) {
        const Field* f = section.find(owner.key);
        if (!f || std::find(owner.algorithms.begin(), owner.algorithms.end(), limit.algorithm) != owner.algorithms.end())
            continue;
        std::string theirs;
        for (std::size_t i = 0; i < owner.algorithms.size(); ++i)
            theirs += (i == 0 ? "" : i + 1 == owner.algorithms.size() ? " and " : ", ") +
                      std::string(algorithm_name(owner.algorithms[i]));
        diagnostics_.error(f->key_at, quoted(owner.key) + " is a " + theirs + " parameter, but " +
                                          named("limit", limit.name) + " is " +
                                          std::string(algorithm_name(limit.algorithm)));
    }
}

void ConfigReader::read_key(const Field& field, LimitConfig& limit) {
    if (!expect_list(field)) return;
    std::vector<KeyPart> parts;
    for (const Field& item : items_of(field)) {
        const auto written = text(item);
        if (!written) continue;
        KeyPartParse parsed = parse_key_part(*written);
        if (!parsed.part) {
            diagnostics_.error(item.at, parsed.error);
            continue;
        }
        if (std::find(parts.begin(), parts.end(), *parsed.part) != parts.end()) {
            diagnostics_.error(item.at, "'key' lists " + quoted(*written) + " twice");
            continue;
        }
        if (parsed.part->kind == KeyPart::Kind::jwt && config_.jwt.keys.empty()) {
            diagnostics_.error(item.at, "key part " + quoted(*written) +
                                            " reads a verified token: it needs a top-level 'jwt' with 'keys'");
            continue;
        }
        parts.push_back(*parsed.part);
    }
    limit.key = std::move(parts);
}

void ConfigReader::warn_when_no_routes(const Field* routes) {
    if (routes && !routes->empty() && !routes->value.IsSequence()) return;  // already an error
    if (routes && !routes->empty() && routes->value.size() > 0) return;
    diagnostics_.warning(routes ? routes->at : Position{1, 1}, "no routes: every request answers 404");
}

// ---- plans -----------------------------------------------------------------------------------

std::optional<YAML::Node> parse_single_document(std::string_view yaml, DiagnosticList& diagnostics);

void ConfigReader::read_plans(const Field& field) {
    if (!field.empty() && !field.value.IsMap()) {
        diagnostics_.error(field.at, field.label() + " must be a map of name: [limits], got " +
                                         description_of(field.value));
        return;
    }
    // A limit's name keeps one algorithm in every plan: a client moved to another plan keeps
    // its counter (the key names the limit, not the plan), which only one algorithm can read.
    std::map<std::string, std::pair<Algorithm, std::string>, std::less<>> algorithm_of;
    for (const Field& entry : Section::entries(field, diagnostics_)) {
        PlanConfig plan;
        plan.name = entry.key;
        if (!is_valid_name(entry.key))
            diagnostics_.error(entry.key_at, "plan name must be 1 to 64 letters, digits, '_', '-' or '.', got " +
                                                 quoted(entry.key));
        RouteConfig holder;  // read_limit's target
        holder.name = "plan " + entry.key;
        RouteSite site;
        if (entry.empty() || !entry.value.IsSequence()) {
            diagnostics_.error(entry.at, "plan " + quoted(entry.key) + " must be a list of limits, got " +
                                             description_of(entry.value));
        } else {
            for (const Field& item : items_of(entry)) {
                const std::size_t before = holder.limits.size();
                read_limit(item, holder, site);
                if (holder.limits.size() > before) plan.keyed.push_back(item.value.IsMap() && item.value["key"].IsDefined());
            }
        }
        std::map<std::string, Position, std::less<>> seen;
        for (std::size_t i = 0; i < holder.limits.size(); ++i) {
            const auto& limit = holder.limits[i];
            if (limit.name.empty()) continue;
            if (const auto [it, inserted] = seen.try_emplace(limit.name, site.limit_name_at[i]); !inserted) {
                diagnostics_.error(site.limit_name_at[i], "duplicate limit name " + quoted(limit.name) + " in plan " +
                                                              quoted(plan.name) + " (first used at line " +
                                                              std::to_string(it->second.line) + ")");
                continue;
            }
            const auto [it, inserted] = algorithm_of.try_emplace(limit.name, limit.algorithm, plan.name);
            if (!inserted && it->second.first != limit.algorithm)
                diagnostics_.error(site.limit_name_at[i],
                                   "limit " + quoted(limit.name) + " is " + std::string(algorithm_name(limit.algorithm)) +
                                       " in plan " + quoted(plan.name) + " but " +
                                       std::string(algorithm_name(it->second.first)) + " in plan " +
                                       quoted(it->second.second) +
                                       ": a client moved between plans keeps its count, which needs one algorithm per "
                                       "limit name (rename one of them)");
        }
        plan.limits = std::move(holder.limits);
        config_.plans.push_back(std::move(plan));
    }
}

void ConfigReader::read_route_plans(const Section& section, RouteConfig& route) {
    const Field* identity = section.find("identity");
    const Field* map = section.find("plan_map");
    const Field* header = section.find("plan_header");
    const Field* fallback = section.find("default_plan");
    if (!identity) {
        for (const Field* f : {map, header, fallback})
            if (f)
                diagnostics_.error(f->key_at, named("route", route.name) + ": " + quoted(f->key) +
                                                  " needs 'identity' (what names the client: \"header:x-api-key\", "
                                                  "\"jwt:sub\", \"client_ip\")");
        return;
    }
    if (!map && !header) {
        diagnostics_.error(identity->key_at, named("route", route.name) +
                                                 " names an 'identity' but no plan for it: add 'plan_map' (a file of "
                                                 "identity: plan) or 'plan_header' (a plan named by a trusted hop)");
        return;
    }
    if (const Field* limits = section.find("limits"))
        diagnostics_.error(limits->key_at, named("route", route.name) +
                                               " uses its clients' plans' limits in place of 'limits': move these "
                                               "limits into the plans");
    if (config_.plans.empty()) {
        diagnostics_.error(identity->key_at, named("route", route.name) +
                                                 " chooses a plan per client, but there is no top-level 'plans'");
        return;
    }
    route.plans = plans_of_route(section, route);
}

std::shared_ptr<RoutePlans> ConfigReader::plans_of_route(const Section& section, RouteConfig& route) {
    auto plans = std::make_shared<RoutePlans>();
    const std::size_t errors_before = diagnostics_.error_count() + other_file_errors_;
    const Field& identity = *section.find("identity");
    if (const auto written = text(identity)) {
        KeyPartParse parsed = parse_key_part(*written);
        if (!parsed.part) {
            diagnostics_.error(identity.at, parsed.error);
        } else if (parsed.part->kind == KeyPart::Kind::jwt && config_.jwt.keys.empty()) {
            diagnostics_.error(identity.at, "identity " + quoted(*written) +
                                                " reads a verified token: it needs a top-level 'jwt' with 'keys'");
        } else if (parsed.part->kind == KeyPart::Kind::method || parsed.part->kind == KeyPart::Kind::path) {
            diagnostics_.error(identity.at, "identity " + quoted(*written) + " does not name a client");
        } else {
            plans->identity = *parsed.part;
        }
    }
    for (const auto& plan : config_.plans) {
        RoutePlans::Set set{plan.name, "", plan.limits};
        for (std::size_t i = 0; i < set.limits.size(); ++i) {
            if (i >= plan.keyed.size() || !plan.keyed[i]) set.limits[i].key = {plans->identity};
            set.limits[i].keeps_used = true;
        }
        plans->by_plan.emplace(plan.name, plans->sets.size());
        plans->sets.push_back(std::move(set));
    }
    auto plan_names = [this] {
        std::vector<std::string_view> names;
        for (const auto& plan : config_.plans) names.push_back(plan.name);
        return names;
    };
    if (const Field* f = section.find("default_plan")) {
        if (const auto written = text(*f)) {
            const auto found = plans->by_plan.find(*written);
            if (found != plans->by_plan.end()) {
                plans->default_plan = *written;
                plans->default_set = found->second;
            } else {
                std::string message = named("route", route.name) + ": 'default_plan' names plan " + quoted(*written) +
                                      ", which is not defined";
                if (auto suggestion = closest_spelling(*written, plan_names()))
                    message += " (did you mean " + quoted(*suggestion) + "?)";
                diagnostics_.error(f->at, message);
            }
        }
    }
    // Unknown clients on a plan whose every limit is keyed on what they send themselves: a
    // client that sends a new identity each time is never limited.
    // (A verified token's claim is not the client's to choose.)
    if (plans->default_set && may_be_left_out(plans->identity) && plans->identity.kind != KeyPart::Kind::jwt) {
        const auto& limits = plans->sets[*plans->default_set].limits;
        const bool covered = std::any_of(limits.begin(), limits.end(), [](const LimitConfig& limit) {
            return std::none_of(limit.key.begin(), limit.key.end(), may_be_left_out);
        });
        if (!limits.empty() && !covered)
            diagnostics_.warning(section.find("default_plan")->at,
                                 named("route", route.name) + ": clients the map does not name get plan " +
                                     quoted(plans->default_plan) + ", whose every limit is keyed on what the client " +
                                     "sends (" + key_part_text(plans->identity) + "): one that sends a new value " +
                                     "each time is never limited; add a limit keyed on client_ip to that plan");
    }
    if (const Field* f = section.find("plan_header")) {
        if (const auto written = text(*f)) {
            if (!is_http_token(*written)) {
                diagnostics_.error(f->at, "'plan_header' must be a header name, got " + quoted(*written));
            } else {
                plans->header = to_lower(*written);
                if (config_.client_ip.trusted_proxies.empty())
                    diagnostics_.warning(f->at, "'plan_header' counts only from a peer in client_ip.trusted_proxies, "
                                                "and there is none: no request's plan comes from it");
            }
        }
    }
    if (const Field* f = section.find("plan_map")) {
        if (const auto written = text(*f)) {
            plans->map_file = file_path(*written);
            std::string error;
            const std::string content = tls::read_small_file(plans->map_file, 64u << 20, error);
            if (!error.empty()) {
                diagnostics_.error(f->at, "'plan_map': " + error);
            } else {
                auto problems = read_plan_map_file(content, plans->map_file, config_.plans, *plans);
                for (auto& problem : problems) {
                    if (!problem.warning) ++other_file_errors_;
                    other_files_.push_back(std::move(problem));
                }
            }
        }
    }
    if (diagnostics_.error_count() + other_file_errors_ > errors_before) return nullptr;
    return plans;
}

// An identity as the map writes it, as requests will name it: an address (identity
// client_ip) in the form sluice writes clients in ("2001:DB8::1" is "2001:db8::1", an
// IPv4-mapped address its IPv4 form); nullopt (and an error) for one that cannot be.
std::optional<std::string> ConfigReader::map_identity(const std::string& written, Position at, const RoutePlans& plans) {
    if (written.empty()) {
        diagnostics_.error(at, "an identity must not be empty");
        return std::nullopt;
    }
    if (plans.identity.kind != KeyPart::Kind::client_ip) return written;
    const auto ip = net::IpAddress::parse(written);
    if (!ip) {
        diagnostics_.error(at, "identity " + quoted(written) + " is not an IP address (the route's identity is client_ip)");
        return std::nullopt;
    }
    return ip->unmapped().str();
}

// A client's buckets, once its overrides are in: what read_token_bucket holds a plan's own
// to (one token per microsecond at most, a whole bucket within 10 years), so the figures the
// limiters derive stay exact and far from overflow.
void ConfigReader::check_overridden_buckets(const RoutePlans::Set& set, Position at) {
    for (const auto& limit : set.limits) {
        if (limit.algorithm != Algorithm::token_bucket && limit.algorithm != Algorithm::leaky_bucket) continue;
        const double interval_us = static_cast<double>(limit.per.count()) * 1000.0 / limit.rate;
        const std::string which = "identity " + quoted(set.identity) + ": limit " + quoted(limit.name) + " of plan " +
                                  quoted(set.plan) + " with its overrides";
        if (interval_us < 1.0)
            diagnostics_.error(at, which + " adds more than one token per microsecond (rate / per)");
        else if (interval_us * static_cast<double>(limit.burst) > max_refill_us)
            diagnostics_.error(at, which + " takes more than 10 years to refill (burst * per / rate)");
    }
}

// A plan map: `IDENTITY: PLAN` or `IDENTITY: {plan: PLAN, overrides: {LIMIT: {rate|burst|limit: N}}}`.
// The set of the plan `plan_field` names for `identity`; nullopt (and an error) for a plan the
// configuration does not have.
std::optional<std::size_t> ConfigReader::plan_of_client(const std::string& identity, const Field& plan_field,
                                                        const std::vector<PlanConfig>& top, const RoutePlans& plans) {
    const auto plan_name = text(plan_field);
    if (!plan_name) return std::nullopt;
    const auto plan = plans.by_plan.find(*plan_name);
    if (plan != plans.by_plan.end()) return plan->second;
    std::vector<std::string_view> names;
    for (const auto& p : top) names.push_back(p.name);
    std::string message = "identity " + quoted(identity) + " names plan " + quoted(*plan_name) + ", which is not defined";
    if (auto suggestion = closest_spelling(*plan_name, names)) message += " (did you mean " + quoted(*suggestion) + "?)";
    diagnostics_.error(plan_field.at, message);
    return std::nullopt;
}

// The limit `name` of a client's set (its plan's limits), or null (and an error at `at`).
LimitConfig* ConfigReader::override_target(RoutePlans::Set& set, const std::string& name, Position at) {
    const auto limit =
        std::find_if(set.limits.begin(), set.limits.end(), [&](const LimitConfig& l) { return l.name == name; });
    if (limit != set.limits.end()) return &*limit;
    std::vector<std::string_view> names;
    for (const auto& l : set.limits) names.push_back(l.name);
    std::string message = "plan " + quoted(set.plan) + " has no limit " + quoted(name);
    if (auto suggestion = closest_spelling(name, names)) message += " (did you mean " + quoted(*suggestion) + "?)";
    diagnostics_.error(at, message);
    return nullptr;
}

// One override, `field` (rate, burst or limit) of `limit` set to the value of `f`, checked as
// the limit's own value is, and against the limit's other numbers.
void ConfigReader::apply_override(LimitConfig& limit, const std::string& plan, std::string_view field, const Field& f) {
    const bool bucket = limit.algorithm == Algorithm::token_bucket || limit.algorithm == Algorithm::leaky_bucket;
    const std::string which =
        "limit " + quoted(limit.name) + " of plan " + quoted(plan) + " is " + std::string(algorithm_name(limit.algorithm));
    if (bucket == (field == "limit")) {
        diagnostics_.error(f.key_at, which + ": it has " + (bucket ? "'rate' and 'burst'" : "'limit'") + ", not " +
                                         quoted(field));
        return;
    }
    if (field == "rate") {
        const auto value = positive_number(f);
        if (value && *value > max_rate)
            diagnostics_.error(f.at, f.label() + " must be at most 1000000000, got " + f.value.Scalar());
        else if (value)
            limit.rate = *value;
        return;
    }
    const auto value = integer(f, 1, max_count);
    if (!value) return;
    (field == "burst" ? limit.burst : limit.limit) = static_cast<std::uint64_t>(*value);
    if (limit.algorithm == Algorithm::leaky_bucket && !limit.nodelay && limit.delay >= limit.burst)
        diagnostics_.error(f.at, which + " with delay " + std::to_string(limit.delay) +
                                     ": its burst must be above that, got " + std::to_string(limit.burst));
    const std::uint64_t capacity = bucket ? limit.burst : limit.limit;
    const std::uint64_t cost = limit.cost_header.empty() ? limit.cost : limit.default_cost;
    if (cost > capacity)
        diagnostics_.error(f.at, which + " costing " + std::to_string(cost) + " a request: " + f.label() + " " +
                                     std::to_string(capacity) + " would refuse every request");
}

// A plan map: `IDENTITY: PLAN` or `IDENTITY: {plan: PLAN, overrides: {LIMIT: {rate|burst|limit: N}}}`.
void ConfigReader::read_plan_map(const YAML::Node& root, const std::vector<PlanConfig>& top, RoutePlans& plans) {
    const Field document{"", root, position_of(root.Mark()), position_of(root.Mark()), false};
    if (document.empty()) return;
    if (!root.IsMap()) {
        diagnostics_.error(document.at, "a plan map must be a map of identity: plan, got " + description_of(root));
        return;
    }
    std::map<std::string, int, std::less<>> first_line;  // (two spellings of one address)
    for (const Field& entry : Section::entries(document, diagnostics_)) {
        const auto identity = map_identity(entry.key, entry.key_at, plans);
        if (!identity) continue;
        if (const auto [it, inserted] = first_line.try_emplace(*identity, entry.key_at.line); !inserted) {
            diagnostics_.error(entry.key_at, "duplicate identity " + quoted(*identity) + " (first at line " +
                                                 std::to_string(it->second) + ")");
            continue;
        }
        const Field* plan_field = &entry;
        std::optional<Section> section;
        if (entry.value.IsMap()) {
            section.emplace(entry, "in a plan map entry", plan_entry_keys, diagnostics_);
            plan_field = section->find("plan");
            if (!plan_field) {
                diagnostics_.error(entry.at, "identity " + quoted(*identity) + " needs a 'plan'");
                continue;
            }
        }
        const auto plan = plan_of_client(*identity, *plan_field, top, plans);
        if (!plan) continue;
        const Field* overrides = section ? section->find("overrides") : nullptr;
        if (!overrides || overrides->empty()) {
            plans.by_identity[*identity] = *plan;
            continue;
        }
        if (!expect_map(*overrides)) continue;
        RoutePlans::Set set{plans.sets[*plan].plan, *identity, plans.sets[*plan].limits};
        const std::size_t errors_before = diagnostics_.error_count();
        for (const Field& item : Section::entries(*overrides, diagnostics_)) {
            LimitConfig* limit = override_target(set, item.key, item.key_at);
            if (!limit || !expect_map(item)) continue;
            const Section values(item, "in an override", plan_override_keys, diagnostics_);
            for (const std::string_view field : plan_override_keys)
                if (const Field* f = values.find(field)) apply_override(*limit, set.plan, field, *f);
        }
        if (diagnostics_.error_count() == errors_before) check_overridden_buckets(set, overrides->key_at);
        if (diagnostics_.error_count() > errors_before) continue;
        plans.by_identity[*identity] = plans.sets.size();
        plans.sets.push_back(std::move(set));
    }
}

// A plan map in CSV (RFC 4180: comma-separated, a field in double quotes may hold commas, line
// breaks and "" for a quote; lines starting with '#' and empty lines are skipped). The first
// record names the columns: identity, plan, then any of LIMIT.rate, LIMIT.burst, LIMIT.limit;
// an empty cell overrides nothing.
void ConfigReader::read_plan_map_csv(std::string_view text, const std::vector<PlanConfig>& top, RoutePlans& plans) {
    struct Cell {
        std::string text;
        Position at;
    };
    std::vector<std::vector<Cell>> records;
    int line = 1, column = 1;
    std::size_t i = 0;
    if (text.starts_with("\xEF\xBB\xBF")) i = 3;  // a UTF-8 byte order mark (spreadsheets write one)
    auto advance = [&](char c) {
        if (c == '\n') {
            ++line;
            column = 1;
        } else {
            ++column;
        }
    };
    while (i < text.size()) {
        const bool comment = column == 1 && text[i] == '#';
        if (comment || text[i] == '\n' || (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
            while (i < text.size() && text[i] != '\n') advance(text[i++]);  // a comment, or an empty line
            if (i < text.size()) advance(text[i++]);
            continue;
        }
        std::vector<Cell> record;
        for (;;) {
            Cell cell{"", Position{line, column}};
            if (i < text.size() && text[i] == '"') {
                advance(text[i++]);
                bool closed = false;
                while (i < text.size()) {
                    const char c = text[i];
                    advance(c);
                    ++i;
                    if (c != '"') {
                        cell.text += c;
                    } else if (i < text.size() && text[i] == '"') {
                        cell.text += '"';
                        advance(text[i++]);
                    } else {
                        closed = true;
                        break;
                    }
                }
                if (!closed) {
                    diagnostics_.error(cell.at, "a quoted field without its closing '\"'");
                    return;
                }
                if (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
                    diagnostics_.error(Position{line, column}, "after a quoted field: ',' or the end of the line");
                    return;
                }
            } else {
                while (i < text.size() && text[i] != ',' && text[i] != '\n' && text[i] != '\r') {
                    if (text[i] == '"') {
                        diagnostics_.error(Position{line, column}, "a '\"' inside a field that is not quoted");
                        return;
                    }
                    cell.text += text[i];
                    advance(text[i++]);
                }
                while (!cell.text.empty() && (cell.text.back() == ' ' || cell.text.back() == '\t')) cell.text.pop_back();
                std::size_t lead = 0;
                while (lead < cell.text.size() && (cell.text[lead] == ' ' || cell.text[lead] == '\t')) ++lead;
                cell.text.erase(0, lead);
                cell.at.column += static_cast<int>(lead);
            }
            record.push_back(std::move(cell));
            if (i < text.size() && text[i] == ',') {
                advance(text[i++]);
                continue;
            }
            if (i < text.size() && text[i] == '\r') advance(text[i++]);
            if (i < text.size() && text[i] == '\n') advance(text[i++]);
            break;
        }
        records.push_back(std::move(record));
    }
    if (records.empty()) return;
    // The columns.
    const auto& header = records.front();
    struct Column {
        std::string limit;
        std::string field;
    };
    std::vector<Column> columns;
    bool header_ok = header.size() >= 2 && header[0].text == "identity" && header[1].text == "plan";
    if (!header_ok)
        diagnostics_.error(header[0].at, "a CSV plan map starts with its columns: identity,plan then any of "
                                         "LIMIT.rate, LIMIT.burst, LIMIT.limit");
    for (std::size_t c = 2; header_ok && c < header.size(); ++c) {
        const auto dot = header[c].text.rfind('.');
        const std::string field = dot == std::string::npos ? "" : header[c].text.substr(dot + 1);
        if (dot == std::string::npos || dot == 0 || !contains(plan_override_keys, field)) {
            diagnostics_.error(header[c].at, "column " + quoted(header[c].text) +
                                                 " must be LIMIT.rate, LIMIT.burst or LIMIT.limit");
            header_ok = false;
            break;
        }
        columns.push_back({header[c].text.substr(0, dot), field});
    }
    if (!header_ok) return;
    std::map<std::string, int, std::less<>> first_line;
    for (std::size_t r = 1; r < records.size(); ++r) {
        const auto& record = records[r];
        if (record.size() != header.size()) {
            diagnostics_.error(record[0].at, "this record has " + std::to_string(record.size()) + " fields, the columns " +
                                                 std::to_string(header.size()));
            continue;
        }
        const auto mapped = map_identity(record[0].text, record[0].at, plans);
        if (!mapped) continue;
        const std::string& identity = *mapped;
        if (const auto [it, inserted] = first_line.try_emplace(identity, record[0].at.line); !inserted) {
            diagnostics_.error(record[0].at, "duplicate identity " + quoted(identity) + " (first at line " +
                                                 std::to_string(it->second) + ")");
            continue;
        }
        const Field plan_field{"plan", YAML::Node(record[1].text), record[1].at, record[1].at, false};
        const auto plan = plan_of_client(identity, plan_field, top, plans);
        if (!plan) continue;
        RoutePlans::Set set{plans.sets[*plan].plan, identity, plans.sets[*plan].limits};
        const std::size_t errors_before = diagnostics_.error_count();
        bool overridden = false;
        for (std::size_t c = 0; c < columns.size(); ++c) {
            const Cell& cell = record[c + 2];
            if (cell.text.empty()) continue;
            LimitConfig* limit = override_target(set, columns[c].limit, cell.at);
            if (!limit) continue;
            apply_override(*limit, set.plan, columns[c].field,
                           Field{header[c + 2].text, YAML::Node(cell.text), cell.at, cell.at, false});
            overridden = true;
        }
        if (overridden && diagnostics_.error_count() == errors_before) check_overridden_buckets(set, record[0].at);
        if (diagnostics_.error_count() > errors_before) continue;
        if (!overridden) {
            plans.by_identity[identity] = *plan;
            continue;
        }
        plans.by_identity[identity] = plans.sets.size();
        plans.sets.push_back(std::move(set));
    }
}

// ---- entry points ----------------------------------------------------------------------------

LoadResult result_of(ConfigReader& reader) {
    LoadResult result;
    result.diagnostics = reader.diagnostics().sorted();
    result.diagnostics.insert(result.diagnostics.end(), reader.other_files().begin(), reader.other_files().end());
    if (!reader.diagnostics().has_errors() && reader.other_file_errors() == 0) result.config = std::make_shared<const Config>(reader.config());
    return result;
}

// yaml-cpp says "illegal map value" and the like for a tab in the indentation; say why.
std::string syntax_hint(std::string_view yaml, const YAML::Exception& error) {
    const YAML::Mark& mark = error.mark;
    if (mark.is_null() || error.msg.find("tab") != std::string::npos) return {};
    std::size_t start = 0;
    for (int line = 0; line < mark.line && start != std::string_view::npos; ++line) {
        start = yaml.find('\n', start);
        if (start != std::string_view::npos) ++start;
    }
    if (start == std::string_view::npos) return {};
    const std::string_view line = yaml.substr(start, yaml.find('\n', start) - start);
    const std::string_view indentation = line.substr(0, line.find_first_not_of(" \t"));
    if (indentation.find('\t') != std::string_view::npos) return " (a tab in the indentation: YAML allows only spaces)";
    return {};
}

// Counts the documents of a stream without building them, and notices a parser that makes
// no progress: yaml-cpp 0.7's LoadAll loops forever on input such as "," (each round yields
// a null document at the same place and allocates a node), which on SIGHUP would take the
// running proxy down (yaml-cpp #1040, fixed upstream after 0.7).
class DocumentCounter final : public YAML::EventHandler {
public:
    void OnDocumentStart(const YAML::Mark&) override {
        first_.reset();
        only_null_ = true;
    }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { event(mark, true); }
    void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { event(mark, false); }
    void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
        event(mark, false);
    }
    void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {
        event(mark, false);
    }
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
        event(mark, false);
    }
    void OnMapEnd() override {}

    // Where the document's content begins (its first node).
    YAML::Mark start() const { return first_.value_or(YAML::Mark::null_mark()); }
    bool only_null() const { return only_null_; }

private:
    void event(const YAML::Mark& mark, bool null) {
        if (!first_) first_ = mark;
        only_null_ = only_null_ && null;
    }
    std::optional<YAML::Mark> first_;
    bool only_null_ = true;
};

std::optional<YAML::Node> parse_single_document(std::string_view yaml, DiagnosticList& diagnostics) {
    try {
        // First the shape of the stream: one document, and a parser that moves on.
        std::istringstream stream{std::string(yaml)};
        YAML::Parser parser(stream);
        DocumentCounter counter;
        std::optional<YAML::Mark> previous;
        for (int documents = 0; parser.HandleNextDocument(counter); ++documents) {
            if (previous && counter.only_null() && counter.start().pos == previous->pos) {
                diagnostics.error(position_of(counter.start()), "invalid YAML: unexpected character");
                return std::nullopt;
            }
            if (documents == 1) {
                diagnostics.error(position_of(counter.start()), "only one YAML document is allowed");
                return std::nullopt;
            }
            previous = counter.start();
        }
        return YAML::Load(std::string(yaml));
    } catch (const YAML::Exception& error) {
        diagnostics.error(position_of(error.mark), "invalid YAML: " + error.msg + syntax_hint(yaml, error));
        return std::nullopt;
    }
}

}  // namespace

std::vector<Diagnostic> read_plan_map_file(std::string_view text, const std::string& name,
                                           const std::vector<PlanConfig>& top, RoutePlans& plans) {
    ConfigReader reader(name);
    const bool csv = name.size() >= 4 && to_lower(name.substr(name.size() - 4)) == ".csv";
    if (csv) {
        reader.read_plan_map_csv(text, top, plans);
    } else if (const auto root = parse_single_document(text, reader.diagnostics())) {
        try {
            reader.read_plan_map(*root, top, plans);
        } catch (const YAML::Exception& error) {
            reader.diagnostics().error(position_of(error.mark), "invalid YAML: " + error.msg);
        }
    }
    return reader.diagnostics().sorted();
}

std::vector<Diagnostic> reread_plan_map(const std::vector<PlanConfig>& top, const RoutePlans& running,
                                        std::shared_ptr<const RoutePlans>& out) {
    // The route's sets are one per top-level plan, then one per client of the map with
    // overrides; by_identity is the map's.
    auto plans = std::make_shared<RoutePlans>(running);
    plans->sets.resize(std::min(plans->sets.size(), top.size()));
    plans->by_identity.clear();
    std::string error;
    const std::string content = tls::read_small_file(plans->map_file, 64u << 20, error);
    if (!error.empty()) return {Diagnostic{plans->map_file, 0, 0, "'plan_map': " + error, false}};
    // A file with nothing in it (no line but blanks and comments) where the running map names
    // clients: most likely one caught while it is being written (an editor saves within the
    // second the watch looks), which would move every client to the default plan.
    const bool nothing = [&] {
        std::string_view rest(content);
        if (rest.starts_with("\xEF\xBB\xBF")) rest.remove_prefix(3);  // a byte order mark
        while (!rest.empty()) {
            const std::size_t end = std::min(rest.find('\n'), rest.size());
            const std::string_view line = rest.substr(0, end);
            const std::size_t first = line.find_first_not_of(" \t\r");
            if (first != std::string_view::npos && line[first] != '#') return false;
            rest.remove_prefix(std::min(end + 1, rest.size()));
        }
        return true;
    }();
    if (nothing && !running.by_identity.empty())
        return {Diagnostic{plans->map_file, 1, 1,
                           "the plan map is empty (a file still being written?): the running map stays; for a map "
                           "with no clients write {} (YAML) or the header line alone (CSV)",
                           false}};
    auto problems = read_plan_map_file(content, plans->map_file, top, *plans);
    if (std::none_of(problems.begin(), problems.end(), [](const Diagnostic& d) { return !d.warning; })) out = plans;
    return problems;
}

LoadResult load_string(std::string_view yaml, const std::string& name) {
    ConfigReader reader(name);
    const auto root = parse_single_document(yaml, reader.diagnostics());
    if (root) {
        try {
            reader.read_document(*root);
        } catch (const YAML::Exception& error) {  // not expected: every access above checks the node first
            reader.diagnostics().error(position_of(error.mark), "invalid YAML: " + error.msg);
        }
    }
    return result_of(reader);
}

LoadResult load_file(const std::string& path) {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    std::string content;
    int read_errno = 0;
    if (!file) {
        read_errno = errno;
    } else {
        char buffer[65536];
        std::size_t count = 0;
        while ((count = std::fread(buffer, 1, sizeof buffer, file)) > 0) content.append(buffer, count);
        if (std::ferror(file)) read_errno = errno ? errno : EIO;
        std::fclose(file);
    }
    if (read_errno != 0) {
        LoadResult result;
        result.io_error = true;
        result.diagnostics.push_back(Diagnostic{path, 0, 0, std::string("cannot read: ") + std::strerror(read_errno), false});
        return result;
    }
    return load_string(content, path);
}

std::vector<std::pair<std::string, std::vector<std::string_view>>> known_keys() {
    return {{"", top_level_keys},
            {"server", ConfigReader::server_table().keys},
            {"server.http2", ConfigReader::http2_table().keys},
            {"server.listen[]", listener_keys},
            {"server.listen[].tls", listener_tls_keys},
            {"server.listen[].tls.certificates[]", certificate_keys},
            {"admin", ConfigReader::admin_table().keys},
            {"client_ip", ConfigReader::client_ip_table().keys},
            {"store", ConfigReader::store_table().keys},
            {"store.redis", redis_keys},
            {"store.memory", ConfigReader::memory_store_table().keys},
            {"upstreams.NAME", ConfigReader::upstream_table().keys},
            {"upstreams.NAME.tls", upstream_tls_keys},
            {"routes[]", route_keys},
            {"routes[].match", match_keys},
            {"routes[].limits[]", limit_keys},
            {"routes[].limits[].count", count_keys},
            {"routes[].limits[].cost", response_cost_keys},
            {"routes[].exempt", exempt_keys},
            {"exempt", exempt_keys},
            {"exempt.headers[]", exempt_header_keys},
            {"jwt", jwt_keys},
            {"jwt.keys[]", jwt_key_keys},
            {"responses", ConfigReader::responses_table().keys},
            {"logging", ConfigReader::logging_table().keys}};
}

}  // namespace sluice::config
