# The fields a browser sends with a page request besides Host, as wrk arguments (sourced by
# run.sh and instructions.sh): 12 fields with Host, about 560 bytes of head, where wrk's own
# requests carry Host alone.
# shellcheck disable=SC2034
BROWSER_HEADERS=(-H "User-Agent: Mozilla/5.0 (X11; Linux x86_64; rv:120.0) Gecko/20100101 Firefox/120.0"
  -H "Accept: text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
  -H "Accept-Language: en-US,en;q=0.5" -H "Accept-Encoding: gzip, deflate, br"
  -H "Referer: https://example.com/page" -H "Cookie: session=abc123def456; theme=dark"
  -H "Upgrade-Insecure-Requests: 1" -H "Sec-Fetch-Dest: document" -H "Sec-Fetch-Mode: navigate"
  -H "Sec-Fetch-Site: same-origin" -H "Cache-Control: max-age=0")
