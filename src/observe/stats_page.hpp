// The /stats page: one self-contained HTML document (no external assets) that polls
// /stats.json every second and shows per-route requests/s, limited/s and limited %.
#pragma once

#include <string_view>

namespace sluice::observe {

extern const std::string_view stats_page_html;

}  // namespace sluice::observe
