-- wrk script: a fresh C-102 agent run per request (a new Idempotency-Key each time).
--   wrk -t1 -c1 -d10s --latency -s tests/load/run.lua http://127.0.0.1:8080
-- The API key is the demo tenant's; set CASEOPS_BENCH_API_KEY to use another.
local counter = 0
local key = os.getenv("CASEOPS_BENCH_API_KEY") or "dev-key-tenant-demo"
local prefix = string.format("wrk-%d-%d", os.time(), math.random(1, 1e9))

function setup(thread)
  counter = counter + 1
  thread:set("id", counter)
end

function init(args)
  n = 0
end

request = function()
  n = n + 1
  return wrk.format("POST", "/v1/cases/C-102/agent-runs", {
    ["Content-Type"] = "application/json",
    ["x-api-key"] = key,
    ["Idempotency-Key"] = string.format("%s-%d-%d", prefix, id, n),
  }, '{"goal":"Check whether claim case C-102 holds every required document."}')
end

response = function(status)
  if status ~= 200 and status ~= 201 then
    io.stderr:write("status " .. status .. "\n")
  end
end
