//! The Lua scripts. Each store write is one script, so it is atomic: Redis runs a script to
//! the end without interleaving other commands, and every script checks everything it can
//! refuse (missing, closed, foreign) before its first write, so a refused call writes
//! nothing. Under `maxmemory`, Redis refuses only a script's *first* write, never a later
//! one, so an out-of-memory script also writes nothing (D15).
//!
//! Calling convention: `ARGV[1]` is the key prefix and `ARGV[2]` the wake-up channel; the
//! operation's own arguments follow. Replies are small arrays or integers whose first
//! element is a status: `-1` not found, `-2` closed, `0`/`1` as stated per script.
//!
//! Scripts derive key names from the prefix (a stream is found from its id through
//! `P:streamidx:<id>`), so they need one primary holding every key: standalone Redis or a
//! Sentinel-managed primary, not Redis Cluster (see the crate docs).

use std::sync::LazyLock;

use redis::Script;

/// Key builders and shared steps, prepended to every script. Must build the same names as
/// `keys.rs`.
macro_rules! prelude {
    () => {
        r#"
local P, CHANNEL = ARGV[1], ARGV[2]
local function tagged(tag, kind, id) return P .. ':{' .. tag .. '}:' .. kind .. ':' .. id end
local function session_key(sid) return P .. ':{s:' .. sid .. '}:session' end
local function session_set(sid, kind) return P .. ':{s:' .. sid .. '}:' .. kind end
local function index_key(id) return P .. ':streamidx:' .. id end
local function record_key(kind, key) return P .. ':record:' .. kind .. ':' .. key end
local function records_index(kind) return P .. ':records:' .. kind end
local function records_expiring(kind) return P .. ':records:' .. kind .. ':expiring' end

-- A stream as a script works on it: its id, tag, keys, owner and state. The state fields
-- change in the script's memory (`append_event`, `close_stream`) and reach Redis in one
-- write at the end (`save_stream`).
--
-- Where its events are: a stream created under layout 2 (`inline`) keeps them in its meta
-- hash, event `n` as field `n`, so an append is part of the one `HSET` that saves the
-- stream; an older stream keeps them in a Redis stream (`events`), entry `n-0`, field `d`.
local function stream_tag(id, session)
  if session ~= '' then return 's:' .. session end
  return 't:' .. id
end

local function stream(id, tag, principal, session)
  return { id = id, tag = tag, meta = tagged(tag, 'stream', id), events = tagged(tag, 'events', id),
    principal = principal, session = session, pending = {}, dropped = {}, stored_last = 0 }
end

-- Fields of hash `key` set, or deleted, a thousand at a time (Lua's `unpack` has a limit).
local function hash_chunks(command, key, fields)
  for i = 1, #fields, 1000 do
    redis.call(command, key, unpack(fields, i, math.min(i + 999, #fields)))
  end
end

-- A live stream, nil if unknown or if its session has ended.
local function find(id)
  local tag = redis.call('GET', index_key(id))
  if not tag then tag = 't:' .. id end
  local meta = tagged(tag, 'stream', id)
  local f = redis.call('HMGET', meta, 'principal', 'session', 'closed', 'first_seq', 'last_seq', 'last_event_ms', 'inline')
  if not f[1] then return nil end
  local session = f[2] or ''
  if session ~= '' and redis.call('EXISTS', session_key(session)) == 0 then return nil end
  local s = stream(id, tag, f[1], session)
  s.closed, s.first_seq, s.last_seq, s.last_event_ms = f[3] == '1', tonumber(f[4]), tonumber(f[5]), f[6]
  s.inline, s.stored_last = f[7] == '1', s.last_seq
  return s
end

-- A stream this script creates (the caller checked no stream has its id): nothing is
-- written before `save_stream`. `inline` (`'1'`): its events go in its meta hash.
local function new_stream(id, principal, session, inline)
  local s = stream(id, stream_tag(id, session), principal, session)
  s.new, s.closed, s.first_seq, s.last_seq, s.inline = true, false, 1, 0, inline == '1'
  return s
end

-- Append one event to live stream s (the caller checked it is open); trims the log to
-- `max` events (0: unbounded). Returns the event's sequence. An inline stream's event and
-- the fields its trim drops are written by `save_stream`.
local function append_event(s, data, max)
  local seq = s.last_seq + 1
  s.last_seq = seq
  if s.inline then
    s.pending[#s.pending + 1] = { seq, data }
  else
    redis.call('XADD', s.events, string.format('%d-0', seq), 'd', data)
  end
  if max > 0 and seq - max + 1 > s.first_seq then
    local first = seq - max + 1
    if s.inline then
      -- Only fields already in Redis are deleted; pending ones below `first` are skipped.
      -- At most 10,000 per append, the newest, so that a `max` lowered under a long stream
      -- cannot hold the server for long: older ones stay, unread, until the stream goes.
      local last_dropped = math.min(first - 1, s.stored_last)
      for q = math.max(s.first_seq, last_dropped - 9999), last_dropped do s.dropped[#s.dropped + 1] = string.format('%d', q) end
    end
    s.first_seq = first
    if not s.inline then redis.call('XTRIM', s.events, 'MINID', string.format('%d-0', s.first_seq)) end
  end
  return seq
end

-- Close live stream s (the caller checked it is open) and index it as finished; entries
-- of the finished index older than `sweep` go.
local function close_stream(s, now, sweep)
  s.closed = true
  -- A new stream is never put in its session's open set.
  if s.session ~= '' and not s.new then redis.call('SREM', session_set(s.session, 'open'), s.id) end
  redis.call('ZADD', P .. ':finished', now, s.id)
  redis.call('ZREMRANGEBYSCORE', P .. ':finished', '-inf', '(' .. sweep)
end

-- Write stream s once this script is done with it: its state, in one HSET, and its
-- expiry: another idle TTL, or the closed TTL if it is a closed sessionless stream. A new
-- stream is indexed under its session; any other one has its tails woken everywhere (nobody
-- can be waiting on a stream this script created).
local function save_stream(s, now, idle_ttl, closed_ttl)
  local ttl = idle_ttl
  if s.session == '' and s.closed then ttl = closed_ttl end
  local state = { 'first_seq', string.format('%d', s.first_seq), 'last_seq', string.format('%d', s.last_seq),
    'closed', s.closed and '1' or '0', 'last_event_ms', now }
  if s.new then
    for _, field in ipairs({ 'principal', s.principal, 'session', s.session }) do state[#state + 1] = field end
    if s.inline then
      state[#state + 1] = 'inline'
      state[#state + 1] = '1'
    end
  end
  for _, event in ipairs(s.pending) do
    if event[1] >= s.first_seq then
      state[#state + 1] = string.format('%d', event[1])
      state[#state + 1] = event[2]
    end
  end
  hash_chunks('HSET', s.meta, state)
  if #s.dropped > 0 then hash_chunks('HDEL', s.meta, s.dropped) end
  redis.call('PEXPIRE', s.meta, ttl)
  if s.session ~= '' then
    if s.new then
      redis.call('SET', index_key(s.id), s.tag, 'PX', ttl)
      redis.call('SADD', session_set(s.session, 'streams'), s.id)
      redis.call('PEXPIRE', session_set(s.session, 'streams'), ttl)
      if not s.closed then
        redis.call('SADD', session_set(s.session, 'open'), s.id)
        redis.call('PEXPIRE', session_set(s.session, 'open'), ttl)
      end
    else
      redis.call('PEXPIRE', index_key(s.id), ttl)
    end
  end
  if s.last_seq > 0 and not s.inline then redis.call('PEXPIRE', s.events, ttl) end
  if not s.new then redis.call('PUBLISH', CHANNEL, 'a:' .. s.id) end
end

-- Whether a stream with this id exists, live or not, under any tag it could have.
local function stream_exists(id, session)
  return redis.call('EXISTS', index_key(id), tagged('t:' .. id, 'stream', id), tagged(stream_tag(id, session), 'stream', id)) > 0
end

-- The version of the unexpired record, or false; then whether its hash (expired or not)
-- has an expiry.
local function record_version(kind, key, now)
  local current = redis.call('HMGET', record_key(kind, key), 'version', 'expires_at')
  local expiring = current[2] ~= false
  if current[1] and (not expiring or tonumber(current[2]) > tonumber(now)) then return current[1], expiring end
  return false, expiring
end

-- Write record `version` of a key whose hash, as the script last left it, is `expiring`
-- (has an expiry), index it, and set its Redis expiry. The hash holds only `version`,
-- `value` and `expires_at`, so an earlier record's hash (expired, not dropped yet) needs no
-- delete first.
local function write_record(kind, key, value, expires_at, version, expiring)
  local rkey = record_key(kind, key)
  if expires_at ~= '' then
    redis.call('HSET', rkey, 'version', version, 'value', value, 'expires_at', expires_at)
  else
    redis.call('HSET', rkey, 'version', version, 'value', value)
    if expiring then redis.call('HDEL', rkey, 'expires_at') end
  end
  redis.call('ZADD', records_index(kind), 0, key)
  if expires_at ~= '' then
    redis.call('ZADD', records_expiring(kind), expires_at, key)
    -- Redis drops the record by itself (at once if the time has passed); prune sweeps the
    -- index entries.
    redis.call('PEXPIREAT', rkey, expires_at)
  elseif expiring then
    redis.call('ZREM', records_expiring(kind), key)
    redis.call('PERSIST', rkey)
  end
  -- A key without an expiry that is left in the expiry index (its earlier record expired
  -- and Redis dropped it) is taken out by prune, which finds the record without one.
end

-- The version a write expecting `expected` (`''`: absent) makes of a record whose
-- unexpired version is `live` (false: none; an expired record counts as absent and is
-- replaced at version 1), or false if the expectation does not hold.
local function next_version(live, expected)
  if expected == '' then
    if live then return false end
    return '1'
  end
  if live ~= expected then return false end
  return string.format('%d', tonumber(live) + 1)
end

-- Write a record if `expected` holds against its unexpired state (see `next_version`).
-- Returns the new version (a string, as `HGET` would give it), or 0 if the condition does
-- not hold.
local function put_record(kind, key, value, expires_at, expected, now)
  local live, expiring = record_version(kind, key, now)
  local version = next_version(live, expected)
  if not version then return 0 end
  write_record(kind, key, value, expires_at, version, expiring)
  return version
end

-- Delete one record and its index entries (`expiring`: whether it may be in the expiry
-- index; one that is there without an expiry of its own is prune's, as in `write_record`).
local function delete_record(kind, key, expiring)
  redis.call('DEL', record_key(kind, key))
  redis.call('ZREM', records_index(kind), key)
  if expiring ~= false then redis.call('ZREM', records_expiring(kind), key) end
end

-- Prune's selection, one definition for the scripts that prune and those that count what a
-- prune would remove: a session idle since before `cutoff` is ended (its streams with it),
-- a live stream finished before `cutoff` is deleted by age, and a member of a kind's expiry
-- index due at `now` is judged by `record_due`.
local function idle_before(sid, cutoff)
  local seen = redis.call('ZSCORE', P .. ':sessions', sid)
  return seen and tonumber(seen) < tonumber(cutoff)
end

local function finished_before(s, cutoff)
  return s.closed and tonumber(s.last_event_ms) < tonumber(cutoff)
end

-- Up to `count` members of kind's expiry index due at `now` (their score), from `offset`.
local function due_records(kind, now, offset, count)
  return redis.call('ZRANGEBYSCORE', records_expiring(kind), '-inf', now, 'LIMIT', offset, count)
end

-- What prune does with due member `key`: `'expired'` (its record expired, or Redis dropped
-- it: delete it), `'renewed'` (re-score it at the expiry returned second) or `'kept'` (it
-- has no expiry any more: out of the expiry index only).
local function record_due(kind, key, now)
  local r = redis.call('HMGET', record_key(kind, key), 'version', 'expires_at')
  if r[1] and r[2] and tonumber(r[2]) > now then return 'renewed', r[2] end
  if r[1] and not r[2] then return 'kept' end
  return 'expired'
end

-- Delete a stream's keys and every reference to it.
local function delete_stream(tag, id, session)
  redis.call('DEL', tagged(tag, 'stream', id), tagged(tag, 'events', id))
  if session ~= '' then
    redis.call('DEL', index_key(id))
    redis.call('SREM', session_set(session, 'streams'), id)
    redis.call('SREM', session_set(session, 'open'), id)
  end
  redis.call('ZREM', P .. ':finished', id)
end
"#
    };
}

/// KEYS: the layout key, then the indexes that any data of the prefix leaves (sessions,
/// finished streams, each record kind's). ARGV: the layout a prefix without data gets, and
/// the number of subscribers of the prefix's wake-up channel. Returns the prefix's layout
/// (`layout.rs`), setting it first if there is none: the given one if none of the indexes
/// exists and nobody listens, else `1` (an earlier release wrote data, or is running:
/// this release sets the key before it subscribes).
pub(crate) static LAYOUT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r#"
local found = redis.call('GET', KEYS[1])
if found then return found end
local used = tonumber(ARGV[2])
for i = 2, #KEYS do used = used + redis.call('EXISTS', KEYS[i]) end
local version = ARGV[1]
if used > 0 then version = '1' end
redis.call('SET', KEYS[1], version)
return version
"#,
    )
});

/// ARGV: sid, principal, record JSON, last_seen_ms, standalone stream, now_ms, ttl_ms,
/// sweep cutoff, inline (`1`: new streams keep their events in their meta hash). Returns 1,
/// or 0 if the session or its stream already exists.
pub(crate) static CREATE_SESSION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local sid, principal, ttl = ARGV[3], ARGV[4], ARGV[9]
local key = session_key(sid)
if redis.call('EXISTS', key) == 1 or redis.call('EXISTS', tagged('s:' .. sid, 'stream', ARGV[7])) == 1 then
  return 0
end
redis.call('HSET', key, 'principal', principal, 'record', ARGV[5], 'version', 0)
redis.call('PEXPIRE', key, ttl)
redis.call('ZADD', P .. ':sessions', ARGV[6], sid)
save_stream(new_stream(ARGV[7], principal, sid, ARGV[11]), ARGV[8], ttl, ttl)
-- Index hygiene: a few entries idle past the TTL whose session Redis has expired.
for _, old in ipairs(redis.call('ZRANGEBYSCORE', P .. ':sessions', '-inf', '(' .. ARGV[10], 'LIMIT', 0, 8)) do
  if redis.call('EXISTS', session_key(old)) == 0 then redis.call('ZREM', P .. ':sessions', old) end
end
return 1
"#
    ))
});

/// KEYS: session. ARGV: sid, principal, expected version, new record JSON, last_seen_ms,
/// ttl_ms. Returns 1 written, 0 version changed meanwhile (retry), -1 not found.
pub(crate) static UPDATE_SESSION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local sid, ttl = ARGV[3], ARGV[8]
local key = KEYS[#KEYS]
local current = redis.call('HMGET', key, 'principal', 'version')
if current[1] ~= ARGV[4] then return -1 end
if current[2] ~= ARGV[5] then return 0 end
redis.call('HSET', key, 'record', ARGV[6])
redis.call('HINCRBY', key, 'version', 1)
redis.call('ZADD', P .. ':sessions', ARGV[7], sid)
-- The session is in use: it and its open streams live another TTL.
redis.call('PEXPIRE', key, ttl)
redis.call('PEXPIRE', session_set(sid, 'streams'), ttl)
redis.call('PEXPIRE', session_set(sid, 'open'), ttl)
for _, id in ipairs(redis.call('SMEMBERS', session_set(sid, 'open'))) do
  redis.call('PEXPIRE', tagged('s:' .. sid, 'stream', id), ttl)
  redis.call('PEXPIRE', tagged('s:' .. sid, 'events', id), ttl)
  redis.call('PEXPIRE', index_key(id), ttl)
end
return 1
"#
    ))
});

/// KEYS: session. ARGV: sid, principal (`''`: any, for prune), idle cutoff (`''`: none; else
/// end only if `last_seen_ms` is still below it), the most streams to delete, `'1'` to go on
/// deleting the streams of a session this script ended already. Returns `{1, more, stream
/// ids...}` if ended (`more`: 1 while streams are left, for the next call), `{0}` if not
/// (missing, foreign, or used meanwhile). One call deletes the session and at most that many
/// of its streams: Redis serves every other client between two calls.
pub(crate) static END_SESSION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local sid = ARGV[3]
local key = KEYS[#KEYS]
if ARGV[7] ~= '1' then
  local owner = redis.call('HGET', key, 'principal')
  if not owner then
    redis.call('ZREM', P .. ':sessions', sid)
    return { 0 }
  end
  if ARGV[4] ~= '' and owner ~= ARGV[4] then return { 0 } end
  if ARGV[5] ~= '' and not idle_before(sid, ARGV[5]) then return { 0 } end
  redis.call('DEL', key)
  redis.call('ZREM', P .. ':sessions', sid)
end
local out = { 1, 0 }
local tag = 's:' .. sid
local set = session_set(sid, 'streams')
for _, id in ipairs(redis.call('SPOP', set, tonumber(ARGV[6]))) do
  redis.call('DEL', tagged(tag, 'stream', id), tagged(tag, 'events', id), index_key(id))
  redis.call('ZREM', P .. ':finished', id)
  out[#out + 1] = id
end
if redis.call('SCARD', set) > 0 then
  out[2] = 1
else
  redis.call('DEL', set, session_set(sid, 'open'))
end
if #out > 2 then redis.call('PUBLISH', CHANNEL, 'g:' .. table.concat(out, ',', 3)) end
return out
"#
    ))
});

