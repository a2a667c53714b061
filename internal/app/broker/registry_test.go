package broker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const (
	orderSchema = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"}]}`
	orderV2     = `{"type":"record","name":"Order","fields":[{"name":"id","type":"string"},{"name":"n","type":"long","default":0}]}`
	userSchema  = `{"type":"record","name":"User","fields":[{"name":"name","type":"string"}]}`
)

func registryClient(t *testing.T, r *Registry) *sr.Client {
	t.Helper()
	cl, err := sr.NewClient(sr.URLs(r.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func register(t *testing.T, cl *sr.Client, subject, schema string) int {
	t.Helper()
	ss, err := cl.CreateSchema(context.Background(), subject, sr.Schema{Schema: schema, Type: sr.TypeAvro})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID
}

// TestRegistryRestartKeepsIDs: a registry with a directory answers every id,
// subject and version it had before a restart with the same schema, and a
// new schema after the restart gets an id that none had (a reused id would
// make the records framed with the old one decode with the wrong schema).
func TestRegistryRestartKeepsIDs(t *testing.T) {
	dir := t.TempDir()
	r, err := StartRegistry("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	cl := registryClient(t, r)
	ids := map[string]int{
		"orders-value/1": register(t, cl, "orders-value", orderSchema),
		"orders-value/2": register(t, cl, "orders-value", orderV2),
		"users-value/1":  register(t, cl, "users-value", userSchema),
		"copy-value/1":   register(t, cl, "copy-value", orderSchema), // one schema, two subjects
	}
	if ids["copy-value/1"] != ids["orders-value/1"] {
		t.Fatalf("one schema under two subjects got ids %d and %d, want one", ids["copy-value/1"], ids["orders-value/1"])
	}
	if err := cl.DeleteSchema(context.Background(), "users-value", 1, sr.SoftDelete); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	r, err = StartRegistry("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cl = registryClient(t, r)
	ctx := context.Background()
	for sv, id := range ids {
		subject, version, _ := strings.Cut(sv, "/")
		byID, err := cl.SchemaByID(ctx, id)
		if err != nil {
			t.Fatalf("after the restart, id %d (%s): %v", id, sv, err)
		}
		want := map[int]string{ids["orders-value/1"]: orderSchema, ids["orders-value/2"]: orderV2, ids["users-value/1"]: userSchema}[id]
		if byID.Schema != want {
			t.Errorf("after the restart, id %d is %s, want %s", id, byID.Schema, want)
		}
		if subject == "users-value" {
			continue // soft-deleted: checked below
		}
		v := 1
		if version == "2" {
			v = 2
		}
		ss, err := cl.SchemaByVersion(ctx, subject, v)
		if err != nil || ss.ID != id {
			t.Errorf("after the restart, %s is id %d (%v), want %d", sv, ss.ID, err, id)
		}
	}
	if _, err := cl.SchemaByVersion(ctx, "users-value", 1); err == nil {
		t.Errorf("after the restart, the soft-deleted users-value/1 is served")
	}
	next := register(t, cl, "new-value", `{"type":"record","name":"New","fields":[]}`)
	for sv, id := range ids {
		if next == id {
			t.Errorf("a schema registered after the restart got id %d, %s's", next, sv)
		}
	}
}

// TestRegistryJournalDamage: a torn last line (a crash before the change was
// answered) is cut off; a damaged line before it stops the start, naming
// the file and the line.
func TestRegistryJournalDamage(t *testing.T) {
	dir := t.TempDir()
	r, err := StartRegistry("127.0.0.1:0", dir)
	if err != nil {
		t.Fatal(err)
	}
	id := register(t, registryClient(t, r), "orders-value", orderSchema)
	r.Close()
	path := filepath.Join(dir, journalName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}

	torn := append(append([]byte{}, good...), `{"method":"POST","path":"/subjects/x/vers`...)
	if err := os.WriteFile(path, torn, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err = StartRegistry("127.0.0.1:0", dir)
	if err != nil {
		t.Fatalf("a torn last line stopped the start: %v", err)
	}
	if ss, err := registryClient(t, r).SchemaByID(context.Background(), id); err != nil || ss.Schema != orderSchema {
		t.Errorf("after a torn last line, id %d is %q (%v)", id, ss.Schema, err)
	}
	register(t, registryClient(t, r), "users-value", userSchema)
	r.Close()
	if data, _ := os.ReadFile(path); strings.Contains(string(data), "/subjects/x/vers") || strings.Count(string(data), "\n") != 2 {
		t.Errorf("the torn line was not cut off before appending:\n%s", data)
	}

	if err := os.WriteFile(path, append([]byte("{not json\n"), good...), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = StartRegistry("127.0.0.1:0", dir)
	if err == nil || !strings.Contains(err.Error(), path+" line 1") {
		t.Fatalf("a damaged first line: %v, want an error naming %s line 1", err, path)
	}
}

// TestRegistryInMemory: without a directory nothing is written and the
// registry still serves what it was given.
func TestRegistryInMemory(t *testing.T) {
	r, err := StartRegistry("127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cl := registryClient(t, r)
	id := register(t, cl, "orders-value", orderSchema)
	if ss, err := cl.SchemaByID(context.Background(), id); err != nil || ss.Schema != orderSchema {
		t.Fatalf("id %d is %q (%v)", id, ss.Schema, err)
	}
}
