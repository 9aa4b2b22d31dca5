-- 10: code on several machines: a queued plan with isolated steps names the repository its
-- workers clone, the commit its steps start from, and the branch their work is merged into; a
-- queued step whose agent finished waits for its merge with the branch it pushed.
ALTER TABLE orchestrations ADD COLUMN repo_url TEXT;
ALTER TABLE orchestrations ADD COLUMN repo_base TEXT;
ALTER TABLE orchestrations ADD COLUMN integration_branch TEXT;
ALTER TABLE orchestration_steps ADD COLUMN merge_branch TEXT;
ALTER TABLE orchestration_steps ADD COLUMN merge_head TEXT;
-- The machine of each owning process (`owner_pid` means something only there): a herd judges
-- and sweeps only its own machine's runs, plans, locks and worktrees. NULL: this machine's.
ALTER TABLE subagents ADD COLUMN owner_host TEXT;
ALTER TABLE orchestrations ADD COLUMN owner_host TEXT;
ALTER TABLE worktree_locks ADD COLUMN owner_host TEXT;
ALTER TABLE worktrees ADD COLUMN owner_host TEXT;
