// Package configs holds the example and demo configurations. They are embedded
// so that `projector demo` works from any directory.
package configs

import _ "embed"

// Demo is configs/demo.yaml, the configuration of `projector demo`.
//
//go:embed demo.yaml
var Demo []byte

// Example is configs/example.yaml.
//
//go:embed example.yaml
var Example []byte
