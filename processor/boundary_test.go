package processor_test

import (
	"go/importer"
	"go/token"
	"go/types"
	"strings"
	"testing"
)

// TestPublicBoundary: no exported identifier of the public packages names a
// type of an internal/ package in its signature, except through an exported
// alias the package itself declares (exports.go): another module can build
// and configure a processor with public names only.
func TestPublicBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the public packages from source")
	}
	imp := importer.ForCompiler(token.NewFileSet(), "source", nil)
	for _, path := range []string{"processor", "dedup", "projection", "sideeffects", "sideeffects/effect", "sideeffects/webhook", "sideeffects/sideeffectstest"} {
		path = "github.com/projector-dev/projector/" + path
		pkg, err := imp.Import(path)
		if err != nil {
			t.Fatalf("import %s: %v", path, err)
		}
		check := func(what string, typ types.Type) {
			if s := types.TypeString(typ, func(p *types.Package) string { return p.Path() }); strings.Contains(s, "/internal/") {
				t.Errorf("%s.%s names an internal type: %s", pkg.Name(), what, s)
			}
		}
		sc := pkg.Scope()
		for _, name := range sc.Names() {
			switch o := sc.Lookup(name).(type) {
			case *types.TypeName:
				if !o.Exported() || o.IsAlias() {
					continue // unexported, or the allowed re-export
				}
				n, _ := o.Type().(*types.Named)
				if n == nil {
					continue
				}
				switch u := n.Underlying().(type) {
				case *types.Struct:
					for i := 0; i < u.NumFields(); i++ {
						if f := u.Field(i); f.Exported() {
							check(name+"."+f.Name(), f.Type())
						}
					}
				case *types.Interface:
					for i := 0; i < u.NumMethods(); i++ {
						if m := u.Method(i); m.Exported() {
							check(name+"."+m.Name(), m.Type())
						}
					}
				default:
					check(name, u)
				}
				for i := 0; i < n.NumMethods(); i++ {
					if m := n.Method(i); m.Exported() {
						check(name+"."+m.Name(), m.Type())
					}
				}
			default:
				if o.Exported() {
					check(name, o.Type())
				}
			}
		}
	}
}
