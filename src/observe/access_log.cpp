#include "observe/access_log.hpp"

#include <spdlog/spdlog.h>

#include "observe/json_text.hpp"

namespace sluice::observe {

namespace {

std::string_view or_dash(std::string_view s) { return s.empty() ? std::string_view("-") : s; }

}  // namespace

std::string format_access_text(const AccessRecord& r) {
    std::string remaining = r.remaining ? std::to_string(*r.remaining) : "-";
    std::string upstream = r.upstream_ms ? fmt::format("{:.1f}", *r.upstream_ms) : "-";
    auto line = fmt::format("{} \"{} {} HTTP/{}.{}\" {} {} route={} limit={} decision={} remaining={} upstream_ms={} total_ms={:.1f}",
                            r.client_ip, r.method, r.target, r.version / 10, r.version % 10, r.status, r.bytes_sent,
                            or_dash(r.route), or_dash(r.limit), r.decision, remaining, upstream, r.total_ms);
    if (r.wait_ms) line += fmt::format(" wait_ms={:.1f}", *r.wait_ms);
    if (r.tunnel_up)
        line += fmt::format(" tunnel_up={} tunnel_down={} tunnel_ms={:.1f}", *r.tunnel_up, r.tunnel_down.value_or(0),
                            r.tunnel_ms);
    return line;
}

std::string format_access_json(const AccessRecord& r) {
    std::string out = "{";
    auto field = [&](std::string_view name, const std::string& json_value) {
        if (out.size() > 1) out += ',';
        out += json_string(name);
        out += ':';
        out += json_value;
    };
    field("client_ip", json_string(r.client_ip));
    field("request", json_string(fmt::format("{} {} HTTP/{}.{}", r.method, r.target, r.version / 10, r.version % 10)));
    field("status", std::to_string(r.status));
    field("bytes", std::to_string(r.bytes_sent));
    field("route", r.route.empty() ? "null" : json_string(r.route));
    field("limit", r.limit.empty() ? "null" : json_string(r.limit));
    field("decision", json_string(r.decision));
    field("remaining", r.remaining ? std::to_string(*r.remaining) : "null");
    field("upstream_ms", r.upstream_ms ? fmt::format("{:.1f}", *r.upstream_ms) : "null");
    field("total_ms", fmt::format("{:.1f}", r.total_ms));
    if (r.wait_ms) field("wait_ms", fmt::format("{:.1f}", *r.wait_ms));
    if (r.tunnel_up) {
        field("tunnel_up", std::to_string(*r.tunnel_up));
        field("tunnel_down", std::to_string(r.tunnel_down.value_or(0)));
        field("tunnel_ms", fmt::format("{:.1f}", r.tunnel_ms));
    }
    out += '}';
    return out;
}

void log_access(const AccessRecord& r, config::LogFormat format) {
    static auto logger = spdlog::get("access");
    if (!logger || !logger->should_log(spdlog::level::info)) return;
    logger->info(format == config::LogFormat::json ? format_access_json(r) : format_access_text(r));
}

}  // namespace sluice::observe
