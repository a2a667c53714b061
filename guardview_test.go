package projector_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestOperatorsUseGuardViewOnly: the operator commands (internal/operator)
// read the version guard's state through its read-only view, the names
// internal/engine/guard declares in view.go, never the guard itself
// (docs/design.md#file-map). Tests may drive a guard to write state.
func TestOperatorsUseGuardViewOnly(t *testing.T) {
	view := map[string]bool{}
	fset := token.NewFileSet()
	vf, err := parser.ParseFile(fset, "internal/engine/guard/view.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range vf.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv == nil && d.Name.IsExported() {
				view[d.Name.Name] = true
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					view[s.Name.Name] = s.Name.IsExported()
				case *ast.ValueSpec:
					for _, n := range s.Names {
						view[n.Name] = n.IsExported()
					}
				}
			}
		}
	}
	if len(view) == 0 {
		t.Fatal("internal/engine/guard/view.go declares no exported name")
	}
	const guardPath = module + "internal/engine/guard"
	err = filepath.WalkDir("internal/operator", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		local := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == guardPath {
				local = "guard"
				if imp.Name != nil {
					local = imp.Name.Name
				}
			}
		}
		if local == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == local && !view[sel.Sel.Name] {
				t.Errorf("%s: uses guard.%s, which is not in the guard's read-only view (internal/engine/guard/view.go)",
					fset.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
