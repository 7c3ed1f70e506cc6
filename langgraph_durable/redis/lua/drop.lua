#!lua flags=allow-oom
-- uses: drop
-- KEYS: the thread's six. Deletes them and the thread's effect journal.
return drop_thread()
