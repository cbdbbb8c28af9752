-- 0002_iam: tenants, principals, groups, API tokens, policies, the audit log
-- and the authorization epoch.
--
-- Names are the keys (policies refer to them, so they never change).

CREATE TABLE tenants (
    name         text        PRIMARY KEY,
    display_name text        NOT NULL,
    platform     boolean     NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL
);

-- At most one platform tenant: the fleet operator's.
CREATE UNIQUE INDEX tenants_one_platform ON tenants (platform) WHERE platform;

-- Users and service accounts share one namespace per tenant.
CREATE TABLE principals (
    tenant       text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name         text        NOT NULL,
    kind         text        NOT NULL CHECK (kind IN ('user', 'service_account')),
    display_name text        NOT NULL,
    email        text        NOT NULL,
    description  text        NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE groups (
    tenant      text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name        text        NOT NULL,
    description text        NOT NULL,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- A member is in the group's tenant: both foreign keys share the tenant
-- column, so a membership can never cross tenants.
CREATE TABLE group_members (
    tenant     text NOT NULL,
    group_name text NOT NULL,
    member     text NOT NULL,
    PRIMARY KEY (tenant, group_name, member),
    FOREIGN KEY (tenant, group_name) REFERENCES groups (tenant, name) ON DELETE CASCADE,
    FOREIGN KEY (tenant, member) REFERENCES principals (tenant, name) ON DELETE CASCADE
);

-- A principal's groups, and the cascade when a principal is deleted.
CREATE INDEX group_members_member ON group_members (tenant, member);

-- The secret is never stored, only its SHA-256.
CREATE TABLE api_tokens (
    id           text        PRIMARY KEY,
    tenant       text        NOT NULL,
    principal    text        NOT NULL,
    secret_hash  bytea       NOT NULL,
    description  text        NOT NULL,
    created_at   timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL,
    last_used_at timestamptz,
    revoked_at   timestamptz,
    FOREIGN KEY (tenant, principal) REFERENCES principals (tenant, name) ON DELETE CASCADE
);

-- A tenant's tokens newest first; the second also serves one principal's
-- tokens and the cascade when a principal is deleted.
CREATE INDEX api_tokens_tenant_created ON api_tokens (tenant, created_at);
CREATE INDEX api_tokens_principal ON api_tokens (tenant, principal, created_at);

CREATE TABLE policies (
    tenant     text        NOT NULL REFERENCES tenants (name) ON DELETE CASCADE,
    name       text        NOT NULL,
    body       text        NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- The audit log. No foreign keys: events outlive the tenants and principals
-- they name.
CREATE TABLE audit_events (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at         timestamptz NOT NULL,
    tenant     text        NOT NULL DEFAULT '',
    principal  text        NOT NULL,
    action     text        NOT NULL,
    resource   text        NOT NULL,
    decision   text        NOT NULL CHECK (decision IN ('allow', 'deny')),
    policies   text[]      NOT NULL DEFAULT '{}',
    reason     text        NOT NULL,
    request_id text        NOT NULL
);

CREATE INDEX audit_events_tenant ON audit_events (tenant, id);
CREATE INDEX audit_events_principal ON audit_events (principal, id);
CREATE INDEX audit_events_action ON audit_events (action, id);
CREATE INDEX audit_events_resource ON audit_events (resource, id);
CREATE INDEX audit_events_at ON audit_events (at);

-- The authorization epoch: one row (id is true), bumped by the triggers below
-- in the same transaction as every change to what authorization reads, so
-- that a cached decision is good for exactly as long as the epoch stands. A
-- row, not a sequence, because a sequence does not roll back. Not bumped by
-- api_tokens (their validity is read on every call) nor by audit_events.
CREATE TABLE authz_epoch (
    id    boolean PRIMARY KEY DEFAULT true CHECK (id),
    epoch bigint  NOT NULL
);

INSERT INTO authz_epoch (id, epoch) VALUES (true, 1);

-- Once per statement rather than per row, so that a statement touching many
-- rows updates the epoch row once. It also fires for a statement that changed
-- nothing, which costs callers no more than a cache miss.
CREATE FUNCTION bump_authz_epoch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE authz_epoch SET epoch = epoch + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER tenants_authz_epoch AFTER INSERT OR UPDATE OR DELETE ON tenants
    FOR EACH STATEMENT EXECUTE FUNCTION bump_authz_epoch();
CREATE TRIGGER principals_authz_epoch AFTER INSERT OR UPDATE OR DELETE ON principals
    FOR EACH STATEMENT EXECUTE FUNCTION bump_authz_epoch();
CREATE TRIGGER groups_authz_epoch AFTER INSERT OR UPDATE OR DELETE ON groups
    FOR EACH STATEMENT EXECUTE FUNCTION bump_authz_epoch();
CREATE TRIGGER group_members_authz_epoch AFTER INSERT OR UPDATE OR DELETE ON group_members
    FOR EACH STATEMENT EXECUTE FUNCTION bump_authz_epoch();
CREATE TRIGGER policies_authz_epoch AFTER INSERT OR UPDATE OR DELETE ON policies
    FOR EACH STATEMENT EXECUTE FUNCTION bump_authz_epoch();
