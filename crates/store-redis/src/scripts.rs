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

-- A live stream: its tag, keys, owner. nil if unknown, or if its session has ended.
local function find(id)
  local tag = redis.call('GET', index_key(id))
  if not tag then tag = 't:' .. id end
  local meta = tagged(tag, 'stream', id)
  local owner = redis.call('HMGET', meta, 'principal', 'session')
  if not owner[1] then return nil end
  local session = owner[2] or ''
  if session ~= '' and redis.call('EXISTS', session_key(session)) == 0 then return nil end
  return { tag = tag, meta = meta, events = tagged(tag, 'events', id), principal = owner[1], session = session }
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
local state = redis.call('HMGET', s.meta, 'closed', 'first_seq')
if state[1] == '1' then return { -2 } end
local seq = redis.call('HINCRBY', s.meta, 'last_seq', 1)
redis.call('XADD', s.events, string.format('%d-0', seq), 'd', ARGV[4])
local first = tonumber(state[2])
local max = tonumber(ARGV[9])
if max > 0 and seq - max + 1 > first then
  first = seq - max + 1
  redis.call('XTRIM', s.events, 'MINID', string.format('%d-0', first))
end
local ttl, closed = ARGV[7], 0
if ARGV[5] == '1' then
  closed = 1
  if s.session == '' then ttl = ARGV[8] else redis.call('SREM', session_set(s.session, 'open'), id) end
  redis.call('ZADD', P .. ':finished', now, id)
  redis.call('ZREMRANGEBYSCORE', P .. ':finished', '-inf', '(' .. ARGV[10])
end
redis.call('HSET', s.meta, 'first_seq', string.format('%d', first), 'closed', closed, 'last_event_ms', now)
redis.call('PEXPIRE', s.meta, ttl)
redis.call('PEXPIRE', s.events, ttl)
if s.session ~= '' then redis.call('PEXPIRE', index_key(id), ttl) end
redis.call('PUBLISH', CHANNEL, 'a:' .. id)
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
local kind, key, expires_at, expected = ARGV[3], ARGV[4], ARGV[6], ARGV[7]
local rkey = record_key(kind, key)
local current = redis.call('HMGET', rkey, 'version', 'expires_at')
local live = current[1] and (not current[2] or tonumber(current[2]) > tonumber(ARGV[8]))
if expected == '' then
  if live then return 0 end
  redis.call('DEL', rkey)
  redis.call('HSET', rkey, 'version', 1, 'value', ARGV[5])
else
  if not live or current[1] ~= expected then return 0 end
  redis.call('HINCRBY', rkey, 'version', 1)
  redis.call('HSET', rkey, 'value', ARGV[5])
  redis.call('HDEL', rkey, 'expires_at')
end
local version = redis.call('HGET', rkey, 'version')
redis.call('ZADD', records_index(kind), 0, key)
if expires_at ~= '' then
  redis.call('HSET', rkey, 'expires_at', expires_at)
  redis.call('ZADD', records_expiring(kind), expires_at, key)
  -- Redis drops the record by itself (at once if the time has passed); prune sweeps the
  -- index entries.
  redis.call('PEXPIREAT', rkey, expires_at)
else
  redis.call('ZREM', records_expiring(kind), key)
  redis.call('PERSIST', rkey)
end
return version
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
local index, expiring = records_index(kind), records_expiring(kind)
local members = redis.call('ZRANGEBYLEX', index, ARGV[4], ARGV[5], 'LIMIT', 0, ARGV[6])
local live = 0
for _, key in ipairs(members) do
  local rkey = record_key(kind, key)
  local r = redis.call('HMGET', rkey, 'version', 'expires_at')
  if r[1] and (not r[2] or tonumber(r[2]) > now) then live = live + 1 end
  redis.call('DEL', rkey)
  redis.call('ZREM', index, key)
  redis.call('ZREM', expiring, key)
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
