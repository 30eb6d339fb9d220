// docs/configuration.md names exactly the keys the loader knows: a key added to the loader
// without a row there, or a row left behind for a key that went, fails here.
#include <catch2/catch.hpp>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "config/loader.hpp"

TEST_CASE("the configuration reference names every key the loader knows, and no other", "[config]") {
    std::ifstream file(SLUICE_SOURCE_DIR "/docs/configuration.md");
    REQUIRE(file);
    std::stringstream text;
    text << file.rdbuf();
    // Rows start with the key in backquotes: | `server.listen` | ...
    std::set<std::string> documented;
    const std::regex row(R"(^\| `([^`]+)` \|)");
    std::string line;
    while (std::getline(text, line)) {
        std::smatch m;
        if (std::regex_search(line, m, row)) documented.insert(m[1]);
    }
    std::set<std::string> known;
    for (const auto& [section, keys] : sluice::config::known_keys())
        for (const auto key : keys) known.insert(section.empty() ? std::string(key) : section + "." + std::string(key));
    for (const auto& key : known) {
        INFO("known to the loader, missing from docs/configuration.md: " << key);
        CHECK(documented.count(key) == 1);
    }
    for (const auto& key : documented) {
        INFO("in docs/configuration.md, unknown to the loader: " << key);
        CHECK(known.count(key) == 1);
    }
}
