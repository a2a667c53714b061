package schemaregistry

import (
	"context"
	"fmt"

	"github.com/bufbuild/protocompile"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// maxIndexes bounds the message indexes of a Protobuf framed value: one
// per level of message nesting.
const maxIndexes = 32

// compileProtobuf compiles the registered .proto text with protocompile.
// A reference's name is the import path the schema uses for it; the
// well-known google/protobuf imports are built in.
func (c *Client) compileProtobuf(ctx context.Context, id int, s sr.Schema) (decoder, error) {
	files := map[string]string{}
	err := c.references(ctx, id, s.References, map[string]bool{}, 0, func(name string, ref sr.SubjectSchema) error {
		if ref.Type != sr.TypeProtobuf {
			return &InvalidError{SchemaID: id, Msg: fmt.Sprintf("reference %q is %s, not Protobuf", name, ref.Type)}
		}
		files[name] = ref.Schema.Schema
		return nil
	})
	if err != nil {
		return nil, err
	}
	main := fmt.Sprintf("projector/schema-id-%d.proto", id)
	files[main] = s.Schema
	comp := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(files),
	})}
	compiled, err := comp.Compile(ctx, main)
	if err != nil {
		if ctx.Err() != nil { // stopped, not a bad schema: not to be cached
			return nil, fmt.Errorf("%w: schema id %d: compiling: %w", ErrUnavailable, id, ctx.Err())
		}
		return nil, &InvalidError{SchemaID: id, Msg: "Protobuf schema does not compile: " + err.Error()}
	}
	return protoSchema{compiled[0]}, nil
}

// protoSchema decodes Protobuf data: the message indexes pick the message
// type (the first index a top-level message of the file, each further one
// a message nested in the previous; a lone 0 the first message), the data
// is unmarshalled into a dynamicpb message and written by protojson, the
// canonical proto3 JSON mapping: lowerCamelCase field names, enums by name,
// 64-bit integers as decimal strings, bytes as base64, well-known types in
// their JSON forms, fields with default values left out. protojson varies
// its whitespace on purpose, from one build of the binary to another; the
// output is compacted so that the bytes (a payload a projection keeps, a
// rebuild by another version compared with live) do not vary.
type protoSchema struct{ file protoreflect.FileDescriptor }

func (protoSchema) kind() string { return "Protobuf" }

func (p protoSchema) decode(data, dst []byte, limit int) ([]byte, string) {
	idx, rest, err := header.DecodeIndex(data, maxIndexes)
	if err != nil {
		return nil, "message indexes: " + err.Error()
	}
	msgs := p.file.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range idx {
		if i < 0 || i >= msgs.Len() {
			return nil, fmt.Sprintf("message index %v names no message in the schema", idx)
		}
		md = msgs.Get(i)
		msgs = md.Messages()
	}
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{RecursionLimit: maxDepth}).Unmarshal(rest, m); err != nil {
		return nil, string(md.FullName()) + ": " + err.Error()
	}
	out, err := protojson.MarshalOptions{}.MarshalAppend(dst, m)
	if err != nil {
		return nil, string(md.FullName()) + ": " + err.Error()
	}
	out = compact(out, len(dst))
	if len(out) > limit {
		return nil, fmt.Sprintf("decodes to more than %d bytes", limit-len(dst))
	}
	return out, ""
}

// compact removes the whitespace outside strings from b[from:], in place.
func compact(b []byte, from int) []byte {
	out, inString, escaped := from, false, false
	for _, c := range b[from:] {
		switch {
		case inString:
			inString = c != '"' || escaped
			escaped = c == '\\' && !escaped
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			continue
		case c == '"':
			inString = true
		}
		b[out] = c
		out++
	}
	return b[:out]
}
