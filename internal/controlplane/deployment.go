package controlplane

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/better-compute/better-compute/internal/store"
)

// deploymentIDKey is the setting that holds the deployment's id.
const deploymentIDKey = "deployment.id"

// ensureDeploymentID returns the deployment's id, making it on the store's
// first use. It runs in one transaction so that several servers starting
// together on one PostgreSQL agree on a single id.
func ensureDeploymentID(ctx context.Context, st *store.Store) (string, error) {
	var id string
	err := st.InTx(ctx, func(ctx context.Context, q store.Querier) error {
		s, err := q.GetSetting(ctx, deploymentIDKey)
		if err == nil {
			id = s.Value
			return nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		id = rand.Text()
		_, err = q.PutSetting(ctx, deploymentIDKey, id)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("deployment id: %w", err)
	}
	return id, nil
}
