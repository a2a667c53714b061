package sideeffects

import (
	"sort"
	"strings"
)

// overlay stages writes on top of another KV (the executor's transaction, or
// MemStore's map) so that an update that fails can be dropped whole: merge
// copies its writes into the parent only once the update succeeded.
type overlay struct {
	parent KV
	writes map[string][]byte
}

func newOverlay(p KV) *overlay { return &overlay{parent: p, writes: map[string][]byte{}} }

func (o *overlay) Get(k []byte) ([]byte, bool, error) {
	if v, ok := o.writes[string(k)]; ok {
		return v, true, nil
	}
	return o.parent.Get(k)
}

func (o *overlay) Set(k, v []byte) { o.writes[string(k)] = v }

// Scan merges the parent's keys with the staged writes, in key order. Scans
// are rare (Recover, listing), so a merge through a map is fine.
func (o *overlay) Scan(prefix []byte, fn func(k, v []byte) error) error {
	merged := map[string][]byte{}
	if err := o.parent.Scan(prefix, func(k, v []byte) error {
		merged[string(k)] = append([]byte(nil), v...)
		return nil
	}); err != nil {
		return err
	}
	for k, v := range o.writes {
		if strings.HasPrefix(k, string(prefix)) {
			merged[k] = v
		}
	}
	keys := make([]string, 0, len(merged))
	for k := range merged {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := fn([]byte(k), merged[k]); err != nil {
			return err
		}
	}
	return nil
}

func (o *overlay) merge() {
	for k, v := range o.writes {
		o.parent.Set([]byte(k), v)
	}
}
