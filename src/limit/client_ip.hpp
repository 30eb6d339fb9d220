// Who the client is: the TCP peer, or, when the peer is a trusted proxy, the right-most
// X-Forwarded-For address that is not itself trusted. Pure.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/cidr.hpp"

namespace sluice::limit {

bool is_trusted(const std::vector<net::Cidr>& trusted, const net::IpAddress& ip);

// `xff` holds the X-Forwarded-For field values in received order (several fields are
// one list). Walking right to left from the peer, every trusted hop is skipped; the
// first untrusted address is the client. When every address is trusted the left-most
// one is the client. An entry that is not an IP address stops the walk: the hop that
// sent it (the address to its right) is the client. Returns the address as text.
std::string client_ip(std::string_view peer, const std::vector<std::string_view>& xff,
                      const std::vector<net::Cidr>& trusted);
// The same walk from a peer already parsed and found trusted (no second parse of it).
std::string forwarded_client(const net::IpAddress& peer, std::span<const std::string_view> xff,
                             const std::vector<net::Cidr>& trusted);

}  // namespace sluice::limit
