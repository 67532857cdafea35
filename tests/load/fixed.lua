-- wrk script: sends, as it is, the request `caseops bench --print-request` wrote
-- (`mcp-call`: a `tools/call` with a valid task token; `replay`: one stored run).
--   caseops bench --scenario mcp-call --print-request > /tmp/mcp-call.http
--   CASEOPS_WRK_REQUEST=/tmp/mcp-call.http \
--     wrk -t2 -c32 -d10s --latency -s tests/load/fixed.lua http://127.0.0.1:8081
-- wrk counts non-2xx answers; a tool error inside a 200 is not counted, so
-- tests/load/series.sh sends the file once with curl and checks the reply first.
local path = os.getenv("CASEOPS_WRK_REQUEST")
if not path then
  error("set CASEOPS_WRK_REQUEST to a file that `caseops bench --print-request` wrote")
end
local file = assert(io.open(path, "rb"))
local raw = file:read("*a")
file:close()

request = function()
  return raw
end
