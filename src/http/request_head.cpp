#include "http/request_head.hpp"

#include <string>
#include <string_view>

#include <boost/beast/core/error.hpp>
#include <boost/asio/buffer.hpp>

#include "http/head_scan.hpp"
#include "http/header_rules.hpp"

namespace sluice::http {
namespace {

namespace bhttp = boost::beast::http;


// The request line's method and target for the access line, from a head Beast did not parse.
void describe_raw_request(std::string_view head, observe::AccessRecord& rec) {
    auto line = head.substr(0, head.find('\r'));
    auto printable = [](std::string_view s) {
        std::string out;
        for (char c : s.substr(0, 200)) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
        return out;
    };
    auto sp1 = line.find(' ');
    rec.method = printable(line.substr(0, sp1));
    if (sp1 == std::string_view::npos) {
        rec.target.clear();
    } else {
        auto rest = line.substr(sp1 + 1);
        rec.target = printable(rest.substr(0, rest.find(' ')));
    }
    // (assign(1, '-'), not = "-": GCC 12 warns falsely of an overlapping copy, PR 105329.)
    if (rec.method.empty()) rec.method.assign(1, '-');
    if (rec.target.empty()) rec.target.assign(1, '-');
}

}  // namespace

std::optional<std::string_view> find_field(const bhttp::fields& fields, bhttp::field name) {
    for (const auto& f : fields)
        if (f.name() == name) return sv(f.value());
    return std::nullopt;
}

RequestHead read_request_head(std::span<char> bytes, const config::ServerConfig& server, RequestParser& parser,
                              observe::AccessRecord& rec) {
    RequestHead out;
    const std::string_view raw(bytes.data(), bytes.size());
    auto refuse = [&out](unsigned status, std::string_view problem) {
        out.refusal = local_problem(status, problem);
        return std::move(out);
    };
    if (auto problem = check_request_head(raw); !problem.empty()) {
        describe_raw_request(raw, rec);
        return refuse(400, problem);
    }
    if (count_field_lines(raw) > max_field_lines) {
        describe_raw_request(raw, rec);
        return refuse(431, "too many header fields");
    }
    if (const auto at = request_version_offset(raw); at != std::string_view::npos) {
        if (raw[at] != '1') {
            describe_raw_request(raw, rec);
            rec.version = 11;
            return refuse(505, "only HTTP/1.x is supported");
        }
        // HTTP/1.2 and up are read as HTTP/1.1: the minor digit is rewritten in place.
        if (raw[at + 2] > '1') bytes[at + 2] = '1';
    }

    parser.header_limit(static_cast<std::uint32_t>(server.max_header_bytes + 4));
    parser.body_limit(boost::none);  // the body is BodyReader's
    boost::beast::error_code ec;
    parser.put(boost::asio::buffer(raw.data(), raw.size()), ec);
    if (ec || !parser.is_header_done()) {
        describe_raw_request(raw, rec);
        return refuse(400, ec ? ec.message() : std::string("incomplete request head"));
    }
    out.parsed = true;
    auto& req = parser.get();
    rec.method = std::string(sv(req.method_string()));
    rec.target = std::string(sv(req.target()));
    rec.version = req.version();

    const auto framing = check_request_framing(req.base(), req.version());
    if (!framing.ok()) return refuse(framing.status, framing.problem);
    BodyLimits limits;
    limits.max_body = server.max_body_bytes;
    limits.max_chunk_line = max_chunk_line;
    limits.max_trailer_bytes = server.max_header_bytes;
    limits.max_trailer_fields = max_field_lines;
    using Body = Framing::Body;
    out.body = framing.body == Body::length    ? BodyReader::length(framing.length, limits)
               : framing.body == Body::chunked ? BodyReader::chunked(limits)
                                               : BodyReader();
    out.length = framing.length;
    out.expects = find_field(req, bhttp::field::expect).has_value();
    if (out.body.state() == BodyReader::State::too_large) return refuse(413, "request body larger than max_body_bytes");

    // One reading of the target for routing, `path` keys and forwarding: the normalised path
    // (and the query as it came) is what the upstream gets. An absolute-form authority,
    // validated, replaces Host (RFC 9112 3.2.2); a Host field must be valid.
    out.target = parse_request_target(sv(req.method_string()), sv(req.target()));
    if (!out.target.ok()) return refuse(400, out.target.problem);
    if (!out.target.authority.empty()) {
        req.set(bhttp::field::host, out.target.authority);
        rec.host = std::string(out.target.authority);
    } else if (const auto host = find_field(req, bhttp::field::host)) {
        if (const auto problem = host_problem(*host); !problem.empty()) return refuse(400, problem);
        rec.host = std::string(*host);
    }
    req.target(out.target.origin_form());
    return out;
}

}  // namespace sluice::http
