package jsonenc_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// htmlEscapingAllowed lists where the module may encode JSON with
// encoding/json's HTML escaping: output that is not a record (terminal
// output, HTTP answers), configuration, and the test harness. A directory
// ends in '/'; otherwise the entry is file:function.
var htmlEscapingAllowed = []string{
	"internal/core/jsonenc/jsonenc.go:Marshal", // the one encoder: SetEscapeHTML(false)
	"cmd/projector/",                               // terminal output
	"internal/app/config/",                         // comparing and printing configuration values
	"internal/harness/",                            // workloads and checkers of tests, the bench and the soak
	"internal/app/ingress/problem.go:writeProblem", // HTTP answers
	"internal/app/ingress/handler.go:responseFor",
	"internal/app/ingress/handler.go:pending",
	"sideeffects/effect/condition.go:Match", // compares a condition's values; the bytes are never kept
	"examples/",                             // other modules: programs of the library's users
}

// TestNoHTMLEscapingOnRecordPaths fails when code outside the places above
// encodes with json.Marshal, json.MarshalIndent or a json.Encoder: their
// bytes may reach Pebble, a changelog or a topic, where HTML escaping makes
// a value up to six times the size the processor checked (issue 22). Use
// jsonenc.Marshal, or add the place above if its bytes are not a record.
func TestNoHTMLEscapingOnRecordPaths(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		rel := filepath.ToSlash(strings.TrimPrefix(path, root+string(filepath.Separator)))
		for _, a := range htmlEscapingAllowed {
			if strings.HasSuffix(a, "/") && strings.HasPrefix(rel, a) {
				return nil
			}
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		checked++
		json := ""
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == "encoding/json" {
				json = "json"
				if im.Name != nil {
					json = im.Name.Name
				}
			}
		}
		if json == "" {
			return nil
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || allowed(rel+":"+fn.Name.Name) {
				continue
			}
			ast.Inspect(fn, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, isIdent := sel.X.(*ast.Ident); isIdent && x.Name == json {
					switch sel.Sel.Name {
					case "Marshal", "MarshalIndent", "NewEncoder":
						t.Errorf("%s: %s calls %s.%s, which escapes HTML: use jsonenc.Marshal", rel, fn.Name.Name, json, sel.Sel.Name)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("only %d files checked: the walk missed the module", checked)
	}
}

func allowed(fileFunc string) bool {
	for _, a := range htmlEscapingAllowed {
		if a == fileFunc {
			return true
		}
	}
	return false
}
