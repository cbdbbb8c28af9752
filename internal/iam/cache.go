package iam

import (
	"math"
	"slices"
	"strconv"
	"sync"
)

// decisionCache remembers decisions of one epoch. It is bounded by keeping
// two generations: new entries go to cur; when cur is full it becomes prev
// and a fresh cur starts; a hit in prev moves the entry back to cur. That
// keeps what is used often and forgets the rest at the cost of two map
// lookups, an approximation of LRU without a list to maintain.
type decisionCache struct {
	mu    sync.Mutex          // guards everything below
	epoch int64               // the epoch of every entry
	half  int                 // the most entries one generation holds
	cur   map[string]Decision // the newer generation
	prev  map[string]Decision // the older generation; nil when empty
}

func newDecisionCache(size int) *decisionCache {
	half := max(size/2, 1)
	return &decisionCache{epoch: math.MinInt64, half: half, cur: make(map[string]Decision)}
}

// get returns the decision cached for key at epoch.
func (c *decisionCache) get(epoch int64, key string) (Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return Decision{}, false
	}
	if d, ok := c.cur[key]; ok {
		return d, true
	}
	d, ok := c.prev[key]
	if ok {
		delete(c.prev, key)
		c.putLocked(key, d)
	}
	return d, ok
}

// put caches d for key at epoch; a decision of any other epoch than the
// cache's is dropped, so a slow caller holding an old engine cannot plant
// an old answer after a reload.
func (c *decisionCache) put(epoch int64, key string, d Decision) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch != c.epoch {
		return
	}
	c.putLocked(key, d)
}

func (c *decisionCache) putLocked(key string, d Decision) {
	c.cur[key] = d
	if len(c.cur) >= c.half {
		c.prev, c.cur = c.cur, make(map[string]Decision, c.half)
	}
}

// reset empties the cache for a newer epoch; an older one changes nothing.
func (c *decisionCache) reset(epoch int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if epoch <= c.epoch {
		return
	}
	c.epoch, c.cur, c.prev = epoch, make(map[string]Decision), nil
}

// len returns the number of cached decisions.
func (c *decisionCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cur) + len(c.prev)
}

// cacheKey spells everything a decision depends on besides the directory:
// principal, action, the resource with its parents and attributes, and the
// context, each value tagged with its type and maps in key order, so that
// equal requests give equal keys and different ones different keys. It
// reports false for a value it cannot spell.
func cacheKey(r Request) (string, bool) {
	var b []byte
	b = appendStrings(b, r.Principal.Type, r.Principal.Tenant, r.Principal.Name, r.Action,
		r.Resource.Type, r.Resource.Tenant, r.Resource.ID)
	parents := make([]string, len(r.Resource.Parents))
	for i, p := range r.Resource.Parents {
		parents[i] = p.String()
	}
	slices.Sort(parents)
	b = append(b, 'P')
	b = strconv.AppendInt(b, int64(len(parents)), 10)
	b = appendStrings(b, parents...)
	var ok bool
	if b, ok = appendMap(append(b, 'A'), r.Resource.Attrs); !ok {
		return "", false
	}
	if b, ok = appendMap(append(b, 'C'), r.Context); !ok {
		return "", false
	}
	return string(b), true
}

func appendStrings(b []byte, ss ...string) []byte {
	for _, s := range ss {
		b = strconv.AppendQuote(b, s)
	}
	return b
}

func appendMap(b []byte, m map[string]any) ([]byte, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = strconv.AppendInt(b, int64(len(keys)), 10)
	for _, k := range keys {
		b = strconv.AppendQuote(b, k)
		var ok bool
		if b, ok = appendValue(b, m[k]); !ok {
			return nil, false
		}
	}
	return b, true
}

// appendValue spells one value. Sets are sorted: Cedar sets have no order.
func appendValue(b []byte, v any) ([]byte, bool) {
	switch v := v.(type) {
	case string:
		return strconv.AppendQuote(append(b, 's'), v), true
	case int:
		return strconv.AppendInt(append(b, 'i'), int64(v), 10), true
	case int64:
		return strconv.AppendInt(append(b, 'i'), v, 10), true
	case int32:
		return strconv.AppendInt(append(b, 'i'), int64(v), 10), true
	case bool:
		return strconv.AppendBool(append(b, 'b'), v), true
	case EntityRef:
		return strconv.AppendQuote(append(b, 'e'), v.String()), true
	case []string:
		return appendSet(append(b, 'S'), slices.Clone(v)), true
	case []EntityRef:
		refs := make([]string, len(v))
		for i, r := range v {
			refs[i] = r.String()
		}
		return appendSet(append(b, 'E'), refs), true
	}
	return nil, false
}

func appendSet(b []byte, elems []string) []byte {
	slices.Sort(elems)
	elems = slices.Compact(elems)
	b = strconv.AppendInt(b, int64(len(elems)), 10)
	return appendStrings(b, elems...)
}
