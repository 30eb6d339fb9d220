// One access line per request: the standard line of INTERFACE.md, or the fields an operator
// chose (logging.access_format), as text or json; every line starts with its time.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "config/config.hpp"

namespace sluice::observe {

// What the limits made of a request: the access line's `decision`. (Per limit, the metrics
// count the same outcomes but `unlimited`: DecisionKind.)
enum class AccessDecision : std::uint8_t {
    unlimited,            // the route has no limits (or the request never reached them)
    allowed,
    limited,
    shadow_limited,       // a shadow limit would have refused it; forwarded
    store_error_allowed,  // the store did not answer; on_error: allow
    store_error_denied,   // ... on_error: deny (503)
    delayed,              // a leaky bucket held it back, then it was forwarded
    exempt,               // `exempt` named it: no limit of its route was asked
    banned,               // refused: its key is banned (`ban`), by this refusal or an earlier one
};
std::string_view access_decision_name(AccessDecision decision);

struct AccessRecord {
    std::string client;  // the resolved client: the limits' client_ip (the peer until resolved)
    std::string peer;    // the TCP peer
    std::string method;
    std::string target;
    unsigned version = 11;  // 10 or 11
    unsigned status = 0;
    std::uint64_t bytes_sent = 0;  // response body bytes
    std::string_view route;        // empty: no route
    std::string_view limit;        // empty: none
    AccessDecision decision = AccessDecision::unlimited;
    std::optional<std::uint64_t> remaining;
    std::optional<double> upstream_ms;
    double total_ms = 0;
    bool forwarded = false;  // the request reached an upstream (not logged: for the counters)
    // A WebSocket tunnel (status 101): bytes relayed each way and how long it was open.
    std::optional<std::uint64_t> tunnel_up;    // client to upstream
    std::optional<std::uint64_t> tunnel_down;  // upstream to client
    double tunnel_ms = 0;
    // decision=delayed: how long a leaky bucket held the request back (part of total_ms).
    std::optional<double> wait_ms;
    std::string request_id;  // empty: none (the head was not read)
    std::string host;        // the Host the request named
    std::string upstream;    // the server it went to, "host:port"
    std::string user_agent;
    // Limits of the route that did not apply, comma-separated: each is keyed on a header the
    // request does not have (empty: every limit applied).
    std::string skipped;
    std::string_view plan;  // the plan whose limits decided it (a route with plans); empty: none
};

// Milliseconds as access lines write them: one decimal, as printf's %.1f.
void append_ms(std::string& out, double ms);

// `time`: what the line starts with (log_time.hpp).
std::string format_access_text(const AccessRecord& r, const config::AccessFormat& format, std::string_view time);
std::string format_access_json(const AccessRecord& r, const config::AccessFormat& format, std::string_view time);

}  // namespace sluice::observe
