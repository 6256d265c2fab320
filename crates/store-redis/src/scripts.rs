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

-- A live stream: its tag, keys, owner, and whether it is closed. nil if unknown, or if its
-- session has ended.
local function find(id)
  local tag = redis.call('GET', index_key(id))
  if not tag then tag = 't:' .. id end
  local meta = tagged(tag, 'stream', id)
  local owner = redis.call('HMGET', meta, 'principal', 'session', 'closed')
  if not owner[1] then return nil end
  local session = owner[2] or ''
  if session ~= '' and redis.call('EXISTS', session_key(session)) == 0 then return nil end
  return { tag = tag, meta = meta, events = tagged(tag, 'events', id), principal = owner[1], session = session,
    closed = owner[3] == '1' }
end

local function stream_tag(id, session)
  if session ~= '' then return 's:' .. session end
  return 't:' .. id
end

-- Write a new stream (the caller checked it does not exist).
local function create_stream(id, principal, session, now, ttl)
  local tag = stream_tag(id, session)
  local meta = tagged(tag, 'stream', id)
  redis.call('HSET', meta, 'principal', principal, 'session', session, 'first_seq', 1, 'last_seq', 0,
    'closed', 0, 'last_event_ms', now)
  redis.call('PEXPIRE', meta, ttl)
  if session ~= '' then
    redis.call('SET', index_key(id), tag, 'PX', ttl)
    for _, kind in ipairs({ 'streams', 'open' }) do
      redis.call('SADD', session_set(session, kind), id)
      redis.call('PEXPIRE', session_set(session, kind), ttl)
    end
  end
end

-- Append one event to live stream s (the caller checked it is open); trims the log to
-- `max` events (0: unbounded). Returns the event's sequence.
local function append_event(s, data, now, max)
  local seq = redis.call('HINCRBY', s.meta, 'last_seq', 1)
  redis.call('XADD', s.events, string.format('%d-0', seq), 'd', data)
  if max > 0 and seq - max + 1 > tonumber(redis.call('HGET', s.meta, 'first_seq')) then
    local first = seq - max + 1
    redis.call('XTRIM', s.events, 'MINID', string.format('%d-0', first))
    redis.call('HSET', s.meta, 'first_seq', string.format('%d', first), 'last_event_ms', now)
  else
    -- Unbounded (or not full yet): `first_seq` stays as it is.
    redis.call('HSET', s.meta, 'last_event_ms', now)
  end
  return seq
end

-- Close live stream s (the caller checked it is open) and index it as finished; entries
-- of the finished index older than `sweep` go.
local function close_stream(s, id, now, sweep)
  redis.call('HSET', s.meta, 'closed', 1, 'last_event_ms', now)
  if s.session ~= '' then redis.call('SREM', session_set(s.session, 'open'), id) end
  redis.call('ZADD', P .. ':finished', now, id)
  redis.call('ZREMRANGEBYSCORE', P .. ':finished', '-inf', '(' .. sweep)
end

-- After writing to stream s (`closed`: whether it is closed now): it lives another idle
-- TTL, or the closed TTL if it is a closed sessionless stream; its tails everywhere are
-- woken. A stream the same script `created` wakes nobody (nobody can be waiting on it), and
-- its hash and index entry already carry the idle TTL from `create_stream`, at the same `now`.
local function touch_stream(s, id, idle_ttl, closed_ttl, created, closed)
  local ttl = idle_ttl
  if s.session == '' and closed then ttl = closed_ttl end
  if not created or ttl ~= idle_ttl then
    redis.call('PEXPIRE', s.meta, ttl)
    if s.session ~= '' then redis.call('PEXPIRE', index_key(id), ttl) end
  end
  redis.call('PEXPIRE', s.events, ttl)
  if not created then redis.call('PUBLISH', CHANNEL, 'a:' .. id) end
end

-- The version of the unexpired record, or false.
local function record_version(kind, key, now)
  local current = redis.call('HMGET', record_key(kind, key), 'version', 'expires_at')
  if current[1] and (not current[2] or tonumber(current[2]) > tonumber(now)) then return current[1], true end
  return false, current[1] ~= false
end