/// ARGV: stream id, principal, session (`''` for none), now_ms, ttl_ms, inline. Returns 1
/// created, 0 already exists, -1 the session does not exist (for this principal: D13).
pub(crate) static CREATE_STREAM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local id, session = ARGV[3], ARGV[5]
if session ~= '' and redis.call('HGET', session_key(session), 'principal') ~= ARGV[4] then return -1 end
if redis.call('EXISTS', tagged(stream_tag(id, session), 'stream', id)) == 1 then return 0 end
save_stream(new_stream(id, ARGV[4], session, ARGV[8]), ARGV[6], ARGV[7], ARGV[7])
return 1
"#
    ))
});

/// ARGV: stream id, data, close (`1`/`0`), now_ms, idle ttl_ms, closed ttl_ms, max events
/// (`0`: unbounded), finished-index sweep cutoff. Returns `{seq}`, `{-1}` not found,
/// `{-2}` closed.
pub(crate) static APPEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local id, now = ARGV[3], ARGV[6]
local s = find(id)
if not s then return { -1 } end
if s.closed then return { -2 } end
local seq = append_event(s, ARGV[4], tonumber(ARGV[9]))
if ARGV[5] == '1' then close_stream(s, now, ARGV[10]) end
save_stream(s, now, ARGV[7], ARGV[8])
return { seq }
"#
    ))
});

