package monitoring

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// metricKind is the Opts type a metric was declared with (Counter, Gauge, Histogram, Summary), or
// Desc for a prometheus.NewDesc of a collector's constant metrics, whose type is chosen per
// sample at collection (so never taken for a histogram's _bucket series).
type metricKind string

// codeMetrics finds every Prometheus metric the Go code under dirs declares, by reading the
// source: each prometheus.<Kind>Opts{Name: ...} literal and prometheus.NewDesc(name, ...) call, with the name a string literal, a
// package-level string constant, or "prefix" + parameter inside a helper closure
// (g := func(name, help string) ... Name: "caplb_agent_" + name ...), resolved at the helper's
// calls. Anything else is an error, so that a new way of naming metrics cannot slip past the
// check.
func codeMetrics(root string, dirs ...string) (map[string]metricKind, error) {
	out := map[string]metricKind{}
	for _, d := range dirs {
		pkgs := map[string][]*ast.File{}
		fset := token.NewFileSet()
		err := filepath.WalkDir(filepath.Join(root, d), func(path string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if e.IsDir() && e.Name() == "testdata" {
				return filepath.SkipDir
			}
			if e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			if err != nil {
				return err
			}
			pkgs[filepath.Dir(path)] = append(pkgs[filepath.Dir(path)], f)
			return nil
		})
		if err != nil {
			return nil, err
		}
		for _, files := range pkgs {
			if err := scanPackage(fset, files, out); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func scanPackage(fset *token.FileSet, files []*ast.File, out map[string]metricKind) error {
	consts := map[string]string{}
	for _, f := range files {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if s, ok := stringLit(vs.Values[i]); ok {
							consts[n.Name] = s
						}
					}
				}
			}
		}
	}
	for _, f := range files {
		// Helper closures whose Opts name is "prefix" + parameter.
		type helper struct {
			prefix string
			kind   metricKind
		}
		helpers := map[string]helper{}
		inHelper := map[ast.Node]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != 1 || len(as.Rhs) != 1 {
				return true
			}
			fl, ok := as.Rhs[0].(*ast.FuncLit)
			id, ok2 := as.Lhs[0].(*ast.Ident)
			if !ok || !ok2 {
				return true
			}
			ast.Inspect(fl, func(n ast.Node) bool {
				kind, name, ok := optsName(n)
				if !ok {
					return true
				}
				if be, ok := name.(*ast.BinaryExpr); ok && be.Op == token.ADD {
					if p, ok := stringLit(be.X); ok {
						if _, ok := be.Y.(*ast.Ident); ok {
							helpers[id.Name] = helper{p, kind}
							inHelper[n] = true
						}
					}
				}
				return true
			})
			return true
		})
		var errs []string
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok {
				if id, ok := call.Fun.(*ast.Ident); ok {
					if h, ok := helpers[id.Name]; ok && len(call.Args) > 0 {
						s, ok := stringLit(call.Args[0])
						if !ok {
							errs = append(errs, fmt.Sprintf("%s: metric helper %s called with a non-literal name", fset.Position(call.Pos()), id.Name))
						} else {
							out[h.prefix+s] = h.kind
						}
					}
				}
			}
			kind, name, ok := optsName(n)
			if !ok {
				kind, name, ok = descName(n)
			}
			if !ok || inHelper[n] {
				return true
			}
			switch v := name.(type) {
			case *ast.BasicLit:
				s, _ := stringLit(v)
				out[s] = kind
			case *ast.Ident:
				s, ok := consts[v.Name]
				if !ok {
					errs = append(errs, fmt.Sprintf("%s: metric name constant %s not found", fset.Position(v.Pos()), v.Name))
				}
				out[s] = kind
			default:
				errs = append(errs, fmt.Sprintf("%s: cannot resolve this metric name statically; extend config/monitoring's scanner", fset.Position(name.Pos())))
			}
			return true
		})
		if len(errs) > 0 {
			return fmt.Errorf("%s", strings.Join(errs, "\n"))
		}
	}
	return nil
}

// optsName matches prometheus.<Kind>Opts{Name: expr}.
func optsName(n ast.Node) (metricKind, ast.Expr, bool) {
	cl, ok := n.(*ast.CompositeLit)
	if !ok {
		return "", nil, false
	}
	sel, ok := cl.Type.(*ast.SelectorExpr)
	if !ok {
		return "", nil, false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" || !strings.HasSuffix(sel.Sel.Name, "Opts") {
		return "", nil, false
	}
	for _, el := range cl.Elts {
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			if k, ok := kv.Key.(*ast.Ident); ok && k.Name == "Name" {
				return metricKind(strings.TrimSuffix(sel.Sel.Name, "Opts")), kv.Value, true
			}
		}
	}
	return "", nil, false
}

// descName matches prometheus.NewDesc(expr, ...), how a custom collector (the WireGuard
// gateway's, which mirrors its /status) names its metrics.
func descName(n ast.Node) (metricKind, ast.Expr, bool) {
	call, ok := n.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return "", nil, false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "NewDesc" {
		return "", nil, false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "prometheus" {
		return "", nil, false
	}
	return "Desc", call.Args[0], true
}

func stringLit(e ast.Expr) (string, bool) {
	bl, ok := e.(*ast.BasicLit)
	if !ok || bl.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(bl.Value)
	return s, err == nil
}

// repoRoot is two levels up from this package (config/monitoring).
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return filepath.Abs(filepath.Join(wd, "..", ".."))
}
