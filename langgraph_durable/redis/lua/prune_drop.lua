#!lua flags=allow-oom
-- uses: thread, prune, drop
-- Deletes an expired thread whole, unless it changed since the pruner read it.
-- KEYS: the thread's six.
-- ARGV: header-hash fields, last-write time (as PRUNE_INSPECT read them), dry run
-- ('1'/'0'). Returns {status, checkpoints, bytes}: status 1 deleted (or, dry,
-- would be), 0 the thread is gone, -1 it changed since it was read (untouched).
if redis.call('EXISTS', I) == 0 then return {0, 0, 0} end
if not unchanged(ARGV[1], ARGV[2]) then return {-1, 0, 0} end
local n, bytes = redis.call('ZCARD', I), thread_bytes()
if ARGV[3] ~= '1' then drop_thread() end
return {1, n, bytes}