-- Write a record if `expected` (`''`: absent) holds against its unexpired state (an
-- expired record counts as absent and is replaced at version 1), index it, and set its
-- Redis expiry. Returns the new version, or 0 if the condition does not hold.
local function put_record(kind, key, value, expires_at, expected, now)
  local rkey = record_key(kind, key)
  local live, present = record_version(kind, key, now)
  -- The value, and the expiry if there is one, in one HSET.
  local fields = { 'value', value }
  if expires_at ~= '' then fields[3], fields[4] = 'expires_at', expires_at end
  local version
  if expected == '' then
    if live then return 0 end
    -- An expired record Redis has not dropped yet is replaced whole.
    if present then redis.call('DEL', rkey) end
    redis.call('HSET', rkey, 'version', 1, unpack(fields))
    version = 1
  else
    if live ~= expected then return 0 end
    version = redis.call('HINCRBY', rkey, 'version', 1)
    redis.call('HSET', rkey, unpack(fields))
    if expires_at == '' then redis.call('HDEL', rkey, 'expires_at') end
  end
  redis.call('ZADD', records_index(kind), 0, key)
  if expires_at ~= '' then
    redis.call('ZADD', records_expiring(kind), expires_at, key)
    -- Redis drops the record by itself (at once if the time has passed); prune sweeps the
    -- index entries.
    redis.call('PEXPIREAT', rkey, expires_at)
  else
    redis.call('ZREM', records_expiring(kind), key)
    -- Only a record that was there can have an expiry to drop.
    if present then redis.call('PERSIST', rkey) end
  end
  -- As a string, as `HGET` would give it.
  return tostring(version)
end

-- Delete one record and its index entries.
local function delete_record(kind, key)
  redis.call('DEL', record_key(kind, key))
  redis.call('ZREM', records_index(kind), key)
  redis.call('ZREM', records_expiring(kind), key)
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

/// ARGV: sid, principal, record JSON, last_seen_ms, standalone stream, now_ms, ttl_ms,
/// sweep cutoff. Returns 1, or 0 if the session or its stream already exists.
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
create_stream(ARGV[7], principal, sid, ARGV[8], ttl)
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
local key = KEYS[1]
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
/// end only if `last_seen_ms` is still below it). Returns `{1, stream ids...}` if ended,
/// `{0}` if not (missing, foreign, or used meanwhile).
pub(crate) static END_SESSION: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local sid = ARGV[3]
local key = KEYS[1]
local owner = redis.call('HGET', key, 'principal')
if not owner then
  redis.call('ZREM', P .. ':sessions', sid)
  return { 0 }
end
if ARGV[4] ~= '' and owner ~= ARGV[4] then return { 0 } end
if ARGV[5] ~= '' then
  local seen = redis.call('ZSCORE', P .. ':sessions', sid)
  if not seen or tonumber(seen) >= tonumber(ARGV[5]) then return { 0 } end
end
local out = { 1 }
local tag = 's:' .. sid
for _, id in ipairs(redis.call('SMEMBERS', session_set(sid, 'streams'))) do
  redis.call('DEL', tagged(tag, 'stream', id), tagged(tag, 'events', id), index_key(id))
  redis.call('ZREM', P .. ':finished', id)
  out[#out + 1] = id
end
redis.call('DEL', key, session_set(sid, 'streams'), session_set(sid, 'open'))
redis.call('ZREM', P .. ':sessions', sid)
if #out > 1 then redis.call('PUBLISH', CHANNEL, 'g:' .. table.concat(out, ',', 2)) end
return out
"#
    ))
});

/// ARGV: stream id, principal, session (`''` for none), now_ms, ttl_ms. Returns 1 created,
/// 0 already exists, -1 the session does not exist (for this principal: D13).
pub(crate) static CREATE_STREAM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local id, session = ARGV[3], ARGV[5]
if session ~= '' and redis.call('HGET', session_key(session), 'principal') ~= ARGV[4] then return -1 end
if redis.call('EXISTS', tagged(stream_tag(id, session), 'stream', id)) == 1 then return 0 end
create_stream(id, ARGV[4], session, ARGV[6], ARGV[7])
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
local seq = append_event(s, ARGV[4], now, tonumber(ARGV[9]))
if ARGV[5] == '1' then close_stream(s, id, now, ARGV[10]) end
touch_stream(s, id, ARGV[7], ARGV[8], false, ARGV[5] == '1')
return { seq }
"#
    ))
});

/// ARGV: stream id, first wanted sequence (after + 1), limit. Returns `{-1}` not found, or
/// `{0, first_seq, last_seq, closed, id, data, id, data, ...}` from one snapshot (entries
/// only if the first wanted sequence is retained).
pub(crate) static READ_AFTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        prelude!(),
        r#"
