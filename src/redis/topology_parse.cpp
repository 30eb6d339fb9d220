// What Redis servers and sentinels tell sluice about the topology, read strictly: hash slots,
// addresses, CLUSTER SLOTS replies, +switch-master messages. Pure (fuzzed by
// tests/fuzz/topology_parse_fuzz.cpp).
#include "redis/topology_parse.hpp"

#include <array>
#include <charconv>
#include <sstream>

#include <boost/asio/ip/address.hpp>

#include "config/endpoint.hpp"

namespace sluice::redis {

namespace {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster uses it.
std::uint16_t crc16(std::string_view data) {
    std::uint16_t crc = 0;
    for (unsigned char byte : data) {
        crc ^= static_cast<std::uint16_t>(byte) << 8;
        for (int bit = 0; bit < 8; ++bit)
            crc = (crc & 0x8000) ? static_cast<std::uint16_t>((crc << 1) ^ 0x1021) : static_cast<std::uint16_t>(crc << 1);
    }
    return crc;
}

}  // namespace

std::uint16_t key_slot(std::string_view key) {
    const auto open = key.find('{');
    if (open != std::string_view::npos) {
        const auto close = key.find('}', open + 1);
        if (close != std::string_view::npos && close != open + 1) key = key.substr(open + 1, close - open - 1);
    }
    return crc16(key) & 16383;
}

bool split_address(std::string_view address, std::string& host, std::uint16_t& port) {
    const auto colon = address.rfind(':');
    if (colon == std::string_view::npos || colon == 0) return false;
    std::string_view host_part = address.substr(0, colon);
    const std::string_view port_part = address.substr(colon + 1);
    if (host_part.size() >= 2 && host_part.front() == '[' && host_part.back() == ']')
        host_part = host_part.substr(1, host_part.size() - 2);
    if (host_part.empty() || host_part.size() > 253) return false;
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(port_part.data(), port_part.data() + port_part.size(), value);
    if (port_part.empty() || ec != std::errc{} || end != port_part.data() + port_part.size() || value == 0 ||
        value > 65535)
        return false;
    const std::string candidate(host_part);
    if (!acceptable_host(candidate)) return false;
    host = candidate;
    port = static_cast<std::uint16_t>(value);
    return true;
}

std::string join_address(const std::string& host, std::uint16_t port) {
    return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

namespace {

bool read_node(const RedisReply& node, const std::string& asked, std::string& address) {
    if (node.type != RedisReply::Type::array || node.elements.size() < 2) return false;
    const auto& host = node.elements[0];
    const auto& port = node.elements[1];
    if (host.type != RedisReply::Type::string || port.type != RedisReply::Type::integer) return false;
    if (port.integer < 1 || port.integer > 65535) return false;
    std::string h;
    std::uint16_t p = 0;
    if (host.text.empty() || host.text == "?") {
        // "the node that answered" (cluster-announce-hostname unknown): its host, this port.
        std::uint16_t asked_port = 0;
        if (!split_address(asked, h, asked_port)) return false;
    } else {
        h = host.text;
    }
    if (!split_address(join_address(h, static_cast<std::uint16_t>(port.integer)), h, p)) return false;
    address = join_address(h, p);
    return true;
}

}  // namespace

bool parse_cluster_slots(const RedisReply& reply, const std::string& asked, std::vector<SlotRange>& ranges,
                         std::string& error) {
    ranges.clear();
    if (reply.type != RedisReply::Type::array) {
        error = "the reply is not an array";
        return false;
    }
    if (reply.elements.size() > cluster_slots) {
        error = "more ranges than slots";
        return false;
    }
    std::array<bool, cluster_slots> seen{};
    for (std::size_t i = 0; i < reply.elements.size(); ++i) {
        const auto& entry = reply.elements[i];
        const std::string where = "range " + std::to_string(i + 1);
        if (entry.type != RedisReply::Type::array || entry.elements.size() < 3 ||
            entry.elements[0].type != RedisReply::Type::integer || entry.elements[1].type != RedisReply::Type::integer) {
            error = where + " is not [first, last, master, replicas...]";
            return false;
        }
        const auto first = entry.elements[0].integer;
        const auto last = entry.elements[1].integer;
        if (first < 0 || last < first || last >= static_cast<std::int64_t>(cluster_slots)) {
            error = where + " has slots outside 0..16383";
            return false;
        }
        SlotRange range;
        range.first = static_cast<std::uint16_t>(first);
        range.last = static_cast<std::uint16_t>(last);
        if (!read_node(entry.elements[2], asked, range.master)) {
            error = where + " names no valid master";
            return false;
        }
        for (std::size_t r = 3; r < entry.elements.size(); ++r) {
            std::string replica;
            if (read_node(entry.elements[r], asked, replica)) range.replicas.push_back(std::move(replica));
        }
        for (auto s = first; s <= last; ++s) {
            if (seen[static_cast<std::size_t>(s)]) {
                error = "slot " + std::to_string(s) + " is in two ranges";
                return false;
            }
            seen[static_cast<std::size_t>(s)] = true;
        }
        ranges.push_back(std::move(range));
    }
    return true;
}

bool parse_port(const std::string& text, std::uint16_t& port) {
    if (text.empty() || text.size() > 5) return false;
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc{} || end != text.data() + text.size() || value == 0 || value > 65535) return false;
    port = static_cast<std::uint16_t>(value);
    return true;
}

bool acceptable_host(const std::string& host) {
    if (host.empty() || host.size() > 253) return false;
    boost::system::error_code ec;
    boost::asio::ip::make_address(host, ec);
    return !ec || config::is_valid_host_name(host);
}

bool parse_switch_master(const std::string& message, const std::string& master_name, SwitchMaster& out) {
    std::istringstream words(message);
    std::string name, old_host, old_port, new_host, new_port, extra;
    if (!(words >> name >> old_host >> old_port >> new_host >> new_port) || (words >> extra)) return false;
    if (name != master_name || !acceptable_host(new_host)) return false;
    std::uint16_t port = 0;
    if (!parse_port(new_port, port)) return false;
    out = SwitchMaster{new_host, port};
    return true;
}

namespace {

std::vector<std::string> words_of(const std::string& message, std::size_t most) {
    std::vector<std::string> words;
    std::istringstream in(message);
    std::string word;
    while (words.size() <= most && in >> word) words.push_back(word);
    return words;
}

}  // namespace

bool parse_promoted_replica(const std::string& message, const std::string& master_name, SwitchMaster& out) {
    const auto w = words_of(message, 8);
    if (w.size() != 8 || w[0] != "slave" || w[4] != "@" || w[5] != master_name) return false;
    std::uint16_t port = 0;
    if (!acceptable_host(w[2]) || !parse_port(w[3], port)) return false;
    out = SwitchMaster{w[2], port};
    return true;
}

bool is_about_master(const std::string& message, const std::string& master_name) {
    const auto w = words_of(message, 5);
    return w.size() >= 4 && w[0] == "master" && w[1] == master_name;
}

}  // namespace sluice::redis
