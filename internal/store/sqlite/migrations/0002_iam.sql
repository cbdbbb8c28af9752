-- 0002_iam: tenants, principals, groups, API tokens, policies, the audit log
-- and the authorization epoch.
--
-- Names are the keys (policies refer to them, so they never change). Times
-- are INTEGER unix microseconds in UTC, as in 0001.

CREATE TABLE tenants (
    name         TEXT    PRIMARY KEY NOT NULL,
    display_name TEXT    NOT NULL,
    platform     INTEGER NOT NULL DEFAULT 0 CHECK (platform IN (0, 1)),
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
) STRICT;

-- At most one platform tenant: the fleet operator's.
CREATE UNIQUE INDEX tenants_one_platform ON tenants (platform) WHERE platform = 1;

-- Users and service accounts share one namespace per tenant.
CREATE TABLE principals (
    tenant       TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name         TEXT    NOT NULL,
    kind         TEXT    NOT NULL CHECK (kind IN ('user', 'service_account')),
    display_name TEXT    NOT NULL,
    email        TEXT    NOT NULL,
    description  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT;

CREATE TABLE groups (
    tenant      TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name        TEXT    NOT NULL,
    description TEXT    NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT;

-- A member is in the group's tenant: both foreign keys share the tenant
-- column, so a membership can never cross tenants.
CREATE TABLE group_members (
    tenant     TEXT NOT NULL,
    group_name TEXT NOT NULL,
    member     TEXT NOT NULL,
    PRIMARY KEY (tenant, group_name, member),
    FOREIGN KEY (tenant, group_name) REFERENCES groups (tenant, name) ON DELETE CASCADE,
    FOREIGN KEY (tenant, member) REFERENCES principals (tenant, name) ON DELETE CASCADE
) STRICT;

-- A principal's groups, and the cascade when a principal is deleted.
CREATE INDEX group_members_member ON group_members (tenant, member);

-- The secret is never stored, only its SHA-256.
CREATE TABLE api_tokens (
    id           TEXT    PRIMARY KEY NOT NULL,
    tenant       TEXT    NOT NULL,
    principal    TEXT    NOT NULL,
    secret_hash  BLOB    NOT NULL,
    description  TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER,
    FOREIGN KEY (tenant, principal) REFERENCES principals (tenant, name) ON DELETE CASCADE
) STRICT;

-- A tenant's tokens newest first; the second also serves one principal's
-- tokens and the cascade when a principal is deleted.
CREATE INDEX api_tokens_tenant_created ON api_tokens (tenant, created_at);
CREATE INDEX api_tokens_principal ON api_tokens (tenant, principal, created_at);

CREATE TABLE policies (
    tenant     TEXT    NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name       TEXT    NOT NULL,
    body       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name)
) STRICT;

-- The audit log. No foreign keys: events outlive the tenants and principals
-- they name. AUTOINCREMENT so that an ID is never reused, even after the
-- newest events are deleted. policies is a JSON array of strings.
CREATE TABLE audit_events (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    tenant     TEXT    NOT NULL DEFAULT '',
    principal  TEXT    NOT NULL,
    action     TEXT    NOT NULL,
    resource   TEXT    NOT NULL,
    decision   TEXT    NOT NULL CHECK (decision IN ('allow', 'deny')),
    policies   TEXT    NOT NULL DEFAULT '[]',
    reason     TEXT    NOT NULL,
    request_id TEXT    NOT NULL
) STRICT;

CREATE INDEX audit_events_tenant ON audit_events (tenant, id);
CREATE INDEX audit_events_principal ON audit_events (principal, id);
CREATE INDEX audit_events_action ON audit_events (action, id);
CREATE INDEX audit_events_resource ON audit_events (resource, id);
CREATE INDEX audit_events_at ON audit_events (at);

-- The authorization epoch: one row (id = 1), bumped by the triggers below in
-- the same transaction as every change to what authorization reads, so that
-- a cached decision is good for exactly as long as the epoch stands. Not
-- bumped by api_tokens (their validity is read on every call) nor by
-- audit_events.
CREATE TABLE authz_epoch (
    id    INTEGER PRIMARY KEY NOT NULL CHECK (id = 1),
    epoch INTEGER NOT NULL
) STRICT;

INSERT INTO authz_epoch (id, epoch) VALUES (1, 1);

-- SQLite has row triggers only: one per table and operation.
CREATE TRIGGER tenants_insert_authz_epoch AFTER INSERT ON tenants
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER tenants_update_authz_epoch AFTER UPDATE ON tenants
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER tenants_delete_authz_epoch AFTER DELETE ON tenants
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;

CREATE TRIGGER principals_insert_authz_epoch AFTER INSERT ON principals
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER principals_update_authz_epoch AFTER UPDATE ON principals
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER principals_delete_authz_epoch AFTER DELETE ON principals
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;

CREATE TRIGGER groups_insert_authz_epoch AFTER INSERT ON groups
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER groups_update_authz_epoch AFTER UPDATE ON groups
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER groups_delete_authz_epoch AFTER DELETE ON groups
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;

CREATE TRIGGER group_members_insert_authz_epoch AFTER INSERT ON group_members
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER group_members_update_authz_epoch AFTER UPDATE ON group_members
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER group_members_delete_authz_epoch AFTER DELETE ON group_members
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;

CREATE TRIGGER policies_insert_authz_epoch AFTER INSERT ON policies
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER policies_update_authz_epoch AFTER UPDATE ON policies
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
CREATE TRIGGER policies_delete_authz_epoch AFTER DELETE ON policies
BEGIN UPDATE authz_epoch SET epoch = epoch + 1; END;