/// ARGV: stream id, first wanted sequence (after + 1), limit. Returns `{-1}` not found,
/// `{-3, seq}` if event `seq` of an inline stream is missing (corrupt), or
/// `{0, first_seq, last_seq, closed, id, data, id, data, ...}` from one snapshot (entries
/// only if the first wanted sequence is retained).
pub(crate) static READ_AFTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local s = find(ARGV[3])
if not s then return { -1 } end
local out = { 0, string.format('%d', s.first_seq), string.format('%d', s.last_seq), s.closed and '1' or '0' }
local from = tonumber(ARGV[4])
if from < s.first_seq then return out end
if not s.inline then
  for _, entry in ipairs(redis.call('XRANGE', s.events, ARGV[4], '+', 'COUNT', ARGV[5])) do
    out[#out + 1] = entry[1]
    out[#out + 1] = entry[2][2]
  end
  return out
end
local to = math.min(s.last_seq, from + tonumber(ARGV[5]) - 1)
for first = from, to, 1000 do
  local fields = {}
  for q = first, math.min(first + 999, to) do fields[#fields + 1] = string.format('%d', q) end
  local values = redis.call('HMGET', s.meta, unpack(fields))
  for i = 1, #fields do
    -- The log is gap-free by construction: a missing event is never skipped (D3).
    if not values[i] then return { -3, fields[i] } end
    out[#out + 1] = fields[i] .. '-0'
    out[#out + 1] = values[i]
  end
end
return out
"#
    ))
});

/// ARGV: stream id. Returns `{principal, session or ''}`, or `{}` if not found.
pub(crate) static STREAM_OWNER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local s = find(ARGV[3])
if not s then return {} end
return { s.principal, s.session }
"#
    ))
});

