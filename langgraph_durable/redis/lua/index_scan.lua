#!lua flags=no-writes
-- KEYS: a tenant's index. ARGV: cursor, count. {next cursor, {member, score, ...}}.
return redis.call('ZSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
