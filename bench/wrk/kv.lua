-- wrk script for bench/http.py: PUTs or GETs of random keys among the preloaded ones,
-- over rkv's REST API ("rest") or etcd's JSON gateway ("etcd").
-- Configured by environment variables (setup() cannot see wrk's script arguments):
--   BENCH_OP      put | get
--   BENCH_API     rest | etcd
--   BENCH_PATH    rest: key path prefix ("/v1/kv/"); etcd: "/v3/kv/put" or "/v3/kv/range"
--   BENCH_EXTRA   rest GET: query string ("?consistency=stale");
--                 etcd range: extra JSON members (',"serializable":true')
--   BENCH_PREFIX  key prefix; keys are PREFIX .. %06d
--   BENCH_KEYS    the key space: each request picks a random key among this many
--   BENCH_VALUE   the value written by PUT (printable ASCII)
--   BENCH_HOSTS   "host:port,host:port": thread i connects to host i mod n
--   BENCH_AUTH    an Authorization header's value sent with every request ("": none)
-- done() prints one line "BENCH_JSON {...}" with the counts and latency percentiles (us).

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

local function b64(s)
  local out = {}
  for i = 1, #s, 3 do
    local a, b, c = s:byte(i, i + 2)
    local n = a * 65536 + (b or 0) * 256 + (c or 0)
    local chars = {}
    for j = 1, 4 do
      local k = math.floor(n / 64 ^ (4 - j)) % 64
      chars[j] = B64:sub(k + 1, k + 1)
    end
    if not b then chars[3] = "=" end
    if not c then chars[4] = "=" end
    out[#out + 1] = table.concat(chars)
  end
  return table.concat(out)
end

local op = os.getenv("BENCH_OP")
local api = os.getenv("BENCH_API")
local path = os.getenv("BENCH_PATH")
local extra = os.getenv("BENCH_EXTRA") or ""
local prefix = os.getenv("BENCH_PREFIX")
local nkeys = tonumber(os.getenv("BENCH_KEYS") or "0")
local value = os.getenv("BENCH_VALUE") or ""
local value_b64 = b64(value)
local json_headers = { ["Content-Type"] = "application/json" }
local auth = os.getenv("BENCH_AUTH") or ""
if auth ~= "" then
  -- wrk.format uses wrk.headers for the requests built without headers (all REST ones).
  wrk.headers["Authorization"] = auth
end

-- Main state: spread the threads over the hosts, keep them for done().
local threads = {}

function setup(thread)
  local hosts = {}
  for h in string.gmatch(os.getenv("BENCH_HOSTS"), "[^,]+") do
    hosts[#hosts + 1] = h
  end
  local host, port = hosts[#threads % #hosts + 1]:match("^(.+):(%d+)$")
  thread.addr = wrk.lookup(host, port)[1]
  thread:set("id", #threads)
  threads[#threads + 1] = thread
end

-- Thread states.
local gets = {}
bad = 0      -- responses outside 2xx (wrk itself only counts >= 400)
missing = 0  -- etcd range answers without "kvs": the key was not found

local function get_request(key)
  if api == "etcd" then
    return wrk.format("POST", path, json_headers, '{"key":"' .. b64(key) .. '"' .. extra .. "}")
  end
  return wrk.format("GET", path .. key .. extra)
end

function init(args)
  math.randomseed(os.time() * 1000 + id * 7919) -- each thread its own sequence
  if op == "get" then
    for i = 0, nkeys - 1 do
      gets[i + 1] = get_request(prefix .. string.format("%06d", i))
    end
  end
end

function request()
  local i = math.random(0, nkeys - 1)
  if op == "get" then
    return gets[i + 1]
  end
  local key = prefix .. string.format("%06d", i)
  if api == "etcd" then
    local body = '{"key":"' .. b64(key) .. '","value":"' .. value_b64 .. '"}'
    return wrk.format("POST", path, json_headers, body)
  end
  return wrk.format("PUT", path .. key, nil, value)
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    bad = bad + 1
  elseif api == "etcd" and op == "get" and not body:find('"kvs"', 1, true) then
    missing = missing + 1
  end
end

function done(summary, latency, requests)
  local bad_total, missing_total = 0, 0
  for _, thread in ipairs(threads) do
    bad_total = bad_total + thread:get("bad")
    missing_total = missing_total + thread:get("missing")
  end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,'
      .. '"timeout":%d,"status_4xx_5xx":%d,"non_2xx":%d,"missing":%d,'
      .. '"p50_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.timeout, e.status,
    bad_total, missing_total, latency:percentile(50), latency:percentile(99), latency.max,
    latency.mean))
end