/// ARGV: stream id. Returns `{principal, session or '', first_seq, last_seq, closed}`, or
/// `{}` if not found.
pub(crate) static STREAM_INFO: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local s = find(ARGV[3])
if not s then return {} end
return { s.principal, s.session, string.format('%d', s.first_seq), string.format('%d', s.last_seq), s.closed and '1' or '0' }
"#
    ))
});

/// ARGV: stream id, cutoff ms. Deletes the stream if it is closed and its final event is
/// older than the cutoff; returns 1 if deleted. Always takes the id out of the finished
/// index unless it is still too young (then its score is corrected).
pub(crate) static DELETE_FINISHED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local id = ARGV[3]
local s = find(id)
if s and finished_before(s, ARGV[4]) then
  delete_stream(s.tag, id, s.session)
  redis.call('PUBLISH', CHANNEL, 'g:' .. id)
  return 1
end
if s and s.closed then
  redis.call('ZADD', P .. ':finished', s.last_event_ms, id)
else
  redis.call('ZREM', P .. ':finished', id)
end
return 0
"#
    ))
});

/// ARGV: kind, key, value, expires_at ms (`''`: never), expected version (`''`: absent),
/// now_ms. Writes the record if the condition holds against its unexpired state (an
/// expired record counts as absent and is replaced at version 1), indexes it, and sets its
/// Redis expiry. Returns the new version, or 0 if the condition does not hold (nothing
/// written).
pub(crate) static PUT_RECORD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
return put_record(ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
"#
    ))
});

