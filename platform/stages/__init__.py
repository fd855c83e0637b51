"""Expensive work kept across trials and runs: the stage cache (:mod:`.cache`), the file systems it and Tune write to,
local or in a bucket (:mod:`.storage`), and the per-actor memos of derived data (:mod:`.memo`)."""
