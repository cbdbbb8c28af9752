// Package devices binds reservations on the node: it keeps one CDI spec
// (the CNCF container-device-interface format) per reservation bound here,
// naming exactly the reserved GPUs, so that a container runtime given
// "bettercompute.dev/gpu=<reservation id>" gets those device nodes and
// NVIDIA_VISIBLE_DEVICES set to their UUIDs, and nothing else.
//
// It is the write side of bcd's devices converger: the converger reads the
// desired allocations from the node's spec and calls Writer.Sync, which
// reads the directory, changes only the difference and says what changed.
// Sync is idempotent and safe to kill at any line: every file appears whole
// (temp file and rename) or not at all, and the next Sync finishes the job.
//
// The spec only names the devices. The driver's libraries and binaries are
// not this package's to inject: the NVIDIA container toolkit's own CDI spec
// or its runtime hook (which reads NVIDIA_VISIBLE_DEVICES) does that.
package devices

import (
	"cmp"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
	"tags.cncf.io/container-device-interface/pkg/parser"
)

const (
	// Vendor and Class make up the CDI kind of every spec written here.
	Vendor = "bettercompute.dev"
	// Class is the CDI device class: one device per reservation, holding
	// all of its GPUs, so a runtime is given one name whatever the count.
	Class = "gpu"
	// Kind is the CDI kind, "vendor/class".
	Kind = Vendor + "/" + Class

	// filePrefix marks the files Sync owns in the directory, which it
	// shares with other vendors' specs (/etc/cdi): Sync reads, replaces
	// and removes only files named filePrefix + a reservation id + an
	// extension below, so anything else is never touched.
	filePrefix = "bettercompute-"
	specExt    = ".json"
	envExt     = ".env"
	// tempPrefix and tempSuffix name a file being written. The CDI cache
	// loads only .json and .yaml files, so a runtime never reads one half
	// written; a crash leaves one behind, which the next Sync removes.
	tempPrefix = "." + filePrefix
	tempSuffix = ".tmp"
)

// commonNodes are the control devices every CUDA process opens, whichever
// GPUs it may use; they go in the spec-level edits, which the runtime
// applies with any device of the spec.
var commonNodes = []string{"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}

// reservationIDRE is the shape of a reservation id: "r-" and 26 characters
// of lowercase base32 (16 random bytes), as the control plane makes them.
// It is stricter than the CDI device name rules, which Sync checks as well.
var reservationIDRE = regexp.MustCompile(`^r-[a-z2-7]{26}$`)

// uuidRE is what a GPU or MIG UUID may hold. It keeps commas, '=' and line
// breaks out of NVIDIA_VISIBLE_DEVICES and the env file.
var uuidRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*$`)

// Allocation is one reservation bound on this node.
type Allocation struct {
	// ReservationID names the reservation, and the CDI device.
	ReservationID string
	// GPUs are the reserved GPUs, from the node's inventory: uuid, index
	// and device_path are used.
	GPUs []*agentv1.GPU
}

// DeviceName is the fully qualified CDI device name a container runtime is
// given for a reservation: "bettercompute.dev/gpu=<reservation id>".
func DeviceName(reservationID string) string {
	return parser.QualifiedName(Vendor, Class, reservationID)
}

// ValidateReservationID reports whether id is a reservation id this package
// can name a device and files after.
func ValidateReservationID(id string) error {
	if !reservationIDRE.MatchString(id) {
		return fmt.Errorf("invalid reservation id %q: want r- and 26 lowercase base32 characters", id)
	}
	if err := parser.ValidateDeviceName(id); err != nil {
		return fmt.Errorf("invalid reservation id %q: %w", id, err)
	}
	return nil
}

// reservation is an Allocation checked and put in order: the GPUs sorted
// by index, so that the files do not change when the caller's order does.
type reservation struct {
	id    string
	uuids []string
	nodes []string
}

// check validates allocs as a whole, before anything is written: one bad
// allocation fails the Sync, since writing the others would report a
// partial state as the node's. A GPU in two reservations is refused too;
// the store never books one twice, so it means the input is wrong.
func check(allocs []Allocation) ([]reservation, error) {
	out := make([]reservation, 0, len(allocs))
	ids := make(map[string]bool, len(allocs))
	owner := map[string]string{} // GPU UUID or device path -> reservation id
	for _, a := range allocs {
		if err := ValidateReservationID(a.ReservationID); err != nil {
			return nil, err
		}
		if ids[a.ReservationID] {
			return nil, fmt.Errorf("reservation %s listed twice", a.ReservationID)
		}
		ids[a.ReservationID] = true
		if len(a.GPUs) == 0 {
			return nil, fmt.Errorf("reservation %s has no GPUs", a.ReservationID)
		}
		gpus := slices.Clone(a.GPUs)
		for i, g := range gpus {
			if err := CheckGPU(g); err != nil {
				return nil, fmt.Errorf("reservation %s, GPU %d: %w", a.ReservationID, i, err)
			}
			for _, k := range []string{g.GetUuid(), g.GetDevicePath()} {
				if prev, dup := owner[k]; dup {
					return nil, fmt.Errorf("reservation %s: GPU %s is also in reservation %s", a.ReservationID, k, prev)
				}
				owner[k] = a.ReservationID
			}
		}
		slices.SortStableFunc(gpus, func(x, y *agentv1.GPU) int {
			return cmp.Or(cmp.Compare(x.GetIndex(), y.GetIndex()), strings.Compare(x.GetUuid(), y.GetUuid()))
		})
		r := reservation{id: a.ReservationID}
		for _, g := range gpus {
			r.uuids = append(r.uuids, g.GetUuid())
			r.nodes = append(r.nodes, g.GetDevicePath())
		}
		out = append(out, r)
	}
	return out, nil
}

// CheckGPU refuses a GPU a spec could not name exactly: no or an odd UUID,
// no device path. The gateway books only GPUs that pass, so that no
// reservation ever holds a GPU its node would refuse to bind.
func CheckGPU(g *agentv1.GPU) error {
	switch {
	case g == nil:
		return fmt.Errorf("missing")
	case g.GetUuid() == "":
		return fmt.Errorf("no UUID")
	case !uuidRE.MatchString(g.GetUuid()):
		return fmt.Errorf("invalid UUID %q", g.GetUuid())
	case g.GetDevicePath() == "":
		return fmt.Errorf("%s has no device path", g.GetUuid())
	}
	p := g.GetDevicePath()
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsAny(p, ",\n\r\x00") {
		return fmt.Errorf("%s has an invalid device path %q", g.GetUuid(), p)
	}
	return nil
}
