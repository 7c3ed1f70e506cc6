#!lua flags=allow-oom
-- KEYS: the lock. ARGV: this pruner. Deletes the lock if this pruner holds it.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
