// Package catalog names GPU models: it turns the product name nvidia-smi
// prints ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB") into a stable
// model key for placement (--model) and a meter for usage (gpu.h100.hours).
//
// Meters name a family, not a variant: every H100 (SXM, PCIe, NVL) is metered
// as gpu.h100.hours, and every A100 (40 or 80 GB, SXM4 or PCIe) as
// gpu.a100.hours. The issue asks for usage "metered as gpu.<model>.hours" with
// gpu.h100.hours as the example, and a price list with one line per family is
// what people read; a price that differs by variant can still key on the
// model key, which usage rows carry beside the meter.
//
// A name the catalog does not know is still bookable: it gets a key derived
// from the name and a meter of its own, so new hardware works on day one and
// the catalog only has to catch up for pretty names and shared meters.
package catalog

import (
	"strings"
)

// Model is one GPU model as placement and metering see it.
type Model struct {
	// Key is the stable identifier: lowercase letters and digits in
	// dash-separated words, such as "h100-sxm" or "a100-sxm4-80gb".
	Key string
	// Name is the name to show people, such as "NVIDIA H100 SXM".
	Name string
	// Meter is the usage meter GPU-hours of this model count against,
	// such as "gpu.h100.hours"; variants of one family share it.
	Meter string
	// MemoryGiB is the nominal memory, as sold; zero when unknown.
	MemoryGiB int
	// Known reports whether the name matched the catalog; false for a
	// model whose key was derived from its name.
	Known bool
}

// Lookup returns the model nvidia-smi's product name stands for. Case,
// spacing, dashes, an "NVIDIA", "Tesla" or "GeForce" prefix and "80GB" versus
// "80 GB" do not matter. A name the catalog does not know gets a derived key
// (see the package comment) and Known false; an empty name gets the key
// "unknown".
func Lookup(name string) Model {
	words := tokens(name)
	for _, e := range table {
		if e.matches(words) {
			return e.Model
		}
	}
	key := deriveKey(name)
	display := strings.Join(strings.Fields(name), " ")
	if display == "" {
		display = key
	}
	return Model{Key: key, Name: display, Meter: "gpu." + key + ".hours"}
}

// ByKey returns the catalog's model with the given key, and whether there is
// one: what validates a requested --model.
func ByKey(key string) (Model, bool) {
	for _, e := range table {
		if e.Key == key {
			return e.Model, true
		}
	}
	return Model{}, false
}

// Models lists the catalog, most specific entries first.
func Models() []Model {
	out := make([]Model, len(table))
	for i, e := range table {
		out[i] = e.Model
	}
	return out
}

// entry is a catalog row: the model, and the word sets that name it. A name
// matches when it holds every word of any one set; the table is tried in
// order, so an entry sits before any more general one that would also match
// (H100 NVL before a bare H100).
type entry struct {
	Model
	match [][]string
}

func (e entry) matches(words map[string]bool) bool {
	for _, set := range e.match {
		all := true
		for _, w := range set {
			if !words[w] {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// tokens splits a product name into lowercase words at anything that is not
// an ASCII letter or digit, and glues a size to its unit ("80 gb" becomes
// "80gb") so both spellings nvidia-smi has used match one word.
func tokens(name string) map[string]bool {
	var words []string
	for _, f := range strings.FieldsFunc(strings.ToLower(name), func(r rune) bool { return !isAlnum(r) }) {
		if f == "gb" && len(words) > 0 && isDigits(words[len(words)-1]) {
			words[len(words)-1] += f
			continue
		}
		words = append(words, f)
	}
	set := make(map[string]bool, len(words))
	for _, w := range words {
		set[w] = true
	}
	return set
}

// maxKeyLen bounds a derived key so that a meter name stays short enough
// for a label or a column, whatever a driver reports.
const maxKeyLen = 63

// deriveKey makes a key from a name the catalog does not know: lowercase,
// every run of other characters one dash, no "nvidia-" prefix, at most
// maxKeyLen characters; "unknown" when nothing is left.
func deriveKey(name string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if isAlnum(r) {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	key := b.String()
	if rest, ok := strings.CutPrefix(key, "nvidia-"); ok {
		key = rest
	}
	if len(key) > maxKeyLen {
		key = strings.TrimRight(key[:maxKeyLen], "-")
	}
	if key == "" {
		return "unknown"
	}
	return key
}

func isAlnum(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') }

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}
