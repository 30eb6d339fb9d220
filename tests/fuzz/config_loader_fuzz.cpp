// libFuzzer target: the config loader, YAML text to a validated Config or diagnostics.
// Sources: src/config/*.cpp src/net/cidr.cpp (links yaml-cpp, spdlog, fmt)
//
// Checked: it returns (no hang: run with -timeout; no crash, no leak), and either a config
// or at least one error, never both.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view yaml(reinterpret_cast<const char*>(data), size);
    const auto result = sluice::config::load_string(yaml, "fuzz.yaml");
    bool error = false;
    for (const auto& d : result.diagnostics) error = error || !d.warning;
    if (static_cast<bool>(result.config) == error) __builtin_trap();
    return 0;
}