/// ARGV: idle cutoff ms, then session ids (members of the sessions index scored below it).
/// Returns how many of them a prune would end (`END_SESSION` with that cutoff): live, and
/// idle since before the cutoff. Reads only.
pub(crate) static COUNT_IDLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local cutoff, due = ARGV[3], 0
for i = 4, #ARGV do
  if redis.call('EXISTS', session_key(ARGV[i])) == 1 and idle_before(ARGV[i], cutoff) then due = due + 1 end
end
return due
"#
    ))
});

/// ARGV: age cutoff ms, idle cutoff ms (`''`: no session ends), then stream ids (members of
/// the finished index scored below the age cutoff). Returns how many of them a prune would
/// delete by age (`DELETE_FINISHED`): live and finished before the cutoff, and not of a
/// session the prune ends first (those go with their session, uncounted). Reads only.
pub(crate) static COUNT_FINISHED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local cutoff, idle, due = ARGV[3], ARGV[4], 0
for i = 5, #ARGV do
  local s = find(ARGV[i])
  if s and finished_before(s, cutoff)
    and not (idle ~= '' and s.session ~= '' and idle_before(s.session, idle)) then
    due = due + 1
  end
end
return due
"#
    ))
});

/// ARGV: kind, now_ms, offset, count. Judges up to `count` members of the kind's expiry
/// index due at `now_ms`, from `offset`, as `PRUNE_RECORDS` does. Returns `{records a prune
/// would delete, members scanned}`. Reads only.
pub(crate) static COUNT_EXPIRED: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local kind, now = ARGV[3], tonumber(ARGV[4])
local due = due_records(kind, ARGV[4], ARGV[5], ARGV[6])
local expired = 0
for _, key in ipairs(due) do
  if record_due(kind, key, now) == 'expired' then expired = expired + 1 end
