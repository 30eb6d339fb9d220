#include "limit/client_ip.hpp"

#include <optional>

namespace sluice::limit {

namespace {

std::string_view trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return s;
}

}  // namespace

bool is_trusted(const std::vector<net::Cidr>& trusted, const net::IpAddress& ip) {
    for (const auto& cidr : trusted)
        if (cidr.contains(ip)) return true;
    return false;
}

std::string client_ip(std::string_view peer, const std::vector<std::string_view>& xff,
                      const std::vector<net::Cidr>& trusted) {
    if (trusted.empty()) return std::string(peer);
    auto peer_ip = net::IpAddress::parse(peer);
    if (!peer_ip || !is_trusted(trusted, *peer_ip)) return std::string(peer);
    return forwarded_client(*peer_ip, xff, trusted);
}

std::string forwarded_client(const net::IpAddress& peer, std::span<const std::string_view> xff,
                             const std::vector<net::Cidr>& trusted) {
    // The address reached so far, written out once at the end: as it was written where that
    // is already how str() writes it (dotted decimal: IpAddress::parse takes no other form
    // of IPv4), else by str().
    net::IpAddress current = peer;
    std::string_view current_text;
    auto written = [&] { return current_text.empty() ? current.unmapped().str() : std::string(current_text); };
    // Walk the fields right to left, and each field's list right to left.
    for (auto field = xff.rbegin(); field != xff.rend(); ++field) {
        std::string_view list = *field;
        while (true) {
            auto comma = list.rfind(',');
            auto item = trim(comma == std::string_view::npos ? list : list.substr(comma + 1));
            if (!item.empty()) {
                auto ip = net::IpAddress::parse(item);
                if (!ip) return written();
                current = *ip;
                current_text = ip->v4 ? item : std::string_view();
                if (!is_trusted(trusted, *ip)) return written();
            }
            if (comma == std::string_view::npos) break;
            list = list.substr(0, comma);
        }
    }
    return written();
}

}  // namespace sluice::limit
