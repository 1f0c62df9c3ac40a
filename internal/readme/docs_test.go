package readme

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// root is the repository's root directory.
func root(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// route is `METHOD /path` in backticks, as docs/api.md names routes.
var route = regexp.MustCompile("`(GET|POST|PUT|DELETE|PATCH|HEAD) (/[^`\\s]*)`")

// docs/api.md names every operation of the OpenAPI document, and nothing
// else as a route, so the two cannot drift apart.
func TestAPIDocMatchesOpenAPI(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal([]byte(read(t, "httpapi/openapi.json")), &doc); err != nil {
		t.Fatal(err)
	}
	inSpec := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			switch method {
			case "get", "post", "put", "delete", "patch", "head":
				inSpec[strings.ToUpper(method)+" "+path] = true
			}
		}
	}
	inDoc := map[string]bool{}
	for _, m := range route.FindAllStringSubmatch(read(t, "docs/api.md"), -1) {
		inDoc[m[1]+" "+m[2]] = true
	}
	if len(inSpec) < 20 {
		t.Fatalf("only %d operations in httpapi/openapi.json: the test reads it wrong", len(inSpec))
	}
	var missing, extra []string
	for r := range inSpec {
		if !inDoc[r] {
			missing = append(missing, r)
		}
	}
	for r := range inDoc {
		if !inSpec[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("docs/api.md does not document %s, an operation of httpapi/openapi.json", r)
	}
	for _, r := range extra {
		t.Errorf("docs/api.md names %s, which httpapi/openapi.json does not have", r)
	}
}

// link is a Markdown link's target.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// Every relative link of the README and docs/ resolves to a file or
// directory inside the repository: none reaches beside it (the HTTP
// contract used to be linked as ../shared/API.md, which a clone lacks).
func TestLinksStayInRepository(t *testing.T) {
	base := root(t)
	abs, err := filepath.Abs(base)
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(abs, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		files = append(files, strings.TrimPrefix(d, abs+string(filepath.Separator)))
	}
	if len(files) < 3 {
		t.Fatalf("found only %v", files)
	}
	checked := 0
	for _, f := range files {
		for _, m := range link.FindAllStringSubmatch(read(t, f), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			p := filepath.Clean(filepath.Join(abs, filepath.Dir(f), target))
			if p != abs && !strings.HasPrefix(p, abs+string(filepath.Separator)) {
				t.Errorf("%s links to %s, outside the repository", f, m[1])
				continue
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
			}
			checked++
		}
	}
	if checked < 20 {
		t.Errorf("only %d links checked: the test reads the files wrong", checked)
	}
}

// Godoc and docs cite no document beside the repository.
func TestNoCitationOfSharedDocs(t *testing.T) {
	for _, f := range []string{"README.md", "docs/api.md"} {
		if s := read(t, f); strings.Contains(s, "../shared") {
			t.Errorf("%s cites ../shared, which a clone does not have", f)
		}
	}
}