end
return { expired, #due }
"#
    ))
});

/// ARGV: kind, lexical min, lexical max, count, now_ms. Scans up to `count` members of the
/// kind's index in key order, from one snapshot. Returns `{scanned, last scanned member,
/// key, version, value, expires_at or '', ...}` for the unexpired records among them;
/// members whose record Redis has expired (or that vanished) are taken out of the index.
pub(crate) static LIST_RECORDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local kind, now = ARGV[3], tonumber(ARGV[7])
local index = records_index(kind)
local members = redis.call('ZRANGEBYLEX', index, ARGV[4], ARGV[5], 'LIMIT', 0, ARGV[6])
local out = { #members, members[#members] or '' }
for _, key in ipairs(members) do
  local r = redis.call('HMGET', record_key(kind, key), 'version', 'value', 'expires_at')
  if not r[1] then
    -- Expired by Redis: out of the listing index now (the expiry index is prune's).
    redis.call('ZREM', index, key)
  elseif not r[3] or tonumber(r[3]) > now then
    out[#out + 1] = key
    out[#out + 1] = r[1]
    out[#out + 1] = r[2] or ''
    out[#out + 1] = r[3] or ''
  end
end
return out
"#
    ))
});

/// ARGV: kind, lexical min, lexical max, count, now_ms. Deletes up to `count` records of
/// the range (the first ones in key order) with their index entries. Returns `{deleted
/// unexpired records, members scanned}`.
pub(crate) static DELETE_RECORDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local kind, now = ARGV[3], tonumber(ARGV[7])
local members = redis.call('ZRANGEBYLEX', records_index(kind), ARGV[4], ARGV[5], 'LIMIT', 0, ARGV[6])
local live = 0
for _, key in ipairs(members) do
  local rkey = record_key(kind, key)
  local r = redis.call('HMGET', rkey, 'version', 'expires_at')
  if r[1] and (not r[2] or tonumber(r[2]) > now) then live = live + 1 end
  delete_record(kind, key)
end
return { live, #members }
"#
    ))
});

