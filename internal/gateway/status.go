package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"github.com/better-compute/better-compute/internal/agent/devices"
	"github.com/better-compute/better-compute/internal/capacity/catalog"
	"github.com/better-compute/better-compute/internal/store"
)

// maxSectionName bounds an inventory section's name.
const maxSectionName = 32

// storeStatus stores a StatusReport in one transaction: every section
// that carries content (after checking its hash; a section without content
// is unchanged and left as stored, unless its hash is that of no bytes:
// then it is empty now), and the conditions, which are complete in every
// report. Nothing is stored when any section is malformed.
func (g *Gateway) storeStatus(ctx context.Context, s *session, r *agentv1.StatusReport) error {
	var sections []store.InventorySection
	for _, sec := range r.GetSections() {
		if !validSectionName(sec.GetName()) {
			return errProtocol("inventory section name %q: want 1 to %d of a-z, 0-9, '-', '_', '.'", sec.GetName(), maxSectionName)
		}
		sum := sha256.Sum256(sec.GetContent())
		if len(sec.GetContent()) == 0 && !bytes.Equal(sec.GetHash(), sum[:]) {
			continue // unchanged: the node sends only the hash of what it sent before
		}
		// Empty content with the hash of no bytes is a section that is
		// now empty (the last disk gone): stored, not taken as unchanged.
		if !bytes.Equal(sum[:], sec.GetHash()) {
			return errProtocol("inventory section %q: the hash is not the SHA-256 of the content", sec.GetName())
		}
		sections = append(sections, store.InventorySection{NodeID: s.nodeID, Name: sec.GetName(), Hash: sum[:], Content: sec.GetContent()})
	}
	conditions, err := conditionsJSON(r.GetConditions())
	if err != nil {
		return errProtocol("conditions: %v", err)
	}
	// The sections that labels and devices come from, decoded once.
	decoded := map[string]*agentv1.Inventory{}
	for _, sec := range sections {
		if labelSections[sec.Name] {
			inv := &agentv1.Inventory{}
			if err := proto.Unmarshal(sec.Content, inv); err != nil {
				return errProtocol("inventory section %q: %v", sec.Name, err)
			}
			decoded[sec.Name] = inv
		}
	}
	gpus, syncDevices := decoded["gpus"]
	devices := gpuDevices(s.nodeID, gpus)
	var taken []string
	// Bulk: after a restart every node reports at once, and an API call
	// must not wait behind all of them for SQLite's write lock.
	err = g.st.InSharedTx(store.Bulk(ctx), func(ctx context.Context, q store.Querier) error {
		for _, sec := range sections {
			if err := q.PutInventorySection(ctx, sec); err != nil {
				return err
			}
		}
		if syncDevices {
			// Every GPU the node reports is a bookable device, keyed by its
			// UUID, in the same transaction as the inventory that shows it.
			var err error
			if taken, err = q.SyncNodeDevices(ctx, s.nodeID, devices); err != nil {
				return err
			}
		}
		if len(decoded) > 0 {
			node, err := q.GetNode(ctx, s.nodeID)
			if err != nil {
				return err
			}
			if labels, changed := withInventoryLabels(node.InventoryLabels, decoded); changed {
				if err := q.SetNodeInventoryLabels(ctx, s.nodeID, labels); err != nil {
					return err
				}
			}
		}
		return q.SetNodeConditions(ctx, s.nodeID, conditions)
	})
	if err != nil {
		return fmt.Errorf("store status report: %w", err)
	}
	if len(taken) > 0 {
		// Two nodes with one GPU: cloned fake hardware, a moved card whose
		// old node was not revoked, or a node lying. Either way the GPU
		// stays with the node that had it; an operator must look.
		g.log.Warn("gateway: a node reports GPUs another node holds; they are not bookable on it until that node is revoked",
			"node", s.nodeID, "gpus", taken)
	}
	return nil
}

// conditionsJSON is how a node's conditions are stored: a JSON array whose
// elements are agentv1.Condition in protojson form (lowerCamel field
// names, RFC 3339 times), such as
// [{"type":"GPUHealthy","ok":true,"message":"","since":"2025-01-02T03:04:05Z"}].
// The API decodes each element with protojson.Unmarshal.
func conditionsJSON(conds []*agentv1.Condition) ([]byte, error) {
	out := []byte{'['}
	for i, c := range conds {
		if i > 0 {
			out = append(out, ',')
		}
		b, err := protojson.Marshal(c)
		if err != nil {
			return nil, err
		}
		out = append(out, b...)
	}
	return append(out, ']'), nil
}

// validSectionName accepts short lowercase names, so that a future section
// ("pcie", "infiniband") is stored without a gateway change.
func validSectionName(name string) bool {
	if name == "" || len(name) > maxSectionName {
		return false
	}
	for _, c := range []byte(name) {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// gpuDevices turns a "gpus" inventory section into the node's bookable
// devices, naming each GPU's model by the catalog. A GPU the node could not
// bind (devices.CheckGPU: no UUID, which is the key, or no device path,
// when nvidia-smi reports no minor number) is left out: booked, it would
// fail every spec the node applies.
func gpuDevices(nodeID string, inv *agentv1.Inventory) []store.Device {
	var out []store.Device
	for _, gpu := range inv.GetGpus().GetDevices() {
		if devices.CheckGPU(gpu) != nil {
			continue
		}
		out = append(out, store.Device{
			UUID:        gpu.GetUuid(),
			NodeID:      nodeID,
			Index:       int(gpu.GetIndex()),
			ModelKey:    catalog.Lookup(gpu.GetName()).Key,
			ModelName:   gpu.GetName(),
			MemoryBytes: gpu.GetMemoryBytes(),
		})
	}
	return out
}
