package config

import (
	"encoding"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written in YAML as a Go duration string
// ("40s", "5m", "168h", "1h30m") or with a leading whole number of days
// ("7d", "1d12h"; a day is 24h). A bare number is an error: the unit is
// never guessed.
type Duration time.Duration

// ParseDuration parses the YAML form of a Duration.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("invalid duration %q: empty", s)
	}
	neg := false
	body := t
	if body[0] == '-' || body[0] == '+' {
		neg = body[0] == '-'
		body = body[1:]
		if body == "" {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
	}
	var days int64
	if i := strings.IndexByte(body, 'd'); i >= 0 {
		n, err := strconv.ParseInt(body[:i], 10, 64)
		if err != nil || i == 0 || n < 0 {
			return 0, fmt.Errorf("invalid duration %q: days must be a whole number before the other units, e.g. 7d or 1d12h", s)
		}
		if n > math.MaxInt64/int64(24*time.Hour) {
			return 0, fmt.Errorf("invalid duration %q: out of range", s)
		}
		days = n
		body = body[i+1:]
	}
	var rest time.Duration
	if body != "" {
		if body[0] == '-' || body[0] == '+' {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		d, err := time.ParseDuration(body)
		if err != nil {
			if _, nerr := strconv.ParseFloat(body, 64); nerr == nil {
				return 0, fmt.Errorf("invalid duration %q: a unit is required, e.g. 5s, 5m, 168h or 7d", s)
			}
			return 0, fmt.Errorf("invalid duration %q: use a number with a unit (ms, s, m, h, d), e.g. 5s, 5m, 168h or 7d", s)
		}
		rest = d
	}
	total := time.Duration(days) * 24 * time.Hour
	if rest > math.MaxInt64-total {
		return 0, fmt.Errorf("invalid duration %q: out of range", s)
	}
	total += rest
	if neg {
		total = -total
	}
	return Duration(total), nil
}

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// String formats d like time.Duration.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error { return parseInto(d, ParseDuration, b) }

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalScalar(n, "a duration such as 5m", d)
}

// ByteSize is a size in bytes, written in YAML as an integer number of bytes
// or a number with a unit: B, KB, MB, GB, TB (powers of 1000) or KiB, MiB,
// GiB, TiB (powers of 1024); units are case-insensitive, e.g. "64MiB", "1.5GiB".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   float64
}{
	// Longest suffixes first so "MiB" is not taken for "B".
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"b", 1},
}

// ParseByteSize parses the YAML form of a ByteSize.
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	lower := strings.ToLower(t)
	num, mult := lower, 1.0
	for _, u := range byteUnits {
		if strings.HasSuffix(lower, u.suffix) {
			num, mult = strings.TrimSpace(lower[:len(lower)-len(u.suffix)]), u.mult
			break
		}
	}
	if num == "" {
		return 0, fmt.Errorf("invalid size %q: use bytes or a number with a unit, e.g. 64MiB", s)
	}
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		v := float64(n) * mult
		if v >= math.MaxInt64 || v <= math.MinInt64 {
			return 0, fmt.Errorf("invalid size %q: out of range", s)
		}
		if mult == 1 {
			return ByteSize(n), nil
		}
		return ByteSize(v), nil
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("invalid size %q: use bytes or a number with a unit, e.g. 64MiB", s)
	}
	v := f * mult
	if v >= math.MaxInt64 || v <= math.MinInt64 {
		return 0, fmt.Errorf("invalid size %q: out of range", s)
	}
	return ByteSize(v), nil
}

// String formats b with the largest binary unit that divides it exactly.
func (b ByteSize) String() string {
	for _, u := range []struct {
		name string
		size ByteSize
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if b != 0 && b%u.size == 0 {
			return strconv.FormatInt(int64(b/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// MarshalText implements encoding.TextMarshaler.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(text []byte) error { return parseInto(b, ParseByteSize, text) }

// MarshalYAML implements yaml.Marshaler.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	return unmarshalScalar(n, "a size such as 64MiB", b)
}

// parseInto sets *dst to parse(text), leaving it as it was on error: the
// UnmarshalText of the units.
func parseInto[T any](dst *T, parse func(string) (T, error), text []byte) error {
	v, err := parse(string(text))
	if err != nil {
		return err
	}
	*dst = v
	return nil
}

// unmarshalScalar is the UnmarshalYAML of the units: a scalar holding their
// text form. want names the form for the message.
func unmarshalScalar(n *yaml.Node, want string, u encoding.TextUnmarshaler) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("expected %s, got %s", want, describe(n))
	}
	return u.UnmarshalText([]byte(n.Value))
}