/// ARGV: kind, now_ms, count. Takes up to `count` members of the kind's expiry index due
/// at `now_ms` and deletes their records if they have expired (or Redis already dropped
/// them); a member whose record was renewed meanwhile is re-scored or dropped from the
/// expiry index. Returns `{records expired, members scanned}`; every scanned member leaves
/// the due range.
pub(crate) static PRUNE_RECORDS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local kind, now = ARGV[3], tonumber(ARGV[4])
local index, expiring = records_index(kind), records_expiring(kind)
local due = due_records(kind, ARGV[4], 0, ARGV[5])
local expired = 0
for _, key in ipairs(due) do
  local verdict, renewed_to = record_due(kind, key, now)
  if verdict == 'renewed' then
    redis.call('ZADD', expiring, renewed_to, key)
  elseif verdict == 'kept' then
    redis.call('ZREM', expiring, key)
  else
    redis.call('DEL', record_key(kind, key))
    redis.call('ZREM', index, key)
    redis.call('ZREM', expiring, key)
    expired = expired + 1
  end
end
return { expired, #due }
"#
    ))
});

/// A write batch, all or nothing. ARGV: now_ms, idle ttl_ms, closed ttl_ms, max events
/// (`0`: unbounded), finished-index sweep cutoff, inline (for the streams it creates), then
/// six fields per op: its code and five arguments (`''` where unused):
/// - `c` create stream: id, principal, session (`''`: none)
/// - `a` append: stream id, data
/// - `x` close: stream id
/// - `p` put record: kind, key, value, expires_at (`''`: never), expected version (`''`: absent)
/// - `d` delete record: kind, key, version
/// - `D` delete records: kind, prefix, lexical min, lexical max
///
/// First every op is checked in order against the state the batch's earlier ops would
/// leave (nothing is written yet), then, only if none is refused, every op is applied and
/// each touched stream is woken once. Returns `{0, result per op...}` (a sequence, a
/// version, a count, or 0), or `{1, index of the refused op (from 0), reason}` with reason
/// `stream`, `session`, `closed`, `exists` or `conflict`, having written nothing.
pub(crate) static BATCH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local now, idle_ttl, closed_ttl, max, sweep, inline = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8]
local base = 9
local count = math.floor((#ARGV - base + 1) / 6)
local function arg(i, n) return ARGV[base + i * 6 + n] end
local function has_prefix(key, prefix) return string.sub(key, 1, #prefix) == prefix end

-- Check: the state each stream and record would have after the ops so far.
local streams, records, cleared = {}, {}, {}
-- Each state keeps what `find` gave (`s`), so applying the batch finds no stream again.
local function stream_state(id)
  if streams[id] == nil then
    local s = find(id)
    if s then streams[id] = { open = not s.closed, s = s } else streams[id] = false end
  end
  return streams[id]
end
-- Whether each record's hash has an expiry, as the check read it, for the writes
-- (`write_record`) to need no second read; kept up to date by the writes. And the version
-- each put op writes, as the check worked it out.
local expiring, versions = {}, {}
local function record_state(kind, key)
  local slot = kind .. '/' .. key
  if records[slot] == nil then
    local version, has_expiry = record_version(kind, key, now)
    expiring[slot] = has_expiry
    for _, range in ipairs(cleared) do
      if range[1] == kind and has_prefix(key, range[2]) then version = false end
    end
    records[slot] = version
  end
  return records[slot]
end
for i = 0, count - 1 do
  local code, a, b, c = arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3)
  if code == 'c' then
    if c ~= '' and redis.call('HGET', session_key(c), 'principal') ~= b then return { 1, i, 'session' } end
    if streams[a] or (streams[a] == nil and stream_exists(a, c)) then return { 1, i, 'exists' } end
    streams[a] = { open = true, s = new_stream(a, b, c, inline) }
  elseif code == 'a' or code == 'x' then
    local st = stream_state(a)
    if not st then return { 1, i, 'stream' } end
    if not st.open then return { 1, i, 'closed' } end
    if code == 'x' then st.open = false end
  elseif code == 'p' then
    local version = next_version(record_state(a, b), arg(i, 5))
    if not version then return { 1, i, 'conflict' } end
    records[a .. '/' .. b] = version
    versions[i] = version
  elseif code == 'd' then
    if record_state(a, b) ~= c then return { 1, i, 'conflict' } end
    records[a .. '/' .. b] = false
  elseif code == 'D' then
    for slot, _ in pairs(records) do
      if has_prefix(slot, a .. '/' .. b) then records[slot] = false end
    end
    cleared[#cleared + 1] = { a, b }
  else
    return redis.error_reply('unknown batch op ' .. tostring(code))
  end
end

-- Apply: nothing can be refused any more. Each stream is written once, at the end.
local out, saved, order = { 0 }, {}, {}
for i = 0, count - 1 do
  local code, a, b, c = arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3)
  local result = 0
  if code == 'c' or code == 'a' or code == 'x' then
    local s = streams[a].s
    if code == 'a' then result = append_event(s, b, max) elseif code == 'x' then close_stream(s, now, sweep) end
    if not saved[a] then
      saved[a] = true
      order[#order + 1] = s
    end
  elseif code == 'p' then
    local slot = a .. '/' .. b
    result = versions[i]
    write_record(a, b, c, arg(i, 4), result, expiring[slot])
    expiring[slot] = arg(i, 4) ~= ''
  elseif code == 'd' then
    local slot = a .. '/' .. b
    delete_record(a, b, expiring[slot])
    expiring[slot] = false
    result = 1
  else
    for _, key in ipairs(redis.call('ZRANGEBYLEX', records_index(a), c, arg(i, 4))) do
      if record_version(a, key, now) then result = result + 1 end
      delete_record(a, key)
      expiring[a .. '/' .. key] = false
    end
  end
  out[#out + 1] = result
end
for _, s in ipairs(order) do save_stream(s, now, idle_ttl, closed_ttl) end
return out
"#
    ))
});
