package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Error is a configuration error tied to one key.
type Error struct {
	// Key is the full dotted path of the key, e.g. "kafka.brokers" or
	// "projections[1].events.CaseOpened". It is empty for errors about the
	// file as a whole (unreadable, empty, not YAML, not a mapping).
	Key string
	// Msg says what is wrong, without the key.
	Msg string
	// Line is the 1-based line in the YAML file, 0 when unknown.
	Line int
	// Err is the underlying error, if any (e.g. from os.ReadFile).
	Err error
}

// Error returns "config: <key>: <msg>", followed by " (line N)" when the line
// is known. Without a key it is "config: <msg>".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	if e.Line > 0 {
		b.WriteString(" (line ")
		b.WriteString(strconv.Itoa(e.Line))
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// Errors lists every *Error in err, in order: err itself, or the members of
// an errors.Join. It returns nil when err holds no *Error.
func Errors(err error) []*Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) && e == err {
		return []*Error{e}
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var out []*Error
		for _, m := range j.Unwrap() {
			out = append(out, Errors(m)...)
		}
		return out
	}
	if errors.As(err, &e) {
		return []*Error{e}
	}
	return nil
}

// errorList collects errors in the order they are found.
type errorList []*Error

func (l *errorList) add(key, format string, args ...any) {
	msg := format
	if len(args) > 0 {
		msg = fmt.Sprintf(format, args...)
	}
	*l = append(*l, &Error{Key: key, Msg: msg})
}

func (l *errorList) addLine(key string, line int, format string, args ...any) {
	l.add(key, format, args...)
	(*l)[len(*l)-1].Line = line
}

// err returns nil, the single *Error, or an errors.Join of all of them.
func (l errorList) err() error {
	switch len(l) {
	case 0:
		return nil
	case 1:
		return l[0]
	}
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errors.Join(errs...)
}