local s = find(ARGV[3])
if not s then return { -1 } end
local state = redis.call('HMGET', s.meta, 'first_seq', 'last_seq', 'closed')
local out = { 0, state[1], state[2], state[3] }
if tonumber(ARGV[4]) >= tonumber(state[1]) then
  for _, entry in ipairs(redis.call('XRANGE', s.events, ARGV[4], '+', 'COUNT', ARGV[5])) do
    out[#out + 1] = entry[1]
    out[#out + 1] = entry[2][2]
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
local state = redis.call('HMGET', s.meta, 'first_seq', 'last_seq', 'closed')
return { s.principal, s.session, state[1], state[2], state[3] }
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
if not s then
  redis.call('ZREM', P .. ':finished', id)
  return 0
end
local state = redis.call('HMGET', s.meta, 'closed', 'last_event_ms')
if state[1] ~= '1' then
  redis.call('ZREM', P .. ':finished', id)
  return 0
end
if tonumber(state[2]) >= tonumber(ARGV[4]) then
  redis.call('ZADD', P .. ':finished', state[2], id)
  return 0
end
delete_stream(s.tag, id, s.session)
redis.call('PUBLISH', CHANNEL, 'g:' .. id)
return 1
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
local due = redis.call('ZRANGEBYSCORE', expiring, '-inf', ARGV[4], 'LIMIT', 0, ARGV[5])
local expired = 0
for _, key in ipairs(due) do
  local rkey = record_key(kind, key)
  local r = redis.call('HMGET', rkey, 'version', 'expires_at')
  if r[1] and r[2] and tonumber(r[2]) > now then
    redis.call('ZADD', expiring, r[2], key)
  elseif r[1] and not r[2] then
    redis.call('ZREM', expiring, key)
  else
    redis.call('DEL', rkey)
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
/// (`0`: unbounded), finished-index sweep cutoff, then six fields per op: its code and
/// five arguments (`''` where unused):
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
local now, idle_ttl, closed_ttl, max, sweep = ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7]
local base = 8
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
local function record_state(kind, key)
  local slot = kind .. '/' .. key
  if records[slot] == nil then
    local version = record_version(kind, key, now)
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
    if stream_state(a) or redis.call('EXISTS', tagged(stream_tag(a, c), 'stream', a)) == 1 then
      return { 1, i, 'exists' }
    end
    local tag = stream_tag(a, c)
    streams[a] = { open = true, s = { tag = tag, meta = tagged(tag, 'stream', a), events = tagged(tag, 'events', a), principal = b, session = c } }
  elseif code == 'a' or code == 'x' then
    local st = stream_state(a)
    if not st then return { 1, i, 'stream' } end
    if not st.open then return { 1, i, 'closed' } end
    if code == 'x' then st.open = false end
  elseif code == 'p' then
    local live = record_state(a, b)
    local expected = arg(i, 5)
    if expected == '' then
      if live then return { 1, i, 'conflict' } end
      records[a .. '/' .. b] = '1'
    else
      if live ~= expected then return { 1, i, 'conflict' } end
      records[a .. '/' .. b] = tostring(tonumber(live) + 1)
    end
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

-- Apply: nothing can be refused any more.
local out, touched, order, created = { 0 }, {}, {}, {}
for i = 0, count - 1 do
  local code, a, b, c = arg(i, 0), arg(i, 1), arg(i, 2), arg(i, 3)
  local result = 0
  if code == 'c' then
    create_stream(a, b, c, now, idle_ttl)
    created[a] = true
  elseif code == 'a' or code == 'x' then
    local s = streams[a].s
    if code == 'a' then result = append_event(s, b, now, max) else close_stream(s, a, now, sweep) end
    if not touched[a] then
      touched[a] = s
      order[#order + 1] = a
    end
  elseif code == 'p' then
    result = put_record(a, b, c, arg(i, 4), arg(i, 5), now)
  elseif code == 'd' then
    delete_record(a, b)
    result = 1
  else
    for _, key in ipairs(redis.call('ZRANGEBYLEX', records_index(a), c, arg(i, 4))) do
      if record_version(a, key, now) then result = result + 1 end
      delete_record(a, key)
    end
  end
  out[#out + 1] = result
end
for _, id in ipairs(order) do touch_stream(touched[id], id, idle_ttl, closed_ttl, created[id], not streams[id].open) end
return out
"#
    ))
});
