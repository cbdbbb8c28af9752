package inventory

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/better-compute/better-compute/gen/bettercompute/agent/v1"
)

// SectionNames are the inventory's sections, in the order Sections returns
// them.
var SectionNames = []string{"host", "cpu", "memory", "disks", "nics", "gpus"}

// section reads and writes one section's field of an Inventory.
type section struct {
	get func(*agentv1.Inventory) *agentv1.Inventory // an Inventory holding only the section
	set func(dst, src *agentv1.Inventory)
}

var sections = map[string]section{
	"host": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Host: i.GetHost()} },
		func(d, s *agentv1.Inventory) { d.Host = s.Host },
	},
	"cpu": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Cpu: i.GetCpu()} },
		func(d, s *agentv1.Inventory) { d.Cpu = s.Cpu },
	},
	"memory": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Memory: i.GetMemory()} },
		func(d, s *agentv1.Inventory) { d.Memory = s.Memory },
	},
	"disks": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Disks: i.GetDisks()} },
		func(d, s *agentv1.Inventory) { d.Disks = s.Disks },
	},
	"nics": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Nics: i.GetNics()} },
		func(d, s *agentv1.Inventory) { d.Nics = s.Nics },
	},
	"gpus": {
		func(i *agentv1.Inventory) *agentv1.Inventory { return &agentv1.Inventory{Gpus: i.GetGpus()} },
		func(d, s *agentv1.Inventory) { d.Gpus = s.Gpus },
	},
}

// deterministic is the encoding sections are hashed in. The inventory has no
// maps, so its bytes depend only on its content for a given protobuf
// library; both ends hash what they received or sent, never re-encode.
var deterministic = proto.MarshalOptions{Deterministic: true}

// Sections splits an inventory into its six sections, in SectionNames order,
// each with its content (an Inventory holding only that section, in
// deterministic binary form) and the SHA-256 of that content. Unchanged
// content gives an identical hash. A section with nothing in it (no disks,
// say) has empty content, whose hash is that of no bytes.
func Sections(inv *agentv1.Inventory) []*agentv1.InventorySection {
	if invalidUTF8(inv.ProtoReflect()) {
		// procfs or nvidia-smi can hand us bytes that are not UTF-8, which
		// protobuf refuses to encode: repair a copy rather than send the
		// section empty (the control plane would store it so).
		inv = proto.CloneOf(inv)
		repairUTF8(inv.ProtoReflect())
	}
	out := make([]*agentv1.InventorySection, 0, len(SectionNames))
	for _, name := range SectionNames {
		content, err := deterministic.Marshal(sections[name].get(inv))
		if err != nil {
			// Cannot happen once the strings are valid; keep the
			// section's place, empty, rather than lose the whole report.
			content = nil
		}
		sum := sha256.Sum256(content)
		out = append(out, &agentv1.InventorySection{Name: name, Hash: sum[:], Content: content})
	}
	return out
}

// Merge rebuilds an inventory from sections as Sections made them: the
// control plane keeps the latest content of each section a node sent and
// merges them. Each section's content must match its hash and hold only its
// own field; a section sent without content (unchanged, so its content must
// come from what was stored) cannot be merged and is an error, as are an
// unknown or repeated name. Missing sections stay unset.
func Merge(sections []*agentv1.InventorySection) (*agentv1.Inventory, error) {
	inv := &agentv1.Inventory{}
	seen := map[string]bool{}
	for _, s := range sections {
		if err := mergeSection(inv, s, seen); err != nil {
			return nil, fmt.Errorf("error merging inventory section %q: %w", s.GetName(), err)
		}
	}
	return inv, nil
}

func mergeSection(inv *agentv1.Inventory, s *agentv1.InventorySection, seen map[string]bool) error {
	sec, ok := sections[s.GetName()]
	if !ok {
		return fmt.Errorf("unknown section (want one of %v)", SectionNames)
	}
	if seen[s.GetName()] {
		return fmt.Errorf("section given twice")
	}
	seen[s.GetName()] = true
	sum := sha256.Sum256(s.GetContent())
	if !bytes.Equal(sum[:], s.GetHash()) {
		if len(s.GetContent()) == 0 {
			return fmt.Errorf("no content (an unchanged section must be merged from the stored content)")
		}
		return fmt.Errorf("content does not match its hash")
	}
	var part agentv1.Inventory
	if err := proto.Unmarshal(s.GetContent(), &part); err != nil {
		return fmt.Errorf("error decoding content: %w", err)
	}
	// The content must hold its own section and nothing else.
	only := &agentv1.Inventory{}
	sec.set(only, &part)
	if !proto.Equal(only, &part) {
		return fmt.Errorf("content holds fields of other sections")
	}
	sec.set(inv, &part)
	return nil
}

// invalidUTF8 reports whether any string in m, however deep, is not UTF-8.
func invalidUTF8(m protoreflect.Message) bool {
	bad := false
	walkStrings(m, func(s string) string {
		bad = bad || !utf8.ValidString(s)
		return s
	})
	return bad
}

// repairUTF8 replaces every invalid byte sequence in m's strings with
// U+FFFD.
func repairUTF8(m protoreflect.Message) {
	walkStrings(m, func(s string) string { return strings.ToValidUTF8(s, "\uFFFD") })
}

// walkStrings sets every string field of m, and of the messages in it, to
// f of its value. The inventory has no maps, but lists of strings and of
// messages.
func walkStrings(m protoreflect.Message, f func(string) string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.StringKind:
			l := v.List()
			for i := range l.Len() {
				l.Set(i, protoreflect.ValueOfString(f(l.Get(i).String())))
			}
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				walkStrings(l.Get(i).Message(), f)
			}
		case fd.Kind() == protoreflect.StringKind:
			m.Set(fd, protoreflect.ValueOfString(f(v.String())))
		case fd.Message() != nil && !fd.IsMap():
			walkStrings(v.Message(), f)
		}
		return true
	})
}
