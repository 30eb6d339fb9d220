// Beast 1.81's request parser as the reference for parse_request_head (which replaced it):
// what it made of a head, and whether it agrees with what parse_request_head made of the
// same bytes. Header-only: the unit tests and the request_head fuzz target include it.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/parser.hpp>

#include "http/field_list.hpp"
#include "http/field_text.hpp"

namespace sluice::testing {

struct BeastRequest {
    bool ok = false;
    boost::beast::http::verb method = boost::beast::http::verb::unknown;
    std::string method_string;
    std::string target;
    unsigned version = 0;
    bool keep_alive = false;
    std::size_t connections = 0;  // Connection fields
    std::vector<std::tuple<boost::beast::http::field, std::string, std::string>> fields;
};

// What Beast's parser made of `head`, as read_request_head used it (header only, no body limit).
inline BeastRequest beast_request(std::string_view head) {
    namespace bhttp = boost::beast::http;
    BeastRequest out;
    bhttp::request_parser<bhttp::empty_body> parser;
    parser.header_limit(static_cast<std::uint32_t>(head.size() + 4));
    parser.body_limit(boost::none);
    boost::beast::error_code ec;
    try {
        parser.put(boost::asio::buffer(head.data(), head.size()), ec);
    } catch (const std::exception&) {  // (a name or value over 64 KiB: Beast throws)
        return out;
    }
    if (ec || !parser.is_header_done()) return out;
    const auto& req = parser.get();
    out.ok = true;
    out.method = req.method();
    out.method_string = std::string(req.method_string());
    out.target = std::string(req.target());
    out.version = req.version();
    out.keep_alive = req.keep_alive();
    for (const auto& f : req) {
        out.fields.emplace_back(f.name(), std::string(f.name_string()), std::string(f.value()));
        if (f.name() == bhttp::field::connection) ++out.connections;
    }
    return out;
}

// Fields in the order Beast's container keeps them: each after the last one of the same name
// (compared ignoring case), else at the end. Beast moved a repeated field up to the others of
// its name; parse_request_head keeps the order received.
template <class Field>
std::vector<Field> beast_order(const std::vector<Field>& received, std::string_view (*name_of)(const Field&)) {
    std::vector<Field> out;
    for (const auto& f : received) {
        auto at = out.end();
        for (auto it = out.begin(); it != out.end(); ++it)
            if (http::iequals_ascii(name_of(*it), name_of(f))) at = it + 1;
        out.insert(at, f);
    }
    return out;
}

// Whether parse_request_head's verdict on `head` (`problem`, `req`) is Beast's: both refuse,
// or both accept with the same method, target, version and fields (code, name and value, in
// Beast's order: beast_order). keep-alive is compared where at most one Connection field
// came: Beast read only the first, parse_request_head reads them all (a close in any closes).
inline bool same_as_beast(const BeastRequest& beast, std::string_view problem, const http::ClientRequest& req) {
    if (beast.ok != problem.empty()) return false;
    if (!beast.ok) return true;
    if (beast.method != req.method() || beast.method_string != req.method_string() || beast.target != req.target() ||
        beast.version != req.version())
        return false;
    if (beast.connections <= 1 && beast.keep_alive != req.keep_alive()) return false;
    const std::vector<http::FieldLine> received(req.begin(), req.end());
    const auto ours = beast_order<http::FieldLine>(received, [](const http::FieldLine& f) { return f.name_string(); });
    if (beast.fields.size() != ours.size()) return false;
    for (std::size_t i = 0; i < ours.size(); ++i) {
        const auto& [id, name, value] = beast.fields[i];
        if (id != ours[i].name() || name != ours[i].name_string() || value != ours[i].value()) return false;
    }
    return true;
}

}  // namespace sluice::testing
