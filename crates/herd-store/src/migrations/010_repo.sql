-- 10: code on several machines: a queued plan with isolated steps names the repository its
-- workers clone, the commit its steps start from, and the branch their work is merged into; a
-- queued step whose agent finished waits for its merge with the branch it pushed.
ALTER TABLE orchestrations ADD COLUMN repo_url TEXT;
ALTER TABLE orchestrations ADD COLUMN repo_base TEXT;
ALTER TABLE orchestrations ADD COLUMN integration_branch TEXT;
ALTER TABLE orchestration_steps ADD COLUMN merge_branch TEXT;
ALTER TABLE orchestration_steps ADD COLUMN merge_head TEXT;
