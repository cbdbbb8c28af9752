package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/better-compute/better-compute/internal/iam"
	"github.com/better-compute/better-compute/internal/store"
)

// The identity a new deployment starts with: the platform tenant, its
// admins group with the policy that lets it do everything, and one admin
// user whose token is written to the data dir.
const (
	// PlatformTenant is the fleet operator's tenant.
	PlatformTenant = "platform"
	// AdminUser is the first platform admin.
	AdminUser = "admin"
	// AdminTokenFile is the name, in the data dir, of the file holding the
	// first admin's API token.
	AdminTokenFile = "admin.token"

	adminsGroup         = "admins"
	platformAdminPolicy = "platform-admins"
	bootstrapKey        = "bootstrap.done"
	adminTokenTTL       = 365 * 24 * time.Hour
)

// bootstrap creates the platform tenant and its admin on the store's first
// use and writes the admin's token to <dataDir>/admin.token (0600). It runs
// in one transaction, so of several servers starting together exactly one
// bootstraps. It returns the token file's path when the file exists.
func bootstrap(ctx context.Context, st *store.Store, dataDir string, logger *slog.Logger) (string, error) {
	path := ""
	if dataDir != "" {
		path = filepath.Join(dataDir, AdminTokenFile)
	}
	wrote := false
	err := st.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		wrote = false
		if _, err := q.GetSetting(ctx, bootstrapKey); err == nil {
			return nil
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if path == "" {
			return errors.New("the first start of a new store needs --data-dir, to write the platform admin's token there")
		}
		secret, err := createPlatformAdmin(ctx, q)
		if err != nil {
			return err
		}
		if err := writePrivate(path, secret+"\n"); err != nil {
			return err
		}
		wrote = true
		_, err = q.PutSetting(ctx, bootstrapKey, "platform tenant and admin created")
		return err
	})
	if err != nil {
		if wrote {
			_ = os.Remove(path) // the token it holds was rolled back
		}
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if wrote {
		logger.Info("created the platform tenant and its admin; the admin's API token is in the data dir", "file", path)
	}
	if path != "" {
		if _, err := os.Stat(path); err == nil {
			return path, nil
		}
	}
	return "", nil
}

// createPlatformAdmin writes the platform tenant, group, policy, admin user
// and the admin's token, and returns the token's secret.
func createPlatformAdmin(ctx context.Context, q store.Querier) (string, error) {
	if _, err := q.CreateTenant(ctx, store.Tenant{Name: PlatformTenant, DisplayName: "Platform", Platform: true}); err != nil {
		return "", err
	}
	if _, err := q.CreateGroup(ctx, store.Group{Tenant: PlatformTenant, Name: adminsGroup, Description: "Operators of the fleet: may do everything"}); err != nil {
		return "", err
	}
	if _, err := q.PutPolicy(ctx, store.Policy{Tenant: PlatformTenant, Name: platformAdminPolicy, Body: iam.PlatformAdminsPolicy()}); err != nil {
		return "", err
	}
	if _, err := q.CreatePrincipal(ctx, store.Principal{Tenant: PlatformTenant, Name: AdminUser, Kind: store.PrincipalUser, DisplayName: "Platform admin"}); err != nil {
		return "", err
	}
	if err := q.AddGroupMember(ctx, PlatformTenant, adminsGroup, AdminUser); err != nil {
		return "", err
	}
	now, err := q.Now(ctx)
	if err != nil {
		return "", err
	}
	id, secret, hash := iam.NewToken()
	if _, err := q.CreateToken(ctx, store.Token{
		ID: id, Tenant: PlatformTenant, Principal: AdminUser, SecretHash: hash,
		Description: "created on the first start", ExpiresAt: now.Add(adminTokenTTL),
	}); err != nil {
		return "", err
	}
	if _, err := q.InsertAuditEvent(ctx, store.AuditEvent{
		Tenant: PlatformTenant, Action: "compute:system:bootstrap", Resource: `System::"deployment"`,
		Decision: "allow", Reason: "first start: created the platform tenant, its admins group and policy, and user admin",
	}); err != nil {
		return "", err
	}
	return secret, nil
}

// writePrivate writes a secret file atomically, readable by its owner only.
func writePrivate(path, content string) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op once renamed
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
