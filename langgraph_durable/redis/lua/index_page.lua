#!lua flags=no-writes
-- KEYS: a tenant's index. ARGV: start, stop (ranks). Flat member/score list.
return redis.call('ZRANGE', KEYS[1], ARGV[1], ARGV[2], 'WITHSCORES')
