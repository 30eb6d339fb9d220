#include "observe/admin_origin.hpp"

#include <boost/asio/ip/address.hpp>

#include "http/field_text.hpp"

namespace sluice::observe {

namespace {

using http::iequals_ascii;

// The host of a Host field ("name", "name:port", "1.2.3.4:port", "[::1]:port").
std::string_view host_part(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        const auto end = host.find(']');
        return end == std::string_view::npos ? host : host.substr(1, end - 1);
    }
    return host.substr(0, host.find(':'));
}

bool addressed_by_ip_or_localhost(std::string_view host) {
    const auto name = host_part(host);
    if (iequals_ascii(name, "localhost")) return true;
    boost::system::error_code ec;
    (void)boost::asio::ip::make_address(std::string(name), ec);
    return !ec;
}

}  // namespace

std::optional<std::string> admin_browser_refusal(std::string_view host, std::string_view origin,
                                                 std::string_view fetch_site) {
    if (!fetch_site.empty() && !iequals_ascii(fetch_site, "same-origin") && !iequals_ascii(fetch_site, "none"))
        return "a browser's request from another site is refused (Sec-Fetch-Site)";
    if (!origin.empty()) {
        // "null" (a sandboxed page, a file, a redirect across sites) is no site of ours either.
        constexpr std::string_view http = "http://";
        const bool same = origin.size() > http.size() && iequals_ascii(origin.substr(0, http.size()), http) &&
                          iequals_ascii(origin.substr(http.size()), host);
        if (!same) return "a browser's request from another origin is refused (Origin)";
    }
    if ((!fetch_site.empty() || !origin.empty()) && !addressed_by_ip_or_localhost(host))
        return "a browser must address the admin port by an IP address or localhost (Host)";
    return std::nullopt;
}

}  // namespace sluice::observe
