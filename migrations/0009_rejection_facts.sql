-- A state-dependent rejection keeps its machine-readable facts (`ErrorInfo.metadata`: the
-- account, the limit, the posting …) beside its message, so a replay answers the same error
-- in full, not only word for word. Earlier rejections have none.
ALTER TABLE rejections ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
