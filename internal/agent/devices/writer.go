package devices

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"tags.cncf.io/container-device-interface/pkg/cdi"
	specs "tags.cncf.io/container-device-interface/specs-go"
)

// Writer keeps one CDI spec file per reservation in Dir, vendor
// "bettercompute.dev", class "gpu": Dir/bettercompute-<id>.json. Beside each
// spec it keeps the reservation's env file, Dir/bettercompute-<id>.env.
//
// The env file lives in Dir rather than a sibling so that one directory
// holds the whole binding of a reservation, one Sync owns it, and one
// --cdi-dir flag points at it; the CDI cache loads only .json and .yaml
// files, so runtimes never mistake it for a spec.
//
// One converger owns a Dir: Syncs on the same Dir must not run at once.
type Writer struct {
	// Dir is the CDI spec directory, /etc/cdi on a real node; created
	// (0755) when missing.
	Dir string
}

// Changes is what one Sync did, by reservation id, each list sorted.
type Changes struct {
	// Written lists reservations whose spec or env file was created or
	// replaced.
	Written []string
	// Removed lists reservations whose files were deleted because they
	// are no longer allocated here.
	Removed []string
}

// Empty reports whether the Sync changed nothing.
func (c Changes) Empty() bool { return len(c.Written) == 0 && len(c.Removed) == 0 }

// Sync makes Dir hold exactly the specs and env files for allocs: it writes
// those that are missing or differ (atomically, mode 0644), removes those of
// reservations not in allocs, and leaves files it does not own alone. A Sync
// over an unchanged set writes nothing. Invalid input fails before anything
// is written; an I/O error stops the Sync and returns what it had changed by
// then, for the next Sync to finish.
func (w *Writer) Sync(allocs []Allocation) (Changes, error) {
	var ch Changes
	res, err := check(allocs)
	if err != nil {
		return ch, err
	}
	// Render everything first, so that a spec the CDI package rejects
	// fails the Sync before any file changes.
	want := make(map[string][]byte, 2*len(res)) // file name -> content
	for _, r := range res {
		spec, err := renderSpec(r)
		if err != nil {
			return ch, err
		}
		want[specFile(r.id)] = spec
		want[envFile(r.id)] = renderEnv(r)
	}
	if err := os.MkdirAll(w.Dir, 0o755); err != nil {
		return ch, fmt.Errorf("error creating CDI directory: %w", err)
	}
	have, err := w.owned()
	if err != nil {
		return ch, err
	}

	written, removed := map[string]bool{}, map[string]bool{}
	// Write before removing, and the env file before the spec: the spec is
	// what makes the device usable, so it appears last and goes first.
	for _, r := range res {
		for _, name := range []string{envFile(r.id), specFile(r.id)} {
			if cur, ok := have[name]; ok && bytes.Equal(cur, want[name]) {
				continue
			}
			if err := w.write(name, want[name]); err != nil {
				return ch.with(written, removed), err
			}
			written[r.id] = true
		}
	}
	var stale []string
	for name := range have {
		if _, ok := want[name]; !ok {
			stale = append(stale, name)
		}
	}
	// A reservation's env file sorts before its spec (".env" < ".json"), so
	// the reverse order removes each spec before its env file.
	slices.Sort(stale)
	slices.Reverse(stale)
	for _, name := range stale {
		if err := os.Remove(filepath.Join(w.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return ch.with(written, removed), fmt.Errorf("error removing %s: %w", name, err)
		}
		removed[ownedID(name)] = true
	}
	if len(written)+len(removed) > 0 {
		if err := syncDir(w.Dir); err != nil {
			return ch.with(written, removed), err
		}
	}
	return ch.with(written, removed), nil
}

func (c Changes) with(written, removed map[string]bool) Changes {
	c.Written = slices.Sorted(maps.Keys(written))
	c.Removed = slices.Sorted(maps.Keys(removed))
	return c
}

// owned reads the files Sync owns in Dir, by name, and removes temp files
// a crashed Sync left behind. Other files are not read, let alone changed.
func (w *Writer) owned() (map[string][]byte, error) {
	entries, err := os.ReadDir(w.Dir)
	if err != nil {
		return nil, fmt.Errorf("error reading CDI directory: %w", err)
	}
	have := map[string][]byte{}
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, tempPrefix) && strings.HasSuffix(name, tempSuffix) && e.Type().IsRegular() {
			if err := os.Remove(filepath.Join(w.Dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("error removing stale temp file %s: %w", name, err)
			}
			continue
		}
		if ownedID(name) == "" || !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(w.Dir, name))
		if err != nil {
			return nil, fmt.Errorf("error reading %s: %w", name, err)
		}
		have[name] = b
	}
	return have, nil
}

