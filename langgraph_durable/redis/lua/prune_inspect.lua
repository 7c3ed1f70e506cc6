#!lua flags=no-writes
-- uses: thread
-- What the pruner reads of a thread first (see _prune.py).
-- KEYS: the thread's six.
-- Returns {exists (I), created, touched ('' where missing), latest "<id>\0<ns>"
-- ('' for none), fields of the header hash}.
local last = redis.call('ZREVRANGE', N, 0, 0)
return {redis.call('EXISTS', I), redis.call('HGET', H, CREATED) or '',
        redis.call('HGET', H, TOUCHED) or '', last[1] or '', redis.call('HLEN', H)}
