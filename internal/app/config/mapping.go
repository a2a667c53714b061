package config

// A mapping's entries as the decoder sees them: explicit keys, then those
// brought in by YAML merge keys.

import (
	"gopkg.in/yaml.v3"
)

// kv is one entry of a mapping.
type kv struct{ k, v *yaml.Node }

// pairs lists a mapping's entries, with YAML merge keys ("<<: *anchor")
// resolved: explicit keys win over merged ones, earlier merges over later.
// Duplicate explicit keys and non-string keys are errors.
func (d *decoder) pairs(n *yaml.Node, path string) []kv {
	var explicit, merged []kv
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.Value == "<<" && (k.Tag == "" || k.Tag == "!" || k.Tag == "!!merge") {
			merged = append(merged, d.mergePairs(v, path)...)
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!null" {
			d.fail(path, k, "keys must be strings, got %s", describe(k))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.fail(joinPath(path, k.Value), k, "duplicate key (first given at line %d)", line)
			continue
		}
		seen[k.Value] = k.Line
		explicit = append(explicit, kv{k, v})
	}
	var out []kv
	for _, p := range merged {
		if _, ok := seen[p.k.Value]; ok {
			continue
		}
		seen[p.k.Value] = p.k.Line
		out = append(out, p)
	}
	return append(out, explicit...)
}

func (d *decoder) mergePairs(n *yaml.Node, path string) []kv {
	n, ok := d.resolve(n, path)
	if !ok {
		return nil
	}
	switch n.Kind {
	case yaml.MappingNode:
		return d.pairs(n, path)
	case yaml.SequenceNode:
		var out []kv
		for _, e := range n.Content {
			e, ok := d.resolve(e, path)
			if !ok {
				continue
			}
			if e.Kind != yaml.MappingNode {
				d.fail(joinPath(path, "<<"), e, "a merge key takes mappings, got %s", describe(e))
				continue
			}
			out = append(out, d.pairs(e, path)...)
		}
		return out
	}
	d.fail(joinPath(path, "<<"), n, "a merge key takes a mapping or a list of mappings, got %s", describe(n))
	return nil
}
