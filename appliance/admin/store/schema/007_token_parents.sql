-- A token made with another token is bound to it: it cannot outlive it,
-- and revoking the parent revokes it (auth.c).  revoked_reason says why a
-- token stopped working (revoked by hand, its parent revoked, its owner's
-- password changed).
ALTER TABLE api_tokens ADD COLUMN parent_token_id INTEGER REFERENCES api_tokens(id) ON DELETE CASCADE;
ALTER TABLE api_tokens ADD COLUMN revoked_reason TEXT;
CREATE INDEX api_tokens_parent ON api_tokens(parent_token_id);
