package config

// The keys a configuration struct accepts (its yaml tags), and the
// suggestion made for an unknown key.

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// fieldSet is a struct type's keys: the field index of each, and the keys
// in declaration order for messages.
type fieldSet struct {
	index map[string]int
	names []string
}

var fieldCache sync.Map // reflect.Type → *fieldSet

// structFields returns the keys of struct type t, computed once per type.
func structFields(t reflect.Type) *fieldSet {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fieldSet)
	}
	fs := &fieldSet{index: map[string]int{}}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		fs.index[name] = i
		fs.names = append(fs.names, name)
	}
	fieldCache.Store(t, fs)
	return fs
}

// suggest explains an unknown key: a near miss, or the keys allowed there.
func suggest(t reflect.Type, key string, names []string) string {
	if t == kafkaType && strings.EqualFold(key, "embedded") {
		return `for the in-process broker write brokers: embedded`
	}
	best, bestDist := "", 3
	for _, n := range names {
		dist := editDistance(strings.ToLower(key), strings.ToLower(n))
		if strings.EqualFold(key, n) {
			dist = 0
		}
		if dist < bestDist {
			best, bestDist = n, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("did you mean %q?", best)
	}
	return "allowed keys: " + strings.Join(names, ", ")
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
