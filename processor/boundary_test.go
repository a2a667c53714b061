package processor_test

import (
	"errors"
	"fmt"
	"go/importer"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/projector-dev/projector/internal/harness/testkit"
)

const modulePath = "github.com/projector-dev/projector"

// TestPublicBoundary: nothing a user of the public packages can reach names
// a type of an internal/ package — no exported alias of one, and no
// exported field, method, function, variable or constant whose type
// mentions one. What a user can reach is walked the way the compiler sees
// it: through aliases, the method sets of T and *T (promoted methods of
// embedded types included), the fields of embedded structs, interface
// methods, function signatures, and every public-package type those
// mention, exported or not. So another module can build, configure and run
// a processor and an executor with public names only, and go doc shows the
// fields it fills (docs/decisions/015-public-api.md).
func TestPublicBoundary(t *testing.T) {
	t.Parallel() // waits on go list
	if testing.Short() {
		t.Skip("builds the public packages' export data (go list -export)")
	}
	leaks := publicLeaks(t)
	for _, l := range leaks {
		t.Errorf("%s", l)
	}
	if len(leaks) > 0 {
		t.Logf("%d leaks", len(leaks))
	}
}

// publicPackages lists the module's packages outside internal/, cmd/ and
// examples/ (a directory with its own go.mod is another module): the public
// library.
func publicPackages(t *testing.T) []string {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if rel != "." {
			if name == "internal" || name == "cmd" || name == "examples" || name == "testdata" ||
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
		}
		files, _ := filepath.Glob(filepath.Join(path, "*.go"))
		for _, f := range files {
			if !strings.HasSuffix(f, "_test.go") {
				if rel == "." {
					pkgs = append(pkgs, modulePath)
				} else {
					pkgs = append(pkgs, modulePath+"/"+rel)
				}
				break
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("found only %d public packages under %s: %v", len(pkgs), root, pkgs)
	}
	return pkgs
}

func isInternal(p *types.Package) bool {
	return p != nil && strings.Contains(p.Path()+"/", "/internal/")
}

func isPublic(p *types.Package) bool {
	return p != nil && !isInternal(p) && (p.Path() == modulePath || strings.HasPrefix(p.Path(), modulePath+"/"))
}

// walker finds the internal types reachable from the public packages.
type walker struct {
	leaks []string
	// seen: the public-package named types already walked.
	seen  map[*types.TypeName]bool
	queue []queued
}

type queued struct {
	where string // how it was reached: pkg.Name
	obj   *types.TypeName
}

func qualify(p *types.Package) string { return p.Path() }

// mention reports every internal named type in typ (found at where) and
// queues the public named types it mentions for their own walk.
func (w *walker) mention(where string, typ types.Type) {
	w.walkType(where, typ, typ, map[types.Type]bool{})
}

func (w *walker) walkType(where string, whole, typ types.Type, visiting map[types.Type]bool) {
	if visiting[typ] {
		return
	}
	visiting[typ] = true
	switch t := typ.(type) {
	case *types.Alias:
		if o := t.Obj(); isInternal(o.Pkg()) {
			w.leak(where, whole, o)
			return
		}
		w.walkType(where, whole, types.Unalias(t), visiting)
	case *types.Named:
		o := t.Origin().Obj()
		switch {
		case isInternal(o.Pkg()):
			w.leak(where, whole, o)
			return
		case isPublic(o.Pkg()) && !w.seen[o]:
			w.seen[o] = true
			w.queue = append(w.queue, queued{o.Pkg().Name() + "." + o.Name(), o})
		}
		for i := 0; i < t.TypeArgs().Len(); i++ {
			w.walkType(where, whole, t.TypeArgs().At(i), visiting)
		}
	case *types.Pointer:
		w.walkType(where, whole, t.Elem(), visiting)
	case *types.Slice:
		w.walkType(where, whole, t.Elem(), visiting)
	case *types.Array:
		w.walkType(where, whole, t.Elem(), visiting)
	case *types.Chan:
		w.walkType(where, whole, t.Elem(), visiting)
	case *types.Map:
		w.walkType(where, whole, t.Key(), visiting)
		w.walkType(where, whole, t.Elem(), visiting)
	case *types.Signature:
		for _, tup := range []*types.Tuple{t.Params(), t.Results()} {
			for i := 0; i < tup.Len(); i++ {
				w.walkType(where, whole, tup.At(i).Type(), visiting)
			}
		}
		for i := 0; i < t.TypeParams().Len(); i++ {
			w.walkType(where, whole, t.TypeParams().At(i).Constraint(), visiting)
		}
	case *types.Struct:
		// An unnamed struct (a field's or parameter's type): its exported
		// fields are reachable.
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() || f.Embedded() {
				w.walkType(where+"."+f.Name(), f.Type(), f.Type(), visiting)
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			if m := t.Method(i); m.Exported() {
				w.walkType(where+"."+m.Name(), m.Type(), m.Type(), visiting)
			}
		}
		for i := 0; i < t.NumEmbeddeds(); i++ {
			w.walkType(where, whole, t.EmbeddedType(i), visiting)
		}
	case *types.Union:
		for i := 0; i < t.Len(); i++ {
			w.walkType(where, whole, t.Term(i).Type(), visiting)
		}
	case *types.TypeParam:
		w.walkType(where, whole, t.Constraint(), visiting)
	}
}

func (w *walker) leak(where string, whole types.Type, o *types.TypeName) {
	w.leaks = append(w.leaks, where+" names internal "+o.Pkg().Path()+"."+o.Name()+" (in "+types.TypeString(whole, qualify)+")")
}

// walkNamed checks what a public named type exposes: its exported fields
// (those of embedded structs included, as they are promoted), the exported
// methods of T and *T (promoted ones included) and, for an interface, its
// methods.
func (w *walker) walkNamed(q queued) {
	named, ok := q.obj.Type().(*types.Named)
	if !ok {
		return
	}
	if st, ok := named.Underlying().(*types.Struct); ok {
		w.walkFields(q.where, st, map[*types.Struct]bool{})
	} else if _, ok := named.Underlying().(*types.Interface); !ok {
		w.mention(q.where, named.Underlying()) // func types, slices, maps…
	}
	for _, recv := range []types.Type{named, types.NewPointer(named)} {
		ms := types.NewMethodSet(recv)
		for i := 0; i < ms.Len(); i++ {
			if m := ms.At(i).Obj(); m.Exported() {
				w.mention(q.where+"."+m.Name(), m.Type())
			}
		}
	}
}

// walkFields checks the exported fields of a struct and, through embedded
// fields (exported or not), those promoted from the embedded structs.
func (w *walker) walkFields(where string, st *types.Struct, done map[*types.Struct]bool) {
	if done[st] {
		return
	}
	done[st] = true
	for i := 0; i < st.NumFields(); i++ {
		f := st.Field(i)
		if f.Exported() {
			w.mention(where+"."+f.Name(), f.Type())
		}
		if !f.Embedded() {
			continue
		}
		ft := f.Type()
		if p, ok := types.Unalias(ft).(*types.Pointer); ok {
			ft = p.Elem()
		}
		if n, ok := types.Unalias(ft).(*types.Named); ok && isInternal(n.Obj().Pkg()) {
			if !f.Exported() {
				w.leak(where+"."+f.Name()+" (embedded)", f.Type(), n.Obj())
			}
			continue
		}
		if inner, ok := types.Unalias(ft).Underlying().(*types.Struct); ok {
			w.walkFields(where, inner, done)
		}
	}
}

// exportImporter imports packages from the compiler's export data, which
// `go list -export` builds (or finds in the build cache): much faster than
// type-checking every dependency from source.
func exportImporter(t *testing.T, pkgs []string) types.Importer {
	var out []byte
	err := testkit.WithBuildLock(t.Context(), "..", pkgs, func(flags []string) (err error) {
		args := append(append([]string{"list"}, flags...), "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}")
		cmd := exec.Command("go", append(args, pkgs...)...)
		cmd.Dir = ".."
		out, err = cmd.Output()
		return err
	})
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list -export: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list -export: %v", err)
	}
	files := map[string]string{}
	for line := range strings.Lines(string(out)) {
		if path, file, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			files[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		f, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

func publicLeaks(t *testing.T) []string {
	pkgs := publicPackages(t)
	imp := exportImporter(t, pkgs)
	w := &walker{seen: map[*types.TypeName]bool{}}
	for _, path := range pkgs {
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		sc := pkg.Scope()
		for _, name := range sc.Names() {
			o := sc.Lookup(name)
			if !o.Exported() {
				continue
			}
			where := pkg.Name() + "." + name
			if tn, ok := o.(*types.TypeName); ok && !tn.IsAlias() {
				if !w.seen[tn] {
					w.seen[tn] = true
					w.queue = append(w.queue, queued{where, tn})
				}
				continue
			}
			// An alias, a function, a variable or a constant: its type.
			w.mention(where, o.Type())
		}
	}
	for len(w.queue) > 0 {
		q := w.queue[0]
		w.queue = w.queue[1:]
		w.walkNamed(q)
	}
	sort.Strings(w.leaks)
	return w.leaks
}
