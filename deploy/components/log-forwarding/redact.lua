--[[
Secret redaction for fluent-bit's lua filter: defense in depth behind the controllers' own
redaction (libs/common/src/trainerop_common/redaction.py), with the same two rules:

  * an env-style entry {name = "API_TOKEN", value = "..."} whose name contains token, key,
    secret, password or passwd (any case) has its string value replaced by "***";
  * in every string, NAME=value, NAME: value and "NAME": "value" where NAME contains one of
    those words has the value replaced by "***".

Both rules apply recursively through nested maps and arrays; map keys, numbers and booleans
are left alone. Lua patterns have no alternation, so the Python regular expression
    (?P<name>\b[A-Za-z0-9_.-]*?(?:token|key|secret|password|passwd)[A-Za-z0-9_.-]*)
    (?P<sep>["']?\s*[=:]\s*)(?P<quote>["']?)(?P<value>[^\s"',}]+)
is implemented as a scan over runs of name characters [A-Za-z0-9_.-]: a run that contains a
secret word and is followed by a separator and a value has that value masked. On ASCII text the
two agree exactly (tests/unit/test_logforward.py checks it on generated text). Beyond ASCII, Lua
works on bytes: a name run right after a non-ASCII letter ("éAPI_TOKEN=v") is masked here though
Python's \b sees no word boundary there (masking more), and a non-ASCII space (U+00A0...)
between NAME and "=" is a separator to Python's \s but not to Lua's %s (masking less; the
controllers print ASCII separators, and they mask at the source anyway).

fluent-bit contract: redact_record(tag, timestamp, record) returns
    0, timestamp, record   when nothing was masked (fluent-bit keeps the original record
                           untouched, so types survive: an empty array stays an array),
    2, timestamp, record   when something was masked (the record is replaced, the
                           timestamp kept).
]]

local MASK = "***"
local SECRET_WORDS = { "token", "key", "secret", "password", "passwd" }

local function is_secret_name(name)
  local lower = string.lower(name)
  for _, word in ipairs(SECRET_WORDS) do
    if string.find(lower, word, 1, true) then
      return true
    end
  end
  return false
end

-- Returns the masked text and whether anything was masked.
local function redact_text(text)
  local out = {}
  local pos = 1
  local changed = false
  while true do
    local s, e = string.find(text, "[%w_%.%-]+", pos)
    if not s then
      break
    end
    local value_start, value_end
    if is_secret_name(string.sub(text, s, e)) then
      local _, sep_end = string.find(text, "^[\"']?%s*[=:]%s*", e + 1)
      if sep_end then
        local quote_end = sep_end
        if string.find(text, "^[\"']", sep_end + 1) then
          quote_end = sep_end + 1
        end
        value_start, value_end = string.find(text, "^[^%s\"',}]+", quote_end + 1)
      end
    end
    if value_start then
      out[#out + 1] = string.sub(text, pos, value_start - 1)
      out[#out + 1] = MASK
      pos = value_end + 1
      changed = true
    else
      out[#out + 1] = string.sub(text, pos, e)
      pos = e + 1
    end
  end
  if not changed then
    return text, false
  end
  out[#out + 1] = string.sub(text, pos)
  return table.concat(out), true
end

-- Masks in place; returns the (possibly new) value and whether anything was masked.
local function redact_value(value)
  local kind = type(value)
  if kind == "string" then
    return redact_text(value)
  end
  if kind ~= "table" then
    return value, false
  end
  local name = value["name"]
  local secret_entry = type(name) == "string" and is_secret_name(name)
  local changed = false
  for key, item in pairs(value) do
    local new, masked
    if key == "value" and secret_entry and type(item) == "string" then
      new, masked = MASK, item ~= MASK
    else
      new, masked = redact_value(item)
    end
    if masked then
      value[key] = new -- assigning to an existing key is allowed during pairs()
      changed = true
    end
  end
  return value, changed
end

function redact_record(tag, timestamp, record)
  local _, changed = redact_value(record)
  if changed then
    return 2, timestamp, record
  end
  return 0, timestamp, record
end