// write replaces Dir/name with data atomically: a temp file in Dir, synced,
// made 0644, then renamed over the name. A spec is read back with the CDI
// package before the rename, so that a spec a runtime would refuse never
// lands.
func (w *Writer) write(name string, data []byte) (err error) {
	f, err := os.CreateTemp(w.Dir, tempPrefix+"*"+tempSuffix)
	if err != nil {
		return fmt.Errorf("error creating temp file for %s: %w", name, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("error writing %s: %w", name, err)
	}
	if strings.HasSuffix(name, specExt) {
		if _, err := cdi.ReadSpec(tmp, 0); err != nil {
			return fmt.Errorf("error validating %s: %w", name, err)
		}
	}
	if err := os.Rename(tmp, filepath.Join(w.Dir, name)); err != nil {
		return fmt.Errorf("error renaming %s into place: %w", name, err)
	}
	return nil
}

// syncDir makes renames and removals in dir durable, so that a power loss
// cannot bring back a spec the node has already reported removed.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("error opening CDI directory to sync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("error syncing CDI directory: %w", err)
	}
	return nil
}

func specFile(id string) string { return filePrefix + id + specExt }
func envFile(id string) string  { return filePrefix + id + envExt }

// ownedID returns the reservation id a file Sync owns is named for, or ""
// when the name is not one of Sync's: filePrefix, a valid reservation id,
// and specExt or envExt.
func ownedID(name string) string {
	rest, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return ""
	}
	for _, ext := range []string{specExt, envExt} {
		if id, ok := strings.CutSuffix(rest, ext); ok && reservationIDRE.MatchString(id) {
			return id
		}
	}
	return ""
}

// renderSpec makes the CDI spec for r, checked with the CDI package's own
// validation: one device named by the reservation id holding its GPU nodes
// and NVIDIA_VISIBLE_DEVICES, and the common control nodes spec-wide.
func renderSpec(r reservation) ([]byte, error) {
	dev := specs.Device{
		Name: r.id,
		ContainerEdits: specs.ContainerEdits{
			Env: []string{visibleDevices(r)},
		},
	}
	for _, p := range r.nodes {
		dev.ContainerEdits.DeviceNodes = append(dev.ContainerEdits.DeviceNodes, &specs.DeviceNode{Path: p})
	}
	spec := &specs.Spec{Version: specs.CurrentVersion, Kind: Kind, Devices: []specs.Device{dev}}
	for _, p := range commonNodes {
		spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, &specs.DeviceNode{Path: p})
	}
	for _, edits := range []*specs.ContainerEdits{&spec.ContainerEdits, &dev.ContainerEdits} {
		if err := (&cdi.ContainerEdits{ContainerEdits: edits}).Validate(); err != nil {
			return nil, fmt.Errorf("reservation %s: invalid CDI edits: %w", r.id, err)
		}
	}
	if err := specs.ValidateVersion(spec); err != nil {
		return nil, fmt.Errorf("reservation %s: %w", r.id, err)
	}
	b, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("error encoding the CDI spec of %s: %w", r.id, err)
	}
	return append(b, '\n'), nil
}

// renderEnv makes the env file for r, KEY=value lines a shell, systemd's
// EnvironmentFile and docker --env-file all read.
func renderEnv(r reservation) []byte {
	return []byte("BETTERCOMPUTE_RESERVATION=" + r.id + "\n" + visibleDevices(r) + "\n")
}

// visibleDevices is the NVIDIA_VISIBLE_DEVICES setting for r: its GPUs'
// UUIDs in index order; UUIDs rather than indexes because indexes are not
// stable across reboots or inside the container.
func visibleDevices(r reservation) string {
	return "NVIDIA_VISIBLE_DEVICES=" + strings.Join(r.uuids, ",")
}
