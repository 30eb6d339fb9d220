// The admin query parser: table of inputs and what each gives.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "observe/query_string.hpp"

using sluice::observe::parse_query;

namespace {

std::vector<std::string> flat(const std::string& query) {
    std::string error;
    auto params = parse_query(query, error);
    INFO(error);
    REQUIRE(params);
    std::vector<std::string> out;
    for (const auto& p : *params) out.push_back(p.name + "=" + p.value);
    return out;
}

std::string error_of(const std::string& query) {
    std::string error;
    CHECK_FALSE(parse_query(query, error));
    return error;
}

}  // namespace

TEST_CASE("query strings: decoded pairs", "[admin]") {
    CHECK(flat("").empty());
    CHECK(flat("route=api") == std::vector<std::string>{"route=api"});
    CHECK(flat("route=api&client=2001%3Adb8%3A%3A1") == std::vector<std::string>{"route=api", "client=2001:db8::1"});
    CHECK(flat("header.X-Api-Key=a+b%2Bc") == std::vector<std::string>{"header.X-Api-Key=a b+c"});
    CHECK(flat("a&b=") == std::vector<std::string>{"a=", "b="});
    CHECK(flat("a=1&&b=2&") == std::vector<std::string>{"a=1", "b=2"});
    CHECK(flat("a=x=y") == std::vector<std::string>{"a=x=y"});
    CHECK(flat("a=%e2%82%ac") == std::vector<std::string>{"a=\xe2\x82\xac"});
    CHECK(flat("a=1&a=2") == std::vector<std::string>{"a=1", "a=2"});  // repeats are the caller's to refuse
}

TEST_CASE("query strings: hostile ones are refused", "[admin]") {
    CHECK(error_of("a=%") == "malformed percent-escape in the query");
    CHECK(error_of("a=%4") == "malformed percent-escape in the query");
    CHECK(error_of("a=%zz") == "malformed percent-escape in the query");
    CHECK(error_of("%00=a") == "control character in a query parameter's name");
    CHECK(error_of("a%0d%0a=1") == "control character in a query parameter's name");
    CHECK(error_of("\x7f=1") == "control character in a query parameter's name");
    // A value may hold any byte: key values can (a tab in a header, %00 in a query parameter).
    CHECK(flat("a=%00&b=x%09y&c=%0d%0a") == std::vector<std::string>{std::string("a=\0", 3), "b=x\ty", "c=\r\n"});
    CHECK(error_of("=1") == "query parameter without a name");
    CHECK(error_of("%41=%") == "malformed percent-escape in the query");
    std::string many;
    for (int i = 0; i < 65; ++i) many += "p" + std::to_string(i) + "=1&";
    CHECK(error_of(many) == "more than 64 query parameters");
    CHECK(error_of("a=" + std::string(4097, 'x')) == "query part longer than 4096 bytes");
    CHECK(flat("a=" + std::string(4096, 'x')).size() == 1);
}
